/*
 * retention.c
 *	  Deleting expired events: eventhub.run_maintenance() and the batch
 *	  delete the background worker shares with it.
 *
 * Retention deletes events only; organization_states keeps every head
 * revision and version, and eventhub.events_since() turns any event a reader
 * missed into the resync error.  Deletes lock only the event rows they
 * remove, which no publisher ever locks, so publishers do not wait on them.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "eventhub.h"

PG_FUNCTION_INFO_V1(run_maintenance);

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
 * follows its organization has not applied it, unless it is older than
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
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[5] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[5];
	int64		deleted;
	bool		isnull;
	int			ret;

	EventhubKeptPlan(&plan,
					 "WITH gone AS ("
					 " DELETE FROM eventhub.events WHERE ctid = ANY (ARRAY("
					 "  SELECT e.ctid FROM eventhub.events e"
					 "  WHERE e.processed_timestamp >= $5 AND e.processed_timestamp < $1"
					 "  AND (e.processed_timestamp < $3 OR NOT EXISTS ("
					 "   SELECT FROM eventhub.replica_progress p"
					 "   JOIN eventhub.replicas r ON r.replica_id = p.replica_id"
					 "   WHERE p.organization_id = e.organization_id"
					 "   AND p.applied_revision < e.revision"
					 "   AND r.last_heartbeat >= $4))"
					 "  ORDER BY e.processed_timestamp LIMIT $2"
					 "  FOR UPDATE OF e SKIP LOCKED))"
					 " RETURNING processed_timestamp)"
					 " SELECT count(*), max(processed_timestamp) FROM gone",
					 5, argtypes);

	values[0] = TimestampTzGetDatum(r->expired_before);
	values[1] = Int32GetDatum(batch_size);
	values[2] = TimestampTzGetDatum(r->forced_before);
	values[3] = TimestampTzGetDatum(r->live_since);
	values[4] = TimestampTzGetDatum(r->resume_from);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
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
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	int			ret;

	EventhubKeptPlan(&plan, "DELETE FROM eventhub.replicas WHERE last_heartbeat < $1",
					 1, argtypes);
	values[0] = TimestampTzGetDatum(GetCurrentTimestamp() -
									(int64) eventhub_replica_ttl * 2 * USECS_PER_SEC);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "eventhub: removing stale replicas failed: %s",
			 SPI_result_code_string(ret));
	return (int64) SPI_processed;
}

/*
 * run_maintenance() -> bigint
 *
 * One maintenance cycle on demand, in the caller's transaction: removes
 * stale replicas, deletes expired events eventhub.cleanup_batch_size at a
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

	EventhubRetentionNow(&r);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	(void) EventhubRemoveStaleReplicas();
	do
	{
		CHECK_FOR_INTERRUPTS();
		deleted = EventhubDeleteExpiredBatch(&r, batch_size);
		total += deleted;
	} while (deleted == batch_size);
	SPI_finish();

	PG_RETURN_INT64(total);
}
