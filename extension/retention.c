/*
 * retention.c
 *	  Deleting expired events: eventhub.run_maintenance(), the batch delete
 *	  the background worker shares with it, and eventhub.cleanup_events().
 *
 * Retention deletes events only; organization_states keeps every head
 * revision and version, and eventhub.events_since() turns any event a reader
 * missed into the resync error.  Deletes lock only the event rows they
 * remove, which no publisher ever locks, so publishers do not wait on them.
 *
 * Compaction (eventhub.compaction; off by default until the TAP tests that
 * expect every expired event to go run with it off): every deleter adds
 * REMOVABLE_SQL to its own condition, so that it never removes the latest
 * event of a live entity (an entity is its organization's (event_type,
 * entity_id)), however old.  Superseded events go, and so does a tombstone
 * (a DELETE) once nothing older of its entity is left: a tombstone that went
 * before an older CREATE would bring the entity back in snapshots.  The
 * statement's snapshot still sees the older events it deletes, so such a
 * tombstone goes one batch or cycle later.  Events at or below the
 * organization's complete_after (declare_full_state) are not part of any
 * snapshot and go too.
 *
 * With compaction off every expired event goes, as before 0.4.0.  Not done
 * yet (issue 18, design 1.3): marking an organization that lost an entity's
 * latest event incomplete (complete_after NULL).  Doing it in the deleting
 * statement made retention wait for the organization's publishers (the
 * UPDATE of organization_states waits on their row lock), which
 * maintenance_concurrency.spec and publish_cleanup.spec forbid.
 *
 * The background worker runs these queries as a superuser, so like
 * publish_event's they name everything with its schema, operators included:
 * nothing in them resolves through a search_path, whatever a database owner
 * sets with ALTER DATABASE ... SET.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "eventhub.h"

/*
 * The other events of event e's entity (e is the alias of the row being
 * deleted).
 */
#define SAME_ENTITY(alias) \
	" " alias ".organization_id OPERATOR(pg_catalog.=) e.organization_id" \
	" AND " alias ".event_type OPERATOR(pg_catalog.=) e.event_type" \
	" AND " alias ".entity_id OPERATOR(pg_catalog.=) e.entity_id"
#define NEWER_EXISTS \
	"EXISTS (SELECT FROM eventhub.events n WHERE" SAME_ENTITY("n") \
	" AND n.revision OPERATOR(pg_catalog.>) e.revision)"
#define OLDER_EXISTS \
	"EXISTS (SELECT FROM eventhub.events o WHERE" SAME_ENTITY("o") \
	" AND o.revision OPERATOR(pg_catalog.<) e.revision)"

/*
 * removable(e), with compaction on: e is superseded, or a tombstone with
 * nothing older of its entity left, or at or below its organization's
 * declared full state.  Appended to a deleter's WHERE clause.
 */
#define REMOVABLE_SQL \
	" AND (" NEWER_EXISTS \
	" OR (e.action OPERATOR(pg_catalog.=) 'DELETE' AND NOT " OLDER_EXISTS ")" \
	" OR e.revision OPERATOR(pg_catalog.<=) COALESCE((SELECT s.complete_after" \
	" FROM eventhub.organization_states s" \
	" WHERE s.organization_id OPERATOR(pg_catalog.=) e.organization_id), 0))"

/*
 * Wraps a deleter (DELETE FROM eventhub.events e ...): the number of events
 * it deleted and the newest processed_timestamp among them.
 */
#define COUNT_GONE(delete_sql) \
	"WITH gone AS (" delete_sql " RETURNING e.processed_timestamp)" \
	" SELECT pg_catalog.count(*), pg_catalog.max(processed_timestamp) FROM gone"

PG_FUNCTION_INFO_V1(run_maintenance);
PG_FUNCTION_INFO_V1(cleanup_events_before);
PG_FUNCTION_INFO_V1(cleanup_events_range);
PG_FUNCTION_INFO_V1(cleanup_events_before_revision);

/*
 * Fills *r with the instants that decide, as of now, which events retention
 * deletes.
 */
void
EventhubRetentionNow(EventhubRetention *r)
{
	TimestampTz now = GetCurrentTimestamp();

	r->expired_before = now - (int64) eventhub_retention * USECS_PER_SEC;
	if (eventhub_retain_until_applied)
		r->forced_before = now - (int64) eventhub_max_retention * USECS_PER_SEC;
	else
		TIMESTAMP_NOEND(r->forced_before);
	r->live_since = now - (int64) eventhub_replica_ttl * USECS_PER_SEC;
	TIMESTAMP_NOBEGIN(r->resume_from);
}

