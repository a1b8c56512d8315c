-- wait_for_events: what a wait answers at once, its refusals, and its
-- timeout.  Sessions that wait while others publish are in
-- regress/t/030_wait_for_events.pl.
CREATE EXTENSION eventhub;
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'api-' || i, NULL, '{}')
  FROM generate_series(1, 3) i;
SELECT eventhub.register_organization('registered') IS NOT NULL;
SELECT version_id AS v3 FROM eventhub.events WHERE organization_id = 'acme' AND revision = 3 \gset
SELECT version_id AS v2 FROM eventhub.events WHERE organization_id = 'acme' AND revision = 2 \gset

-- Behind: answered at once, in the order given, whatever the timeout.
CALL eventhub.wait_for_events('{registered,acme}', '{0,2}', NULL, 600000, NULL);
-- A cursor above the head (ZE002 at the fetch), or above 0 where there is
-- no head at all: moved too.
CALL eventhub.wait_for_events('{acme,nobody}', '{4,1}', NULL, 600000, NULL);
-- At the head with its version: nothing moved, so it waits out its timeout.
CALL eventhub.wait_for_events('{acme}', '{3}', ARRAY[:'v3']::uuid[], 0, NULL);
-- The head at the cursor's revision with another version (a history
-- rewritten by a failover): moved.  Without a version, not compared.
CALL eventhub.wait_for_events('{acme}', '{3}', ARRAY[:'v2']::uuid[], 0, NULL);
CALL eventhub.wait_for_events('{acme}', '{3}', '{NULL}', 0, NULL);
-- Revision 0 matches a registered head without events, whatever the version.
CALL eventhub.wait_for_events('{registered,nobody}', '{0,0}', ARRAY[:'v2', NULL]::uuid[], 0, NULL);
-- No organization: a plain sleep of timeout_ms.
CALL eventhub.wait_for_events('{}', '{}', '{}', 0, NULL);

-- Refused, with nothing done.
CALL eventhub.wait_for_events(NULL, '{0}', NULL, 0, NULL);
CALL eventhub.wait_for_events('{acme}', NULL, NULL, 0, NULL);
CALL eventhub.wait_for_events('{acme}', '{0,1}', NULL, 0, NULL);
\echo :LAST_ERROR_SQLSTATE
CALL eventhub.wait_for_events('{acme}', '{0}', '{NULL,NULL}', 0, NULL);
CALL eventhub.wait_for_events('{acme,NULL}', '{0,0}', NULL, 0, NULL);
CALL eventhub.wait_for_events('{""}', '{0}', NULL, 0, NULL);
CALL eventhub.wait_for_events(ARRAY[repeat('x', 1025)], '{0}', NULL, 0, NULL);
CALL eventhub.wait_for_events('{acme}', '{-1}', NULL, 0, NULL);
CALL eventhub.wait_for_events('{acme}', '{NULL}', NULL, 0, NULL);
CALL eventhub.wait_for_events('{{acme}}', '{{0}}', NULL, 0, NULL);
CALL eventhub.wait_for_events('{acme}', '{0}', NULL, -1, NULL);
\echo :LAST_ERROR_SQLSTATE
CALL eventhub.wait_for_events('{acme}', '{0}', NULL, 3600001, NULL);
CALL eventhub.wait_for_events('{acme}', '{0}', NULL, NULL, NULL);
-- It commits, so not inside a transaction block, nor from a function.
BEGIN;
CALL eventhub.wait_for_events('{acme}', '{0}', NULL, 0, NULL);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
CREATE FUNCTION wait_in_function() RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE m text[];
BEGIN CALL eventhub.wait_for_events('{acme}', '{0}', NULL, 0, m); RETURN m; END $$;
SELECT wait_in_function();
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.wait_for_events('{acme}', '{0}', NULL, 0);
DROP FUNCTION wait_in_function();

-- Privileges: nothing for PUBLIC; a reader sees only what row-level
-- security shows it.
CREATE ROLE regress_eh_waiter;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_waiter;
GRANT SELECT ON eventhub.organization_states TO regress_eh_waiter;
SET ROLE regress_eh_waiter;
CALL eventhub.wait_for_events('{acme}', '{0}', NULL, 0, NULL);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON PROCEDURE eventhub.wait_for_events(text[], bigint[], uuid[], integer) TO regress_eh_waiter;
SELECT eventhub.grant_organization('regress_eh_waiter', 'registered', 'read');
SET ROLE regress_eh_waiter;
-- acme's head is hidden from it: behind acme, it learns nothing.
CALL eventhub.wait_for_events('{acme,registered}', '{0,0}', NULL, 0, NULL);
RESET ROLE;
DROP OWNED BY regress_eh_waiter;
DROP ROLE regress_eh_waiter;
DROP EXTENSION eventhub;
