/*
 * statements.c
 *	  The SQL statements eventhub runs, but retention's
 *	  (statements_retention.c); statement_list.c lists them all.
 *
 * Each statement is one constant, written whole, with the types of its
 * parameters beside it: what a reviewer reads is what runs.  The code that
 * runs SQL takes an EventhubStatement, never a string, and
 * check_statements.sh fails when a statement is missing from
 * statement_list.c or when a file calls SPI with a query of its own.
 *
 * Statements that run as the extension's owner, or in the background
 * worker, name every relation, function and operator with its schema:
 * nothing in them may resolve through the caller's search_path.  Keep it
 * that way.
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "statements.h"

const EventhubStatement EventhubSqlAccessGrantOrganization = {
	"access.grant_organization", 5, {REGROLEOID, TEXTOID, TEXTOID, BOOLOID, REGROLEOID},
	"INSERT INTO eventhub.organization_grants\n"
	"(grantee, organization_id, prefix, privilege, granted_by, granted_at)\n"
	"VALUES ($1, $2, $4, $3, $5, pg_catalog.now())\n"
	"  ON CONFLICT DO NOTHING"
};

const EventhubStatement EventhubSqlAccessRevokeOrganization = {
	"access.revoke_organization", 4, {REGROLEOID, TEXTOID, TEXTOID, BOOLOID},
	"DELETE FROM eventhub.organization_grants\n"
	"WHERE grantee OPERATOR(pg_catalog.=) $1\n"
	"  AND organization_id OPERATOR(pg_catalog.=) $2\n"
	"  AND privilege OPERATOR(pg_catalog.=) $3\n"
	"  AND prefix OPERATOR(pg_catalog.=) $4"
};

const EventhubStatement EventhubSqlAccessRemoveGrantsOfDroppedRoles = {
	"access.remove_grants_of_dropped_roles", 0, {InvalidOid},
	"WITH gone AS (\n"
	"    DELETE FROM eventhub.organization_grants g\n"
	"    WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles a\n"
	"        WHERE a.oid OPERATOR(pg_catalog.=) g.grantee::pg_catalog.oid)\n"
	"    RETURNING g.grantee::pg_catalog.oid AS role)\n"
	"SELECT role, pg_catalog.count(*) FROM gone GROUP BY role ORDER BY role"
};

const EventhubStatement EventhubSqlAccessRemoveReplicasOfDroppedRoles = {
	"access.remove_replicas_of_dropped_roles", 0, {InvalidOid},
	"DELETE FROM eventhub.replicas r\n"
	"WHERE r.owner::pg_catalog.oid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid\n"
	"  AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles a\n"
	"    WHERE a.oid OPERATOR(pg_catalog.=) r.owner::pg_catalog.oid)\n"
	"RETURNING r.replica_id, r.owner::pg_catalog.oid"
};

const EventhubStatement EventhubSqlAccessRemoveGrantsOfRole = {
	"access.remove_grants_of_role", 1, {OIDOID},
	"DELETE FROM eventhub.organization_grants\n"
	"WHERE grantee::pg_catalog.oid OPERATOR(pg_catalog.=) $1"
};

const EventhubStatement EventhubSqlAccessRemoveReplicasOfRole = {
	"access.remove_replicas_of_role", 1, {OIDOID},
	"DELETE FROM eventhub.replicas\n"
	"WHERE owner::pg_catalog.oid OPERATOR(pg_catalog.=) $1"
};

const EventhubStatement EventhubSqlNotifyKeyInsertKey = {
	"notify_key.insert_key", 1, {BYTEAOID},
	"INSERT INTO eventhub.notification_key (key) VALUES ($1)"
};

const EventhubStatement EventhubSqlNotifyKeyDeleteKey = {
	"notify_key.delete_key", 0, {InvalidOid},
	"DELETE FROM eventhub.notification_key"
};

const EventhubStatement EventhubSqlNotifierAnnouncedEvents = {
	"notifier.announced_events", 3, {TEXTOID, INT8OID, INT8OID},
	"SELECT e.revision, e.version_id, e.processed_timestamp,\n"
	"e.originated_timestamp, e.event_type, e.action, e.entity_id,\n"
	"e.correlation_id, e.event_data::pg_catalog.text,\n"
	"COALESCE(e.transaction_first_revision, e.revision)\n"
	"FROM eventhub.events e\n"
	"WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.revision OPERATOR(pg_catalog.>=) $2\n"
	"  AND e.revision OPERATOR(pg_catalog.<=) $3\n"
	"ORDER BY e.revision"
};

const EventhubStatement EventhubSqlPublishInsertOrganization = {
	"publish.insert_organization", 3, {TEXTOID, UUIDOID, TIMESTAMPTZOID},
	"INSERT INTO eventhub.organization_states\n"
	"(organization_id, version_id, revision, updated_at)\n"
	"VALUES ($1, $2, 0, $3)\n"
	"  ON CONFLICT (organization_id) DO NOTHING"
};

const EventhubStatement EventhubSqlPublishCreateOrganization = {
	"publish.create_organization", 2, {TEXTOID, UUIDOID},
	"INSERT INTO eventhub.organization_states\n"
	"(organization_id, version_id, revision, updated_at)\n"
	"VALUES ($1, $2, 1, pg_catalog.clock_timestamp())\n"
	"  ON CONFLICT (organization_id) DO NOTHING\n"
	"RETURNING revision, updated_at"
};

const EventhubStatement EventhubSqlPublishAdvanceOrganization = {
	"publish.advance_organization", 2, {TEXTOID, UUIDOID},
	"UPDATE eventhub.organization_states\n"
	"SET revision = revision OPERATOR(pg_catalog.+) 1, version_id = $2,\n"
	"updated_at = pg_catalog.clock_timestamp()\n"
	"WHERE organization_id OPERATOR(pg_catalog.=) $1\n"
	"RETURNING revision, updated_at"
};

const EventhubStatement EventhubSqlPublishRestoreOrganization = {
	"publish.restore_organization", 2, {TEXTOID, INT8OID},
	"UPDATE eventhub.organization_states s\n"
	"SET revision = e.revision, version_id = e.version_id,\n"
	"updated_at = e.processed_timestamp\n"
	"FROM eventhub.events e\n"
	"WHERE s.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.revision OPERATOR(pg_catalog.=) $2"
};

const EventhubStatement EventhubSqlPublishFindCorrelation = {
	"publish.find_correlation", 8, {TEXTOID, UUIDOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID},
	"WITH prior AS (\n"
	"    SELECT e.revision,\n"
	"    e.event_type OPERATOR(pg_catalog.=) $4 AND e.action OPERATOR(pg_catalog.=) $5\n"
	"      AND e.entity_id OPERATOR(pg_catalog.=) $6 AND e.event_data OPERATOR(pg_catalog.=) $8 AS same\n"
	"    FROM eventhub.events e\n"
	"    WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND e.correlation_id OPERATOR(pg_catalog.=) $7)\n"
	"SELECT revision, same FROM prior"
};

const EventhubStatement EventhubSqlPublishInsertEvent = {
	"publish.insert_event", 11, {TEXTOID, INT8OID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, INT8OID},
	"INSERT INTO eventhub.events\n"
	"(organization_id, revision, version_id, processed_timestamp,\n"
	"    originated_timestamp, event_type, action, entity_id,\n"
	"    correlation_id, event_data, transaction_first_revision)\n"
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, COALESCE($11, $2))"
};

const EventhubStatement EventhubSqlPublishInsertEventOnce = {
	"publish.insert_event_once", 11, {TEXTOID, INT8OID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, INT8OID},
	"INSERT INTO eventhub.events\n"
	"(organization_id, revision, version_id, processed_timestamp,\n"
	"    originated_timestamp, event_type, action, entity_id,\n"
	"    correlation_id, event_data, transaction_first_revision)\n"
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, COALESCE($11, $2))\n"
	"  ON CONFLICT (organization_id, correlation_id) DO NOTHING"
};

/*
 * publish_event's common case in one statement (one executor start):
 * advance an existing organization's head and insert the event at the new
 * revision.  Parameters: $1 organization, $2 version, $3 originated, $4
 * event_type, $5 action, $6 entity, $7 correlation, $8 data, $9 the
 * transaction's first revision in the organization (NULL when this is its
 * first event there).
 */