/*
 * Deletes at most batch_size expired events, oldest first, and returns how
 * many it deleted.  An expired event stays while a live replica that
 * follows its organization has not applied it, or has applied it last (so
 * that the replica can still check, after a failover, that the event at its
 * cursor has the version it applied), unless it is older than
 * eventhub.max_retention.  Each batch starts where the previous one of the
 * same cycle ended (r->resume_from), so that it does not walk again over the
 * index entries of the rows already deleted, which vacuum has not removed
 * yet: every batch costs the same, however large the backlog.  The caller
 * has connected to SPI and set up a transaction.  Rows another deleter holds
 * are skipped, not waited for.
 */
int64
EventhubDeleteExpiredBatch(EventhubRetention *r, int batch_size)
{
	static EventhubPlan keep_plan;
	static EventhubPlan all_plan;
	Oid			argtypes[5] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[5];
	int64		deleted;
	bool		isnull;
	int			ret;

#define EXPIRED_BATCH(removable) \
	"DELETE FROM eventhub.events e WHERE e.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT e.ctid FROM eventhub.events e" \
	"  WHERE e.processed_timestamp OPERATOR(pg_catalog.>=) $5" \
	"  AND e.processed_timestamp OPERATOR(pg_catalog.<) $1" \
	"  AND (e.processed_timestamp OPERATOR(pg_catalog.<) $3 OR NOT EXISTS (" \
	"   SELECT FROM eventhub.replica_progress p" \
	"   JOIN eventhub.replicas r ON r.replica_id OPERATOR(pg_catalog.=) p.replica_id" \
	"   WHERE p.organization_id OPERATOR(pg_catalog.=) e.organization_id" \
	"   AND p.applied_revision OPERATOR(pg_catalog.<=) e.revision" \
	"   AND r.last_heartbeat OPERATOR(pg_catalog.>=) $4))" \
	removable \
	"  ORDER BY e.processed_timestamp LIMIT $2" \
	"  FOR UPDATE OF e SKIP LOCKED))"

	values[0] = TimestampTzGetDatum(r->expired_before);
	values[1] = Int32GetDatum(batch_size);
	values[2] = TimestampTzGetDatum(r->forced_before);
	values[3] = TimestampTzGetDatum(r->live_since);
	values[4] = TimestampTzGetDatum(r->resume_from);
	if (eventhub_compaction)
		ret = EventhubExecuteAsOwner(&keep_plan, COUNT_GONE(EXPIRED_BATCH(REMOVABLE_SQL)),
									 5, argtypes, values, NULL, 0);
	else
		ret = EventhubExecuteAsOwner(&all_plan, COUNT_GONE(EXPIRED_BATCH("")),
									 5, argtypes, values, NULL, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eventhub: deleting expired events failed: %s",
			 SPI_result_code_string(ret));
	deleted = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (deleted > 0)
		r->resume_from = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc, 2, &isnull));
	return deleted;
}

/*
 * Removes the replicas without a heartbeat for twice eventhub.replica_ttl
 * (stale for a whole ttl), with their progress.  Returns how many.  The
 * caller has connected to SPI and set up a transaction.
 */
int64
EventhubRemoveStaleReplicas(void)
{
	static EventhubPlan plan;
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	int			ret;

	values[0] = TimestampTzGetDatum(GetCurrentTimestamp() -
									(int64) eventhub_replica_ttl * 2 * USECS_PER_SEC);
	ret = EventhubExecuteAsOwner(&plan,
								 "DELETE FROM eventhub.replicas WHERE last_heartbeat OPERATOR(pg_catalog.<) $1",
								 1, argtypes, values, NULL, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "eventhub: removing stale replicas failed: %s",
			 SPI_result_code_string(ret));
	return (int64) SPI_processed;
}

/*
 * run_maintenance() -> bigint
 *
 * One maintenance cycle on demand, in the caller's transaction: removes
 * stale replicas and what dropped roles left behind, deletes expired events eventhub.cleanup_batch_size at a
 * time, and returns how many events it deleted.  For servers where the background
 * worker cannot be preloaded (run it from cron or pg_cron instead).
 */
Datum
run_maintenance(PG_FUNCTION_ARGS)
{
	EventhubRetention r;
	int			batch_size = eventhub_cleanup_batch_size;
	int64		total = 0;
	int64		deleted;

	EventhubRequireCurrentSchema();
	EventhubRetentionNow(&r);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	(void) EventhubRemoveStaleReplicas();
	(void) EventhubRemoveDroppedRoles();
	do
	{
		CHECK_FOR_INTERRUPTS();
		deleted = EventhubDeleteExpiredBatch(&r, batch_size);
		total += deleted;
	} while (deleted == batch_size);
	SPI_finish();

	PG_RETURN_INT64(total);
}

