-- run_maintenance and the eventhub.* settings.  The test cluster preloads
-- the library with the default settings (retention 1h).
CREATE EXTENSION eventhub;

SELECT name, setting, unit, context, boot_val
  FROM pg_settings WHERE name LIKE 'eventhub.%' ORDER BY name;
SHOW eventhub.retention;
SHOW eventhub.maintenance_interval;
-- Settings a session cannot change, and the reserved prefix.
SET eventhub.retention = '5min';
SET eventhub.database = 'other';
SET eventhub.retension = '5min';

-- Expired (older than eventhub.retention) events go, fresh ones stay, in
-- every organization; heads and versions stay.
-- Each organization's events are one entity's, each superseded by the next
-- (compaction keeps only the last).
SELECT count(eventhub.publish_event(o, 'API', 'UPDATE', 'api', NULL, '{}'))
  FROM unnest(ARRAY['acme', 'globex']) o, generate_series(1, 4) r;
SET eventhub.protect_tables = off;  -- the fixture ages events directly
UPDATE eventhub.events SET processed_timestamp = now() - interval '61 minutes' WHERE revision <= 2;
UPDATE eventhub.events SET processed_timestamp = now() - interval '59 minutes' WHERE revision = 3;
RESET eventhub.protect_tables;
CREATE TEMP TABLE states_before AS SELECT * FROM eventhub.organization_states;
SELECT eventhub.run_maintenance();
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
SELECT count(*) AS changed_states
  FROM (SELECT * FROM eventhub.organization_states EXCEPT SELECT * FROM states_before) d;
SELECT eventhub.run_maintenance();

-- More expired events than one batch (10000 by default), of one entity
-- whose last event is its DELETE: everything but the tombstone goes in one
-- pass, the tombstone on the next, once nothing older of its entity is left.
SET eventhub.protect_tables = off;
INSERT INTO eventhub.events
SELECT 'bulk', i, gen_random_uuid(), now() - interval '1 day', now(), 'API',
       CASE WHEN i = 25000 THEN 'DELETE' ELSE 'UPDATE' END, 'e', 'bulk-' || i, '{}'
  FROM generate_series(1, 25000) i;
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance();
SELECT count(*) AS bulk_left FROM eventhub.events WHERE organization_id = 'bulk';
SELECT eventhub.run_maintenance();
SELECT count(*) AS bulk_left FROM eventhub.events WHERE organization_id = 'bulk';

-- In the caller's transaction: a rollback undoes it.
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day' WHERE organization_id = 'acme';
RESET eventhub.protect_tables;
BEGIN;
SELECT eventhub.run_maintenance();
ROLLBACK;
SELECT count(*) AS acme_events FROM eventhub.events WHERE organization_id = 'acme';

DROP EXTENSION eventhub;
