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

-- One call is a whole pass, every batch of it (docs/sql.md,
-- run_maintenance): with batches of 2, organization "passes" loses 9
-- expired events in one call.  A batch does not see its own deletes, so a
-- tombstone goes once an earlier batch removed its entity's older events:
-- x's CREATE and UPDATE (revisions 1 and 2) fill the first batch, and x's
-- DELETE (3) goes in the second, in the same call.  y's last event (10)
-- is its latest and stays.  Each event is a second older than the next,
-- so that the walk takes them in revision order.
\set setting eventhub.cleanup_batch_size
\set value 2
\i regress/include/reload_setting.sql
SHOW eventhub.cleanup_batch_size;
SELECT count(eventhub.publish_event('passes', 'API', a, e, NULL, '{}'))
  FROM (VALUES (1, 'CREATE', 'x'), (2, 'UPDATE', 'x'), (3, 'DELETE', 'x'), (4, 'CREATE', 'y'), (5, 'UPDATE', 'y'),
               (6, 'UPDATE', 'y'), (7, 'UPDATE', 'y'), (8, 'UPDATE', 'y'), (9, 'UPDATE', 'y'), (10, 'UPDATE', 'y'))
       v(r, a, e);
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day' + revision * interval '1 second'
 WHERE organization_id = 'passes';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance() AS deleted;
SELECT array_agg(revision ORDER BY revision) AS kept FROM eventhub.events WHERE organization_id = 'passes';
-- Organization "later": z's CREATE and DELETE in one batch.  The batch
-- removes the CREATE, and still sees it when it looks at the DELETE: the
-- tombstone stays for the next call, which removes it.
SELECT count(eventhub.publish_event('later', 'API', a, 'z', NULL, '{}'))
  FROM (VALUES ('CREATE'), ('DELETE')) v(a);
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day' + revision * interval '1 second'
 WHERE organization_id = 'later';
RESET eventhub.protect_tables;
SELECT eventhub.run_maintenance() AS deleted;
SELECT array_agg(revision ORDER BY revision) AS kept FROM eventhub.events WHERE organization_id = 'later';
SELECT eventhub.run_maintenance() AS deleted;
SELECT count(*) AS kept FROM eventhub.events WHERE organization_id = 'later';
\set setting eventhub.cleanup_batch_size
\set value default
\i regress/include/reload_setting.sql
SHOW eventhub.cleanup_batch_size;

-- In the caller's transaction: a rollback undoes it.
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day' WHERE organization_id = 'acme';
RESET eventhub.protect_tables;
BEGIN;
SELECT eventhub.run_maintenance();
ROLLBACK;
SELECT count(*) AS acme_events FROM eventhub.events WHERE organization_id = 'acme';

DROP EXTENSION eventhub;
