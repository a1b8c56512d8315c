-- eventhub 0.3.0 -> 0.4.0.  Run by ALTER EXTENSION eventhub UPDATE.
--
-- New: each entity's latest event is kept (compaction), snapshots of an
-- organization's entities, and transaction boundaries in the event log.
-- The schema side: events.event_type and entity_id compare byte by byte,
-- events gain transaction_first_revision and the index events_entity_idx,
-- organization_states gains complete_after.  A database updated from 0.3.0
-- (or, through it, from 0.2.0) and a fresh 0.4.0 installation have the same
-- catalog (regress/sql/update.sql checks it).

\echo Use "ALTER EXTENSION eventhub UPDATE TO '0.4.0'" to load this file. \quit

-- The type stays text, so changing the collation rewrites nothing (the
-- table keeps its files; update.sql checks it): no index names these two
-- columns yet.  The new column has no default: adding it rewrites nothing
-- either, and the events already published keep NULL, "its own
-- transaction".  ACCESS EXCLUSIVE on events until the update commits.
ALTER TABLE eventhub.events
    ALTER COLUMN event_type TYPE text COLLATE "C",
    ALTER COLUMN entity_id TYPE text COLLATE "C",
    ADD COLUMN transaction_first_revision bigint;

COMMENT ON COLUMN eventhub.events.transaction_first_revision IS 'Revision of the first event the publishing transaction wrote in this organization: one transaction''s events have consecutive revisions and share it. NULL for an event published before 0.4.0, which counts as its own transaction.';

-- Built inside the update (an extension script cannot build it
-- CONCURRENTLY): publishers wait for it, about a second or two per million
-- events.
CREATE INDEX events_entity_idx ON eventhub.events (organization_id, event_type, entity_id, revision);

-- Added without a default and filled below, so that the catalog is a fresh
-- installation's: ADD COLUMN ... DEFAULT 0 would keep 0 as the column's
-- "missing value" (pg_attribute.attmissingval), which a fresh table has
-- not and pg_dump --binary-upgrade carries (017_upgrade.pl compares its
-- output).  Neither statement rewrites the table.
ALTER TABLE eventhub.organization_states ADD COLUMN complete_after bigint;
ALTER TABLE eventhub.organization_states ALTER COLUMN complete_after SET DEFAULT 0;

COMMENT ON COLUMN eventhub.organization_states.complete_after IS 'N: every entity''s latest event above revision N is kept, so the entities'' latest events are the organization''s full state; 0 for a new organization. NULL: retention may have removed an entity''s latest event (an organization whose events were removed before 0.4.0), and a snapshot is refused until eventhub.declare_full_state().';

-- transactions_since's row: the columns of eventhub.events, then where the
-- event stands in its transaction and the head it was read at.  (A RETURNS
-- TABLE could not name a column organization_id, the name of an argument.)
CREATE TYPE eventhub.transaction_event AS (
    organization_id      text,
    revision             bigint,
    version_id           uuid,
    processed_timestamp  timestamptz,
    originated_timestamp timestamptz,
    event_type           text,
    action               text,
    entity_id            text,
    correlation_id       text,
    event_data           jsonb,
    transaction_first_revision bigint,
    transaction_end      boolean,
    head_revision        bigint);

COMMENT ON TYPE eventhub.transaction_event IS
'A row of eventhub.transactions_since(): the event''s columns as in eventhub.events; transaction_first_revision, the revision of its transaction''s first event (its own revision for an event published before 0.4.0); transaction_end, whether it is the last event of its transaction in the organization; head_revision, the organization''s head revision when the batch was read.';

-- The consumer protocol of events_since, with whole transactions: call it
-- again from the last row of the batch, apply a transaction (and keep the
-- cursor) at its row with transaction_end, and call again at once unless
-- the batch is empty or its last row has revision = head_revision (caught
-- up).
CREATE FUNCTION eventhub.transactions_since(
    organization_id text,
    after_revision  bigint,
    max_events      integer DEFAULT 1000,
    after_version   uuid DEFAULT NULL,
    max_bytes       integer DEFAULT NULL)
RETURNS SETOF eventhub.transaction_event
AS 'MODULE_PATHNAME', 'transactions_since'
LANGUAGE C STABLE ROWS 1000;
-- Runs as the caller, with the caller's privileges and row-level security;
-- its queries qualify every name, operators included (extension/read.c).

COMMENT ON FUNCTION eventhub.transactions_since(text, bigint, integer, uuid, integer) IS
'Returns the events of an organization with revision > after_revision, in revision order, as events_since does, with their transaction: a batch holds up to max_events events, or fewer once their stored size reaches max_bytes, and ends where a publishing transaction ends, unless one transaction alone exceeds the limits (its part then ends with transaction_end false). Caught up when the batch is empty or its last row has revision = head_revision. Raises SQLSTATE ZE001, ZE002 and ZE003 as events_since does.';

REVOKE ALL ON FUNCTION eventhub.transactions_since(text, bigint, integer, uuid, integer) FROM PUBLIC;

