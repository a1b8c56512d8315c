-- eventhub.metrics(): its series (names, types, labels), counters that
-- count committed work only, per-replica series and no per-organization
-- ones, the visibility rule of replica_status, and its privileges.  The
-- suites' server preloads the library, so the counters are in shared
-- memory; they count for the whole server, so only their changes are
-- compared.
CREATE EXTENSION eventhub;
-- m(name, labels): one series' value (NULL when absent).
CREATE FUNCTION pg_temp.m(series text, want jsonb DEFAULT '{}') RETURNS double precision LANGUAGE sql AS
$$ SELECT value FROM eventhub.metrics() WHERE name = series AND labels = want $$;
CREATE TEMP TABLE before AS SELECT name, value FROM eventhub.metrics() WHERE type = 'counter';
CREATE FUNCTION pg_temp.counted(series text) RETURNS double precision LANGUAGE sql AS
$$ SELECT pg_temp.m(series) - (SELECT value FROM before WHERE name = series) $$;

-- The families, their types and label names, in order; every name follows
-- Prometheus' rules, counters end in _total, help is there.
SELECT name, type, array_agg(DISTINCT k ORDER BY k) FILTER (WHERE k IS NOT NULL) AS label_names, count(*) AS series
  FROM (SELECT m.*, row_number() OVER () AS n FROM eventhub.metrics() m) m
  LEFT JOIN LATERAL jsonb_object_keys(m.labels) k ON true
 GROUP BY name, type ORDER BY min(n);
SELECT count(*) AS bad_rows FROM eventhub.metrics()
 WHERE name !~ '^eventhub_[a-z_]+$' OR (type = 'counter') <> (name LIKE '%\_total')
    OR type NOT IN ('counter', 'gauge') OR coalesce(help, '') = '' OR value IS NULL
    OR jsonb_typeof(labels) <> 'object'
    OR EXISTS (SELECT FROM jsonb_each(labels) l WHERE jsonb_typeof(l.value) <> 'string');
-- Both replica states are there, at 0.
SELECT labels, value FROM eventhub.metrics() WHERE name = 'eventhub_replicas' ORDER BY labels::text;

-- Events published: a committed publish counts, a rolled-back one does not,
-- nor one under a savepoint rolled back; a released savepoint's counts do.
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a1', NULL, '{}');
SELECT pg_temp.counted('eventhub_events_published_total') AS published;
BEGIN;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}');
ROLLBACK;
SELECT pg_temp.counted('eventhub_events_published_total') AS published_after_rollback;
BEGIN;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}');
SAVEPOINT s1;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}');
SAVEPOINT s2;
SELECT eventhub.publish_event('globex', 'API', 'CREATE', 'g1', NULL, '{}');
RELEASE s2;
ROLLBACK TO s1;
SAVEPOINT s3;
SELECT eventhub.publish_event('globex', 'API', 'CREATE', 'g1', NULL, '{}');
RELEASE s3;
-- Not before the commit.
SELECT pg_temp.counted('eventhub_events_published_total') AS published_before_commit;
COMMIT;
SELECT pg_temp.counted('eventhub_events_published_total') AS published_after_savepoints;
-- A replayed correlation id publishes nothing.
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', 'once', '{}');
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', 'once', '{}');
SELECT pg_temp.counted('eventhub_events_published_total') AS published_with_replay;
-- An error inside a savepoint, caught: the events before it in the
-- savepoint go with it.
DO $$
BEGIN
  BEGIN
    PERFORM eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}');
    PERFORM 1 / 0;
  EXCEPTION WHEN division_by_zero THEN NULL;
  END;
  PERFORM eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}');
END $$;
SELECT pg_temp.counted('eventhub_events_published_total') AS published_after_caught_error;
-- This database has no notifier (eventhub.database is another): each
-- committed publishing transaction sends one notification per organization.
SELECT pg_temp.counted('eventhub_notifications_sent_total') AS notifications;

