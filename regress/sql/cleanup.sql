-- cleanup_events: deletes by age across organizations, by range in one, or
-- below a revision in one; returns the count, and never touches
-- organization_states.  Every organization's events are one entity's
-- UPDATEs, each superseded by the next: with compaction (on by default)
-- they go like any expired event, except each organization's last, which
-- goes once a DELETE supersedes it (compaction.sql has the rest).
CREATE EXTENSION eventhub;
SELECT count(eventhub.publish_event(o, 'API', 'UPDATE', 'api', NULL, '{}'))
  FROM unnest(ARRAY['acme', 'globex', 'initech']) o, generate_series(1, 4) i;
-- Revision r of every organization is (4 - r) days older than t0.
SELECT now() AS t0 \gset
-- (A superuser's repair: the fixture ages events directly.)
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET processed_timestamp = :'t0'::timestamptz - (4 - revision) * interval '1 day';
RESET eventhub.protect_tables;
CREATE TEMP TABLE states_before AS SELECT * FROM eventhub.organization_states;

-- Strictly older than the cutoff: revisions 1 and 2 of every organization.
SELECT eventhub.cleanup_events(:'t0'::timestamptz - interval '36 hours');
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
-- Nothing left to delete at the same cutoff.
SELECT eventhub.cleanup_events(:'t0'::timestamptz - interval '36 hours');

-- The range form touches one organization, [from_ts, to_ts): revision 3 is
-- exactly at from_ts and goes, revision 4 is exactly at to_ts and stays.
SELECT eventhub.cleanup_events('globex', :'t0'::timestamptz - interval '1 day', :'t0');
SELECT eventhub.cleanup_events('nobody', '-infinity', 'infinity');
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;

-- By revision, in one organization: everything below before_revision.
SELECT eventhub.publish_event('initech', 'API', 'UPDATE', 'api', NULL, '{}') FROM generate_series(5, 6) i;
SELECT eventhub.cleanup_events('initech', 5);
SELECT eventhub.cleanup_events('initech', 5);
SELECT eventhub.cleanup_events('initech', 0);
SELECT eventhub.cleanup_events('nobody', 100);
SELECT organization_id, array_agg(revision ORDER BY revision) AS kept
  FROM eventhub.events GROUP BY 1 ORDER BY 1;
-- A reader behind the removed events is told (ZE001); one at 4 reads on.
SELECT revision FROM eventhub.events_since('initech', 3);
SELECT revision FROM eventhub.events_since('initech', 4);
SELECT eventhub.cleanup_events('initech', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events('initech', NULL::bigint);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events(NULL, 5);
\echo :LAST_ERROR_SQLSTATE
DELETE FROM states_before WHERE organization_id = 'initech';
INSERT INTO states_before SELECT * FROM eventhub.organization_states WHERE organization_id = 'initech';

-- organization_states is exactly as before.
SELECT count(*) AS changed_states
  FROM (SELECT * FROM eventhub.organization_states
        EXCEPT SELECT * FROM states_before) d;

-- Everything, once each entity is deleted: the superseded events first,
-- then the tombstones, which have nothing older left.
SELECT eventhub.publish_event(o, 'API', 'DELETE', 'api', NULL, 'null')
  FROM unnest(ARRAY['acme', 'globex', 'initech']) o;
SELECT eventhub.cleanup_events('infinity');
SELECT eventhub.cleanup_events('infinity');
SELECT count(*) AS events FROM eventhub.events;
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;

DROP EXTENSION eventhub;
