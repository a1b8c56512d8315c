-- Privileges: the documented publisher and reader GRANTs work, nothing is
-- open to PUBLIC, events cannot be written around publish_event, and a
-- hostile search_path changes nothing.
CREATE EXTENSION eventhub;
CREATE ROLE regress_eh_publisher;
CREATE ROLE regress_eh_reader;
CREATE ROLE regress_eh_nobody;

-- The publisher and reader GRANTs of docs/operations.md (Roles), exactly
-- as written there: EventhubTest.pm's bundle_sql gives them, for a test
-- that checks this file still holds them.
GRANT USAGE ON SCHEMA eventhub TO regress_eh_publisher;
GRANT EXECUTE ON FUNCTION
    eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz),
    eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz),
    eventhub.register_organization(text),
    eventhub.declare_full_state(text, bigint)
  TO regress_eh_publisher;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_reader;
GRANT SELECT ON eventhub.organization_states, eventhub.events TO regress_eh_reader;
GRANT EXECUTE ON FUNCTION eventhub.events_since(text, bigint, integer, uuid),
                          eventhub.transactions_since(text, bigint, integer, uuid, integer),
                          eventhub.snapshot_head(text),
                          eventhub.snapshot_entities(text, bigint, text, text, integer, integer, uuid),
                          eventhub.notification_token(text),
                          eventhub.notification_data_key(text),
                          eventhub.notifier_pid(),
                          eventhub.heartbeat(text, jsonb, jsonb, text),
                          eventhub.deregister_replica(text)
  TO regress_eh_reader;