-- Retention: run_maintenance's deletes count once committed, and its pass
-- sets the last pass timestamp; a rolled-back run counts nothing.
SET eventhub.protect_tables = off;  -- the fixture ages events directly
UPDATE eventhub.events SET processed_timestamp = now() - interval '2 hours';
RESET eventhub.protect_tables;
BEGIN;
SELECT eventhub.run_maintenance() AS deleted_then_rolled_back;
ROLLBACK;
SELECT pg_temp.counted('eventhub_retention_deleted_events_total') AS retention_deleted;
SELECT eventhub.run_maintenance() AS deleted;
SELECT pg_temp.counted('eventhub_retention_deleted_events_total') AS retention_deleted;
SELECT pg_temp.m('eventhub_retention_last_pass_timestamp_seconds') BETWEEN extract(epoch FROM now()) - 1
       AND extract(epoch FROM clock_timestamp()) + 1 AS last_pass_just_now;

-- Replicas: per-replica series, sums over organizations, stale and live,
-- and configuration hashes against the most common one at each revision.
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'a1', NULL, '{}') FROM generate_series(1, 3);
SELECT eventhub.publish_event('globex', 'API', 'UPDATE', 'g1', NULL, '{}');
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;
SELECT eventhub.heartbeat('r-1', '{"acme": {"revision": 7, "config_hash": "h7"}, "globex": {"revision": 2, "config_hash": "g"}}'),
       eventhub.heartbeat('r-2', '{"acme": {"revision": 7, "config_hash": "h7"}, "globex": {"revision": 1, "config_hash": "g"}}'),
       eventhub.heartbeat('r-3', '{"acme": {"revision": 7, "config_hash": "other"}}'),
       eventhub.heartbeat('r-4', '{"acme": {"revision": 4, "config_hash": "h4"}}'),
       eventhub.heartbeat('r-5', '{}');
SET eventhub.protect_tables = off;
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '10 minutes' WHERE replica_id = 'r-5';
-- r-4 is behind from revision 5 on, published an hour ago.
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 hour' WHERE organization_id = 'acme' AND revision = 5;
RESET eventhub.protect_tables;
SELECT name, labels->>'replica' AS replica, round(value::numeric, 0) AS value FROM eventhub.metrics()
 WHERE labels ? 'replica' AND name <> 'eventhub_replica_heartbeat_age_seconds' ORDER BY name, 2;
SELECT labels->>'replica' AS replica, value BETWEEN 0 AND 5 AS recent, value >= 600 AS ten_minutes
  FROM eventhub.metrics() WHERE name = 'eventhub_replica_heartbeat_age_seconds' ORDER BY 1;
SELECT name, labels, round(value::numeric, 0) AS value FROM eventhub.metrics()
 WHERE name IN ('eventhub_replicas', 'eventhub_replicas_config_hash_disagreeing', 'eventhub_organizations',
                'eventhub_organizations_behind', 'eventhub_replica_lag_events_max',
                'eventhub_oldest_unapplied_event_age_seconds')
 ORDER BY name, labels::text;
-- Two live replicas that disagree, one to one: neither is the majority.
SELECT eventhub.heartbeat('r-1', '{"acme": {"revision": 7, "config_hash": "h7"}}'),
       eventhub.heartbeat('r-2', '{"acme": {"revision": 7, "config_hash": "h7-b"}}'),
       eventhub.deregister_replica('r-3');
SELECT labels->>'replica' AS replica, value FROM eventhub.metrics()
 WHERE name = 'eventhub_replica_config_hash_mismatch' ORDER BY 1;

-- No series per organization: a thousand more organizations add none.
CREATE TEMP TABLE series_before AS SELECT count(*) AS n FROM eventhub.metrics();
SELECT count(eventhub.register_organization('many-' || i)) FROM generate_series(1, 1000) i;
SELECT (SELECT count(*) FROM eventhub.metrics()) - n AS more_series, pg_temp.m('eventhub_organizations') AS organizations
  FROM series_before;

-- Privileges: nothing for PUBLIC; the operator bundle's grant; under
-- access control the calling role sees what replica_status shows it.
CREATE ROLE regress_eh_metrics_nobody;
CREATE ROLE regress_eh_metrics_operator;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_metrics_nobody, regress_eh_metrics_operator;
GRANT SELECT ON eventhub.organization_states, eventhub.events, eventhub.replica_status TO regress_eh_metrics_operator;
GRANT EXECUTE ON FUNCTION eventhub.metrics() TO regress_eh_metrics_operator;
SET ROLE regress_eh_metrics_nobody;
SELECT count(*) FROM eventhub.metrics();
RESET ROLE;
SET ROLE regress_eh_metrics_operator;
SELECT count(*) > 0 AS answers FROM eventhub.metrics();
RESET ROLE;
SELECT eventhub.grant_organization('regress_eh_metrics_operator', 'globex', 'read');
SET ROLE regress_eh_metrics_operator;
SELECT DISTINCT labels->>'replica' AS replica FROM eventhub.metrics() WHERE labels ? 'replica' ORDER BY 1;
SELECT name, round(value::numeric, 0) AS value FROM eventhub.metrics()
 WHERE name IN ('eventhub_organizations', 'eventhub_organizations_behind') ORDER BY 1;
