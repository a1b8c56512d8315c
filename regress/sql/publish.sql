-- publish_event and register_organization: revisions, versions, stored
-- columns, idempotency and the transactional outbox.
CREATE EXTENSION eventhub;

-- The first event registers the organization and gets revision 1; revisions
-- are gapless per organization and independent across organizations.
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', 'c-1', '{"name": "weather"}');
SELECT eventhub.publish_event('acme', 'CERTIFICATE', 'CREATE', 'cert-1', 'c-2', '{"cn": "acme.test"}');
SELECT eventhub.publish_event('globex', 'LLM_TEMPLATE', 'CREATE', 'tpl-1', 'c-3', '[1, 2, 3]');
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
SELECT eventhub.publish_event('acme', 'API', 'DELETE', 'api-1', 'c-5', 'null');
-- Event types are free-form.
SELECT eventhub.publish_event('globex', 'RATE_LIMIT_POLICY', 'UPDATE', 'rl-7', 'c-6', '{"rps": 10}');

SELECT organization_id, revision, event_type, action, entity_id, correlation_id, event_data
  FROM eventhub.events ORDER BY organization_id, revision;
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY organization_id;

-- Each event carries a new version id (a UUID laid out as version 7: the
-- Unix time in milliseconds, then random bits), and the organization's
-- version id is its head event's.
SELECT count(*) AS events, count(DISTINCT version_id) AS distinct_versions,
       bool_and(version_id::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$') AS all_v7,
       bool_and(('x' || substr(replace(version_id::text, '-', ''), 1, 12))::bit(48)::bigint
                BETWEEN (extract(epoch FROM now()) * 1000)::bigint - 60000
                    AND (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS all_stamped_now
  FROM eventhub.events;
SELECT s.organization_id, s.version_id = e.version_id AS state_matches_head_event
  FROM eventhub.organization_states s
  JOIN eventhub.events e ON e.organization_id = s.organization_id AND e.revision = s.revision
 ORDER BY 1;

-- Timestamps: originated_timestamp defaults to now() and is stored as given
-- otherwise; processed_timestamp and updated_at are the server's clock when
-- the revision was assigned.
BEGIN;
SELECT eventhub.publish_event('initech', 'API', 'CREATE', 'a', 'c-7', '{}') AS rev_default_ts;
SELECT eventhub.publish_event('initech', 'API', 'UPDATE', 'a', 'c-8', '{}', '2020-01-02 03:04:05+00') AS rev_given_ts;
SELECT revision,
       originated_timestamp = now() AS originated_is_now,
       originated_timestamp = '2020-01-02 03:04:05+00' AS originated_as_given,
       processed_timestamp BETWEEN now() AND clock_timestamp() AS processed_is_server_clock
  FROM eventhub.events WHERE organization_id = 'initech' ORDER BY revision;
SELECT s.updated_at = e.processed_timestamp AS updated_at_matches
  FROM eventhub.organization_states s
  JOIN eventhub.events e ON e.organization_id = s.organization_id AND e.revision = s.revision
 WHERE s.organization_id = 'initech';
COMMIT;

-- A NULL correlation id gets a generated UUID string (the event's version
-- id), different each time, and the later sorts after the earlier (from
-- another millisecond: the order within one millisecond is random).
SELECT eventhub.publish_event('initech', 'API', 'UPDATE', 'a', NULL, '{}');
SELECT pg_sleep(0.002);
SELECT eventhub.publish_event('initech', 'API', 'UPDATE', 'a', NULL, '{}');
SELECT count(DISTINCT correlation_id) AS distinct_generated,
       bool_and(correlation_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$') AS all_uuids,
       bool_and(correlation_id = version_id::text) AS the_version_ids,
       (array_agg(correlation_id ORDER BY revision))[1] < (array_agg(correlation_id ORDER BY revision))[2] AS in_order
  FROM eventhub.events WHERE organization_id = 'initech' AND revision > 2;

--
-- Idempotency
--
CREATE TEMP TABLE before AS
  SELECT (SELECT count(*) FROM eventhub.events) AS events, s.*
    FROM eventhub.organization_states s WHERE s.organization_id = 'acme';

-- Publishing the same event again returns its original revision and changes
-- nothing, whatever originated_timestamp says.
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', 'c-4', '{"v": 2, "name": "weather"}', '1999-01-01');
-- publish_event_result says it was a replay; a new event is not one, and
-- the replay of an event of this very transaction is.
SELECT * FROM eventhub.publish_event_result('acme', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
BEGIN;
SELECT * FROM eventhub.publish_event_result('acme', 'API', 'UPDATE', 'api-1', 'c-4b', '{"v": 4}');
SELECT * FROM eventhub.publish_event_result('acme', 'API', 'UPDATE', 'api-1', 'c-4b', '{"v": 4}');
SELECT * FROM eventhub.publish_event_result('acme', 'API', 'UPDATE', 'api-1', NULL, '{"v": 4}');
ROLLBACK;
SELECT eventhub.publish_event_result('acme', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 3}');
\echo :LAST_ERROR_SQLSTATE
SELECT (SELECT count(*) FROM eventhub.events) = b.events AS no_new_event,
       s.revision = b.revision AS same_revision,
       s.version_id = b.version_id AS same_version,
       s.updated_at = b.updated_at AS same_updated_at
  FROM eventhub.organization_states s, before b WHERE s.organization_id = 'acme';

-- The same correlation id with any different content is an error naming it.
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 3}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-2', 'c-4', '{"name": "weather", "v": 2}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'DELETE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'CERTIFICATE', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
\echo :LAST_ERROR_SQLSTATE
SELECT (SELECT count(*) FROM eventhub.events) = b.events AS no_new_event,
       s.revision = b.revision AS same_revision,
       s.version_id = b.version_id AS same_version
  FROM eventhub.organization_states s, before b WHERE s.organization_id = 'acme';
-- A correlation id is an idempotency key within its organization: the same
-- id in another organization is another event there (organization ids are
-- exact: case matters), and acme is untouched.
SELECT eventhub.publish_event('globex', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
SELECT eventhub.publish_event('ACME', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
SELECT organization_id, revision, correlation_id FROM eventhub.events
 WHERE correlation_id = 'c-4' ORDER BY organization_id;
-- ... and a replay there is recognised there.
SELECT eventhub.publish_event('globex', 'API', 'UPDATE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
SELECT eventhub.publish_event('globex', 'API', 'DELETE', 'api-1', 'c-4', '{"name": "weather", "v": 2}');
\echo :LAST_ERROR_SQLSTATE
SELECT s.revision = b.revision AS acme_same_revision, s.version_id = b.version_id AS acme_same_version
  FROM eventhub.organization_states s, before b WHERE s.organization_id = 'acme';
SELECT count(*) AS organizations FROM eventhub.organization_states;

--
-- register_organization
--
SELECT eventhub.register_organization('hooli') IS NOT NULL AS registered;
SELECT organization_id, revision FROM eventhub.organization_states WHERE organization_id = 'hooli';
SELECT eventhub.register_organization('hooli') = version_id AS idempotent
  FROM eventhub.organization_states WHERE organization_id = 'hooli';
-- For a known organization it returns the current version and changes nothing.
SELECT eventhub.register_organization('acme') = version_id AS current_version,
       revision
  FROM eventhub.organization_states WHERE organization_id = 'acme';
-- A registered organization's first event is revision 1.
SELECT eventhub.publish_event('hooli', 'API', 'CREATE', 'x', NULL, '{}');

--
-- The transactional outbox: the event commits or rolls back with the
-- caller's own writes.
--
CREATE TABLE apis (id text PRIMARY KEY, spec jsonb);
BEGIN;
INSERT INTO apis VALUES ('api-9', '{"path": "/v9"}');
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-9', 'c-9', '{"path": "/v9"}');
ROLLBACK;
SELECT count(*) AS apis FROM apis;
SELECT count(*) AS events_for_api_9 FROM eventhub.events WHERE entity_id = 'api-9';
SELECT revision FROM eventhub.organization_states WHERE organization_id = 'acme';

BEGIN;
INSERT INTO apis VALUES ('api-9', '{"path": "/v9"}');
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-9', 'c-9', '{"path": "/v9"}');
COMMIT;
SELECT a.id, e.revision FROM apis a JOIN eventhub.events e ON e.entity_id = a.id;

-- A rolled-back savepoint gives its revision back: no gap.
BEGIN;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-10', NULL, '{}');
SAVEPOINT s;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-11', NULL, '{}');
ROLLBACK TO SAVEPOINT s;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-12', NULL, '{}');
COMMIT;
SELECT revision, entity_id FROM eventhub.events WHERE organization_id = 'acme' ORDER BY revision;

-- A failed publish inside a savepoint leaves nothing behind either.
BEGIN;
SAVEPOINT s;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', 'c-4', 'true');
ROLLBACK TO SAVEPOINT s;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-12', NULL, '{}');
COMMIT;

-- Revisions stay gapless per organization through all of the above.
SELECT organization_id, min(revision), max(revision), count(*),
       max(revision) = count(*) AS gapless
  FROM eventhub.events GROUP BY organization_id ORDER BY 1;

-- transaction_first_revision: every event a transaction publishes in an
-- organization carries the revision of its first one there, through the
-- first publish that registers the organization, with and without a
-- correlation id, and with another organization in between.
BEGIN;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-1', NULL, '{}');
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-2', 'txn-c-2', '{}');
SELECT eventhub.publish_event('globex', 'API', 'CREATE', 'g-1', NULL, '{}');
SELECT eventhub.publish_event('txn', 'API', 'UPDATE', 't-1', NULL, '{"v": 2}');
COMMIT;
-- A savepoint rolled back in the middle takes its revision back, and the
-- events around it still share the first revision.
BEGIN;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-3', NULL, '{}');
SAVEPOINT s;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-4', NULL, '{}');
ROLLBACK TO SAVEPOINT s;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-5', 'txn-c-5', '{}');
SAVEPOINT r;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-6', NULL, '{}');
RELEASE SAVEPOINT r;
COMMIT;
-- A transaction whose first event was rolled back with its savepoint starts
-- at its first surviving event; a replayed correlation id publishes nothing.
BEGIN;
SAVEPOINT s;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-7', NULL, '{}');
ROLLBACK TO SAVEPOINT s;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-2', 'txn-c-2', '{}');
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-8', NULL, '{}');
SAVEPOINT s2;
SELECT eventhub.publish_event('txn', 'API', 'CREATE', 't-9', NULL, '{}');
COMMIT;
-- Events in their own transactions each start one.
SELECT eventhub.publish_event('txn', 'API', 'DELETE', 't-3', NULL, 'null');
SELECT eventhub.publish_event('txn', 'API', 'DELETE', 't-5', NULL, 'null');
SELECT organization_id, revision, entity_id, transaction_first_revision
  FROM eventhub.events WHERE organization_id = 'txn' OR entity_id = 'g-1'
 ORDER BY organization_id, revision;

DROP TABLE apis;
DROP EXTENSION eventhub;
