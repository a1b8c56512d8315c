-- events_since: the read cursor, batches, and the resync signals.
CREATE EXTENSION eventhub;
SELECT eventhub.publish_event('acme', 'API', CASE WHEN i = 1 THEN 'CREATE' ELSE 'UPDATE' END,
                              'api-1', 'c-' || i, jsonb_build_object('v', i))
  FROM generate_series(1, 7) i;
SELECT eventhub.publish_event('globex', 'API', 'CREATE', 'api-1', 'g-1', '{}');

-- From 0: everything, in revision order, with every column.
SELECT organization_id, revision, action, entity_id, correlation_id, event_data
  FROM eventhub.events_since('acme', 0);
SELECT e IS NOT DISTINCT FROM x AS same_rows
  FROM eventhub.events_since('acme', 0) x
  JOIN eventhub.events e USING (organization_id, revision)
 LIMIT 1;

-- Batches: a reader that advances its cursor sees every event exactly once.
SELECT revision FROM eventhub.events_since('acme', 0, 3);
SELECT revision FROM eventhub.events_since('acme', 3, 3);
SELECT revision FROM eventhub.events_since('acme', 6, 3);
-- At the head: nothing, not an error.
SELECT count(*) FROM eventhub.events_since('acme', 7);
-- Only the named organization.
SELECT organization_id, revision FROM eventhub.events_since('globex', 0);
-- An organization nobody published to has head 0.
SELECT count(*) FROM eventhub.events_since('nobody', 0);
SELECT eventhub.register_organization('registered') IS NOT NULL;
SELECT count(*) FROM eventhub.events_since('registered', 0);

-- A cursor above the head: the reader has seen history this database does
-- not have (ZE002).
SELECT * FROM eventhub.events_since('acme', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('nobody', 1);
\echo :LAST_ERROR_SQLSTATE

-- The cursor with its version: a reader that applied another history (a
-- failover to a standby that had not received it) gets ZE003, whether the
-- head is above, at or (ZE002) below its cursor.
SELECT version_id AS v5 FROM eventhub.events WHERE organization_id = 'acme' AND revision = 5 \gset
SELECT version_id AS v7 FROM eventhub.events WHERE organization_id = 'acme' AND revision = 7 \gset
SELECT revision FROM eventhub.events_since('acme', 5, 10, :'v5');
SELECT count(*) FROM eventhub.events_since('acme', 7, 10, :'v7');
SELECT count(*) FROM eventhub.events_since('acme', 0, 10, gen_random_uuid());
-- (terse: the details name random version ids)
\set VERBOSITY terse
SELECT * FROM eventhub.events_since('acme', 5, 10, :'v7');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 7, 10, :'v5');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT * FROM eventhub.events_since('acme', 8, 10, :'v7');
\echo :LAST_ERROR_SQLSTATE

-- Retention removed events the reader has not seen: ZE001, never a gap.
-- Revisions 1-3 are made old and cleaned up.
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = processed_timestamp - interval '2 days'
 WHERE organization_id = 'acme' AND revision <= 3;
RESET eventhub.protect_tables;
SELECT eventhub.cleanup_events(now() - interval '1 day');
SELECT * FROM eventhub.events_since('acme', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 2);
\echo :LAST_ERROR_SQLSTATE
-- A cursor at the edge of the kept history keeps working.
SELECT revision FROM eventhub.events_since('acme', 3);
SELECT revision FROM eventhub.events_since('acme', 5, 1);

-- A hole in the middle (a range cleanup) is detected too, whether the batch
-- would start at it or run into it.  The message names the cursor passed
-- (3, though 4 is kept), the detail the revision that is gone (5).
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = '2001-01-01'
 WHERE organization_id = 'acme' AND revision = 5;
RESET eventhub.protect_tables;
SELECT eventhub.cleanup_events('acme', '2000-01-01', '2002-01-01');
SELECT revision FROM eventhub.events_since('acme', 3, 1);
SELECT * FROM eventhub.events_since('acme', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT revision FROM eventhub.events_since('acme', 5);

-- Everything after the cursor removed: ZE001, not an empty answer.
-- (Compaction keeps an entity's latest event unless it is at or below a
-- declared full state.)
SELECT eventhub.declare_full_state('acme', 7);
SELECT eventhub.cleanup_events(now() + interval '1 hour');
SELECT * FROM eventhub.events_since('acme', 6);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM eventhub.events_since('acme', 7);
-- With the event at the cursor removed, the head still tells a diverged
-- cursor at it; a cursor below a removed event cannot be checked.
SELECT count(*) FROM eventhub.events_since('acme', 7, 10, :'v7');
\set VERBOSITY terse
SELECT * FROM eventhub.events_since('acme', 7, 10, :'v5');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT * FROM eventhub.events_since('acme', 6, 10, :'v5');
\echo :LAST_ERROR_SQLSTATE
-- Retention never touches the head or version of an organization.
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;
-- Publishing continues from the head.
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', NULL, '{}');
SELECT revision FROM eventhub.events_since('acme', 7);

-- A batch's rows wait in memory the backend keeps from one query to the
-- next.  Two sets in one query, a set read again for each outer row, a
-- cursor that holds one open while others are read, and a query that fails
-- halfway each read their own rows, and the next query finds the memory
-- free again.
SELECT eventhub.register_organization('kept') IS NOT NULL AS registered;
SELECT count(eventhub.publish_event('kept', 'API', 'UPDATE', 'api-' || g, NULL, jsonb_build_object('g', g)))
  FROM generate_series(1, 30) g;
SELECT count(*), sum(a.revision), sum(b.revision), bool_and(a.event_data = b.event_data)
  FROM eventhub.events_since('kept', 0) a JOIN eventhub.events_since('kept', 10) b USING (revision);
SELECT o, (SELECT string_agg(revision::text, ',') FROM eventhub.events_since('kept', o, 3)) AS revisions
  FROM generate_series(0, 27, 9) o;
BEGIN;
DECLARE held CURSOR FOR SELECT revision, event_data->>'g' AS g FROM eventhub.events_since('kept', 0);
FETCH 2 FROM held;
SELECT min(revision), max(revision), count(*) FROM eventhub.events_since('kept', 20);
FETCH 2 FROM held;
COMMIT;
SELECT revision, 1 / (revision - 5) FROM eventhub.events_since('kept', 0);
SELECT count(*), min(revision), max(revision), sum((event_data->>'g')::int)
  FROM eventhub.events_since('kept', 0);
SELECT revision, event_data FROM eventhub.transactions_since('kept', 28);

DROP EXTENSION eventhub;
