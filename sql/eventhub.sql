-- eventhub install script.  This is the one editable copy: the build copies
-- it to sql/eventhub--<version>.sql.  Every object is schema-qualified and
-- every function pins its search_path or qualifies every name it uses, so
-- nothing here depends on the caller's search_path (see "Security
-- Considerations for Extensions").

\echo Use "CREATE EXTENSION eventhub" to load this file. \quit

-- The schema belongs to the extension: DROP EXTENSION removes it, and a
-- schema of that name that someone created beforehand (and so could own)
-- makes CREATE EXTENSION fail instead of being used.  That is why the control
-- file names pg_catalog, as pg_cron does, rather than "eventhub".
CREATE SCHEMA eventhub;
COMMENT ON SCHEMA eventhub IS 'eventhub: ordered, exactly-once configuration change events.';

--
-- Tables
--

-- No CHECK constraints here or in events: only eventhub's functions write
-- these tables (the write guard below), they check what they write, and a
-- CHECK constraint would cost every publish the parsing of its expression
-- (PostgreSQL prepares constraint expressions once per statement).  Every
-- publish updates its organization's row: room on each page keeps those
-- updates HOT.  Identifiers compare byte by byte (COLLATE "C"): their
-- order and their indexes do not depend on the operating system's locale
-- data, which can change under an index with an upgrade of the C library.
CREATE TABLE eventhub.organization_states (
    organization_id text COLLATE "C" PRIMARY KEY,
    version_id   uuid NOT NULL,
    revision     bigint NOT NULL,
    updated_at   timestamptz NOT NULL,
    complete_after bigint DEFAULT 0
) WITH (fillfactor = 50);

COMMENT ON TABLE eventhub.organization_states IS
'One row per organization: its head revision (the revision of its latest event, 0 before the first) and the version id that changes with every event.';
COMMENT ON COLUMN eventhub.organization_states.organization_id IS 'Organization id, as passed to publish_event.';
COMMENT ON COLUMN eventhub.organization_states.version_id IS 'Rotated to a new random UUID by every event; equals the version_id of the head event.';
COMMENT ON COLUMN eventhub.organization_states.revision IS 'Head revision: the highest revision ever assigned in this organization. Retention never lowers it.';
COMMENT ON COLUMN eventhub.organization_states.updated_at IS 'When the organization was registered or last published to.';
COMMENT ON COLUMN eventhub.organization_states.complete_after IS 'N: every entity''s latest event above revision N is kept, so the entities'' latest events are the organization''s full state; 0 for a new organization. NULL: retention may have removed an entity''s latest event (an organization whose events were removed before 0.4.0), and a snapshot is refused until eventhub.declare_full_state().';

CREATE TABLE eventhub.events (
    organization_id      text COLLATE "C" NOT NULL,
    revision             bigint NOT NULL,
    version_id           uuid NOT NULL,
    processed_timestamp  timestamptz NOT NULL,
    originated_timestamp timestamptz NOT NULL,
    event_type           text COLLATE "C" NOT NULL,
    action               text NOT NULL,
    entity_id            text COLLATE "C" NOT NULL,
    correlation_id       text COLLATE "C" NOT NULL,
    event_data           jsonb NOT NULL,
    transaction_first_revision bigint,
    CONSTRAINT events_pkey PRIMARY KEY (organization_id, revision),
    CONSTRAINT events_organization_id_correlation_id_key UNIQUE (organization_id, correlation_id)
);

-- Retention deletes by age; this index lets it find expired events without
-- scanning the table.
CREATE INDEX events_processed_timestamp_idx ON eventhub.events (processed_timestamp);

-- Each entity's events in revision order: the latest is the last one of its
-- (organization_id, event_type, entity_id) group.  Snapshots page through it
-- by (event_type, entity_id), and retention asks it whether an event has a
-- newer one.  event_type and entity_id compare byte by byte, as the index
-- orders them.
CREATE INDEX events_entity_idx ON eventhub.events (organization_id, event_type, entity_id, revision);