const EventhubStatement EventhubSqlPublishPublish = {
	"publish.publish", 9, {TEXTOID, UUIDOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, INT8OID},
	"WITH adv AS (\n"
	"    UPDATE eventhub.organization_states s\n"
	"    SET revision = s.revision OPERATOR(pg_catalog.+) 1, version_id = $2,\n"
	"    updated_at = pg_catalog.clock_timestamp()\n"
	"    WHERE s.organization_id OPERATOR(pg_catalog.=) $1\n"
	"    RETURNING s.revision, s.updated_at)\n"
	"INSERT INTO eventhub.events\n"
	"(organization_id, revision, version_id, processed_timestamp,\n"
	"    originated_timestamp, event_type, action, entity_id,\n"
	"    correlation_id, event_data, transaction_first_revision)\n"
	"SELECT $1, adv.revision, $2, adv.updated_at, $3, $4, $5, $6, $7, $8,\n"
	"COALESCE($9, adv.revision) FROM adv\n"
	"RETURNING revision"
};

/*
 * The same with a correlation id given: the statement first looks the id
 * up in the organization (prior): a replay advances nothing; and an id a
 * concurrent publisher committed meanwhile makes the insert do nothing.
 */
const EventhubStatement EventhubSqlPublishPublishOnce = {
	"publish.publish_once", 9, {TEXTOID, UUIDOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID, INT8OID},
	"WITH prior AS (\n"
	"    SELECT e.revision,\n"
	"    e.event_type OPERATOR(pg_catalog.=) $4 AND e.action OPERATOR(pg_catalog.=) $5\n"
	"      AND e.entity_id OPERATOR(pg_catalog.=) $6 AND e.event_data OPERATOR(pg_catalog.=) $8 AS same\n"
	"    FROM eventhub.events e\n"
	"    WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND e.correlation_id OPERATOR(pg_catalog.=) $7), adv AS (\n"
	"    UPDATE eventhub.organization_states s\n"
	"    SET revision = s.revision OPERATOR(pg_catalog.+) 1, version_id = $2,\n"
	"    updated_at = pg_catalog.clock_timestamp()\n"
	"    WHERE s.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND NOT EXISTS (SELECT FROM prior)\n"
	"    RETURNING s.revision, s.updated_at),\n"
	"ins AS (INSERT INTO eventhub.events\n"
	"    (organization_id, revision, version_id, processed_timestamp,\n"
	"        originated_timestamp, event_type, action, entity_id,\n"
	"        correlation_id, event_data, transaction_first_revision)\n"
	"    SELECT $1, adv.revision, $2, adv.updated_at, $3, $4, $5, $6, $7, $8,\n"
	"    COALESCE($9, adv.revision) FROM adv\n"
	"      ON CONFLICT (organization_id, correlation_id) DO NOTHING RETURNING revision)\n"
	"SELECT (SELECT revision FROM prior), (SELECT same FROM prior),\n"
	"(SELECT revision FROM adv), (SELECT revision FROM ins)"
};