SELECT replica_id FROM eventhub.replica_status ORDER BY 1;
RESET ROLE;
SELECT eventhub.revoke_organization('regress_eh_metrics_operator', 'globex', 'read');

-- A hostile search_path changes nothing: every name is qualified.
CREATE SCHEMA regress_eh_metrics_evil;
CREATE FUNCTION regress_eh_metrics_evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'epoch'::timestamptz $$;
CREATE FUNCTION regress_eh_metrics_evil.texteq(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$;
CREATE OPERATOR regress_eh_metrics_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_eh_metrics_evil.texteq);
CREATE TEMP TABLE plain AS SELECT name, labels, value FROM eventhub.metrics() WHERE type = 'gauge';
SET search_path = regress_eh_metrics_evil, pg_catalog;
CREATE TEMP TABLE hostile AS SELECT name, labels, value FROM eventhub.metrics() WHERE type OPERATOR(pg_catalog.=) 'gauge';
RESET search_path;
-- The same gauges (the ages aside, which move with the clock).
SELECT count(*) AS differing FROM ((TABLE plain EXCEPT TABLE hostile) UNION ALL (TABLE hostile EXCEPT TABLE plain)) d
 WHERE name NOT LIKE '%\_seconds';
SELECT count(*) AS gauges FROM hostile;
DROP SCHEMA regress_eh_metrics_evil CASCADE;

-- Lag comes from the rows behind their head at their replica's last
-- heartbeat (replica_progress.head_revision): a replica caught up at its
-- heartbeat counts as caught up until its next one, which reports it behind;
-- one that catches up is no longer behind.
SELECT eventhub.publish_event('late', 'API', 'CREATE', 'l1', NULL, '{}') FROM generate_series(1, 2);
SELECT eventhub.heartbeat('r-late', '{"late": {"revision": 2}}');
SELECT eventhub.publish_event('late', 'API', 'UPDATE', 'l1', NULL, '{}') FROM generate_series(1, 3);
SELECT pg_temp.m('eventhub_replica_lag_events', '{"replica": "r-late"}') AS lag_before_next_heartbeat;
SELECT eventhub.heartbeat('r-late', '{"late": {"revision": 3}}');
SELECT applied_revision, head_revision FROM eventhub.replica_progress WHERE replica_id = 'r-late';
SELECT pg_temp.m('eventhub_replica_lag_events', '{"replica": "r-late"}') AS lag,
       pg_temp.m('eventhub_replica_lag_seconds', '{"replica": "r-late"}') > 0 AS lag_seconds;
-- Measured against the head of now: two more events, still behind.
SELECT eventhub.publish_event('late', 'API', 'UPDATE', 'l1', NULL, '{}') FROM generate_series(1, 2);
SELECT pg_temp.m('eventhub_replica_lag_events', '{"replica": "r-late"}') AS lag_against_head_now;
SELECT eventhub.heartbeat('r-late', '{"late": {"revision": 7}}');
SELECT pg_temp.m('eventhub_replica_lag_events', '{"replica": "r-late"}') AS lag_caught_up,
       pg_temp.m('eventhub_replica_lag_seconds', '{"replica": "r-late"}') AS lag_seconds_caught_up;
SELECT eventhub.deregister_replica('r-late');

-- Configuration hashes are compared at the pairs heartbeat() found split
-- (eventhub.config_splits), whichever replica reports second; only a row a
-- heartbeat changes is compared, a steady heartbeat adds nothing; a pair no
-- longer split counts for nothing, and maintenance removes it.
SELECT eventhub.publish_event('split', 'API', 'CREATE', 's1', NULL, '{}') FROM generate_series(1, 3);
SELECT eventhub.heartbeat('s-a', '{"split": {"revision": 2, "config_hash": "x"}}'),
       eventhub.heartbeat('s-b', '{"split": {"revision": 2, "config_hash": "x"}}');