COMMENT ON TABLE eventhub.events IS
'The event log. Per organization, revisions are gapless and become visible in revision order. Write it only through eventhub.publish_event(); read it through eventhub.events_since().';
COMMENT ON COLUMN eventhub.events.organization_id IS 'Organization the event belongs to.';
COMMENT ON COLUMN eventhub.events.revision IS 'Position of the event in its organization: 1, 2, 3, ... without gaps. The read cursor.';
COMMENT ON COLUMN eventhub.events.version_id IS 'Version id the organization took with this event.';
COMMENT ON COLUMN eventhub.events.processed_timestamp IS 'Server clock when the revision was assigned. Used by retention only, never as a cursor.';
COMMENT ON COLUMN eventhub.events.originated_timestamp IS 'When the publisher says the change happened. Informational.';
COMMENT ON COLUMN eventhub.events.event_type IS 'Free-form kind of entity, for example API, CERTIFICATE or LLM_TEMPLATE.';
COMMENT ON COLUMN eventhub.events.action IS 'CREATE, UPDATE or DELETE.';
COMMENT ON COLUMN eventhub.events.entity_id IS 'Id of the entity that changed.';
COMMENT ON COLUMN eventhub.events.correlation_id IS 'Idempotency key, unique within the organization. Publishing the same event again with it returns the original revision.';
COMMENT ON COLUMN eventhub.events.event_data IS 'The change itself, as JSON. Never sent in notifications.';
COMMENT ON COLUMN eventhub.events.transaction_first_revision IS 'Revision of the first event the publishing transaction wrote in this organization: one transaction''s events have consecutive revisions and share it. NULL for an event published before 0.4.0, which counts as its own transaction.';

-- Keep the data in pg_dump output: these tables hold user data, not
-- configuration that CREATE EXTENSION recreates.
SELECT pg_catalog.pg_extension_config_dump('eventhub.organization_states', '');
SELECT pg_catalog.pg_extension_config_dump('eventhub.events', '');

--
-- Writing
--

CREATE FUNCTION eventhub.register_organization(organization_id text)
RETURNS uuid
AS 'MODULE_PATHNAME', 'register_organization'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.register_organization(text) IS
'Registers an organization at revision 0 if it is new; idempotent. Returns its current version id.';

CREATE FUNCTION eventhub.publish_event(
    organization_id      text,
    event_type           text,
    action               text,
    entity_id            text,
    correlation_id       text,
    event_data           jsonb,
    originated_timestamp timestamptz DEFAULT pg_catalog.now())
RETURNS bigint
AS 'MODULE_PATHNAME', 'publish_event'
LANGUAGE C VOLATILE;
-- No SET search_path here, unlike every other function: on the hot path it
-- costs about 15% of publish throughput.  Instead every relation, function
-- and operator in publish_event's queries is schema-qualified (publish.c).

COMMENT ON FUNCTION eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz) IS
'Appends an event inside the caller''s transaction: assigns the organization''s next revision, rotates its version id and returns the revision. A repeated correlation_id with identical content returns the original revision and changes nothing.';

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

--
-- Reading
--

-- The consumer protocol: keep, per organization, the revision and the
-- version id of the last event applied (the cursor; start at 0, or at
-- organization_states.revision and version_id to skip history).  LISTEN
-- eventhub first, then call events_since with the cursor until it returns
-- fewer than max_events rows, advancing the cursor to the last row's
-- revision and version_id.  On SQLSTATE ZE001, ZE002 or ZE003 read the head
-- (organization_states.revision and version_id), reload the full state, and
-- continue from that head.
CREATE FUNCTION eventhub.events_since(
    organization_id text,
    after_revision  bigint,
    max_events      integer DEFAULT 1000,
    after_version   uuid DEFAULT NULL)
RETURNS SETOF eventhub.events
AS 'MODULE_PATHNAME', 'events_since'
LANGUAGE C STABLE ROWS 1000;
-- Runs as the caller, with the caller's privileges and row-level security;
-- its queries qualify every name, operators included.

COMMENT ON FUNCTION eventhub.events_since(text, bigint, integer, uuid) IS
'Returns up to max_events events of an organization with revision > after_revision, in revision order. Raises SQLSTATE ZE001 when events the caller has not seen were removed, ZE002 when after_revision is above the head revision, and ZE003 when the event at after_revision (or the head, at it) has another version than after_version: all three mean "reload the full state".';

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

--
-- Snapshots
--

-- The head a snapshot is read at: see extension/snapshot.c.
CREATE FUNCTION eventhub.snapshot_head(organization_id text, OUT revision bigint, OUT version_id uuid)
RETURNS record
AS 'MODULE_PATHNAME', 'snapshot_head'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;
-- Runs as the caller, with the caller's privileges and row-level security.

