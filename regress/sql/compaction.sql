-- eventhub.compaction: retention (run_maintenance, the worker's batch, every
-- cleanup_events) keeps each live entity's latest event however old, and
-- removes superseded events and tombstones with nothing older left.  An
-- entity is an organization's (event_type, entity_id).
CREATE EXTENSION eventhub;
SELECT context, boot_val FROM pg_settings WHERE name = 'eventhub.compaction';
-- On by default; a session cannot change it (every deleter applies the
-- same rule).
SET eventhub.compaction = off;
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

-- A pass looks at a bounded number of events per batch (ten times
-- eventhub.cleanup_batch_size) and resumes after them, so it goes on behind
-- a block of kept events larger than that bound, ties on
-- processed_timestamp included, and still ends.  Organization "block":
-- 5000 entities' only events, then 3000 events of entity s, all but the last
-- superseded, all processed at the same instant; a batch of 100 looks at no
-- more than 1000 of them, so the first five find nothing to delete.
\set setting eventhub.cleanup_batch_size
\set value 100
\i regress/include/reload_setting.sql
SHOW eventhub.cleanup_batch_size;
SET eventhub.protect_tables = off;
INSERT INTO eventhub.events (organization_id, revision, version_id, processed_timestamp, originated_timestamp,
                             event_type, action, entity_id, correlation_id, event_data)
SELECT 'block', i, gen_random_uuid(), now() - interval '1 day', now(), 'API', 'UPDATE',
       CASE WHEN i <= 5000 THEN 'k-' || i ELSE 's' END, 'block-' || i, '{}'
  FROM generate_series(1, 8000) i;
INSERT INTO eventhub.organization_states (organization_id, version_id, revision, updated_at)
SELECT 'block', version_id, revision, now() FROM eventhub.events
 WHERE organization_id = 'block' AND revision = 8000;
RESET eventhub.protect_tables;
SELECT count(*) FILTER (WHERE entity_id = 's') AS s_events, count(*) FILTER (WHERE entity_id <> 's') AS others
  FROM eventhub.events WHERE organization_id = 'block';
SELECT eventhub.run_maintenance();
SELECT count(*) FILTER (WHERE entity_id = 's') AS s_events, count(*) FILTER (WHERE entity_id <> 's') AS others,
       max(revision) FILTER (WHERE entity_id = 's') AS s_latest
  FROM eventhub.events WHERE organization_id = 'block';
SELECT eventhub.run_maintenance();

-- Compaction off (operations.md: events carrying partial updates): every
-- expired event goes, as before 0.4.0, but an organization that loses an
-- entity's latest event (or a tombstone with older events left) is marked
-- incomplete in the same statement, and its snapshots are refused (ZE004)
-- until eventhub.declare_full_state().
\set setting eventhub.compaction
\set value off
\i regress/include/reload_setting.sql
SHOW eventhub.compaction;
CREATE FUNCTION pg_temp.snapshot_sqlstate(org text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM eventhub.snapshot_head(org);
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END
$$;
CREATE TEMP VIEW completeness AS
  SELECT organization_id, complete_after, pg_temp.snapshot_sqlstate(organization_id) AS snapshot
    FROM eventhub.organization_states WHERE organization_id IN ('n', 'p', 'q', 'r') ORDER BY 1;
-- n: 1 API/a CREATE, 2 its UPDATE, 3 API/b CREATE.  Below revision 2 only
-- the superseded CREATE goes: n stays complete.  Below 3, a's latest goes:
-- n is incomplete.
SELECT eventhub.publish_event('n', 'API', 'CREATE', 'a', NULL, '{}');
SELECT eventhub.publish_event('n', 'API', 'UPDATE', 'a', NULL, '{"v": 2}');
SELECT eventhub.publish_event('n', 'API', 'CREATE', 'b', NULL, '{}');
SELECT eventhub.cleanup_events('n', 2);
SELECT * FROM completeness;
SELECT eventhub.cleanup_events('n', 3);
SELECT revision, entity_id FROM eventhub.events WHERE organization_id = 'n';
SELECT * FROM completeness;
SELECT eventhub.snapshot_head('n');
-- p: superseded events only go (run_maintenance): complete.  q: a range
-- over an entity's DELETE alone, with its CREATE left: incomplete.  r: an
-- entity's only event goes by run_maintenance: incomplete.
SELECT eventhub.publish_event('p', 'API', 'CREATE', 'a', NULL, '{}');
SELECT eventhub.publish_event('p', 'API', 'UPDATE', 'a', NULL, '{"v": 2}');
SELECT eventhub.publish_event('q', 'API', 'CREATE', 'x', NULL, '{}');
SELECT eventhub.publish_event('q', 'API', 'DELETE', 'x', NULL, 'null');
SELECT eventhub.publish_event('r', 'API', 'CREATE', 'a', NULL, '{}');
SELECT eventhub.publish_event('r', 'API', 'CREATE', 'b', NULL, '{}');
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day'
 WHERE (organization_id, revision) IN (('p', 1), ('r', 1));
UPDATE eventhub.events SET processed_timestamp = '2001-01-01'
 WHERE (organization_id, revision) = ('q', 2);
RESET eventhub.protect_tables;
SELECT eventhub.cleanup_events('q', '2000-01-01', '2002-01-01');
SELECT eventhub.run_maintenance();
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events WHERE organization_id IN ('p', 'q', 'r') GROUP BY 1 ORDER BY 1;
SELECT * FROM completeness;
-- declare_full_state makes an organization complete again.
SELECT eventhub.declare_full_state('r', 2);
SELECT * FROM completeness;
-- Everything else, by run_maintenance too.
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
SELECT count(*) AS events FROM eventhub.events;
SELECT * FROM completeness;

\set setting eventhub.compaction
\set value default
\i regress/include/reload_setting.sql
\set setting eventhub.cleanup_batch_size
\set value default
\i regress/include/reload_setting.sql
SHOW eventhub.compaction;
SHOW eventhub.cleanup_batch_size;
DROP VIEW completeness;
DROP EXTENSION eventhub;
