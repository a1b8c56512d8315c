-- eventhub 0.4.0 -> 0.5.0.  Run by ALTER EXTENSION eventhub UPDATE.
--
-- New: eventhub.publish_event_result() (publish_event, and whether it was a
-- replay), eventhub.metrics(), the metrics operators alert on in Prometheus'
-- data model, and what keeps it cheap: replica_progress.head_revision with
-- the partial index of the rows behind, and eventhub.config_splits.  A
-- database updated from 0.4.0 (or, through it, from any earlier release)
-- and a fresh 0.5.0 installation have the same catalog
-- (regress/sql/update.sql and regress/t/017_upgrade.pl check it).

\echo Use "ALTER EXTENSION eventhub UPDATE TO '0.5.0'" to load this file. \quit

ALTER TABLE eventhub.replica_progress ADD COLUMN head_revision bigint;
COMMENT ON COLUMN eventhub.replica_progress.head_revision IS 'The organization''s head revision when the replica''s last heartbeat recorded this row (NULL when unknown): the row is behind when applied_revision < head_revision.';

-- The rows behind their head now get it now, so that metrics() counts them
-- at once; the others (caught up: NULL counts as not behind) get it at
-- their replica's next heartbeat.
UPDATE eventhub.replica_progress p
   SET head_revision = s.revision
  FROM eventhub.organization_states s
 WHERE s.organization_id OPERATOR(pg_catalog.=) p.organization_id
   AND p.applied_revision OPERATOR(pg_catalog.<) s.revision;

CREATE INDEX replica_progress_behind_idx
    ON eventhub.replica_progress (organization_id, replica_id)
    WHERE applied_revision < head_revision;

CREATE TABLE eventhub.config_splits (
    organization_id text COLLATE "C" NOT NULL,
    revision        bigint NOT NULL,
    CONSTRAINT config_splits_pkey PRIMARY KEY (organization_id, revision)
);

COMMENT ON TABLE eventhub.config_splits IS
'(organization, revision) pairs at which replicas reported different configuration hashes: candidates that metrics() checks against replica_progress. Written by eventhub.heartbeat(), emptied of settled pairs by maintenance.';
COMMENT ON COLUMN eventhub.config_splits.organization_id IS 'The organization.';
COMMENT ON COLUMN eventhub.config_splits.revision IS 'The applied revision at which the hashes differ.';

-- The splits the progress rows show now, in one pass; heartbeats add the
-- new ones from here on.
INSERT INTO eventhub.config_splits (organization_id, revision)
SELECT q.organization_id, q.applied_revision
  FROM eventhub.replica_progress q
 WHERE q.config_hash IS NOT NULL
 GROUP BY q.organization_id, q.applied_revision
HAVING pg_catalog.min(q.config_hash COLLATE pg_catalog."C")
       OPERATOR(pg_catalog.<>) pg_catalog.max(q.config_hash COLLATE pg_catalog."C");

ALTER TABLE eventhub.config_splits ENABLE ROW LEVEL SECURITY;
CREATE POLICY config_splits_read ON eventhub.config_splits FOR SELECT
    USING (eventhub.has_organization_privilege(organization_id, 'read'));
COMMENT ON POLICY config_splits_read ON eventhub.config_splits IS
'Splits in the organizations the calling role may read.';

CREATE TRIGGER config_splits_protect
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON eventhub.config_splits
    FOR EACH STATEMENT EXECUTE FUNCTION eventhub.protect_table(
        'Splits are recorded by eventhub.heartbeat() and removed by maintenance.');
COMMENT ON TRIGGER config_splits_protect ON eventhub.config_splits IS 'Only eventhub''s functions write this table.';

-- As every table of the install script: nothing for PUBLIC.
REVOKE ALL ON eventhub.config_splits FROM PUBLIC;