/*
 * Runs one of a cleanup_events' two deletes on eventhub.events, keep_sql
 * with compaction on and all_sql with it off, and returns the number of
 * rows deleted.
 */
static int64
DeleteEvents(EventhubPlan *keep_cache, const char *keep_sql,
			 EventhubPlan *all_cache, const char *all_sql,
			 int nargs, Oid *argtypes, Datum *values)
{
	int			ret;
	int64		deleted;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	if (eventhub_compaction)
		ret = EventhubExecuteAsOwner(keep_cache, keep_sql, nargs, argtypes, values, NULL, 0);
	else
		ret = EventhubExecuteAsOwner(all_cache, all_sql, nargs, argtypes, values, NULL, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eventhub: deleting events failed: %s", SPI_result_code_string(ret));
	deleted = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	return deleted;
}

/*
 * cleanup_events(older_than timestamptz) -> bigint
 *
 * Deletes the events of every organization processed before older_than and
 * returns how many.  The operator's explicit override: it does not wait for
 * replicas.
 */
Datum
cleanup_events_before(PG_FUNCTION_ARGS)
{
	static EventhubPlan keep_plan;
	static EventhubPlan all_plan;
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		values[1];

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("older_than must not be null")));
	values[0] = PG_GETARG_DATUM(0);
#define BEFORE_DELETE \
	"DELETE FROM eventhub.events e WHERE e.processed_timestamp OPERATOR(pg_catalog.<) $1"
	PG_RETURN_INT64(DeleteEvents(&keep_plan, COUNT_GONE(BEFORE_DELETE REMOVABLE_SQL),
								 &all_plan, COUNT_GONE(BEFORE_DELETE),
								 1, argtypes, values));
}

/*
 * cleanup_events(organization_id text, from_ts timestamptz, to_ts
 *				  timestamptz) -> bigint
 *
 * Deletes one organization's events processed in [from_ts, to_ts) and
 * returns how many.
 */
Datum
cleanup_events_range(PG_FUNCTION_ARGS)
{
	static EventhubPlan keep_plan;
	static EventhubPlan all_plan;
	Oid			argtypes[3] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[3];

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("organization_id must not be null")));
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", PG_ARGISNULL(1) ? "from_ts" : "to_ts"),
				 errhint("Use '-infinity' or 'infinity' for an open end.")));
	if (PG_GETARG_TIMESTAMPTZ(1) > PG_GETARG_TIMESTAMPTZ(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("from_ts must not be later than to_ts"),
				 errdetail("from_ts is %s and to_ts is %s.",
						   DatumGetCString(DirectFunctionCall1(timestamptz_out, PG_GETARG_DATUM(1))),
						   DatumGetCString(DirectFunctionCall1(timestamptz_out, PG_GETARG_DATUM(2))))));
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
#define RANGE_DELETE \
	"DELETE FROM eventhub.events e WHERE e.organization_id OPERATOR(pg_catalog.=) $1" \
	" AND e.processed_timestamp OPERATOR(pg_catalog.>=) $2" \
	" AND e.processed_timestamp OPERATOR(pg_catalog.<) $3"
	PG_RETURN_INT64(DeleteEvents(&keep_plan, COUNT_GONE(RANGE_DELETE REMOVABLE_SQL),
								 &all_plan, COUNT_GONE(RANGE_DELETE),
								 3, argtypes, values));
}

/*
 * cleanup_events(organization_id text, before_revision bigint) -> bigint
 *
 * Deletes one organization's events with a revision below before_revision
 * and returns how many: "everything before revision N", for a consumer
 * that reloaded its state at N or an operator trimming one organization.
 */
Datum
cleanup_events_before_revision(PG_FUNCTION_ARGS)
{
	static EventhubPlan keep_plan;
	static EventhubPlan all_plan;
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		values[2];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", PG_ARGISNULL(0) ? "organization_id" : "before_revision")));
	if (PG_GETARG_INT64(1) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("before_revision must not be negative"),
				 errdetail("before_revision is " INT64_FORMAT ".", PG_GETARG_INT64(1)),
				 errhint("Revisions start at 1: before_revision 1 deletes nothing, the head revision plus one deletes every kept event.")));
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
#define REVISION_DELETE \
	"DELETE FROM eventhub.events e WHERE e.organization_id OPERATOR(pg_catalog.=) $1" \
	" AND e.revision OPERATOR(pg_catalog.<) $2"
	PG_RETURN_INT64(DeleteEvents(&keep_plan, COUNT_GONE(REVISION_DELETE REMOVABLE_SQL),
								 &all_plan, COUNT_GONE(REVISION_DELETE),
								 2, argtypes, values));
}