SELECT count(*) AS splits_when_agreeing FROM eventhub.config_splits WHERE organization_id = 'split';
SELECT eventhub.heartbeat('s-c', '{"split": {"revision": 2, "config_hash": "y"}}');
-- The other order at revision 3: the odd one first, then the two others.
SELECT eventhub.heartbeat('s-c', '{"split": {"revision": 3, "config_hash": "y"}}');
SELECT eventhub.heartbeat('s-a', '{"split": {"revision": 3, "config_hash": "x"}}'),
       eventhub.heartbeat('s-b', '{"split": {"revision": 3, "config_hash": "x"}}');
SELECT organization_id, revision FROM eventhub.config_splits WHERE organization_id = 'split' ORDER BY 2;
SELECT labels->>'replica' AS replica, value FROM eventhub.metrics()
 WHERE name = 'eventhub_replica_config_hash_mismatch' AND labels->>'replica' LIKE 's-%' ORDER BY 1;
-- A steady heartbeat compares nothing: a pair taken away is not found again
-- until a row there changes.
SET eventhub.protect_tables = off;
DELETE FROM eventhub.config_splits WHERE organization_id = 'split';
RESET eventhub.protect_tables;
SELECT eventhub.heartbeat('s-a', '{"split": {"revision": 3, "config_hash": "x"}}'),
       eventhub.heartbeat('s-c', '{"split": {"revision": 3, "config_hash": "y"}}');
SELECT count(*) AS splits_after_steady_heartbeats FROM eventhub.config_splits WHERE organization_id = 'split';
SELECT eventhub.heartbeat('s-c', '{"split": {"revision": 3, "config_hash": "z"}}');
SELECT organization_id, revision FROM eventhub.config_splits WHERE organization_id = 'split' ORDER BY 2;
-- s-c takes the others' hash: no longer split, no mismatch, and maintenance
-- removes the pair.
SELECT eventhub.heartbeat('s-c', '{"split": {"revision": 3, "config_hash": "x"}}');
SELECT count(*) AS mismatched FROM eventhub.metrics()
 WHERE name = 'eventhub_replica_config_hash_mismatch' AND labels->>'replica' LIKE 's-%' AND value = 1;
-- (r-1 and r-2, one to one at acme above, still disagree.)
SELECT pg_temp.m('eventhub_replicas_config_hash_disagreeing') AS disagreeing;
SELECT eventhub.run_maintenance() >= 0 AS maintained;
SELECT count(*) AS splits_after_maintenance FROM eventhub.config_splits WHERE organization_id = 'split';
-- Only a stale replica differs: no mismatch (it is compared with the live
-- ones once it is live again), and maintenance keeps the pair.
SELECT eventhub.heartbeat('s-c', '{"split": {"revision": 3, "config_hash": "w"}}');
SET eventhub.protect_tables = off;
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '6 minutes' WHERE replica_id = 's-c';
RESET eventhub.protect_tables;
SELECT count(*) AS mismatched_with_stale FROM eventhub.metrics()
 WHERE name = 'eventhub_replica_config_hash_mismatch' AND labels->>'replica' LIKE 's-%' AND value = 1;
SELECT eventhub.run_maintenance() >= 0 AS maintained;
SELECT organization_id, revision FROM eventhub.config_splits WHERE organization_id = 'split' ORDER BY 2;
SELECT eventhub.heartbeat('s-c', '{"split": {"revision": 3, "config_hash": "w"}}');
SELECT labels->>'replica' AS replica, value FROM eventhub.metrics()
 WHERE name = 'eventhub_replica_config_hash_mismatch' AND labels->>'replica' LIKE 's-%' ORDER BY 1;
SELECT eventhub.deregister_replica(r) FROM unnest(ARRAY['s-a', 's-b', 's-c']) r;
SELECT eventhub.run_maintenance() >= 0 AS maintained;
SELECT count(*) AS splits_without_replicas FROM eventhub.config_splits WHERE organization_id = 'split';

DROP EXTENSION eventhub;
DROP ROLE regress_eh_metrics_nobody, regress_eh_metrics_operator;
