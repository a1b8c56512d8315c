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

CREATE TABLE eventhub.organization_states (
    organization text PRIMARY KEY,
    version_id   uuid NOT NULL,
    revision     bigint NOT NULL CONSTRAINT organization_states_revision_check CHECK (revision >= 0),
    updated_at   timestamptz NOT NULL
);

COMMENT ON TABLE eventhub.organization_states IS
'One row per organization: its head revision (the revision of its latest event, 0 before the first) and the version id that changes with every event.';
COMMENT ON COLUMN eventhub.organization_states.organization IS 'Organization id, as passed to publish_event.';
COMMENT ON COLUMN eventhub.organization_states.version_id IS 'Rotated to a new random UUID by every event; equals the version_id of the head event.';
COMMENT ON COLUMN eventhub.organization_states.revision IS 'Head revision: the highest revision ever assigned in this organization. Retention never lowers it.';
COMMENT ON COLUMN eventhub.organization_states.updated_at IS 'When the organization was registered or last published to.';

CREATE TABLE eventhub.events (
    organization_id      text NOT NULL,
    revision             bigint NOT NULL,
    version_id           uuid NOT NULL,
    processed_timestamp  timestamptz NOT NULL,
    originated_timestamp timestamptz NOT NULL,
    event_type           text NOT NULL,
    action               text NOT NULL CONSTRAINT events_action_check CHECK (action IN ('CREATE', 'UPDATE', 'DELETE')),
    entity_id            text NOT NULL,
    correlation_id       text NOT NULL CONSTRAINT events_correlation_id_key UNIQUE,
    event_data           jsonb NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (organization_id, revision)
);

-- Retention deletes by age; this index lets it find expired events without
-- scanning the table.
CREATE INDEX events_processed_timestamp_idx ON eventhub.events (processed_timestamp);

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
COMMENT ON COLUMN eventhub.events.correlation_id IS 'Idempotency key, unique across all organizations. Publishing the same event again with it returns the original revision.';
COMMENT ON COLUMN eventhub.events.event_data IS 'The change itself, as JSON. Never sent in notifications.';

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
LANGUAGE C VOLATILE SECURITY DEFINER
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
LANGUAGE C VOLATILE SECURITY DEFINER;
-- No SET search_path here, unlike every other function: on the hot path it
-- costs about 15% of publish throughput.  Instead every relation, function
-- and operator in publish_event's queries is schema-qualified (publish.c).

COMMENT ON FUNCTION eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz) IS
'Appends an event inside the caller''s transaction: assigns the organization''s next revision, rotates its version id and returns the revision. A repeated correlation_id with identical content returns the original revision and changes nothing.';

--
-- Reading
--

-- The consumer protocol: keep the revision of the last event applied per
-- organization (start at 0, or at organization_states.revision to skip
-- history), call events_since with it until it returns fewer than
-- max_events rows, and advance the cursor to the last row's revision.  On
-- SQLSTATE EH001 or EH002 reload the full state, then continue from
-- organization_states.revision.
CREATE FUNCTION eventhub.events_since(
    organization_id text,
    after_revision  bigint,
    max_events      integer DEFAULT 1000)
RETURNS SETOF eventhub.events
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head     bigint;
    expected bigint;
    returned integer := 0;
    ev       eventhub.events;
BEGIN
    IF organization_id IS NULL THEN
        RAISE EXCEPTION 'organization_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF after_revision IS NULL THEN
        RAISE EXCEPTION 'after_revision must not be null' USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Pass 0 to read an organization from its first kept event.';
    END IF;
    IF max_events IS NULL THEN
        RAISE EXCEPTION 'max_events must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF after_revision < 0 THEN
        RAISE EXCEPTION 'after_revision must not be negative'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('after_revision is %s.', after_revision),
                  HINT = 'Pass 0 to read an organization from its first kept event.';
    END IF;
    IF max_events <= 0 THEN
        RAISE EXCEPTION 'max_events must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('max_events is %s.', max_events);
    END IF;

    -- The function is STABLE, so the head and the events below come from one
    -- snapshot: every revision up to head is either returned or was removed.
    SELECT s.revision INTO head
      FROM eventhub.organization_states s
     WHERE s.organization = events_since.organization_id;
    head := COALESCE(head, 0);

    IF after_revision > head THEN
        RAISE EXCEPTION 'revision % is ahead of organization "%"', after_revision, organization_id
            USING ERRCODE = 'EH002',
                  DETAIL = pg_catalog.format('The head revision of organization "%s" is %s.', organization_id, head),
                  HINT = 'The database no longer has history this reader has seen, for example after a failover. Reload the full state and continue from the head revision.';
    END IF;

    expected := after_revision + 1;
    FOR ev IN
        SELECT e.*
          FROM eventhub.events e
         WHERE e.organization_id = events_since.organization_id
           AND e.revision > after_revision
         ORDER BY e.revision
         LIMIT max_events
    LOOP
        IF ev.revision <> expected THEN
            EXIT;
        END IF;
        expected := expected + 1;
        returned := returned + 1;
        RETURN NEXT ev;
    END LOOP;

    -- A short batch must end at the head; a revision missing before that
    -- was removed by retention.
    IF returned < max_events AND expected <= head THEN
        RAISE EXCEPTION 'events of organization "%" after revision % have been removed', organization_id, expected - 1
            USING ERRCODE = 'EH001',
                  DETAIL = pg_catalog.format('Revision %s is no longer kept; the head revision is %s.', expected, head),
                  HINT = 'Reload the full state and continue from the head revision in eventhub.organization_states.';
    END IF;
    RETURN;
