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
 * The instant before which events have expired, by eventhub.retention.
 */
TimestampTz
EventhubRetentionCutoff(void)
{
	return GetCurrentTimestamp() - (int64) eventhub_retention * USECS_PER_SEC;
}

/*
 * Deletes at most batch_size events processed before cutoff, oldest first,
 * and returns how many it deleted.  The caller has connected to SPI and set
 * up a transaction.  Rows another deleter holds are skipped, not waited for.
 */
int64
EventhubDeleteExpiredBatch(TimestampTz cutoff, int batch_size)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	int			ret;

	if (plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare("DELETE FROM eventhub.events WHERE ctid = ANY (ARRAY("
									" SELECT ctid FROM eventhub.events"
									" WHERE processed_timestamp < $1"
									" ORDER BY processed_timestamp LIMIT $2"
									" FOR UPDATE SKIP LOCKED))",
									2, argtypes);

		if (p == NULL)
			elog(ERROR, "could not prepare eventhub retention query: %s",
				 SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "could not keep eventhub retention query plan");
		plan = p;
	}

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int32GetDatum(batch_size);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "eventhub: deleting expired events failed: %s",
			 SPI_result_code_string(ret));
	return (int64) SPI_processed;
}

/*
 * run_maintenance() -> bigint
 *
 * One maintenance cycle on demand, in the caller's transaction: deletes the
 * events older than eventhub.retention, eventhub.cleanup_batch_size at a
 * time, and returns how many it deleted.  For servers where the background
 * worker cannot be preloaded (run it from cron or pg_cron instead).
 */
Datum
run_maintenance(PG_FUNCTION_ARGS)
{
	TimestampTz cutoff = EventhubRetentionCutoff();
	int			batch_size = eventhub_cleanup_batch_size;
	int64		total = 0;
	int64		deleted;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	do
	{
		CHECK_FOR_INTERRUPTS();
		deleted = EventhubDeleteExpiredBatch(cutoff, batch_size);
		total += deleted;
	} while (deleted == batch_size);
	SPI_finish();

	PG_RETURN_INT64(total);
}