COMMENT ON FUNCTION eventhub.snapshot_head(text) IS
'Returns the head revision and version id a snapshot of the organization is read at, in the caller''s snapshot: (0, NULL) for an organization never registered, (0, its version id) for one registered without events. Raises SQLSTATE ZE004 when the organization''s latest events are not its full state (organization_states.complete_after NULL: see eventhub.declare_full_state()). Read it and the snapshot''s pages in one REPEATABLE READ transaction, then continue with events_since from that head.';

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
'Returns one page of the organization''s snapshot at head at_revision: each live entity''s latest event, in (event_type, entity_id) byte order, after (after_event_type, after_entity_id) when given (the last row of the previous page). A page holds max_entities rows, or fewer once their stored size reaches max_bytes: a page with no rows ends the snapshot, and so does one with fewer than max_entities rows when max_bytes is NULL. Raises SQLSTATE ZE004 when the organization''s latest events are not its full state, and ZE005 when its head is no longer at_revision (and at_version): read snapshot_head and the pages in one REPEATABLE READ transaction.';

-- complete_after: see the column's comment and extension/snapshot.c.
CREATE FUNCTION eventhub.declare_full_state(organization_id text, after_revision bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'declare_full_state'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.declare_full_state(text, bigint) IS
'Declares that the organization''s events above after_revision hold the full state of every live entity, and sets its complete_after to after_revision (between 0 and the head revision). Needs the publish privilege. Use it after publishing the full state again, with the head revision read before that.';

--
-- Retention
--

CREATE FUNCTION eventhub.cleanup_events(older_than timestamptz)
RETURNS bigint
AS 'MODULE_PATHNAME', 'cleanup_events_before'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.cleanup_events(timestamptz) IS
'Deletes the events of every organization processed before older_than, except each live entity''s latest event while eventhub.compaction is on, and returns how many. Never changes a head or version; readers behind the removed events get SQLSTATE ZE001. With eventhub.compaction off, an organization that loses an entity''s latest event gets complete_after NULL (its snapshots raise ZE004).';

CREATE FUNCTION eventhub.cleanup_events(organization_id text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
AS 'MODULE_PATHNAME', 'cleanup_events_range'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.cleanup_events(text, timestamptz, timestamptz) IS
'Deletes the events of one organization processed in [from_ts, to_ts), except each live entity''s latest event while eventhub.compaction is on, and returns how many. Never changes a head or version; readers that have not seen a removed event get SQLSTATE ZE001. With eventhub.compaction off, an organization that loses an entity''s latest event gets complete_after NULL (its snapshots raise ZE004).';

CREATE FUNCTION eventhub.cleanup_events(organization_id text, before_revision bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'cleanup_events_before_revision'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.cleanup_events(text, bigint) IS
'Deletes the events of one organization with a revision below before_revision, except each live entity''s latest event while eventhub.compaction is on, and returns how many. Never changes a head or version; readers that have not seen a removed event get SQLSTATE ZE001. With eventhub.compaction off, an organization that loses an entity''s latest event gets complete_after NULL (its snapshots raise ZE004).';

CREATE FUNCTION eventhub.run_maintenance()
RETURNS bigint
AS 'MODULE_PATHNAME', 'run_maintenance'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.run_maintenance() IS
'Runs one maintenance cycle now, in the caller''s transaction: deletes the events older than eventhub.retention (except each live entity''s latest event while eventhub.compaction is on) and returns how many. For servers without the background worker.';

--
-- Notification
--

-- The key of the notification tokens.  Readable by no role but the owner,
-- and not dumped: a restored database gets a new key, and clients fetch the
-- new tokens when they reconnect.
CREATE TABLE eventhub.notification_key (
    key bytea NOT NULL
);

COMMENT ON TABLE eventhub.notification_key IS
'The secret key under which notification tokens are computed (one row). Never granted to anyone; replace it with eventhub.rotate_notification_key().';
COMMENT ON COLUMN eventhub.notification_key.key IS 'HMAC-SHA-256 key, 32 random bytes.';

CREATE FUNCTION eventhub.notification_token(organization_id text)
RETURNS text
AS 'MODULE_PATHNAME', 'notification_token'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION eventhub.notification_token(text) IS
'The token that notifications on channel eventhub carry for an organization: {"notification_token": "<token>", "version_id": "<uuid>"}. Needs read privilege on the organization.';

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

CREATE FUNCTION eventhub.notification_mode()
RETURNS text
AS 'MODULE_PATHNAME', 'notification_mode'
LANGUAGE C VOLATILE;

COMMENT ON FUNCTION eventhub.notification_mode() IS
'How this database announces published events: worker (the notifier background worker sends one NOTIFY per organization and batch, outside the publishers'' commits; the library is preloaded) or transaction (each publishing transaction sends its own at commit).';

CREATE FUNCTION eventhub.rotate_notification_key()
RETURNS void
AS 'MODULE_PATHNAME', 'rotate_notification_key'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.rotate_notification_key() IS
'Replaces the notification key with a new random one, which changes every notification token.';

SELECT eventhub.rotate_notification_key();

--
-- Per-organization access
--

CREATE TABLE eventhub.organization_grants (
    grantee         regrole NOT NULL,
    organization_id text COLLATE "C" NOT NULL,
    prefix          boolean NOT NULL,
    privilege       text NOT NULL CONSTRAINT organization_grants_privilege_check CHECK (privilege IN ('publish', 'read')),
    granted_by      regrole NOT NULL,
    granted_at      timestamptz NOT NULL,
    CONSTRAINT organization_grants_pkey PRIMARY KEY (grantee, organization_id, prefix, privilege),
    CONSTRAINT organization_grants_id_check CHECK (prefix OR organization_id <> '')
);

COMMENT ON TABLE eventhub.organization_grants IS
'Which roles may publish to or read which organizations. Empty: every role may use every organization (single-tenant). The first grant turns access control on for every role but superusers and roles with BYPASSRLS. Change it with eventhub.grant_organization() and eventhub.revoke_organization().';
COMMENT ON COLUMN eventhub.organization_grants.grantee IS 'The role granted the privilege; its members have it too (unless NOINHERIT).';
COMMENT ON COLUMN eventhub.organization_grants.organization_id IS 'The organization id, or with prefix the start of the ids it covers ( covers every organization).';
COMMENT ON COLUMN eventhub.organization_grants.prefix IS 'Whether organization_id is a prefix.';
COMMENT ON COLUMN eventhub.organization_grants.privilege IS 'publish (publish_event, register_organization) or read (events_since, the tables, notification tokens, heartbeats).';
COMMENT ON COLUMN eventhub.organization_grants.granted_by IS 'The role that made the grant.';
COMMENT ON COLUMN eventhub.organization_grants.granted_at IS 'When the grant was made.';

SELECT pg_catalog.pg_extension_config_dump('eventhub.organization_grants', '');

CREATE FUNCTION eventhub.has_organization_privilege(organization_id text, privilege text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'has_organization_privilege'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION eventhub.has_organization_privilege(text, text) IS
'Whether the calling role may publish to (privilege ''publish'') or read (''read'') an organization. Executable by every role: the row-level security policies of eventhub''s tables call it.';

CREATE FUNCTION eventhub.has_organization_privilege(role regrole, organization_id text, privilege text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'has_organization_privilege_role'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION eventhub.has_organization_privilege(regrole, text, text) IS
'Whether a role may publish to (privilege ''publish'') or read (''read'') an organization.';

CREATE FUNCTION eventhub.grant_organization(role regrole, organization_id text, privilege text,
                                            prefix boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'grant_organization'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.grant_organization(regrole, text, text, boolean) IS
'Grants a role publish or read on an organization, or with prefix on every organization whose id starts with organization_id. Returns whether the grant is new. The first grant turns access control on.';

CREATE FUNCTION eventhub.revoke_organization(role regrole, organization_id text, privilege text,
                                             prefix boolean DEFAULT false)
RETURNS boolean
AS 'MODULE_PATHNAME', 'revoke_organization'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.revoke_organization(regrole, text, text, boolean) IS
'Revokes a grant made with the same arguments; returns whether there was one. Revoking the last grant turns access control off.';

--
-- Replica registry
--

CREATE TABLE eventhub.replicas (
    replica_id     text COLLATE "C" PRIMARY KEY,
    labels         jsonb NOT NULL DEFAULT '{}',
    version        text,
    started_at     timestamptz NOT NULL,
    last_heartbeat timestamptz NOT NULL,
    owner          regrole NOT NULL
);

COMMENT ON TABLE eventhub.replicas IS
'Replicas that report their progress with eventhub.heartbeat(). Stale after eventhub.replica_ttl without a heartbeat; removed by maintenance after twice that.';
COMMENT ON COLUMN eventhub.replicas.replica_id IS 'Id the replica chose, for example its pod name.';
COMMENT ON COLUMN eventhub.replicas.labels IS 'Free-form JSON object the replica reports (zone, node, ...).';
COMMENT ON COLUMN eventhub.replicas.version IS 'Software version the replica reports.';
COMMENT ON COLUMN eventhub.replicas.started_at IS 'When the replica registered.';
COMMENT ON COLUMN eventhub.replicas.last_heartbeat IS 'When the replica last called eventhub.heartbeat().';
COMMENT ON COLUMN eventhub.replicas.owner IS 'The role that registered the replica; only it (its members, superusers) may send its heartbeats or deregister it.';

CREATE TABLE eventhub.replica_progress (
    replica_id         text COLLATE "C" NOT NULL REFERENCES eventhub.replicas ON DELETE CASCADE,
    organization_id    text COLLATE "C" NOT NULL,
    applied_revision   bigint NOT NULL,
    applied_version_id uuid,
    applied_at         timestamptz NOT NULL,
    config_hash        text,
    head_revision      bigint,
    CONSTRAINT replica_progress_pkey PRIMARY KEY (replica_id, organization_id)
);

-- Retention asks "does a live replica still need this event?" per event;
-- heartbeat and metrics() find the replicas at one revision through it.
CREATE INDEX replica_progress_organization_idx
    ON eventhub.replica_progress (organization_id, applied_revision);

-- The rows behind their organization's head at their last heartbeat: the
-- few that metrics() reads for lag, instead of every row.
CREATE INDEX replica_progress_behind_idx
    ON eventhub.replica_progress (organization_id, replica_id)
    WHERE applied_revision < head_revision;

COMMENT ON TABLE eventhub.replica_progress IS
'Per replica and organization: the revision it has applied and the configuration it serves.';
COMMENT ON COLUMN eventhub.replica_progress.replica_id IS 'The replica.';
COMMENT ON COLUMN eventhub.replica_progress.organization_id IS 'An organization the replica follows.';
COMMENT ON COLUMN eventhub.replica_progress.applied_revision IS 'The revision of the last event the replica applied.';
COMMENT ON COLUMN eventhub.replica_progress.applied_version_id IS 'The version_id of that event, as the replica saw it.';
COMMENT ON COLUMN eventhub.replica_progress.applied_at IS 'When the replica first reported this applied revision.';
COMMENT ON COLUMN eventhub.replica_progress.config_hash IS 'Hash the application reports of the configuration it serves for the organization, to compare replicas.';
COMMENT ON COLUMN eventhub.replica_progress.head_revision IS 'The organization''s head revision when the replica''s last heartbeat recorded this row (NULL when unknown): the row is behind when applied_revision < head_revision.';

-- Where replicas at the same revision of an organization reported different
-- configuration hashes: heartbeat adds a pair when a row it changes has
-- another replica's different hash beside it, maintenance removes the pairs
-- no longer split, and metrics() compares hashes at these pairs only.
CREATE TABLE eventhub.config_splits (
    organization_id text COLLATE "C" NOT NULL,
    revision        bigint NOT NULL,
    CONSTRAINT config_splits_pkey PRIMARY KEY (organization_id, revision)
);

COMMENT ON TABLE eventhub.config_splits IS
'(organization, revision) pairs at which replicas reported different configuration hashes: candidates that metrics() checks against replica_progress. Written by eventhub.heartbeat(), emptied of settled pairs by maintenance.';
COMMENT ON COLUMN eventhub.config_splits.organization_id IS 'The organization.';
COMMENT ON COLUMN eventhub.config_splits.revision IS 'The applied revision at which the hashes differ.';

CREATE FUNCTION eventhub.heartbeat(
    replica_id text,
    progress   jsonb,
    labels     jsonb DEFAULT NULL,
    version    text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'heartbeat'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.heartbeat(text, jsonb, jsonb, text) IS
'Registers a replica for the calling role if new, records its progress {"<organization>": {"revision": N, "version_id": "...", "config_hash": "..."}} for the organizations named (N a JSON number or a string of digits), and refreshes its last_heartbeat. A replica registered by another role is refused; so is a heartbeat on a hot standby.';

CREATE FUNCTION eventhub.deregister_replica(replica_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'deregister_replica'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.deregister_replica(text) IS
'Removes one of the calling role''s replicas and its progress; returns whether it was registered. Its progress no longer holds retention.';

CREATE FUNCTION eventhub.remove_replica(replica_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'remove_replica'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.remove_replica(text) IS
'Removes any replica and its progress, whoever registered it; returns whether it was registered. For administrators.';

-- PARALLEL RESTRICTED: it reads the grants with a fresh snapshot, which a
-- parallel worker cannot take.
CREATE FUNCTION eventhub.replica_visible(owner regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'replica_visible'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;

COMMENT ON FUNCTION eventhub.replica_visible(regrole) IS
'Whether the calling role sees a replica registered by owner apart from the organizations it follows: always while access control is off, else its own. Executable by every role: row-level security calls it.';

-- One row per replica and organization: a million rows for ten replicas
-- following 100,000 organizations, so every part of it is a join computed
-- once, never a query per row over other rows.  The settings come from
-- one-time subqueries (a WITH clause would keep the planner from merging
-- the view into the query that reads it, and from its statistics); the
-- hash comparison joins the few (organization, revision) pairs at which
-- replicas report different hashes, found in one pass; the visibility rule
-- is skipped as a whole while access control is off.
CREATE VIEW eventhub.replica_status AS
SELECT r.replica_id,
       CASE WHEN pg_catalog.now() - r.last_heartbeat
                 > (SELECT COALESCE(pg_catalog.current_setting('eventhub.replica_ttl', true), '5min')::interval)
            THEN 'stale' ELSE 'live' END AS state,
       p.organization_id,
       s.revision AS head_revision,
       p.applied_revision,
       s.revision - p.applied_revision AS lag_revisions,
       CASE WHEN p.applied_revision >= s.revision THEN interval '0'
            ELSE pg_catalog.now() - (SELECT e.processed_timestamp FROM eventhub.events e
                                      WHERE e.organization_id = p.organization_id
                                        AND e.revision > p.applied_revision
                                      ORDER BY e.revision LIMIT 1)
       END AS behind_for,
       p.applied_version_id,
       p.applied_at,
       pg_catalog.now() - r.last_heartbeat AS since_heartbeat,
       p.config_hash,
       -- Without a row in h, every replica at this revision reports this
       -- hash; with one, it agrees when no live replica reports another.
       CASE WHEN p.config_hash IS NOT NULL THEN
            h.organization_id IS NULL OR h.live_least IS NULL
            OR (h.live_least = p.config_hash COLLATE "C" AND h.live_greatest = p.config_hash COLLATE "C")
       END AS hash_agrees,
       r.labels,
       r.version,
       r.started_at,
       r.last_heartbeat,
       r.owner
  FROM eventhub.replicas r
  LEFT JOIN eventhub.replica_progress p ON p.replica_id = r.replica_id
  LEFT JOIN eventhub.organization_states s ON s.organization_id = p.organization_id
  LEFT JOIN (SELECT q.organization_id, q.applied_revision,
                    pg_catalog.min(q.config_hash COLLATE "C") FILTER (WHERE q.replica_id = ANY (live.ids)) AS live_least,
                    pg_catalog.max(q.config_hash COLLATE "C") FILTER (WHERE q.replica_id = ANY (live.ids)) AS live_greatest
               FROM eventhub.replica_progress q
              CROSS JOIN (SELECT ARRAY(
                     SELECT l.replica_id FROM eventhub.replicas l
                      WHERE pg_catalog.now() - l.last_heartbeat
                            <= (SELECT COALESCE(pg_catalog.current_setting('eventhub.replica_ttl', true), '5min')::interval)
                     ) AS ids) live
              WHERE q.config_hash IS NOT NULL
              GROUP BY q.organization_id, q.applied_revision
             HAVING pg_catalog.min(q.config_hash COLLATE "C") <> pg_catalog.max(q.config_hash COLLATE "C")) h
    ON h.organization_id = p.organization_id AND h.applied_revision = p.applied_revision
 -- The view reads the tables with its owner's rights, past their row-level
 -- security, so it applies the same rule itself.
 WHERE (SELECT NOT EXISTS (SELECT FROM eventhub.organization_grants))
    OR CASE WHEN p.organization_id IS NULL THEN eventhub.replica_visible(r.owner)
            ELSE eventhub.has_organization_privilege(p.organization_id, 'read') END;

COMMENT ON VIEW eventhub.replica_status IS
'One row per replica and organization: head and applied revision, lag, how long the replica has been behind (behind_for), time since its last heartbeat, state live or stale (eventhub.replica_ttl), and whether its config_hash agrees with the other live replicas at the same revision. Under access control, only the organizations the calling role may read.';
COMMENT ON COLUMN eventhub.replica_status.replica_id IS 'The replica.';
COMMENT ON COLUMN eventhub.replica_status.state IS 'live, or stale: no heartbeat for longer than eventhub.replica_ttl.';
COMMENT ON COLUMN eventhub.replica_status.organization_id IS 'An organization it follows (NULL for a replica that reported none).';
COMMENT ON COLUMN eventhub.replica_status.head_revision IS 'The organization''s head revision (NULL if it was never registered).';
COMMENT ON COLUMN eventhub.replica_status.applied_revision IS 'The revision the replica has applied.';
COMMENT ON COLUMN eventhub.replica_status.lag_revisions IS 'head_revision - applied_revision.';
COMMENT ON COLUMN eventhub.replica_status.behind_for IS 'Freshness: 0 at the head, else how long the oldest event it has not applied has been published (NULL if that event is no longer kept).';
COMMENT ON COLUMN eventhub.replica_status.applied_version_id IS 'The version_id the replica reported with its revision.';
COMMENT ON COLUMN eventhub.replica_status.applied_at IS 'When the replica first reported its applied revision.';
COMMENT ON COLUMN eventhub.replica_status.since_heartbeat IS 'Time since its last heartbeat.';
COMMENT ON COLUMN eventhub.replica_status.config_hash IS 'Hash of the configuration the replica serves for the organization.';
COMMENT ON COLUMN eventhub.replica_status.hash_agrees IS 'false when another live replica at the same applied revision reports a different config_hash; NULL without a hash.';
COMMENT ON COLUMN eventhub.replica_status.labels IS 'The replica''s labels.';
COMMENT ON COLUMN eventhub.replica_status.version IS 'The replica''s software version.';
COMMENT ON COLUMN eventhub.replica_status.started_at IS 'When the replica registered.';
COMMENT ON COLUMN eventhub.replica_status.last_heartbeat IS 'When the replica last sent a heartbeat.';
COMMENT ON COLUMN eventhub.replica_status.owner IS 'The role that registered the replica.';

--
-- Monitoring
--

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

--
-- Row-level security: a role sees the rows of the organizations it may
-- read (all of them while access control is off).  There is no policy for
-- INSERT, UPDATE or DELETE: only the owner, through eventhub's functions,
-- writes.  Superusers, the owner and roles with BYPASSRLS see everything.
--

-- The tables whose rows belong to an organization: a policy each, the same
-- but for its comment.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('organization_states', 'Rows of the organizations the calling role may read.'),
        ('events', 'Events of the organizations the calling role may read.'),
        ('replica_progress', 'Progress on the organizations the calling role may read.'),
        ('config_splits', 'Splits in the organizations the calling role may read.')
    ) AS v(tab, note)
    LOOP
        EXECUTE format('ALTER TABLE eventhub.%I ENABLE ROW LEVEL SECURITY', t.tab);
        EXECUTE format('CREATE POLICY %I ON eventhub.%I FOR SELECT'
                       ' USING (eventhub.has_organization_privilege(organization_id, %L))',
                       t.tab || '_read', t.tab, 'read');
        EXECUTE format('COMMENT ON POLICY %I ON eventhub.%I IS %L', t.tab || '_read', t.tab, t.note);
    END LOOP;
END
$$;

ALTER TABLE eventhub.replicas ENABLE ROW LEVEL SECURITY;
CREATE POLICY replicas_read ON eventhub.replicas FOR SELECT
    USING (eventhub.replica_visible(owner)
           OR EXISTS (SELECT FROM eventhub.replica_progress p WHERE p.replica_id = replicas.replica_id));
COMMENT ON POLICY replicas_read ON eventhub.replicas IS
'The calling role''s replicas, and those following an organization it may read (every replica while access control is off).';

ALTER TABLE eventhub.organization_grants ENABLE ROW LEVEL SECURITY;
ALTER TABLE eventhub.notification_key ENABLE ROW LEVEL SECURITY;

--
-- The write guard (guard.c): only eventhub's functions write its tables,
-- whatever table privileges a role was granted, and no trigger can be added
-- to them to run inside eventhub's functions with the extension owner's rights.
--

CREATE FUNCTION eventhub.protect_table()
RETURNS trigger
AS 'MODULE_PATHNAME', 'protect_table'
LANGUAGE C;

COMMENT ON FUNCTION eventhub.protect_table() IS
'Trigger function: refuses INSERT, UPDATE, DELETE and TRUNCATE on eventhub''s tables except from eventhub''s own functions, a superuser''s restore of a dump (COPY ... FROM with row_security off), or with eventhub.protect_tables off (superuser).';

-- Each table's trigger (TABLE_protect), its argument the message that says
-- which functions write the table.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('organization_states', 'Organizations are advanced by eventhub.publish_event() and registered by eventhub.register_organization().'),
        ('events', 'Events are added by eventhub.publish_event() and removed by retention or eventhub.cleanup_events().'),
        ('replicas', 'Replicas are registered by eventhub.heartbeat() and removed by eventhub.deregister_replica() or eventhub.remove_replica().'),
        ('replica_progress', 'Progress is recorded by eventhub.heartbeat().'),
        ('config_splits', 'Splits are recorded by eventhub.heartbeat() and removed by maintenance.'),
        ('organization_grants', 'Grants are changed by eventhub.grant_organization() and eventhub.revoke_organization().'),
        ('notification_key', 'The key is replaced by eventhub.rotate_notification_key().')
    ) AS v(tab, message)
    LOOP
        EXECUTE format('CREATE TRIGGER %I'
                       ' BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON eventhub.%I'
                       ' FOR EACH STATEMENT EXECUTE FUNCTION eventhub.protect_table(%L)',
                       t.tab || '_protect', t.tab, t.message);
        EXECUTE format('COMMENT ON TRIGGER %I ON eventhub.%I IS %L', t.tab || '_protect', t.tab,
                       'Only eventhub''s functions write this table.');
    END LOOP;
END
$$;

CREATE FUNCTION eventhub.invalidate_cache()
RETURNS trigger
AS 'MODULE_PATHNAME', 'invalidate_cache'
LANGUAGE C;

COMMENT ON FUNCTION eventhub.invalidate_cache() IS
'Trigger function: every backend reloads its copy of the table once the change commits.';

CREATE TRIGGER organization_grants_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON eventhub.organization_grants
    FOR EACH STATEMENT EXECUTE FUNCTION eventhub.invalidate_cache();
CREATE TRIGGER notification_key_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON eventhub.notification_key
    FOR EACH STATEMENT EXECUTE FUNCTION eventhub.invalidate_cache();

COMMENT ON TRIGGER organization_grants_changed ON eventhub.organization_grants IS 'Backends cache the grants.';
COMMENT ON TRIGGER notification_key_changed ON eventhub.notification_key IS 'Backends cache the key.';

CREATE FUNCTION eventhub.protect_ddl()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'protect_ddl'
LANGUAGE C;

COMMENT ON FUNCTION eventhub.protect_ddl() IS
'Event trigger function: refuses CREATE TRIGGER on eventhub''s tables, unless eventhub.protect_tables is off (superuser).';

CREATE EVENT TRIGGER eventhub_protect_ddl ON ddl_command_start
    WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION eventhub.protect_ddl();

COMMENT ON EVENT TRIGGER eventhub_protect_ddl IS
'A trigger on eventhub''s tables would run inside its functions with the owner''s rights: refused.';

--
-- Privileges: nothing for PUBLIC but the two functions row-level security
-- calls (they answer only for the calling role).  docs/operations.md (Roles) shows the
-- GRANTs for publishing, reading, operating and administering roles.
--

REVOKE ALL ON ALL TABLES IN SCHEMA eventhub FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA eventhub FROM PUBLIC;
GRANT EXECUTE ON FUNCTION eventhub.has_organization_privilege(text, text),
                          eventhub.replica_visible(regrole)
  TO PUBLIC;
