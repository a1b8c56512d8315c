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

DROP EXTENSION eventhub;
DROP ROLE regress_eh_metrics_nobody, regress_eh_metrics_operator;