-- Retention keeps each live entity's latest event (eventhub.compaction), or
-- marks the organization incomplete.
COMMENT ON FUNCTION eventhub.cleanup_events(timestamptz) IS
'Deletes the events of every organization processed before older_than, except each live entity''s latest event while eventhub.compaction is on, and returns how many. Never changes a head or version; readers behind the removed events get SQLSTATE ZE001. With eventhub.compaction off, an organization that loses an entity''s latest event gets complete_after NULL (its snapshots raise ZE004).';
COMMENT ON FUNCTION eventhub.cleanup_events(text, timestamptz, timestamptz) IS
'Deletes the events of one organization processed in [from_ts, to_ts), except each live entity''s latest event while eventhub.compaction is on, and returns how many. Never changes a head or version; readers that have not seen a removed event get SQLSTATE ZE001. With eventhub.compaction off, an organization that loses an entity''s latest event gets complete_after NULL (its snapshots raise ZE004).';
COMMENT ON FUNCTION eventhub.cleanup_events(text, bigint) IS
'Deletes the events of one organization with a revision below before_revision, except each live entity''s latest event while eventhub.compaction is on, and returns how many. Never changes a head or version; readers that have not seen a removed event get SQLSTATE ZE001. With eventhub.compaction off, an organization that loses an entity''s latest event gets complete_after NULL (its snapshots raise ZE004).';
COMMENT ON FUNCTION eventhub.run_maintenance() IS
'Runs one maintenance cycle now, in the caller''s transaction: deletes the events older than eventhub.retention (except each live entity''s latest event while eventhub.compaction is on) and returns how many. For servers without the background worker.';

-- The head a snapshot is read at: see extension/snapshot.c.
CREATE FUNCTION eventhub.snapshot_head(organization_id text, OUT revision bigint, OUT version_id uuid)
RETURNS record
AS 'MODULE_PATHNAME', 'snapshot_head'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;
-- Runs as the caller, with the caller's privileges and row-level security.

COMMENT ON FUNCTION eventhub.snapshot_head(text) IS
'Returns the head revision and version id a snapshot of the organization is read at, in the caller''s snapshot: (0, NULL) for an organization never registered. Raises SQLSTATE ZE004 when the organization''s latest events are not its full state (organization_states.complete_after NULL: see eventhub.declare_full_state()). Read it and the snapshot''s pages in one REPEATABLE READ transaction, then continue with events_since from that head.';

REVOKE ALL ON FUNCTION eventhub.snapshot_head(text) FROM PUBLIC;

-- One page of a snapshot: see extension/snapshot.c.
CREATE FUNCTION eventhub.snapshot_entities(
    organization_id  text,
    at_revision      bigint,
    after_event_type text DEFAULT NULL,
    after_entity_id  text DEFAULT NULL,
    max_entities     integer DEFAULT 1000,
    max_bytes        integer DEFAULT NULL,
    at_version       uuid DEFAULT NULL)
RETURNS TABLE (event_type text, entity_id text, revision bigint, version_id uuid, action text,
               event_data jsonb, originated_timestamp timestamptz)
AS 'MODULE_PATHNAME', 'snapshot_entities'
LANGUAGE C STABLE ROWS 1000
SET search_path = pg_catalog, pg_temp
SET jit = off;
-- Runs as the caller, with the caller's privileges and row-level security.
-- jit off: its page query's generic plan is costed over the whole
-- organization, so JIT compiled it again for every page, more than half of
-- a large snapshot's CPU (make bench, docs/performance.md).

COMMENT ON FUNCTION eventhub.snapshot_entities(text, bigint, text, text, integer, integer, uuid) IS
'Returns one page of the organization''s snapshot at head at_revision: each live entity''s latest event, in (event_type, entity_id) byte order, after (after_event_type, after_entity_id) when given (the last row of the previous page). A page holds max_entities rows, or fewer once their size reaches max_bytes; a page short on both counts is the last. Raises SQLSTATE ZE004 when the organization''s latest events are not its full state, and ZE005 when its head is no longer at_revision (and at_version): read snapshot_head and the pages in one REPEATABLE READ transaction.';

REVOKE ALL ON FUNCTION eventhub.snapshot_entities(text, bigint, text, text, integer, integer, uuid) FROM PUBLIC;

-- complete_after: see the column's comment and extension/snapshot.c.
CREATE FUNCTION eventhub.declare_full_state(organization_id text, after_revision bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'declare_full_state'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.declare_full_state(text, bigint) IS
'Declares that the organization''s events above after_revision hold the full state of every live entity, and sets its complete_after to after_revision (between 0 and the head revision). Needs the publish privilege. Use it after publishing the full state again, with the head revision read before that.';

REVOKE ALL ON FUNCTION eventhub.declare_full_state(text, bigint) FROM PUBLIC;

-- Every organization starts complete (0), except those that lost events:
-- before 0.4.0 revisions are gapless and only retention and cleanup_events
-- remove events, so an organization holding fewer events than its head
-- revision lost some, possibly an entity's only event, and its snapshot
-- would miss that entity; those get NULL.  One UPDATE of every
-- organization's row (HOT: no index names the column).  A WARNING, not a
-- NOTICE: PostgreSQL runs an extension's script with client_min_messages
-- and log_min_messages at WARNING at least, so a NOTICE would reach neither
-- the operator nor the server log.
DO $$
DECLARE
    cut bigint;
BEGIN
    UPDATE eventhub.organization_states s
       SET complete_after = CASE WHEN s.revision OPERATOR(pg_catalog.>)
                                      (SELECT pg_catalog.count(*) FROM eventhub.events e
                                        WHERE e.organization_id OPERATOR(pg_catalog.=) s.organization_id)
                                 THEN NULL ELSE 0 END;
    SELECT pg_catalog.count(*) INTO cut FROM eventhub.organization_states s WHERE s.complete_after IS NULL;
    IF cut OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING '% organizations lost events before 0.4.0: their snapshots are refused until eventhub.declare_full_state()', cut
            USING HINT = 'For each of them (organization_states.complete_after IS NULL): read its head revision, publish the full state of every live entity, then call eventhub.declare_full_state(organization_id, that head revision).';
    END IF;
END
$$;
