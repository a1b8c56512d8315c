-- eventhub.compaction: retention (run_maintenance, the worker's batch, every
-- cleanup_events) keeps each live entity's latest event however old, and
-- removes superseded events and tombstones with nothing older left.  An
-- entity is an organization's (event_type, entity_id).
CREATE EXTENSION eventhub;
SELECT context, boot_val FROM pg_settings WHERE name = 'eventhub.compaction';
SET eventhub.compaction = on;
-- Turned on.  The backend applies the reload before its next command: each
-- command below waits a little until it has (at most 20 s in all).
ALTER SYSTEM SET eventhub.compaction = on;
SELECT pg_reload_conf();
\set ECHO none
\o /dev/null
SELECT 'SELECT pg_catalog.pg_sleep(0.05) WHERE pg_catalog.current_setting(''eventhub.compaction'') <> ''on'''
  FROM generate_series(1, 400) \gexec
\o
\set ECHO all
SHOW eventhub.compaction;

-- Organization k: 1 API/a CREATE, 2 API/a UPDATE (its latest), 3 API/b
-- CREATE, 4 API/b DELETE (a tombstone with an older event), 5 API/c CREATE,
-- 6 CERT/a CREATE (another type with the same id: another entity), 7 API/d
-- DELETE (a lone tombstone); organization m: 1 API/a CREATE, 2 its UPDATE.
SELECT eventhub.publish_event('k', 'API', 'CREATE', 'a', NULL, '{"v": 1}');
SELECT eventhub.publish_event('k', 'API', 'UPDATE', 'a', NULL, '{"v": 2}');
SELECT eventhub.publish_event('k', 'API', 'CREATE', 'b', NULL, '{}');
SELECT eventhub.publish_event('k', 'API', 'DELETE', 'b', NULL, 'null');
SELECT eventhub.publish_event('k', 'API', 'CREATE', 'c', NULL, '{}');
SELECT eventhub.publish_event('k', 'CERT', 'CREATE', 'a', NULL, '{}');
SELECT eventhub.publish_event('k', 'API', 'DELETE', 'd', NULL, 'null');
SELECT eventhub.publish_event('m', 'API', 'CREATE', 'a', NULL, '{}');
SELECT eventhub.publish_event('m', 'API', 'UPDATE', 'a', NULL, '{"v": 2}');
-- The full history, kept aside; every event is a day old.
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day';
RESET eventhub.protect_tables;
CREATE TEMP TABLE history AS SELECT * FROM eventhub.events;
CREATE TEMP TABLE states_before AS SELECT * FROM eventhub.organization_states;
CREATE TEMP VIEW latest_live AS
  SELECT h.organization_id, h.revision FROM history h
   WHERE h.action <> 'DELETE'
     AND NOT EXISTS (SELECT FROM history n WHERE n.organization_id = h.organization_id
                     AND n.event_type = h.event_type AND n.entity_id = h.entity_id
                     AND n.revision > h.revision);

