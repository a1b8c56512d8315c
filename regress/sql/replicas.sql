-- The replica registry: heartbeat, deregister_replica, the replica_status
-- view, and retention that waits for live replicas.  Default settings:
-- replica_ttl 5min, retain_until_applied on, max_retention 24h, retention 1h.
CREATE EXTENSION eventhub;
-- Each organization's events are one entity's, each superseded by the next
-- (globex's last is its DELETE): with compaction (on by default) retention
-- may remove all but acme's last.
SELECT count(eventhub.publish_event('acme', 'API', 'UPDATE', 'api', NULL, '{}')) FROM generate_series(1, 5) r;
SELECT count(eventhub.publish_event('globex', 'API', CASE WHEN r = 2 THEN 'DELETE' ELSE 'UPDATE' END, 'api', NULL, '{}'))
  FROM generate_series(1, 2) r;
CREATE FUNCTION pg_temp.version_at(org text, rev bigint) RETURNS text LANGUAGE sql AS
$$ SELECT version_id::text FROM eventhub.events WHERE organization_id = org AND revision = rev $$;

-- Registration: the first heartbeat registers, later ones refresh.
SELECT eventhub.heartbeat('replica-a',
    jsonb_build_object('acme', jsonb_build_object('revision', 5, 'version_id', pg_temp.version_at('acme', 5), 'config_hash', 'h1'),
                       'globex', jsonb_build_object('revision', 2, 'config_hash', 'g1')),
    '{"zone": "eu-1"}', '1.4.2');
SELECT eventhub.heartbeat('replica-b', '{"acme": {"revision": 3, "config_hash": "h0"}}');
SELECT eventhub.heartbeat('replica-c', '{}', '{"zone": "eu-2"}');
SELECT replica_id, labels, version, started_at = last_heartbeat AS just_registered
  FROM eventhub.replicas ORDER BY 1;
SELECT replica_id, organization_id, applied_revision, applied_version_id IS NOT NULL AS has_version, config_hash
  FROM eventhub.replica_progress ORDER BY 1, 2;

-- The view: one row per replica and organization, lag and freshness.
SELECT replica_id, state, organization_id, head_revision, applied_revision, lag_revisions,
       behind_for = interval '0' AS at_head, behind_for > interval '0' AS behind,
       since_heartbeat < interval '1 minute' AS recent, config_hash, hash_agrees, labels, version
  FROM eventhub.replica_status ORDER BY replica_id, organization_id;

-- A later heartbeat keeps started_at and labels unless given; applied_at
-- moves only when the applied revision does.
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replicas SET started_at = started_at - interval '1 hour',
                             last_heartbeat = last_heartbeat - interval '1 minute';
RESET eventhub.protect_tables;
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replica_progress SET applied_at = applied_at - interval '1 hour';
RESET eventhub.protect_tables;
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5, "config_hash": "h1"}}');
SELECT eventhub.heartbeat('replica-b', '{"acme": {"revision": 5, "config_hash": "h1"}}', NULL, '1.4.3');
SELECT r.replica_id, r.labels, r.version, r.started_at < now() - interval '59 minutes' AS same_start,
       r.last_heartbeat > now() - interval '30 seconds' AS refreshed, p.organization_id, p.applied_revision,
       p.applied_at > now() - interval '30 seconds' AS applied_recently
  FROM eventhub.replicas r JOIN eventhub.replica_progress p USING (replica_id)
 ORDER BY 1, 6;

-- Hash disagreement at the same revision shows; stale replicas do not count.
SELECT eventhub.heartbeat('replica-b', '{"acme": {"revision": 5, "config_hash": "DIFFERENT"}}');
SELECT replica_id, organization_id, applied_revision, config_hash, hash_agrees
  FROM eventhub.replica_status WHERE organization_id = 'acme' ORDER BY 1;
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '6 minutes' WHERE replica_id = 'replica-b';
RESET eventhub.protect_tables;
SELECT replica_id, state, config_hash, hash_agrees
  FROM eventhub.replica_status WHERE organization_id = 'acme' ORDER BY 1;

-- Deregistration removes the replica and its progress.
SELECT eventhub.deregister_replica('replica-c');
SELECT eventhub.deregister_replica('replica-c');
SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'replica-c';

--
-- Bad input: a specific error, and nothing written.
--
CREATE TEMP TABLE before AS
  SELECT (SELECT count(*) FROM eventhub.replicas) AS replicas,
         (SELECT string_agg(replica_id || organization_id || applied_revision, ',' ORDER BY 1) FROM eventhub.replica_progress) AS progress,
         (SELECT max(last_heartbeat) FROM eventhub.replicas) AS beat;
