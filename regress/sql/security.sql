-- Privileges: the documented publisher and reader GRANTs work, nothing is
-- open to PUBLIC, events cannot be written around publish_event, and a
-- hostile search_path changes nothing.
CREATE EXTENSION eventhub;
CREATE ROLE regress_eh_publisher;
CREATE ROLE regress_eh_reader;
CREATE ROLE regress_eh_nobody;

-- The GRANTs the README documents.
GRANT USAGE ON SCHEMA eventhub TO regress_eh_publisher, regress_eh_reader;
GRANT EXECUTE ON FUNCTION
    eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz),
    eventhub.register_organization(text)
  TO regress_eh_publisher;
GRANT SELECT ON eventhub.organization_states, eventhub.events TO regress_eh_reader;
GRANT EXECUTE ON FUNCTION eventhub.events_since(text, bigint, integer) TO regress_eh_reader;

SET ROLE regress_eh_publisher;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-1', 'c-1', '{}');
SELECT eventhub.register_organization('globex') IS NOT NULL AS registered;
-- ...but cannot touch the tables directly.
INSERT INTO eventhub.events VALUES ('acme', 2, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'x', 'c-x', '{}');
\echo :LAST_ERROR_SQLSTATE
UPDATE eventhub.organization_states SET revision = 0;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM eventhub.events;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events;
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.cleanup_events(now());
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SET ROLE regress_eh_reader;
SELECT organization_id, revision FROM eventhub.events_since('acme', 0);
SELECT organization, revision FROM eventhub.organization_states ORDER BY 1;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-2', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO eventhub.events VALUES ('acme', 2, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'x', 'c-x', '{}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- A role with no GRANT can do nothing.
SET ROLE regress_eh_nobody;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-2', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('acme', 0);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- A hostile search_path: objects named like the ones publish_event uses,
-- placed ahead of pg_catalog, are never called.
CREATE SCHEMA regress_evil;
GRANT USAGE, CREATE ON SCHEMA regress_evil TO regress_eh_publisher;
SET ROLE regress_eh_publisher;
CREATE FUNCTION regress_evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '1970-01-01'::timestamptz $$;
CREATE FUNCTION regress_evil.texteq(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.texteq);
CREATE FUNCTION regress_evil.jsonbeq(jsonb, jsonb) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_evil.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = regress_evil.jsonbeq);
CREATE FUNCTION regress_evil.plus(bigint, integer) RETURNS bigint LANGUAGE sql AS $$ SELECT $1 + 100 $$;
CREATE OPERATOR regress_evil.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = regress_evil.plus);
CREATE FUNCTION regress_evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '1970-01-01'::timestamptz $$;
SET search_path = regress_evil, pg_catalog, public;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', NULL, '{}');
-- Had the hostile "=" been used, this different event would have been
-- taken as a replay of c-1.
SELECT eventhub.publish_event('acme', 'API', 'DELETE', 'api-9', 'c-1', '{}');
\echo :LAST_ERROR_SQLSTATE
RESET search_path;
RESET ROLE;
-- Revisions advance by one (not by the hostile "+"), timestamps are real.
SELECT revision, action, originated_timestamp > '2000-01-01' AS real_now,
       processed_timestamp > '2000-01-01' AS real_clock
  FROM eventhub.events WHERE organization_id = 'acme' ORDER BY revision;
-- The same with pg_temp first: relations are qualified, so a temporary
-- table named like one of ours is never written.
SET ROLE regress_eh_publisher;
CREATE TEMP TABLE organization_states (organization text, version_id uuid, revision bigint, updated_at timestamptz);
SET search_path = pg_temp, regress_evil, pg_catalog;
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', NULL, '{}');
SELECT count(*) AS temp_rows FROM pg_temp.organization_states;
DROP TABLE pg_temp.organization_states;
RESET search_path;
RESET ROLE;

DROP SCHEMA regress_evil CASCADE;
DROP EXTENSION eventhub;
DROP ROLE regress_eh_publisher, regress_eh_reader, regress_eh_nobody;