END
$$;

COMMENT ON FUNCTION eventhub.events_since(text, bigint, integer) IS
'Returns up to max_events events of an organization with revision > after_revision, in revision order. Raises SQLSTATE EH001 when events the caller has not seen were removed, and EH002 when after_revision is above the head revision: both mean "reload the full state".';

--
-- Retention
--

CREATE FUNCTION eventhub.cleanup_events(older_than timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF older_than IS NULL THEN
        RAISE EXCEPTION 'older_than must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM eventhub.events e WHERE e.processed_timestamp < older_than;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$$;

COMMENT ON FUNCTION eventhub.cleanup_events(timestamptz) IS
'Deletes the events of every organization processed before older_than and returns how many. Never changes organization_states; readers behind the removed events get SQLSTATE EH001.';

CREATE FUNCTION eventhub.cleanup_events(organization_id text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF organization_id IS NULL THEN
        RAISE EXCEPTION 'organization_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF from_ts IS NULL OR to_ts IS NULL THEN
        RAISE EXCEPTION '% must not be null', CASE WHEN from_ts IS NULL THEN 'from_ts' ELSE 'to_ts' END
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Use ''-infinity'' or ''infinity'' for an open end.';
    END IF;
    IF from_ts > to_ts THEN
        RAISE EXCEPTION 'from_ts must not be later than to_ts'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('from_ts is %s and to_ts is %s.', from_ts, to_ts);
    END IF;
    DELETE FROM eventhub.events e
     WHERE e.organization_id = cleanup_events.organization_id
       AND e.processed_timestamp >= from_ts
       AND e.processed_timestamp < to_ts;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$$;

COMMENT ON FUNCTION eventhub.cleanup_events(text, timestamptz, timestamptz) IS
'Deletes the events of one organization processed in [from_ts, to_ts) and returns how many. Never changes organization_states; readers that have not seen a removed event get SQLSTATE EH001.';

CREATE FUNCTION eventhub.run_maintenance()
RETURNS bigint
AS 'MODULE_PATHNAME', 'run_maintenance'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION eventhub.run_maintenance() IS
'Runs one maintenance cycle now, in the caller''s transaction: deletes the events older than eventhub.retention and returns how many. For servers without the background worker.';

--
-- Notification
--

CREATE FUNCTION eventhub.notify_event()
RETURNS trigger
AS 'MODULE_PATHNAME', 'notify_event'
LANGUAGE C;
-- notify_event runs no SQL and resolves no names, so it needs no pinned
-- search_path (and saves the cost of one on every published event).

COMMENT ON FUNCTION eventhub.notify_event() IS
'Trigger function: sends NOTIFY eventhub with {"organization_id": ..., "revision": ..., "version_id": ...} for each inserted event.';

CREATE TRIGGER events_notify
    AFTER INSERT ON eventhub.events
    FOR EACH ROW EXECUTE FUNCTION eventhub.notify_event();

COMMENT ON TRIGGER events_notify ON eventhub.events IS
'Wakes listeners on channel eventhub when an event commits.';

--
-- Replica registry
--

CREATE TABLE eventhub.replicas (
    replica_id     text PRIMARY KEY,
    labels         jsonb NOT NULL DEFAULT '{}',
    version        text,
    started_at     timestamptz NOT NULL,
    last_heartbeat timestamptz NOT NULL
);

COMMENT ON TABLE eventhub.replicas IS
'Replicas that report their progress with eventhub.heartbeat(). Stale after eventhub.replica_ttl without a heartbeat; removed by maintenance after twice that.';
COMMENT ON COLUMN eventhub.replicas.replica_id IS 'Id the replica chose, for example its pod name.';
COMMENT ON COLUMN eventhub.replicas.labels IS 'Free-form JSON object the replica reports (zone, node, ...).';
COMMENT ON COLUMN eventhub.replicas.version IS 'Software version the replica reports.';
COMMENT ON COLUMN eventhub.replicas.started_at IS 'When the replica registered.';
COMMENT ON COLUMN eventhub.replicas.last_heartbeat IS 'When the replica last called eventhub.heartbeat().';

CREATE TABLE eventhub.replica_progress (
    replica_id         text NOT NULL REFERENCES eventhub.replicas ON DELETE CASCADE,
    organization_id    text NOT NULL,
    applied_revision   bigint NOT NULL,
    applied_version_id uuid,
    applied_at         timestamptz NOT NULL,
    config_hash        text,
    CONSTRAINT replica_progress_pkey PRIMARY KEY (replica_id, organization_id)
);

-- Retention asks "does a live replica still need this event?" per event.
CREATE INDEX replica_progress_organization_idx
    ON eventhub.replica_progress (organization_id, applied_revision);

COMMENT ON TABLE eventhub.replica_progress IS
'Per replica and organization: the revision it has applied and the configuration it serves.';
COMMENT ON COLUMN eventhub.replica_progress.replica_id IS 'The replica.';
COMMENT ON COLUMN eventhub.replica_progress.organization_id IS 'An organization the replica follows.';
COMMENT ON COLUMN eventhub.replica_progress.applied_revision IS 'The revision of the last event the replica applied.';
COMMENT ON COLUMN eventhub.replica_progress.applied_version_id IS 'The version_id of that event, as the replica saw it.';
COMMENT ON COLUMN eventhub.replica_progress.applied_at IS 'When the replica first reported this applied revision.';
COMMENT ON COLUMN eventhub.replica_progress.config_hash IS 'Hash the application reports of the configuration it serves for the organization, to compare replicas.';

CREATE FUNCTION eventhub.heartbeat(
    replica_id text,
    progress   jsonb,
    labels     jsonb DEFAULT NULL,
    version    text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org      text;
    entry    jsonb;
    key      text;
    rev      bigint;
    head     bigint;
BEGIN
    IF replica_id IS NULL THEN
        RAISE EXCEPTION 'replica_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF replica_id = '' THEN
        RAISE EXCEPTION 'replica_id must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(replica_id) > 1024 THEN
        RAISE EXCEPTION 'replica_id is too long' USING ERRCODE = 'string_data_right_truncation',
            DETAIL = format('The value is %s bytes long; the limit is 1024 bytes.', octet_length(replica_id));
    END IF;
    IF progress IS NULL THEN
        RAISE EXCEPTION 'progress must not be null' USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Pass ''{}'' for a replica that follows no organization.';
    END IF;
    IF jsonb_typeof(progress) <> 'object' THEN
        RAISE EXCEPTION 'progress must be a JSON object' USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Pass {"<organization>": {"revision": <applied revision>, "version_id": "<uuid>", "config_hash": "<hash>"}, ...}.';
    END IF;
    IF labels IS NOT NULL AND jsonb_typeof(labels) <> 'object' THEN
        RAISE EXCEPTION 'labels must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Check everything before writing anything.
    FOR org, entry IN SELECT * FROM jsonb_each(progress) LOOP
        IF org = '' OR octet_length(org) > 1024 THEN
            RAISE EXCEPTION 'invalid organization id in progress' USING ERRCODE = 'invalid_parameter_value',
                DETAIL = 'Organization ids are 1 to 1024 bytes long.';
        END IF;
        IF jsonb_typeof(entry) <> 'object' THEN
            RAISE EXCEPTION 'progress of organization "%" must be a JSON object', org
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'Pass {"revision": <applied revision>, "version_id": "<uuid>", "config_hash": "<hash>"}.';
        END IF;
        FOR key IN SELECT jsonb_object_keys(entry) LOOP
            IF key NOT IN ('revision', 'version_id', 'config_hash') THEN
                RAISE EXCEPTION 'unknown key "%" in progress of organization "%"', key, org
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'The keys are revision, version_id and config_hash.';
            END IF;
        END LOOP;
        IF NOT entry ? 'revision' THEN
            RAISE EXCEPTION 'progress of organization "%" has no revision', org
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF jsonb_typeof(entry->'revision') <> 'number' THEN
            RAISE EXCEPTION 'revision of organization "%" must be an integer', org
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('It is %s.', entry->'revision');
        END IF;
        IF (entry->>'revision')::numeric <> trunc((entry->>'revision')::numeric)
           OR (entry->>'revision')::numeric > 9223372036854775807 THEN
            RAISE EXCEPTION 'revision of organization "%" must be an integer', org
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('It is %s.', entry->'revision');
        END IF;
        IF (entry->>'revision')::numeric < 0 THEN
            RAISE EXCEPTION 'revision of organization "%" must not be negative', org
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('It is %s.', entry->'revision');
        END IF;
        rev := (entry->>'revision')::bigint;
        SELECT s.revision INTO head FROM eventhub.organization_states s WHERE s.organization = org;
        IF rev > COALESCE(head, 0) THEN
            RAISE EXCEPTION 'revision % of organization "%" is above its head revision', rev, org
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = format('The head revision is %s.', COALESCE(head, 0)),
                      HINT = 'Report the revision of the last event applied, from this database.';
        END IF;
        IF jsonb_typeof(entry->'version_id') NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'version_id of organization "%" must be a UUID string', org
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF jsonb_typeof(entry->'config_hash') NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'config_hash of organization "%" must be a string', org
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM (entry->>'version_id')::uuid;
    END LOOP;

    INSERT INTO eventhub.replicas AS r (replica_id, labels, version, started_at, last_heartbeat)
    VALUES (heartbeat.replica_id, COALESCE(heartbeat.labels, '{}'), heartbeat.version, now(), now())
    ON CONFLICT ON CONSTRAINT replicas_pkey DO UPDATE
       SET last_heartbeat = now(),
           labels = COALESCE(heartbeat.labels, r.labels),
           version = COALESCE(heartbeat.version, r.version);

    INSERT INTO eventhub.replica_progress AS p
           (replica_id, organization_id, applied_revision, applied_version_id, applied_at, config_hash)
    SELECT heartbeat.replica_id, j.key, (j.value->>'revision')::bigint,
           (j.value->>'version_id')::uuid, now(), j.value->>'config_hash'
      FROM jsonb_each(progress) j
    ON CONFLICT ON CONSTRAINT replica_progress_pkey DO UPDATE
       SET applied_at = CASE WHEN p.applied_revision = excluded.applied_revision
                              AND (p.applied_version_id = excluded.applied_version_id
                                   OR p.applied_version_id IS NULL OR excluded.applied_version_id IS NULL)
                             THEN p.applied_at ELSE excluded.applied_at END,
           applied_version_id = CASE WHEN p.applied_revision = excluded.applied_revision
                                     THEN COALESCE(excluded.applied_version_id, p.applied_version_id)
                                     ELSE excluded.applied_version_id END,
           applied_revision = excluded.applied_revision,
           config_hash = excluded.config_hash;
END
$$;

COMMENT ON FUNCTION eventhub.heartbeat(text, jsonb, jsonb, text) IS
'Registers a replica if new, records its progress {"<organization>": {"revision": N, "version_id": "...", "config_hash": "..."}} for the organizations named, and refreshes its last_heartbeat.';

CREATE FUNCTION eventhub.deregister_replica(replica_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted integer;
BEGIN
    IF replica_id IS NULL THEN
        RAISE EXCEPTION 'replica_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM eventhub.replicas r WHERE r.replica_id = deregister_replica.replica_id;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted > 0;
END
$$;

COMMENT ON FUNCTION eventhub.deregister_replica(text) IS
'Removes a replica and its progress; returns whether it was registered. Its progress no longer holds retention.';

CREATE VIEW eventhub.replica_status AS
WITH settings AS (
    SELECT COALESCE(pg_catalog.current_setting('eventhub.replica_ttl', true), '5min')::interval AS ttl
)
SELECT r.replica_id,
       CASE WHEN pg_catalog.now() - r.last_heartbeat > settings.ttl THEN 'stale' ELSE 'live' END AS state,
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
       CASE WHEN p.config_hash IS NOT NULL THEN NOT EXISTS (
           SELECT FROM eventhub.replica_progress q
             JOIN eventhub.replicas qr ON qr.replica_id = q.replica_id
            WHERE q.organization_id = p.organization_id
              AND q.applied_revision = p.applied_revision
              AND q.replica_id <> p.replica_id
              AND q.config_hash <> p.config_hash
              AND pg_catalog.now() - qr.last_heartbeat <= settings.ttl)
       END AS hash_agrees,
       r.labels,
       r.version,
       r.started_at,
       r.last_heartbeat
  FROM eventhub.replicas r
 CROSS JOIN settings
  LEFT JOIN eventhub.replica_progress p ON p.replica_id = r.replica_id
  LEFT JOIN eventhub.organization_states s ON s.organization = p.organization_id;

COMMENT ON VIEW eventhub.replica_status IS
'One row per replica and organization: head and applied revision, lag, how long the replica has been behind (behind_for), time since its last heartbeat, state live or stale (eventhub.replica_ttl), and whether its config_hash agrees with the other live replicas at the same revision.';
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

--
-- Privileges: nothing for PUBLIC.  The README shows the GRANTs for a
-- publishing role and a reading role.
--

REVOKE ALL ON ALL TABLES IN SCHEMA eventhub FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA eventhub FROM PUBLIC;