const EventhubStatement EventhubSqlPublishOrganizationVersion = {
	"publish.organization_version", 1, {TEXTOID},
	"SELECT version_id FROM eventhub.organization_states\n"
	"WHERE organization_id OPERATOR(pg_catalog.=) $1"
};

const EventhubStatement EventhubSqlReadCursor = {
	"read.cursor", 2, {TEXTOID, INT8OID},
	"SELECT s.revision, s.version_id,\n"
	"(SELECT c.version_id FROM eventhub.events c\n"
	"    WHERE c.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND c.revision OPERATOR(pg_catalog.=) $2)\n"
	"FROM eventhub.organization_states s\n"
	"WHERE s.organization_id OPERATOR(pg_catalog.=) $1"
};

const EventhubStatement EventhubSqlReadEventsSince = {
	"read.events_since", 3, {TEXTOID, INT8OID, INT4OID},
	"SELECT e.* FROM eventhub.events e\n"
	"WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.revision OPERATOR(pg_catalog.>) $2\n"
	"ORDER BY e.revision LIMIT $3"
};

const EventhubStatement EventhubSqlReadTransactionsSince = {
	"read.transactions_since", 3, {TEXTOID, INT8OID, INT8OID},
	"SELECT e.organization_id, e.revision, e.version_id,\n"
	"e.processed_timestamp, e.originated_timestamp, e.event_type,\n"
	"e.action, e.entity_id, e.correlation_id, e.event_data,\n"
	"COALESCE(e.transaction_first_revision, e.revision)\n"
	"FROM eventhub.events e\n"
	"WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.revision OPERATOR(pg_catalog.>) $2\n"
	"ORDER BY e.revision LIMIT $3"
};