GRANT EXECUTE ON PROCEDURE eventhub.wait_for_events(text[], bigint[], uuid[], integer)
  TO regress_eh_reader;

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
-- It declares the full state of its organizations, and reads nothing.
SELECT eventhub.declare_full_state('acme', 0);
SELECT * FROM eventhub.transactions_since('acme', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.snapshot_head('acme');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.snapshot_entities('acme', 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SET ROLE regress_eh_reader;
SELECT organization_id, revision FROM eventhub.events_since('acme', 0);
SELECT organization_id, revision, transaction_first_revision, transaction_end, head_revision
  FROM eventhub.transactions_since('acme', 0);
SELECT revision, version_id IS NOT NULL AS has_version FROM eventhub.snapshot_head('acme');
SELECT event_type, entity_id, revision FROM eventhub.snapshot_entities('acme', 1);
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;
CALL eventhub.wait_for_events('{acme}', '{0}', NULL, 0, NULL);
SELECT eventhub.declare_full_state('acme', 1);
\echo :LAST_ERROR_SQLSTATE
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
SELECT * FROM eventhub.transactions_since('acme', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.snapshot_head('acme');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.snapshot_entities('acme', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.declare_full_state('acme', 1);
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
-- The readers' functions as well: the hostile "=" would give globex, which
-- has no events, every event of acme.
GRANT USAGE ON SCHEMA regress_evil TO regress_eh_reader;
SET ROLE regress_eh_reader;
SET search_path = regress_evil, pg_catalog, public;
SELECT count(*) AS globex_events FROM eventhub.events_since('globex', 0);
SELECT count(*) AS globex_events FROM eventhub.transactions_since('globex', 0);
SELECT count(*) AS globex_entities FROM eventhub.snapshot_entities('globex', 0);
RESET search_path;
RESET ROLE;

DROP SCHEMA regress_evil CASCADE;

--
-- The write guard: even a role granted every privilege on every table
-- writes nothing but through eventhub's functions.
--
CREATE ROLE regress_eh_all;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_all;
GRANT ALL ON ALL TABLES IN SCHEMA eventhub TO regress_eh_all;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA eventhub TO regress_eh_all;
SELECT revision AS acme_head FROM eventhub.organization_states WHERE organization_id = 'acme';
SET ROLE regress_eh_all;
-- A forged event: revision 999 of an organization whose head is 3.
INSERT INTO eventhub.events VALUES ('acme', 999, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'x', 'forged', '{}');
\echo :LAST_ERROR_SQLSTATE
UPDATE eventhub.organization_states SET revision = 999;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM eventhub.events WHERE organization_id = 'acme';
\echo :LAST_ERROR_SQLSTATE
TRUNCATE eventhub.events;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO eventhub.replicas (replica_id, started_at, last_heartbeat, owner) VALUES ('r', now(), now(), 'regress_eh_all');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO eventhub.replica_progress VALUES ('r', 'acme', 1, NULL, now(), NULL);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO eventhub.organization_grants VALUES ('regress_eh_all', '', true, 'read', 'regress_eh_all', now());
\echo :LAST_ERROR_SQLSTATE
DELETE FROM eventhub.notification_key;
\echo :LAST_ERROR_SQLSTATE
-- Nor can it switch the guard off, or add a trigger to run inside
-- eventhub's SECURITY DEFINER functions.
SET eventhub.protect_tables = off;
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION pg_temp.sneaky() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER sneaky AFTER INSERT ON eventhub.events FOR EACH ROW EXECUTE FUNCTION pg_temp.sneaky();
\echo :LAST_ERROR_SQLSTATE
-- Through the functions, the same role publishes (no grants exist yet).
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'api-1', NULL, '{}');
RESET ROLE;
DROP FUNCTION pg_temp.sneaky();
SELECT revision AS acme_head, (SELECT count(*) FROM eventhub.events WHERE organization_id = 'acme') AS acme_events,
       (SELECT count(*) FROM eventhub.replicas) AS replicas, (SELECT count(*) FROM eventhub.notification_key) AS keys
  FROM eventhub.organization_states WHERE organization_id = 'acme';
-- A superuser switches the guard off for a repair, and only then.
UPDATE eventhub.events SET event_data = '{"repaired": true}' WHERE organization_id = 'acme' AND revision = 1;
\echo :LAST_ERROR_SQLSTATE
SET eventhub.protect_tables = off;
UPDATE eventhub.events SET event_data = '{"repaired": true}' WHERE organization_id = 'acme' AND revision = 1;
RESET eventhub.protect_tables;
SELECT event_data FROM eventhub.events WHERE organization_id = 'acme' AND revision = 1;

--
-- Per-organization access.  Without grants, every role that may call a
-- function may use every organization.
--
CREATE ROLE regress_eh_tenant_a;
CREATE ROLE regress_eh_tenant_b;
CREATE ROLE regress_eh_admin;
GRANT USAGE ON SCHEMA eventhub TO regress_eh_tenant_a, regress_eh_tenant_b, regress_eh_admin;
GRANT SELECT ON eventhub.organization_states, eventhub.events, eventhub.replica_status
  TO regress_eh_tenant_a, regress_eh_tenant_b;
GRANT EXECUTE ON FUNCTION
    eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz),
    eventhub.register_organization(text),
    eventhub.declare_full_state(text, bigint),
    eventhub.events_since(text, bigint, integer, uuid),
    eventhub.transactions_since(text, bigint, integer, uuid, integer),
    eventhub.snapshot_head(text),
    eventhub.snapshot_entities(text, bigint, text, text, integer, integer, uuid),
    eventhub.notification_token(text),
    eventhub.notification_data_key(text),
    eventhub.heartbeat(text, jsonb, jsonb, text),
    eventhub.deregister_replica(text)
  TO regress_eh_tenant_a, regress_eh_tenant_b;
GRANT EXECUTE ON FUNCTION
    eventhub.grant_organization(regrole, text, text, boolean),
    eventhub.revoke_organization(regrole, text, text, boolean),
    eventhub.has_organization_privilege(regrole, text, text),
    eventhub.remove_replica(text)
  TO regress_eh_admin;
SET ROLE regress_eh_tenant_b;
SELECT eventhub.publish_event('b-1', 'API', 'CREATE', 'secret-api', 'corr-b', '{"secret": "b"}');
SELECT eventhub.heartbeat('gw-b', '{"b-1": {"revision": 1}}');
RESET ROLE;
SELECT eventhub.has_organization_privilege('b-1', 'read') AS open_before_grants;

-- The administrator grants each tenant its prefix; the first grant turns
-- access control on.
SET ROLE regress_eh_admin;
SELECT eventhub.grant_organization('regress_eh_tenant_a', 'a-', 'publish', prefix => true);
SELECT eventhub.grant_organization('regress_eh_tenant_a', 'a-', 'read', prefix => true);
SELECT eventhub.grant_organization('regress_eh_tenant_a', 'a-', 'read', prefix => true) AS granted_again;
SELECT eventhub.grant_organization('regress_eh_tenant_b', 'b-', 'publish', true);
SELECT eventhub.grant_organization('regress_eh_tenant_b', 'b-1', 'read');
SELECT r, o, p, eventhub.has_organization_privilege(r::regrole, o, p)
  FROM unnest(ARRAY['regress_eh_tenant_a', 'regress_eh_tenant_b']) r,
       unnest(ARRAY['a-1', 'b-1', 'b-2', 'acme']) o,
       unnest(ARRAY['publish', 'read']) p
 ORDER BY 1, 2, 3;
-- Bad grants.
SELECT eventhub.grant_organization('regress_eh_tenant_a', 'a-1', 'write');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.grant_organization('regress_eh_tenant_a', '', 'read');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.grant_organization('-', 'a-1', 'read');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.grant_organization('regress_eh_tenant_a', NULL, 'read');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SET ROLE regress_eh_tenant_a;
-- Its own organizations work.
SELECT eventhub.publish_event('a-1', 'API', 'CREATE', 'api', 'corr-b', '{}');
SELECT eventhub.register_organization('a-2') IS NOT NULL AS registered;
SELECT revision FROM eventhub.events_since('a-1', 0);
SELECT length(eventhub.notification_token('a-1')) AS token_length;
SELECT revision FROM eventhub.transactions_since('a-1', 0);
SELECT revision FROM eventhub.snapshot_head('a-1');
SELECT entity_id FROM eventhub.snapshot_entities('a-1', 1);
SELECT length(eventhub.notification_data_key('a-1')) AS data_key_length;
SELECT eventhub.declare_full_state('a-1', 0);
-- Another tenant's: refused with errors that name only what was passed,
-- whether the organization exists or not.
SELECT eventhub.publish_event('b-1', 'API', 'CREATE', 'secret-api', 'corr-b', '{"secret": "b"}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.register_organization('b-1');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('b-1', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.events_since('b-9', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.notification_token('b-1');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('gw-a', '{"b-1": {"revision": 5}}');
\echo :LAST_ERROR_SQLSTATE
-- The same for every function operations.md lists under read and publish.
SELECT * FROM eventhub.transactions_since('b-1', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.snapshot_head('b-1');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM eventhub.snapshot_entities('b-1', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.notification_data_key('b-1');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.declare_full_state('b-1', 0);
\echo :LAST_ERROR_SQLSTATE
-- The tables and the status view show only its organizations.
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;
SELECT organization_id, revision, correlation_id FROM eventhub.events ORDER BY 1, 2;
SELECT count(*) AS visible_replica_rows FROM eventhub.replica_status;
-- Another tenant's replica cannot be hijacked.
SELECT eventhub.heartbeat('gw-b', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.deregister_replica('gw-b');
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.heartbeat('gw-a', '{"a-1": {"revision": 1}}');
SELECT replica_id, organization_id, applied_revision, owner FROM eventhub.replica_status;
RESET ROLE;
SELECT r.replica_id, r.owner, p.organization_id, p.applied_revision
  FROM eventhub.replicas r JOIN eventhub.replica_progress p USING (replica_id) ORDER BY 1;

SET ROLE regress_eh_tenant_b;
SELECT organization_id, revision FROM eventhub.organization_states ORDER BY 1;
SELECT eventhub.publish_event('b-2', 'API', 'CREATE', 'x', NULL, '{}');
SELECT * FROM eventhub.events_since('b-2', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT eventhub.deregister_replica('gw-b');
RESET ROLE;

-- A tenant's SECURITY DEFINER function, called by another tenant, acts
-- with its owner's grants, not its caller's: tenant_b cannot borrow
-- tenant_a's to publish to or read a-1.
CREATE SCHEMA regress_eh_trap AUTHORIZATION regress_eh_tenant_b;
GRANT USAGE ON SCHEMA regress_eh_trap TO regress_eh_tenant_a;
SET ROLE regress_eh_tenant_b;
CREATE FUNCTION regress_eh_trap.steal() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT eventhub.publish_event('a-1', 'API', 'DELETE', 'api', NULL, '{}') $$;
CREATE FUNCTION regress_eh_trap.peek() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT count(*) FROM eventhub.events_since('a-1', 0) $$;
CREATE FUNCTION regress_eh_trap.peek_table() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT count(*) FROM eventhub.events WHERE organization_id = 'a-1' $$;
RESET ROLE;
SET ROLE regress_eh_tenant_a;
SELECT regress_eh_trap.steal();
\echo :LAST_ERROR_SQLSTATE
SELECT regress_eh_trap.peek();
\echo :LAST_ERROR_SQLSTATE
SELECT regress_eh_trap.peek_table() AS a1_rows_seen_by_b;
SELECT revision FROM eventhub.organization_states WHERE organization_id = 'a-1';
RESET ROLE;
DROP SCHEMA regress_eh_trap CASCADE;

-- An administrator removes any replica; revoking the last grants turns
-- access control off again.
SET ROLE regress_eh_admin;
SELECT eventhub.remove_replica('gw-a');
SELECT eventhub.revoke_organization('regress_eh_tenant_a', 'a-', 'publish', true);
SELECT eventhub.revoke_organization('regress_eh_tenant_a', 'a-', 'publish', true) AS revoked_again;
SELECT eventhub.revoke_organization(g.grantee, g.organization_id, g.privilege, g.prefix)
  FROM (VALUES ('regress_eh_tenant_a'::regrole, 'a-', 'read', true),
               ('regress_eh_tenant_b', 'b-', 'publish', true),
               ('regress_eh_tenant_b', 'b-1', 'read', false)) g(grantee, organization_id, privilege, prefix);
RESET ROLE;
-- A parallel scan under row-level security: the policy's function runs in
-- the leader only (it loads the grants with a fresh snapshot).
SELECT eventhub.grant_organization('regress_eh_tenant_a', 'a-1', 'read');
SET ROLE regress_eh_tenant_a;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET force_parallel_mode = on;
SELECT count(*) AS a1_events_in_parallel_mode FROM eventhub.events;
RESET force_parallel_mode;
RESET min_parallel_table_scan_size;
RESET parallel_tuple_cost;
RESET parallel_setup_cost;
RESET ROLE;
SELECT eventhub.revoke_organization('regress_eh_tenant_a', 'a-1', 'read');
SET ROLE regress_eh_tenant_a;
SELECT count(*) AS all_visible_again FROM eventhub.organization_states;
RESET ROLE;

DROP EXTENSION eventhub;
DROP ROLE regress_eh_publisher, regress_eh_reader, regress_eh_nobody, regress_eh_all,
          regress_eh_tenant_a, regress_eh_tenant_b, regress_eh_admin;
