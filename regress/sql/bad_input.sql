-- Every bad input gets a specific SQLSTATE and a PostgreSQL-style message,
-- and writes nothing: no event, no new organization, no version rotation.
CREATE EXTENSION eventhub;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', 'c-1', '{}');
CREATE TEMP TABLE before AS
  SELECT (SELECT count(*) FROM eventhub.events) AS events,
         (SELECT count(*) FROM eventhub.organization_states) AS organizations,
         s.revision, s.version_id
    FROM eventhub.organization_states s WHERE s.organization_id = 'acme';
CREATE FUNCTION pg_temp.unchanged() RETURNS boolean LANGUAGE sql AS $$
  SELECT (SELECT count(*) FROM eventhub.events) = b.events
     AND (SELECT count(*) FROM eventhub.organization_states) = b.organizations
     AND s.revision = b.revision AND s.version_id = b.version_id
    FROM eventhub.organization_states s, before b WHERE s.organization_id = 'acme'
$$;

-- organization_id
SELECT eventhub.publish_event(NULL, 'API', 'CREATE', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('', 'API', 'CREATE', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
-- 1024 bytes is the limit (it keeps the NOTIFY payload under 8000 bytes).
SELECT eventhub.publish_event(repeat('é', 513), 'API', 'CREATE', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event(repeat('o', 1025), 'API', 'CREATE', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.register_organization(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.register_organization('');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.register_organization(repeat('o', 1025));
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.unchanged();

-- event_type, action, entity_id
SELECT eventhub.publish_event('acme', NULL, 'CREATE', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', '', 'CREATE', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', NULL, 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'UPSERT', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'create', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', '', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'CREATE', NULL, NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'CREATE', '', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.unchanged();

-- correlation_id: NULL means "generate one"; empty or too long is refused.
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', '', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', repeat('c', 1025), '{}');
\echo :LAST_ERROR_SQLSTATE

-- event_data and originated_timestamp
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', NULL, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', NULL, '{"unterminated": ');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', NULL, '{}', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', NULL, '{}', 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.unchanged();

-- A new organization named in a refused publish is not registered.
SELECT eventhub.publish_event('newco', 'API', 'BOGUS', 'api-1', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS newco FROM eventhub.organization_states WHERE organization_id = 'newco';

-- events_since
SELECT * FROM eventhub.events_since(NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 0, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 0, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 0, -5);
\echo :LAST_ERROR_SQLSTATE

-- cleanup_events
SELECT eventhub.cleanup_events(NULL::timestamptz);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events(NULL, now(), now());
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events('acme', NULL, now());
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events('acme', now(), NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events('acme', '2030-01-02', '2030-01-01');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.unchanged();

-- The trigger functions refuse to be called outside their triggers.
SELECT eventhub.protect_table();
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.invalidate_cache();
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.protect_ddl();
\echo :LAST_ERROR_SQLSTATE

DROP EXTENSION eventhub;