SELECT eventhub.heartbeat(NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat(repeat('r', 1025), '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '[1]');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{}', '"eu"');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": 5}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5, "revison": 5}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"config_hash": "h"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": -1}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 2.5}}');
\echo :LAST_ERROR_SQLSTATE
-- a string is a revision only when it is decimal digits and nothing else
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": "5x"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": "-1"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": " 5"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": "5.0"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": ""}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": "9223372036854775808"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": "6"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 1e30}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 6}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"nobody": {"revision": 1}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5, "version_id": "not-a-uuid"}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5, "version_id": 7}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5, "config_hash": ["x"]}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{"": {"revision": 0}}');
\echo :LAST_ERROR_SQLSTATE
-- a revision written with a fraction is not an integer, even 5.0
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5.0}}');
\echo :LAST_ERROR_SQLSTATE
-- size limits: organization ids 1024 bytes, config_hash and version 256,
-- labels 4096 as JSON text
SELECT eventhub.heartbeat('replica-a', jsonb_build_object(repeat('o', 1025), '{"revision": 0}'::jsonb));
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', jsonb_build_object('acme', jsonb_build_object('revision', 5, 'config_hash', repeat('h', 257))));
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{}', NULL, repeat('v', 257));
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('replica-a', '{}', jsonb_build_object('note', repeat('x', 4085)));
\echo :LAST_ERROR_SQLSTATE
-- one bad organization among good ones: nothing of the call is written
SELECT eventhub.heartbeat('replica-new', '{"acme": {"revision": 1}, "globex": {"revision": 99}}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.deregister_replica(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT (SELECT count(*) FROM eventhub.replicas) = b.replicas AS same_replicas,
       (SELECT string_agg(replica_id || organization_id || applied_revision, ',' ORDER BY 1) FROM eventhub.replica_progress) = b.progress AS same_progress,
       (SELECT max(last_heartbeat) FROM eventhub.replicas) = b.beat AS same_heartbeats
  FROM before b;
-- An organization not yet published to, at revision 0, is fine.
SELECT eventhub.heartbeat('replica-a', '{"nobody": {"revision": 0}}');
-- A revision as a string of digits, as drivers that return bigint as a
-- string hand it back, is that revision.
SELECT eventhub.heartbeat('replica-digits', '{"acme": {"revision": "5"}, "globex": {"revision": "0002"}}');
SELECT organization_id, applied_revision FROM eventhub.replica_progress
 WHERE replica_id = 'replica-digits' ORDER BY 1;
SELECT eventhub.deregister_replica('replica-digits');
-- So are values at the limits, and an integer in exponent notation.
SELECT eventhub.heartbeat('replica-limits',
    jsonb_build_object(repeat('o', 1024), '{"revision": 0}'::jsonb,
                       'acme', jsonb_build_object('revision', 5e0, 'config_hash', repeat('h', 256))),
    jsonb_build_object('note', repeat('x', 4084)), repeat('v', 256));
SELECT length(labels::text) AS labels_bytes, length(version) AS version_bytes,
       (SELECT max(length(config_hash)) FROM eventhub.replica_progress p WHERE p.replica_id = r.replica_id) AS hash_bytes,
       (SELECT max(length(organization_id)) FROM eventhub.replica_progress p WHERE p.replica_id = r.replica_id) AS id_bytes
  FROM eventhub.replicas r WHERE replica_id = 'replica-limits';
SELECT eventhub.deregister_replica('replica-limits');

--
-- Retention waits for live replicas, up to eventhub.max_retention.
--
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replicas SET last_heartbeat = now();
RESET eventhub.protect_tables;
SELECT eventhub.heartbeat('replica-a', '{"acme": {"revision": 5}, "globex": {"revision": 1}}');
SELECT eventhub.heartbeat('replica-b', '{"acme": {"revision": 2}}');
-- All of acme and globex expired (2 hours old, retention is 1 hour).
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.events SET processed_timestamp = now() - interval '2 hours';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
-- replica-b has applied acme up to 2 and replica-a globex up to 1: those
-- and the events after them are kept (the one applied last, so that a
-- replica can check its cursor's version after a failover).
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
-- replica-b turns stale: it no longer holds anything; replica-a still
-- holds acme 5, the event it applied last.
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '6 minutes' WHERE replica_id = 'replica-b';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
-- Past eventhub.max_retention an event goes even for a live replica, which
-- then gets the resync error.  globex's tombstone goes on the second pass,
-- once nothing older of its entity is left.
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.events SET processed_timestamp = now() - interval '25 hours' WHERE organization_id = 'globex';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
SELECT eventhub.run_maintenance();
SELECT count(*) AS globex_left FROM eventhub.events WHERE organization_id = 'globex';
SELECT * FROM eventhub.events_since('globex', 1);
\echo :LAST_ERROR_SQLSTATE

-- Replicas without a heartbeat for twice replica_ttl are removed by
-- maintenance; stale ones younger than that stay.
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '11 minutes' WHERE replica_id = 'replica-b';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
SELECT replica_id FROM eventhub.replicas ORDER BY 1;
SELECT count(*) AS progress_of_removed FROM eventhub.replica_progress WHERE replica_id = 'replica-b';

-- Hashes are compared at the same applied revision only, and with live
-- replicas only; a replica without a hash compares nothing.
SELECT eventhub.heartbeat('hash-1', '{"acme": {"revision": 4, "config_hash": "x"}}'),
       eventhub.heartbeat('hash-2', '{"acme": {"revision": 4, "config_hash": "x"}}'),
       eventhub.heartbeat('hash-3', '{"acme": {"revision": 3, "config_hash": "y"}}'),
       eventhub.heartbeat('hash-4', '{"acme": {"revision": 4}}');
SELECT replica_id, applied_revision, config_hash, hash_agrees
  FROM eventhub.replica_status WHERE replica_id LIKE 'hash-%' ORDER BY 1;
SELECT eventhub.heartbeat('hash-3', '{"acme": {"revision": 4, "config_hash": "y"}}');
SELECT replica_id, applied_revision, config_hash, hash_agrees
  FROM eventhub.replica_status WHERE replica_id LIKE 'hash-%' ORDER BY 1;
SET eventhub.protect_tables = off;  -- the fixture changes times directly
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '6 minutes' WHERE replica_id = 'hash-3';
RESET eventhub.protect_tables;
SELECT replica_id, state, config_hash, hash_agrees
  FROM eventhub.replica_status WHERE replica_id LIKE 'hash-%' ORDER BY 1;

DROP EXTENSION eventhub;
