-- eventhub 0.2.0 -> 0.3.0.  Run by ALTER EXTENSION eventhub UPDATE.
--
-- New: cleanup_events(organization_id, before_revision).  Changed in the
-- library only, described here: heartbeat() takes a revision written as a
-- string of digits and refuses a hot standby up front; the write guard lets
-- a superuser's restore of a dump load the tables.  A database updated from
-- 0.2.0 and a fresh 0.3.0 installation have the same catalog
-- (regress/sql/update.sql checks it).

\echo Use "ALTER EXTENSION eventhub UPDATE TO '0.3.0'" to load this file. \quit

-- A database updated from 0.1.0 had the roles' grants re-applied inside the
-- 0.1.0 -> 0.2.0 update script, and PostgreSQL records every GRANT and
-- REVOKE an extension script runs as the object's initial privileges
-- (pg_init_privs).  pg_dump writes only what differs from those, so a dump
-- of such a database lost the grants.  The initial privileges become what
-- a fresh installation records: the owner's own, and PUBLIC's EXECUTE on
-- the two functions row-level security calls; the grants themselves stay.
-- (ALTER EXTENSION runs as a superuser: eventhub is not trusted.)
WITH member(classoid, objoid, owner, public_execute) AS (
    SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid, c.relowner, false
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace OPERATOR(pg_catalog.=) 'eventhub'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid, p.proowner,
           p.oid OPERATOR(pg_catalog.=) ANY (ARRAY['eventhub.has_organization_privilege(text, text)',
                                                   'eventhub.replica_visible(regrole)']::pg_catalog.regprocedure[])
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace OPERATOR(pg_catalog.=) 'eventhub'::pg_catalog.regnamespace
    UNION ALL
    SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, n.oid, n.nspowner, false
      FROM pg_catalog.pg_namespace n
     WHERE n.oid OPERATOR(pg_catalog.=) 'eventhub'::pg_catalog.regnamespace),
kept AS (
    SELECT i.classoid, i.objoid, i.objsubid,
           ARRAY(SELECT item FROM pg_catalog.unnest(i.initprivs) AS item
                  WHERE (SELECT e.grantee FROM pg_catalog.aclexplode(ARRAY[item]) AS e LIMIT 1)
                        OPERATOR(pg_catalog.=) m.owner
                     OR (m.public_execute AND i.objsubid OPERATOR(pg_catalog.=) 0
                         AND item OPERATOR(pg_catalog.=) pg_catalog.makeaclitem(0, m.owner, 'EXECUTE', false))) AS acl
      FROM pg_catalog.pg_init_privs i
      JOIN member m ON m.classoid OPERATOR(pg_catalog.=) i.classoid AND m.objoid OPERATOR(pg_catalog.=) i.objoid
     WHERE i.privtype OPERATOR(pg_catalog.=) 'e'),
emptied AS (
    DELETE FROM pg_catalog.pg_init_privs i
     USING kept k
     WHERE k.acl OPERATOR(pg_catalog.=) '{}'
       AND i.classoid OPERATOR(pg_catalog.=) k.classoid AND i.objoid OPERATOR(pg_catalog.=) k.objoid
       AND i.objsubid OPERATOR(pg_catalog.=) k.objsubid)
UPDATE pg_catalog.pg_init_privs i
   SET initprivs = k.acl
  FROM kept k
 WHERE k.acl OPERATOR(pg_catalog.<>) '{}' AND k.acl OPERATOR(pg_catalog.<>) i.initprivs
   AND i.classoid OPERATOR(pg_catalog.=) k.classoid AND i.objoid OPERATOR(pg_catalog.=) k.objoid
   AND i.objsubid OPERATOR(pg_catalog.=) k.objsubid;

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
