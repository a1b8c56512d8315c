/*
 * statements_retention.c
 *	  The statements that delete events: retention's batches
 *	  (EventhubDeleteExpiredBatch) and cleanup_events(), each with
 *	  compaction on and off.
 *
 * With compaction on, an event is removable when it is superseded (a newer
 * event of its entity exists), or a tombstone with nothing older of its
 * entity left, or at or below its organization's declared full state
 * (complete_after).
 *
 * With compaction off, removing an event "loses" an entity of a complete
 * organization when the event is its entity's latest and not a tombstone,
 * or a tombstone with older events of its entity (which it may outlive;
 * the statement cannot tell), and above the organization's complete_after;
 * the organization must then be marked incomplete first.  An organization
 * already marked (complete_after NULL) loses nothing more.  The marking
 * (marked) locks the organizations' rows with SKIP LOCKED first, so it
 * never waits for a publisher (who holds its organization's row until it
 * commits); it then updates only rows it holds.  A deleter removes an
 * organization's lost events only when the organization is marked here or
 * was already: an organization it could not lock keeps them until a later
 * batch, cycle or call.  The marking commits with the deletes, or neither
 * does.  An organization already incomplete in the statement's snapshot
 * is not locked (so that its publishers never wait for retention again);
 * a declare_full_state() of it that commits while the statement runs can
 * therefore be followed by the removal of a latest event above the
 * declared revision.  Such an event has outlived eventhub.retention, while
 * the recipe publishes the full state just before declaring it, so only a
 * retention shorter than that recipe meets this; the next removal of a
 * latest event marks the organization again.
 *
 * A batch of a retention pass ($1 expired before, $2 batch size, $3
 * forced before, $4 live since, $5 and $6 where the walk resumes, $7 the
 * walk's length): walk: the next $7 events in order, with only what the
 * conditions read (e, so that they apply to it as to a row of events).
 * picked: the first $2 of them that may go, with, when compaction is off,
 * whether removing each loses an entity; the conditions run on a row only
 * when the walk gets to it (the subquery with its LIMIT is not flattened),
 * so a batch whose first rows may all go looks at no more than it
 * deletes.  marked (compaction off): the organizations marked incomplete.
 * gone: the rows deleted, locked with SKIP LOCKED.  ends: the walk's
 * length and last row, read (a second, cheap walk without the conditions,
 * in the same snapshot) only when fewer than $2 were picked.
 *
 * cleanup_events' statements delete what their condition selects and
 * return the number of events deleted and the newest processed_timestamp
 * among them.
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "statements.h"

const EventhubStatement EventhubSqlRetentionRemoveStaleReplicas = {
	"retention.remove_stale_replicas", 1, {TIMESTAMPTZOID},
	"DELETE FROM eventhub.replicas WHERE last_heartbeat OPERATOR(pg_catalog.<) $1"
};

const EventhubStatement EventhubSqlRetentionDeleteExpiredBatch = {
	"retention.delete_expired_batch", 7, {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIDOID, INT8OID},
	"WITH picked AS MATERIALIZED (\n"
	"    SELECT e.tid, e.processed_timestamp AS ts, e.organization_id AS org, false\n"
	"    AS lost\n"
	"    FROM (SELECT e.ctid AS tid, e.processed_timestamp, e.organization_id, e.event_type,\n"
	"        e.entity_id, e.revision, e.action\n"
	"        FROM eventhub.events e\n"
	"        WHERE e.processed_timestamp OPERATOR(pg_catalog.>=) $5\n"
	"          AND e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"          AND ROW(e.processed_timestamp, e.ctid) OPERATOR(pg_catalog.>) ROW($5, $6)\n"
	"        ORDER BY e.processed_timestamp, e.ctid LIMIT $7) e\n"
	"    WHERE (e.processed_timestamp OPERATOR(pg_catalog.<) $3 OR NOT EXISTS (\n"
	"            SELECT FROM eventhub.replica_progress p\n"
	"            JOIN eventhub.replicas r ON r.replica_id OPERATOR(pg_catalog.=) p.replica_id\n"
	"            WHERE p.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND p.applied_revision OPERATOR(pg_catalog.<=) e.revision\n"
	"              AND r.last_heartbeat OPERATOR(pg_catalog.>=) $4))\n"
	"      AND (EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"            n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"              AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"              AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"          OR (e.action OPERATOR(pg_catalog.=) 'DELETE' AND NOT EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"          OR e.revision OPERATOR(pg_catalog.<=) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 0))\n"
	"    LIMIT $2),\n"
	"ends AS MATERIALIZED (\n"
	"    SELECT w.ts, w.tid, pg_catalog.count(*) OVER () AS n\n"
	"    FROM (SELECT e.processed_timestamp AS ts, e.ctid AS tid\n"
	"        FROM eventhub.events e\n"
	"        WHERE e.processed_timestamp OPERATOR(pg_catalog.>=) $5\n"
	"          AND e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"          AND ROW(e.processed_timestamp, e.ctid) OPERATOR(pg_catalog.>) ROW($5, $6)\n"
	"        ORDER BY e.processed_timestamp, e.ctid LIMIT $7) w\n"
	"    ORDER BY w.ts DESC, w.tid DESC LIMIT 1),\n"
	"gone AS (DELETE FROM eventhub.events e WHERE e.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"            SELECT l.ctid FROM eventhub.events l WHERE l.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"                    SELECT c.tid FROM picked c WHERE true))\n"
	"            FOR UPDATE OF l SKIP LOCKED))\n"
	"    RETURNING e.ctid)\n"
	"SELECT (SELECT pg_catalog.count(*) FROM gone), k.n, l.ts, l.tid,\n"
	"CASE WHEN k.n OPERATOR(pg_catalog.<) $2 THEN (SELECT x.n FROM ends x) END,\n"
	"CASE WHEN k.n OPERATOR(pg_catalog.<) $2 THEN (SELECT x.ts FROM ends x) END,\n"
	"CASE WHEN k.n OPERATOR(pg_catalog.<) $2 THEN (SELECT x.tid FROM ends x) END\n"
	"FROM (SELECT pg_catalog.count(*) AS n FROM picked) k\n"
	"LEFT JOIN (SELECT c.ts, c.tid FROM picked c ORDER BY c.ts DESC, c.tid DESC LIMIT 1) l ON true"
};

const EventhubStatement EventhubSqlRetentionDeleteExpiredBatchNoCompaction = {
	"retention.delete_expired_batch_no_compaction", 7, {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIDOID, INT8OID},
	"WITH picked AS MATERIALIZED (\n"
	"    SELECT e.tid, e.processed_timestamp AS ts, e.organization_id AS org, (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"            n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"              AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"              AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"          AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"          AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))\n"
	"    AS lost\n"
	"    FROM (SELECT e.ctid AS tid, e.processed_timestamp, e.organization_id, e.event_type,\n"
	"        e.entity_id, e.revision, e.action\n"
	"        FROM eventhub.events e\n"
	"        WHERE e.processed_timestamp OPERATOR(pg_catalog.>=) $5\n"
	"          AND e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"          AND ROW(e.processed_timestamp, e.ctid) OPERATOR(pg_catalog.>) ROW($5, $6)\n"
	"        ORDER BY e.processed_timestamp, e.ctid LIMIT $7) e\n"
	"    WHERE (e.processed_timestamp OPERATOR(pg_catalog.<) $3 OR NOT EXISTS (\n"
	"            SELECT FROM eventhub.replica_progress p\n"
	"            JOIN eventhub.replicas r ON r.replica_id OPERATOR(pg_catalog.=) p.replica_id\n"
	"            WHERE p.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND p.applied_revision OPERATOR(pg_catalog.<=) e.revision\n"
	"              AND r.last_heartbeat OPERATOR(pg_catalog.>=) $4))\n"
	"    LIMIT $2),\n"
	"ends AS MATERIALIZED (\n"
	"    SELECT w.ts, w.tid, pg_catalog.count(*) OVER () AS n\n"
	"    FROM (SELECT e.processed_timestamp AS ts, e.ctid AS tid\n"
	"        FROM eventhub.events e\n"
	"        WHERE e.processed_timestamp OPERATOR(pg_catalog.>=) $5\n"
	"          AND e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"          AND ROW(e.processed_timestamp, e.ctid) OPERATOR(pg_catalog.>) ROW($5, $6)\n"
	"        ORDER BY e.processed_timestamp, e.ctid LIMIT $7) w\n"
	"    ORDER BY w.ts DESC, w.tid DESC LIMIT 1),\n"
	"marked AS (UPDATE eventhub.organization_states st SET complete_after = NULL\n"
	"    WHERE st.organization_id OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"            SELECT lk.organization_id FROM eventhub.organization_states lk\n"
	"            WHERE lk.organization_id IN (SELECT c.org FROM picked c WHERE c.lost) AND lk.complete_after IS NOT NULL\n"
	"            FOR NO KEY UPDATE OF lk SKIP LOCKED))\n"
	"    RETURNING st.organization_id),\n"
	"gone AS (DELETE FROM eventhub.events e WHERE e.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"            SELECT l.ctid FROM eventhub.events l WHERE l.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"                    SELECT c.tid FROM picked c WHERE true\n"
	"                      AND (NOT c.lost OR c.org IN (SELECT m.organization_id FROM marked m))))\n"
	"            FOR UPDATE OF l SKIP LOCKED))\n"
	"    RETURNING e.ctid)\n"
	"SELECT (SELECT pg_catalog.count(*) FROM gone), k.n, l.ts, l.tid,\n"
	"CASE WHEN k.n OPERATOR(pg_catalog.<) $2 THEN (SELECT x.n FROM ends x) END,\n"
	"CASE WHEN k.n OPERATOR(pg_catalog.<) $2 THEN (SELECT x.ts FROM ends x) END,\n"
	"CASE WHEN k.n OPERATOR(pg_catalog.<) $2 THEN (SELECT x.tid FROM ends x) END\n"
	"FROM (SELECT pg_catalog.count(*) AS n FROM picked) k\n"
	"LEFT JOIN (SELECT c.ts, c.tid FROM picked c ORDER BY c.ts DESC, c.tid DESC LIMIT 1) l ON true"
};

const EventhubStatement EventhubSqlRetentionCleanupBefore = {
	"retention.cleanup_before", 1, {TIMESTAMPTZOID},
	"WITH gone AS (DELETE FROM eventhub.events e WHERE e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"      AND (EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"            n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"              AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"              AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"          OR (e.action OPERATOR(pg_catalog.=) 'DELETE' AND NOT EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"          OR e.revision OPERATOR(pg_catalog.<=) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 0))\n"
	"    RETURNING e.processed_timestamp)\n"
	"SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"
};

const EventhubStatement EventhubSqlRetentionCleanupBeforeNoCompaction = {
	"retention.cleanup_before_no_compaction", 1, {TIMESTAMPTZOID},
	"WITH marked AS (UPDATE eventhub.organization_states st SET complete_after = NULL\n"
	"    WHERE st.organization_id OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"            SELECT lk.organization_id FROM eventhub.organization_states lk\n"
	"            WHERE lk.organization_id IN (SELECT e.organization_id FROM eventhub.events e\n"
	"                WHERE e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"                  AND (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"                        n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                          AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                          AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                          AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"                      AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                            o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                              AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                              AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                              AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"                      AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                            WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))) AND lk.complete_after IS NOT NULL\n"
	"            FOR NO KEY UPDATE OF lk SKIP LOCKED))\n"
	"    RETURNING st.organization_id),\n"
	"gone AS (DELETE FROM eventhub.events e WHERE e.processed_timestamp OPERATOR(pg_catalog.<) $1\n"
	"      AND (NOT (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"                n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"              AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                    o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                      AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                      AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                      AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"              AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                    WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))\n"
	"          OR e.organization_id IN (SELECT m.organization_id FROM marked m))\n"
	"    RETURNING e.processed_timestamp)\n"
	"SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"
};

const EventhubStatement EventhubSqlRetentionCleanupRange = {
	"retention.cleanup_range", 3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	"WITH gone AS (DELETE FROM eventhub.events e WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND e.processed_timestamp OPERATOR(pg_catalog.>=) $2\n"
	"      AND e.processed_timestamp OPERATOR(pg_catalog.<) $3\n"
	"      AND (EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"            n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"              AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"              AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"          OR (e.action OPERATOR(pg_catalog.=) 'DELETE' AND NOT EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"          OR e.revision OPERATOR(pg_catalog.<=) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 0))\n"
	"    RETURNING e.processed_timestamp)\n"
	"SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"
};

const EventhubStatement EventhubSqlRetentionCleanupRangeNoCompaction = {
	"retention.cleanup_range_no_compaction", 3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	"WITH marked AS (UPDATE eventhub.organization_states st SET complete_after = NULL\n"
	"    WHERE st.organization_id OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"            SELECT lk.organization_id FROM eventhub.organization_states lk\n"
	"            WHERE lk.organization_id IN (SELECT e.organization_id FROM eventhub.events e\n"
	"                WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"                  AND e.processed_timestamp OPERATOR(pg_catalog.>=) $2\n"
	"                  AND e.processed_timestamp OPERATOR(pg_catalog.<) $3\n"
	"                  AND (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"                        n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                          AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                          AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                          AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"                      AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                            o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                              AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                              AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                              AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"                      AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                            WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))) AND lk.complete_after IS NOT NULL\n"
	"            FOR NO KEY UPDATE OF lk SKIP LOCKED))\n"
	"    RETURNING st.organization_id),\n"
	"gone AS (DELETE FROM eventhub.events e WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND e.processed_timestamp OPERATOR(pg_catalog.>=) $2\n"
	"      AND e.processed_timestamp OPERATOR(pg_catalog.<) $3\n"
	"      AND (NOT (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"                n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"              AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                    o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                      AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                      AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                      AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"              AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                    WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))\n"
	"          OR e.organization_id IN (SELECT m.organization_id FROM marked m))\n"
	"    RETURNING e.processed_timestamp)\n"
	"SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"
};

const EventhubStatement EventhubSqlRetentionCleanupBeforeRevision = {
	"retention.cleanup_before_revision", 2, {TEXTOID, INT8OID},
	"WITH gone AS (DELETE FROM eventhub.events e WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND e.revision OPERATOR(pg_catalog.<) $2\n"
	"      AND (EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"            n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"              AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"              AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"              AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"          OR (e.action OPERATOR(pg_catalog.=) 'DELETE' AND NOT EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"          OR e.revision OPERATOR(pg_catalog.<=) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 0))\n"
	"    RETURNING e.processed_timestamp)\n"
	"SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"
};

const EventhubStatement EventhubSqlRetentionCleanupBeforeRevisionNoCompaction = {
	"retention.cleanup_before_revision_no_compaction", 2, {TEXTOID, INT8OID},
	"WITH marked AS (UPDATE eventhub.organization_states st SET complete_after = NULL\n"
	"    WHERE st.organization_id OPERATOR(pg_catalog.=) ANY (ARRAY(\n"
	"            SELECT lk.organization_id FROM eventhub.organization_states lk\n"
	"            WHERE lk.organization_id IN (SELECT e.organization_id FROM eventhub.events e\n"
	"                WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"                  AND e.revision OPERATOR(pg_catalog.<) $2\n"
	"                  AND (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"                        n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                          AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                          AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                          AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"                      AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                            o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                              AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                              AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                              AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"                      AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                            WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))) AND lk.complete_after IS NOT NULL\n"
	"            FOR NO KEY UPDATE OF lk SKIP LOCKED))\n"
	"    RETURNING st.organization_id),\n"
	"gone AS (DELETE FROM eventhub.events e WHERE e.organization_id OPERATOR(pg_catalog.=) $1\n"
	"      AND e.revision OPERATOR(pg_catalog.<) $2\n"
	"      AND (NOT (NOT EXISTS (SELECT FROM eventhub.events n WHERE\n"
	"                n.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                  AND n.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                  AND n.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                  AND n.revision OPERATOR(pg_catalog.>) e.revision)\n"
	"              AND (e.action OPERATOR(pg_catalog.<>) 'DELETE' OR EXISTS (SELECT FROM eventhub.events o WHERE\n"
	"                    o.organization_id OPERATOR(pg_catalog.=) e.organization_id\n"
	"                      AND o.event_type OPERATOR(pg_catalog.=) e.event_type\n"
	"                      AND o.entity_id OPERATOR(pg_catalog.=) e.entity_id\n"
	"                      AND o.revision OPERATOR(pg_catalog.<) e.revision))\n"
	"              AND e.revision OPERATOR(pg_catalog.>) COALESCE((SELECT s.complete_after FROM eventhub.organization_states s\n"
	"                    WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 9223372036854775807))\n"
	"          OR e.organization_id IN (SELECT m.organization_id FROM marked m))\n"
	"    RETURNING e.processed_timestamp)\n"
	"SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"
};