/*
 * wait.moved: of the organizations a session waits for, those whose head
 * is past the cursor (another revision; at a revision above 0, another
 * version when one is given; a cursor above 0 with no head at all), in the
 * caller's order; and, for each, whether the caller sees its head.  Runs
 * as the caller, under row-level security.
 */
const EventhubStatement EventhubSqlWaitMoved = {
	"wait.moved", 3, {TEXTARRAYOID, INT8ARRAYOID, UUIDARRAYOID},
	"SELECT pg_catalog.array_agg(c.org ORDER BY c.n) FILTER (\n"
	"  WHERE CASE WHEN s.organization_id IS NULL THEN c.rev OPERATOR(pg_catalog.>) 0\n"
	"    WHEN c.rev OPERATOR(pg_catalog.=) 0 THEN s.revision OPERATOR(pg_catalog.<>) 0\n"
	"    ELSE s.revision OPERATOR(pg_catalog.<>) c.rev\n"
	"      OR (c.ver IS NOT NULL\n"
	"          AND (s.version_id OPERATOR(pg_catalog.=) c.ver) IS NOT TRUE) END),\n"
	"  pg_catalog.array_agg(s.organization_id IS NOT NULL ORDER BY c.n)\n"
	"FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3))\n"
	"    WITH ORDINALITY AS c(org, rev, ver, n)\n"
	"LEFT JOIN eventhub.organization_states s\n"
	"  ON s.organization_id OPERATOR(pg_catalog.=) c.org"
};

const EventhubStatement EventhubSqlSnapshotHead = {
	"snapshot.head", 1, {TEXTOID},
	"SELECT s.revision, s.version_id, s.complete_after\n"
	"FROM eventhub.organization_states s\n"
	"WHERE s.organization_id OPERATOR(pg_catalog.=) $1"
};

const EventhubStatement EventhubSqlSnapshotDeclareFullState = {
	"snapshot.declare_full_state", 2, {TEXTOID, INT8OID},
	"UPDATE eventhub.organization_states s\n"
	"SET complete_after = $2\n"
	"WHERE s.organization_id OPERATOR(pg_catalog.=) $1\n"
	"RETURNING s.revision"
};

const EventhubStatement EventhubSqlSnapshotEntitiesFirst = {
	"snapshot.entities_first", 2, {TEXTOID, INT8OID},
	"SELECT e.event_type, e.entity_id, e.revision, e.version_id,\n"
	"e.action, e.event_data, e.originated_timestamp\n"
	"FROM eventhub.events e\n"
	"WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.revision OPERATOR(pg_catalog.>) $2\n"
	"ORDER BY e.event_type, e.entity_id, e.revision"
};

const EventhubStatement EventhubSqlSnapshotEntitiesNext = {
	"snapshot.entities_next", 4, {TEXTOID, INT8OID, TEXTOID, TEXTOID},
	"SELECT e.event_type, e.entity_id, e.revision, e.version_id,\n"
	"e.action, e.event_data, e.originated_timestamp\n"
	"FROM eventhub.events e\n"
	"WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"  AND e.revision OPERATOR(pg_catalog.>) $2\n"
	"  AND (e.event_type, e.entity_id) OPERATOR(pg_catalog.>) ($3, $4)\n"
	"ORDER BY e.event_type, e.entity_id, e.revision"
};

const EventhubStatement EventhubSqlReplicasHeadsExceeded = {
	"replicas.heads_exceeded", 2, {TEXTARRAYOID, INT8ARRAYOID},
	"SELECT c.org, c.rev, COALESCE(s.revision, 0)\n"
	"FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2))\n"
	"WITH ORDINALITY AS c(org, rev, n)\n"
	"LEFT JOIN eventhub.organization_states s\n"
	"  ON s.organization_id OPERATOR(pg_catalog.=) c.org\n"
	"WHERE c.rev OPERATOR(pg_catalog.>) COALESCE(s.revision, 0)\n"
	"ORDER BY c.n LIMIT 1"
};

