-- eventhub 0.2.0 -> 0.3.0.  Run by ALTER EXTENSION eventhub UPDATE.
--
-- New: cleanup_events(organization_id, before_revision).  Changed in the
-- library only, described here: heartbeat() takes a revision written as a
-- string of digits and refuses a hot standby up front; the write guard lets
-- a superuser's restore of a dump load the tables.  A database updated from
-- 0.2.0 and a fresh 0.3.0 installation have the same catalog
-- (regress/sql/update.sql checks it).

\echo Use "ALTER EXTENSION eventhub UPDATE TO '0.3.0'" to load this file. \quit

CREATE FUNCTION eventhub.cleanup_events(organization_id text, before_revision bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'cleanup_events_before_revision'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.cleanup_events(text, bigint) IS
'Deletes the events of one organization with a revision below before_revision and returns how many. Never changes organization_states; readers that have not seen a removed event get SQLSTATE ZE001.';

REVOKE ALL ON FUNCTION eventhub.cleanup_events(text, bigint) FROM PUBLIC;

COMMENT ON FUNCTION eventhub.heartbeat(text, jsonb, jsonb, text) IS
'Registers a replica for the calling role if new, records its progress {"<organization>": {"revision": N, "version_id": "...", "config_hash": "..."}} for the organizations named (N a JSON number or a string of digits), and refreshes its last_heartbeat. A replica registered by another role is refused; so is a heartbeat on a hot standby.';

COMMENT ON FUNCTION eventhub.protect_table() IS
'Trigger function: refuses INSERT, UPDATE, DELETE and TRUNCATE on eventhub''s tables except from eventhub''s own functions, a superuser''s restore of a dump (COPY ... FROM with row_security off), or with eventhub.protect_tables off (superuser).';