-- run_maintenance (the worker's batch): superseded events and the lone
-- tombstone go; the tombstone of b stays while b's CREATE was still there
-- for the statement, and goes on the next pass.
SELECT eventhub.run_maintenance();
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
SELECT eventhub.run_maintenance();
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
-- Every live entity's latest event is there, nothing superseded is.
SELECT count(*) AS latest_missing
  FROM latest_live l
 WHERE NOT EXISTS (SELECT FROM eventhub.events e
                   WHERE e.organization_id = l.organization_id AND e.revision = l.revision);
SELECT count(*) AS superseded_left
  FROM eventhub.events e
 WHERE NOT EXISTS (SELECT FROM latest_live l
                   WHERE e.organization_id = l.organization_id AND e.revision = l.revision);
-- Nothing more to remove, however old, by any deleter.
SELECT eventhub.run_maintenance();
SELECT eventhub.cleanup_events('infinity');
SELECT eventhub.cleanup_events('k', '-infinity', 'infinity');
SELECT eventhub.cleanup_events('k', 100);
SELECT count(*) AS events FROM eventhub.events;
-- A snapshot is the entities' current state.
SELECT event_type, entity_id, revision, event_data
  FROM eventhub.snapshot_entities('k', (eventhub.snapshot_head('k')).revision);

-- cleanup_events over a range holding only an entity's DELETE keeps it
-- while its CREATE is there; below a revision, the CREATE goes as
-- superseded, and then the tombstone, which has nothing older left.
SELECT eventhub.publish_event('k', 'API', 'CREATE', 'e', NULL, '{}');
SELECT eventhub.publish_event('k', 'API', 'DELETE', 'e', NULL, 'null');
SELECT now() AS t1 \gset
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = :'t1'::timestamptz - interval '1 hour'
 WHERE organization_id = 'k' AND revision = 8;
RESET eventhub.protect_tables;
SELECT eventhub.cleanup_events('k', :'t1'::timestamptz - interval '30 minutes', 'infinity');
SELECT eventhub.cleanup_events('k', 11);
SELECT array_agg(revision ORDER BY revision) AS kept FROM eventhub.events WHERE organization_id = 'k';
SELECT eventhub.cleanup_events('k', 11);
SELECT array_agg(revision ORDER BY revision) AS kept FROM eventhub.events WHERE organization_id = 'k';
-- A re-created entity: the CREATE after a DELETE is its latest and stays.
SELECT eventhub.publish_event('k', 'API', 'CREATE', 'b', NULL, '{"again": true}');
SELECT eventhub.cleanup_events('infinity');
SELECT eventhub.cleanup_events('infinity');
SELECT revision, entity_id, action FROM eventhub.events WHERE organization_id = 'k' ORDER BY revision;
-- With compaction on nothing marks an organization incomplete.
SELECT count(*) AS changed_states
  FROM (SELECT organization_id, complete_after FROM eventhub.organization_states
        EXCEPT SELECT organization_id, complete_after FROM states_before) d;

-- Events at or below a declared full state go even when latest.
SELECT eventhub.publish_event('k', 'API', 'UPDATE', 'c', NULL, '{"full": true}');
SELECT eventhub.declare_full_state('k', 10);
SELECT eventhub.cleanup_events('infinity');
SELECT revision, entity_id, action FROM eventhub.events WHERE organization_id = 'k' ORDER BY revision;

-- Compaction off (the default for now; operations.md: events carrying
-- partial updates): every expired event goes, as before 0.4.0.  (Marking the
-- organization incomplete when an entity's latest event goes is not done
-- yet.)
ALTER SYSTEM SET eventhub.compaction = off;
SELECT pg_reload_conf();
\set ECHO none
\o /dev/null
SELECT 'SELECT pg_catalog.pg_sleep(0.05) WHERE pg_catalog.current_setting(''eventhub.compaction'') <> ''off'''
  FROM generate_series(1, 400) \gexec
\o
\set ECHO all
SHOW eventhub.compaction;
SELECT eventhub.publish_event('n', 'API', 'CREATE', 'a', NULL, '{}');
SELECT eventhub.publish_event('n', 'API', 'UPDATE', 'a', NULL, '{"v": 2}');
SELECT eventhub.publish_event('n', 'API', 'CREATE', 'b', NULL, '{}');
SELECT eventhub.cleanup_events('n', 2);
SELECT eventhub.cleanup_events('n', 3);
SELECT revision, entity_id FROM eventhub.events WHERE organization_id = 'n';
-- Everything else, by run_maintenance too.
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
SELECT count(*) AS events FROM eventhub.events;

ALTER SYSTEM RESET eventhub.compaction;
SELECT pg_reload_conf();
\set ECHO none
\o /dev/null
SELECT 'SELECT pg_catalog.pg_sleep(0.05) WHERE pg_catalog.current_setting(''eventhub.compaction'') <> ''off'''
  FROM generate_series(1, 400) \gexec
\o
\set ECHO all
SHOW eventhub.compaction;
DROP EXTENSION eventhub;