-- Runs as the caller; its one statement runs as the owner with the
-- visibility rule of replica_status for the calling role, and qualifies
-- every name, operators included (extension/metrics_report.c).  jit off:
-- its statement's estimates exceed JIT's thresholds with many progress
-- rows, and compiling it cost a second per call (make bench, item 10).
CREATE FUNCTION eventhub.metrics()
RETURNS TABLE (name text, labels jsonb, type text, help text, value double precision)
AS 'MODULE_PATHNAME', 'metrics'
LANGUAGE C STABLE ROWS 500
SET search_path = pg_catalog, pg_temp
SET jit = off;

COMMENT ON FUNCTION eventhub.metrics() IS
'Metrics in Prometheus'' data model, one row per series: name (eventhub_...), labels (a JSON object of strings, {} when none; per-replica series carry {"replica": "<replica id>"}), type (counter or gauge), help and value. Counters (_total) count since the server started (they need the library preloaded, else 0); no series is per organization. Under access control, replicas and organizations as replica_status shows them to the calling role.';

-- As every function of the install script: nothing for PUBLIC.
-- docs/operations.md (Roles) grants it to the operator role.
REVOKE ALL ON FUNCTION eventhub.metrics() FROM PUBLIC;

-- Notifications that carry their events (docs/protocol.md): the key they
-- are sealed under, and the pid of the notifier that alone sends them.
CREATE FUNCTION eventhub.notification_data_key(organization_id text)
RETURNS bytea
AS 'MODULE_PATHNAME', 'notification_data_key'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION eventhub.notification_data_key(text) IS
'The AES-256-GCM key that the events a notification about an organization carries (its "events" key) are sealed under; see docs/protocol.md. Needs read privilege on the organization. Changes when the notification key is rotated.';

CREATE FUNCTION eventhub.notifier_pid()
RETURNS integer
AS 'MODULE_PATHNAME', 'notifier_pid'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION eventhub.notifier_pid() IS
'The process id of the notifier worker that announces what this database publishes (NULL when none does): a client takes the events a notification carries only from a notification this process sent.';

REVOKE ALL ON FUNCTION eventhub.notification_data_key(text), eventhub.notifier_pid() FROM PUBLIC;

-- publish_event, and whether the call was a replay of a committed event.
CREATE FUNCTION eventhub.publish_event_result(
    organization_id      text,
    event_type           text,
    action               text,
    entity_id            text,
    correlation_id       text,
    event_data           jsonb,
    originated_timestamp timestamptz DEFAULT pg_catalog.now(),
    OUT revision         bigint,
    OUT replayed         boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'publish_event_result'
LANGUAGE C VOLATILE;
-- As publish_event: no SET search_path, every name qualified (publish.c).

COMMENT ON FUNCTION eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz) IS
'publish_event, returning the revision and whether the call was a replay: true when the correlation_id was already committed with identical content (nothing changed, the revision is the original event''s). A client that retries a publish whose commit it did not see learns that the first attempt committed.';

REVOKE ALL ON FUNCTION eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz) FROM PUBLIC;

-- The new functions go to the grantees of what they extend, so that
-- clients use them from now on without a new GRANT: those of
-- notification_token (readers of notifications) get notification_data_key
-- and notifier_pid, those of publish_event get publish_event_result.  The
-- grantees themselves (PUBLIC included), not every member of a role that
-- holds the grant: a member that leaves the role keeps nothing.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT DISTINCT f.granted,
               CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE a.grantee::regrole::text END AS grantee
          FROM (VALUES ('eventhub.notification_token(text)',
                        'eventhub.notification_data_key(text), eventhub.notifier_pid()'),
                       ('eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz)',
                        'eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz)')) f(held, granted)
          JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) f.held::pg_catalog.regprocedure,
               LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', g.granted, g.grantee);
    END LOOP;
END
$$;