/*
 * heartbeat(): registers or refreshes a replica.  A replica registered
 * before 0.2.0, by no role (owner 0), is claimed by the caller.
 */
const EventhubStatement EventhubSqlReplicasRegisterReplica = {
	"replicas.register_replica", 4, {TEXTOID, JSONBOID, TEXTOID, REGROLEOID},
	"INSERT INTO eventhub.replicas AS r\n"
	"(replica_id, labels, version, owner, started_at, last_heartbeat)\n"
	"VALUES ($1, COALESCE($2, '{}'), $3, $4, pg_catalog.now(), pg_catalog.now())\n"
	"  ON CONFLICT ON CONSTRAINT replicas_pkey DO UPDATE\n"
	"SET last_heartbeat = pg_catalog.now(),\n"
	"labels = COALESCE($2, r.labels),\n"
	"version = COALESCE($3, r.version),\n"
	"owner = CASE WHEN r.owner::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid\n"
	"  THEN $4 ELSE r.owner END\n"
	"RETURNING owner"
};

const EventhubStatement EventhubSqlReplicasRecordProgress = {
	"replicas.record_progress", 5, {TEXTOID, TEXTARRAYOID, INT8ARRAYOID, UUIDARRAYOID, TEXTARRAYOID},
	"WITH c AS MATERIALIZED (\n"
	"    SELECT c.org, c.rev, c.ver, c.hash, s.revision AS head\n"
	"    FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3),\n"
	"        pg_catalog.unnest($4), pg_catalog.unnest($5)) AS c(org, rev, ver, hash)\n"
	"    LEFT JOIN eventhub.organization_states s\n"
	"      ON s.organization_id OPERATOR(pg_catalog.=) c.org),\n"
	"up AS (\n"
	"    INSERT INTO eventhub.replica_progress AS p\n"
	"    (replica_id, organization_id, applied_revision, applied_version_id,\n"
	"        applied_at, config_hash, head_revision)\n"
	"    SELECT $1, c.org, c.rev, c.ver, pg_catalog.now(), c.hash, c.head FROM c\n"
	"      ON CONFLICT ON CONSTRAINT replica_progress_pkey DO UPDATE\n"
	"    SET applied_at = CASE\n"
	"      WHEN p.applied_revision OPERATOR(pg_catalog.=) excluded.applied_revision\n"
	"      AND (p.applied_version_id OPERATOR(pg_catalog.=) excluded.applied_version_id\n"
	"          OR p.applied_version_id IS NULL OR excluded.applied_version_id IS NULL)\n"
	"      THEN p.applied_at ELSE excluded.applied_at END,\n"
	"    applied_version_id = CASE\n"
	"      WHEN p.applied_revision OPERATOR(pg_catalog.=) excluded.applied_revision\n"
	"      THEN COALESCE(excluded.applied_version_id, p.applied_version_id)\n"
	"      ELSE excluded.applied_version_id END,\n"
	"    applied_revision = excluded.applied_revision,\n"
	"    config_hash = excluded.config_hash,\n"
	"    head_revision = excluded.head_revision)\n"
	"SELECT c.org, c.rev, c.hash FROM c\n"
	"LEFT JOIN eventhub.replica_progress o\n"
	"  ON o.replica_id OPERATOR(pg_catalog.=) $1\n"
	"  AND o.organization_id OPERATOR(pg_catalog.=) c.org\n"
	"WHERE c.hash IS NOT NULL AND (o.replica_id IS NULL\n"
	"      OR o.applied_revision OPERATOR(pg_catalog.<>) c.rev\n"
	"      OR o.config_hash IS NULL\n"
	"      OR o.config_hash OPERATOR(pg_catalog.<>) c.hash)"
};