-- PostgreSQL records every GRANT an extension script runs as the object's
-- initial privileges, which pg_dump leaves out: those grants would not
-- survive a dump.  The initial privileges become a fresh installation's
-- (the owner's alone); the grants themselves stay.
UPDATE pg_catalog.pg_init_privs i
   SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
  FROM pg_catalog.pg_proc p
 WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY['eventhub.notification_data_key(text)',
                                               'eventhub.notifier_pid()',
                                               'eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz)']::pg_catalog.regprocedure[])
   AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
   AND i.objoid OPERATOR(pg_catalog.=) p.oid
   AND i.objsubid OPERATOR(pg_catalog.=) 0
   AND i.privtype OPERATOR(pg_catalog.=) 'e';

-- snapshot_head's and snapshot_entities' comments: a registered
-- organization's empty head, and which page is the last.
COMMENT ON FUNCTION eventhub.snapshot_head(text) IS
'Returns the head revision and version id a snapshot of the organization is read at, in the caller''s snapshot: (0, NULL) for an organization never registered, (0, its version id) for one registered without events. Raises SQLSTATE ZE004 when the organization''s latest events are not its full state (organization_states.complete_after NULL: see eventhub.declare_full_state()). Read it and the snapshot''s pages in one REPEATABLE READ transaction, then continue with events_since from that head.';
COMMENT ON FUNCTION eventhub.snapshot_entities(text, bigint, text, text, integer, integer, uuid) IS
'Returns one page of the organization''s snapshot at head at_revision: each live entity''s latest event, in (event_type, entity_id) byte order, after (after_event_type, after_entity_id) when given (the last row of the previous page). A page holds max_entities rows, or fewer once their stored size reaches max_bytes: a page with no rows ends the snapshot, and so does one with fewer than max_entities rows when max_bytes is NULL. Raises SQLSTATE ZE004 when the organization''s latest events are not its full state, and ZE005 when its head is no longer at_revision (and at_version): read snapshot_head and the pages in one REPEATABLE READ transaction.';

-- Every statement the extension's C code runs, for review and debugging
-- (extension/statements.c): a reviewer reads, PREPAREs and EXPLAINs each.
-- Not granted to PUBLIC.
CREATE FUNCTION eventhub.statements()
RETURNS TABLE (name text, statement text, argument_types regtype[])
AS 'MODULE_PATHNAME', 'statements'
LANGUAGE C STABLE PARALLEL SAFE ROWS 50
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.statements() IS
'Every SQL statement eventhub''s functions and background workers run: its name (module.statement), its text, and the types of its parameters ($1, $2, ...), so that each can be read, prepared and explained. For review and debugging; not granted to PUBLIC.';

REVOKE ALL ON FUNCTION eventhub.statements() FROM PUBLIC;

--
-- Waiting without LISTEN
--

-- Blocks until one of the organizations moves past its cursor, or
-- timeout_ms passes: on a primary, on a hot standby, through a
-- transaction-pooling proxy.  A procedure: it commits before it sleeps, so
-- that a waiting session holds no snapshot and no lock.  CALL it on its own
-- (not in a transaction block), with NULL for moved.  Needs the library in
-- shared_preload_libraries.
CREATE PROCEDURE eventhub.wait_for_events(
    organization_ids text[],
    after_revisions  bigint[],
    after_versions   uuid[],
    timeout_ms       integer,
    OUT moved        text[])
AS 'MODULE_PATHNAME', 'wait_for_events'
LANGUAGE C;
-- Runs as the caller, with the caller's privileges and row-level security;
-- its query qualifies every name, operators included (a procedure that
-- commits cannot pin its search_path with SET).

COMMENT ON PROCEDURE eventhub.wait_for_events(text[], bigint[], uuid[], integer, text[]) IS
'Waits until the head of one of the organizations is past its cursor (another revision; at a revision above 0, another version when after_versions gives one), or until timeout_ms (0 to 3600000) passes, and returns the organizations that moved, in the order given (empty at the timeout). Woken at commit on a primary and at replay on a hot standby; holds no snapshot and no lock while it waits. CALL it outside a transaction block; needs eventhub in shared_preload_libraries.';

REVOKE ALL ON PROCEDURE eventhub.wait_for_events(text[], bigint[], uuid[], integer, text[]) FROM PUBLIC;