const EventhubStatement EventhubSqlReplicasRecordConfigSplits = {
	"replicas.record_config_splits", 4, {TEXTOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID},
	"INSERT INTO eventhub.config_splits AS x (organization_id, revision)\n"
	"SELECT c.org, c.rev\n"
	"FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3),\n"
	"    pg_catalog.unnest($4)) AS c(org, rev, hash)\n"
	"WHERE EXISTS (SELECT FROM eventhub.replica_progress q\n"
	"    WHERE q.organization_id OPERATOR(pg_catalog.=) c.org\n"
	"      AND q.applied_revision OPERATOR(pg_catalog.=) c.rev\n"
	"      AND q.replica_id OPERATOR(pg_catalog.<>) $1\n"
	"      AND q.config_hash OPERATOR(pg_catalog.<>) c.hash)\n"
	"ORDER BY c.org, c.rev\n"
	"  ON CONFLICT ON CONSTRAINT config_splits_pkey\n"
	"DO UPDATE SET revision = excluded.revision"
};

const EventhubStatement EventhubSqlReplicasDeleteReplica = {
	"replicas.delete_replica", 1, {TEXTOID},
	"DELETE FROM eventhub.replicas\n"
	"WHERE replica_id OPERATOR(pg_catalog.=) $1\n"
	"RETURNING owner"
};

const EventhubStatement EventhubSqlReplicasForgetSettledSplits = {
	"replicas.forget_settled_splits", 0, {InvalidOid},
	"DELETE FROM eventhub.config_splits x USING (\n"
	"    SELECT y.organization_id, y.revision, y.xmin AS seen\n"
	"    FROM eventhub.config_splits y WHERE NOT EXISTS (\n"
	"        SELECT FROM eventhub.replica_progress a\n"
	"        JOIN eventhub.replica_progress b\n"
	"          ON b.organization_id OPERATOR(pg_catalog.=) a.organization_id\n"
	"          AND b.applied_revision OPERATOR(pg_catalog.=) a.applied_revision\n"
	"        WHERE a.organization_id OPERATOR(pg_catalog.=) y.organization_id\n"
	"          AND a.applied_revision OPERATOR(pg_catalog.=) y.revision\n"
	"          AND b.config_hash OPERATOR(pg_catalog.<>) a.config_hash)\n"
	"    ORDER BY y.organization_id, y.revision) s\n"
	"WHERE x.organization_id OPERATOR(pg_catalog.=) s.organization_id\n"
	"  AND x.revision OPERATOR(pg_catalog.=) s.revision\n"
	"  AND x.xmin OPERATOR(pg_catalog.=) s.seen"
};

const EventhubStatement EventhubSqlWorkerStalledSessions = {
	"worker.stalled_sessions", 1, {OIDOID},
	"SELECT pid, backend_start, backend_xmin::pg_catalog.text,\n"
	"usename, application_name, client_addr::pg_catalog.text\n"
	"FROM pg_catalog.pg_stat_activity\n"
	"WHERE datid OPERATOR(pg_catalog.=) $1\n"
	"  AND backend_type OPERATOR(pg_catalog.=) 'client backend'\n"
	"  AND state OPERATOR(pg_catalog.=) 'idle'\n"
	"  AND wait_event_type OPERATOR(pg_catalog.=) 'Client'\n"
	"  AND wait_event OPERATOR(pg_catalog.=) 'ClientWrite'"
};

const EventhubStatement EventhubSqlWorkerTerminateSession = {
	"worker.terminate_session", 1, {INT4OID},
	"SELECT pg_catalog.pg_terminate_backend($1)"
};

/*
 * eventhub.metrics(): one statement, as the owner.  $1: live replicas have a heartbeat at or
 * after it; $2, $3: retention's limits (expired before $2, forced before
 * $3); $4: access control is on.  Every name is qualified, operators
 * included.
 *
 * rep: every replica, live or not.  behind: the progress rows the caller
 * sees that were behind their organization's head at their last heartbeat
 * (the partial index replica_progress_behind_idx) and still are, with their
 * lag behind the head of now (one probe of organization_states each, OFFSET
 * 0: not a hash join that would read every organization).  aged: those with the age of the oldest
 * event not applied.  split: the candidate (organization, revision) pairs
 * of config_splits; at_split: the progress rows there, through the index
 * on (organization_id, applied_revision) (OFFSET 0: not flattened into a
 * join that would hash every row); votes: how many live replicas report
 * each hash there; winner: the hash reported by more than any other;
 * mismatched: replicas with a visible row at a pair where live replicas
 * report two hashes or more (a pair that settled, or where only stale
 * replicas differ, counts for nothing), whose hash is not the winner.
 * vis: the replicas the caller sees.
 *
 * One row per visible replica (none: one row of NULLs), each carrying the
 * global figures.
 */

/*
 * standby_waker.heads: every organization's head, read by the standby waker
 * after replay moved on.
 */
const EventhubStatement EventhubSqlStandbyWakerHeads = {
	"standby_waker.heads", 0, {InvalidOid},
	"SELECT organization_id, revision, version_id FROM eventhub.organization_states"
};

const EventhubStatement EventhubSqlMetricsReportReadTables = {
	"metrics_report.read_tables", 4, {TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID},
	"WITH rep AS MATERIALIZED (\n"
	"    SELECT r.replica_id, r.owner, r.last_heartbeat OPERATOR(pg_catalog.>=) $1 AS live,\n"
	"    GREATEST(0, pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) r.last_heartbeat)) AS heartbeat_age\n"
	"    FROM eventhub.replicas r),\n"
	"behind AS MATERIALIZED (\n"
	"    SELECT p.replica_id, p.organization_id, p.applied_revision, s.updated_at,\n"
	"    s.revision OPERATOR(pg_catalog.-) p.applied_revision AS lag\n"
	"    FROM eventhub.replica_progress p CROSS JOIN LATERAL (\n"
	"        SELECT s.revision, s.updated_at FROM eventhub.organization_states s\n"
	"        WHERE s.organization_id OPERATOR(pg_catalog.=) p.organization_id OFFSET 0) s\n"
	"    WHERE p.applied_revision OPERATOR(pg_catalog.<) p.head_revision\n"
	"      AND s.revision OPERATOR(pg_catalog.>) p.applied_revision\n"
	"      AND (NOT $4 OR eventhub.has_organization_privilege(p.organization_id, 'read'))),\n"
	"aged AS MATERIALIZED (\n"
	"    SELECT b.replica_id, b.organization_id, b.applied_revision, b.lag, rep.live,\n"
	"    pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) COALESCE(\n"
	"            (SELECT e.processed_timestamp FROM eventhub.events e\n"
	"                WHERE e.organization_id OPERATOR(pg_catalog.=) b.organization_id\n"
	"                  AND e.revision OPERATOR(pg_catalog.>) b.applied_revision\n"
	"                ORDER BY e.revision LIMIT 1), b.updated_at)) AS age\n"
	"    FROM behind b JOIN rep ON rep.replica_id OPERATOR(pg_catalog.=) b.replica_id),\n"
	"split AS MATERIALIZED (\n"
	"    SELECT x.organization_id, x.revision AS applied_revision FROM eventhub.config_splits x),\n"
	"at_split AS MATERIALIZED (\n"
	"    SELECT q.* FROM split x CROSS JOIN LATERAL (\n"
	"        SELECT q.replica_id, q.organization_id, q.applied_revision, q.config_hash\n"
	"        FROM eventhub.replica_progress q\n"
	"        WHERE q.organization_id OPERATOR(pg_catalog.=) x.organization_id AND q.applied_revision OPERATOR(pg_catalog.=) x.applied_revision\n"
	"          AND q.config_hash IS NOT NULL OFFSET 0) q),\n"
	"votes AS MATERIALIZED (\n"
	"    SELECT q.organization_id, q.applied_revision, q.config_hash, pg_catalog.count(*) AS n\n"
	"    FROM at_split q JOIN rep ON rep.replica_id OPERATOR(pg_catalog.=) q.replica_id\n"
	"    WHERE rep.live\n"
	"    GROUP BY q.organization_id, q.applied_revision, q.config_hash),\n"
	"winner AS (\n"
	"    SELECT v.organization_id, v.applied_revision, v.config_hash FROM votes v\n"
	"    WHERE v.n OPERATOR(pg_catalog.>) ALL (SELECT w.n FROM votes w\n"
	"        WHERE w.organization_id OPERATOR(pg_catalog.=) v.organization_id AND w.applied_revision OPERATOR(pg_catalog.=) v.applied_revision\n"
	"          AND w.config_hash OPERATOR(pg_catalog.<>) v.config_hash)),\n"
	"mismatched AS MATERIALIZED (\n"
	"    SELECT DISTINCT q.replica_id FROM at_split q\n"
	"    WHERE (NOT $4 OR eventhub.has_organization_privilege(q.organization_id, 'read'))\n"
	"      AND (SELECT pg_catalog.count(*) FROM votes v WHERE v.organization_id OPERATOR(pg_catalog.=) q.organization_id\n"
	"          AND v.applied_revision OPERATOR(pg_catalog.=) q.applied_revision) OPERATOR(pg_catalog.>) 1\n"
	"      AND NOT EXISTS (SELECT FROM winner w WHERE w.organization_id OPERATOR(pg_catalog.=) q.organization_id\n"
	"          AND w.applied_revision OPERATOR(pg_catalog.=) q.applied_revision AND w.config_hash OPERATOR(pg_catalog.=) q.config_hash)),\n"
	"vis AS (\n"
	"    SELECT rep.replica_id, rep.live, rep.heartbeat_age FROM rep\n"
	"    WHERE NOT $4 OR CASE\n"
	"      WHEN EXISTS (SELECT FROM eventhub.replica_progress p WHERE p.replica_id OPERATOR(pg_catalog.=) rep.replica_id)\n"
	"      THEN EXISTS (SELECT FROM eventhub.replica_progress p WHERE p.replica_id OPERATOR(pg_catalog.=) rep.replica_id\n"
	"          AND eventhub.has_organization_privilege(p.organization_id, 'read'))\n"
	"      ELSE eventhub.replica_visible(rep.owner) END),\n"
	"per_replica AS (\n"
	"    SELECT a.replica_id, pg_catalog.sum(a.lag) AS lag, pg_catalog.max(a.age) AS age\n"
	"    FROM aged a GROUP BY a.replica_id)\n"
	"SELECT v.replica_id, v.live, v.heartbeat_age,\n"
	"COALESCE(l.lag, 0)::pg_catalog.float8, COALESCE(l.age, 0),\n"
	"EXISTS (SELECT FROM mismatched m WHERE m.replica_id OPERATOR(pg_catalog.=) v.replica_id),\n"
	"g.organizations::pg_catalog.float8, g.behind::pg_catalog.float8, g.lag_max::pg_catalog.float8,\n"
	"g.oldest, g.held_back::pg_catalog.float8, g.kept::pg_catalog.float8\n"
	"FROM (SELECT\n"
	"    (SELECT pg_catalog.count(*) FROM eventhub.organization_states s\n"
	"        WHERE NOT $4 OR eventhub.has_organization_privilege(s.organization_id, 'read')) AS organizations,\n"
	"    (SELECT pg_catalog.count(DISTINCT a.organization_id) FROM aged a WHERE a.live) AS behind,\n"
	"    (SELECT COALESCE(pg_catalog.max(a.lag), 0) FROM aged a WHERE a.live) AS lag_max,\n"
	"    (SELECT COALESCE(pg_catalog.max(a.age), 0) FROM aged a WHERE a.live) AS oldest,\n"
	"    (SELECT COALESCE(pg_catalog.sum((SELECT pg_catalog.count(*) FROM eventhub.events e\n"
	"                    WHERE e.organization_id OPERATOR(pg_catalog.=) o.organization_id AND e.revision OPERATOR(pg_catalog.>) o.applied\n"
	"                      AND e.processed_timestamp OPERATOR(pg_catalog.<) $2\n"
	"                      AND e.processed_timestamp OPERATOR(pg_catalog.>=) $3)), 0)\n"
	"        FROM (SELECT a.organization_id, pg_catalog.min(a.applied_revision) AS applied\n"
	"            FROM aged a WHERE a.live GROUP BY a.organization_id) o) AS held_back,\n"
	"    (SELECT GREATEST(c.reltuples, 0) FROM pg_catalog.pg_class c\n"
	"        WHERE c.oid OPERATOR(pg_catalog.=) 'eventhub.events'::pg_catalog.regclass) AS kept) g\n"
	"LEFT JOIN vis v ON true\n"
	"LEFT JOIN per_replica l ON l.replica_id OPERATOR(pg_catalog.=) v.replica_id\n"
	"ORDER BY v.replica_id"
};

