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
 * Compaction (eventhub.compaction, on by default): every deleter adds the
 * condition "removable" (statements_retention.c) to its own, so that it never removes the latest
 * event of a live entity (an entity is its organization's (event_type,
 * entity_id)), however old.  Superseded events go, and so does a tombstone
 * (a DELETE) once nothing older of its entity is left: a tombstone that went
 * before an older CREATE would bring the entity back in snapshots.  The
 * statement's snapshot still sees the older events it deletes, so such a
 * tombstone goes one batch or cycle later.  Events at or below the
 * organization's complete_after (declare_full_state) are not part of any
 * snapshot and go too.
 *
 * With compaction off every expired event goes, as before 0.4.0, but never
 * silently: a deleter that removes an event that loses an entity ("lost")
 * marks its organization incomplete (complete_after NULL, and snapshots
 * raise ZE004) in the same statement, and commits both or neither.  The
 * marking never waits: it takes the organization's row with SKIP LOCKED,
 * and an organization whose row a publisher holds keeps its lost events
 * until a later batch.  It writes each organization's row once, when it
 * goes from complete to incomplete; nothing else in retention writes
 * organization_states.
 *
 * The background worker runs these queries as a superuser, so like
 * publish_event's they name everything with its schema, operators included:
 * nothing in them resolves through a search_path, whatever a database owner
 * sets with ALTER DATABASE ... SET.
 */
#include "postgres.h"

#include <limits.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/itemptr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "common.h"
#include "metrics.h"
#include "guard.h"
#include "access.h"
#include "replicas.h"
#include "retention.h"

static int	eventhub_retention = 3600;
int			eventhub_cleanup_batch_size = 10000;
static int	eventhub_replica_ttl = 300;
static bool eventhub_retain_until_applied = true;
static int	eventhub_max_retention = 86400;
static bool eventhub_compaction = true;

/*
 * Defines the settings of retention: how long events are kept, and for whom.
 */
void
EventhubDefineRetentionSettings(void)
{
	DefineCustomIntVariable("eventhub.retention",
							"Sets how long events are kept.",
							"Retention deletes events whose processed_timestamp is older than this.",
							&eventhub_retention,
							3600,
							1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.cleanup_batch_size",
							"Sets the most events one retention transaction deletes.",
							"Each batch commits on its own, so that a publisher never waits long behind retention.",
							&eventhub_cleanup_batch_size,
							10000,
							1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.replica_ttl",
							"Sets how long a replica may go without a heartbeat before it is stale.",
							"A stale replica holds no retention; maintenance removes it after twice this time.",
							&eventhub_replica_ttl,
							300,
							1, INT_MAX / 2,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("eventhub.retain_until_applied",
							 "Keeps expired events until every live replica has applied them.",
							 "Up to eventhub.max_retention; stale replicas hold nothing.",
							 &eventhub_retain_until_applied,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.max_retention",
							"Sets the longest an event is kept for a live replica that has not applied it.",
							"After this, retention deletes it anyway and that replica resyncs.",
							&eventhub_max_retention,
							86400,
							1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("eventhub.compaction",
							 "Sets whether retention keeps each entity's latest event.",
							 "On: retention removes only superseded events and deleted entities' tombstones, so that a snapshot is each entity's current state. Off (events carry partial updates): retention removes every expired event, as before 0.4.0, and an organization that loses an entity's latest event is marked incomplete (its snapshots raise ZE004).",
							 &eventhub_compaction,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
}

PG_FUNCTION_INFO_V1(run_maintenance);
PG_FUNCTION_INFO_V1(cleanup_events_before);
PG_FUNCTION_INFO_V1(cleanup_events_range);
PG_FUNCTION_INFO_V1(cleanup_events_before_revision);

/* Counts the passes begun (EventhubRetentionNow) in this backend. */
static uint64 retention_passes = 0;

/*
 * Drops a kept plan, so that its next use prepares it again.
 *
 * Retention's statements probe events once per row they look at, and a
 * plan made while events was small (a sequential scan per probe) costs
 * minutes once a backlog has been loaded: PostgreSQL replans only when
 * statistics change, which an autovacuum ANALYZE may do much later.  So
 * each retention pass, and each cleanup_events call, plans afresh: a
 * fresh plan sees the table's current size.  Planning costs milliseconds;
 * a batch costs far more.
 */
static void
ForgetPlan(EventhubPlan *cache)
{
	if (cache->plan != NULL)
	{
		SPI_freeplan(cache->plan);
		cache->plan = NULL;
	}
}

/*
 * Fills the instants of *r that decide, as of now, which events retention
 * deletes and which replicas are live (eventhub.metrics() reads them as of
 * its transaction's start).
 */
void
EventhubRetentionLimits(EventhubRetention *r, TimestampTz now)
{
	r->expired_before = now - (int64) eventhub_retention * USECS_PER_SEC;
	if (eventhub_retain_until_applied)
		r->forced_before = now - (int64) eventhub_max_retention * USECS_PER_SEC;
	else
		TIMESTAMP_NOEND(r->forced_before);
	r->live_since = now - (int64) eventhub_replica_ttl * USECS_PER_SEC;
}

/*
 * Fills *r with retention's limits as of now, and starts a pass from the
 * oldest event.
 */
void
EventhubRetentionNow(EventhubRetention *r)
{
	retention_passes++;

	EventhubRetentionLimits(r, GetCurrentTimestamp());
	TIMESTAMP_NOBEGIN(r->resume_from);
	ItemPointerSet(&r->resume_tid, 0, 0);
}

/*
 * Sets where the pass's next batch starts from a batch's result row
 * (tuple, desc), and returns whether the pass has more to look at.
 */
static bool
ResumeAfterBatch(EventhubRetention *r, HeapTuple tuple, TupleDesc desc, int batch_size,
				 int64 scan_limit)
{
	bool		isnull;
	int64		picked = DatumGetInt64(SPI_getbinval(tuple, desc, 2, &isnull));

	if (picked >= batch_size)
	{
		/* The walk stopped at the last row picked: the rest comes next. */
		r->resume_from = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 3, &isnull));
		r->resume_tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(tuple, desc, 4, &isnull));
		return true;
	}
	else
	{
		int64		walked = DatumGetInt64(SPI_getbinval(tuple, desc, 5, &isnull));

		if (isnull)
			return false;		/* nothing left in the walk */
		r->resume_from = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 6, &isnull));
		r->resume_tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(tuple, desc, 7, &isnull));
		return walked >= scan_limit;
	}
}

/*
 * One batch of a retention pass, in the caller's transaction: walks the
 * events processed before the retention limit in (processed_timestamp,
 * ctid) order from where the previous batch of the pass stopped
 * (r->resume_from, r->resume_tid), looking at no more than
 * EVENTHUB_SCAN_FACTOR * batch_size of them, and deletes the first
 * batch_size it may.  Returns how many it deleted, and sets *more when the
 * pass has more to look at.
 *
 * An expired event stays while a live replica that follows its organization
 * has not applied it, or has applied it last (so that the replica can
 * still check, after a failover, that the event at its cursor has the
 * version it applied), unless it is older than eventhub.max_retention; with
 * compaction on, each live entity's latest event stays too; with it off,
 * an entity's latest event goes only with its organization marked
 * incomplete (statements_retention.c says how).  Rows another deleter holds are
 * skipped, not waited for.
 *
 * The walk is bounded: with compaction on the oldest events are the kept
 * ones, and an unbounded batch would walk all of them in one statement
 * before finding something to delete.  Each batch resumes after the last
 * row it looked at (the last one it picked when it picked batch_size, else
 * the last of its bounded walk), so that no batch walks again over kept
 * rows or over the index entries of rows already deleted, which vacuum has
 * not removed yet: every batch costs about the same, however large the
 * backlog or the kept set.  The ctid breaks ties on processed_timestamp (a
 * large transaction's events share it), so a pass always moves on.  The
 * caller has connected to SPI and set up a transaction.
 */
int64
EventhubDeleteExpiredBatch(EventhubRetention *r, int batch_size, bool *more)
{
	static EventhubPlan keep_plan;
	static EventhubPlan all_plan;
	static uint64 planned_for = 0;	/* the pass keep_plan and all_plan are for */
	Datum		values[7];
	int64		scan_limit = (int64) batch_size * EVENTHUB_SCAN_FACTOR;
	int64		deleted;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	int			ret;

	if (planned_for != retention_passes)
	{
		ForgetPlan(&keep_plan);
		ForgetPlan(&all_plan);
		planned_for = retention_passes;
	}
	values[0] = TimestampTzGetDatum(r->expired_before);
	values[1] = Int32GetDatum(batch_size);
	values[2] = TimestampTzGetDatum(r->forced_before);
	values[3] = TimestampTzGetDatum(r->live_since);
	values[4] = TimestampTzGetDatum(r->resume_from);
	values[5] = PointerGetDatum(&r->resume_tid);
	values[6] = Int64GetDatum(scan_limit);
	if (eventhub_compaction)
		ret = EventhubExecuteAsOwner(&keep_plan, &EventhubSqlRetentionDeleteExpiredBatch,
									 values, NULL, 0);
	else
		ret = EventhubExecuteAsOwner(&all_plan, &EventhubSqlRetentionDeleteExpiredBatchNoCompaction,
									 values, NULL, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eventhub: deleting expired events failed: %s",
			 SPI_result_code_string(ret));
	tuple = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	deleted = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
	*more = ResumeAfterBatch(r, tuple, desc, batch_size, scan_limit);
	EventhubCountAtCommit(EVENTHUB_COUNTER_RETENTION_DELETED, (uint64) deleted);
	if (!*more)
		EventhubRetentionPassEndsAtCommit();
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
	Datum		values[1];

	values[0] = TimestampTzGetDatum(GetCurrentTimestamp() -
									(int64) eventhub_replica_ttl * 2 * USECS_PER_SEC);
	EventhubRunAsOwner(&plan, &EventhubSqlRetentionRemoveStaleReplicas, values,
					   SPI_OK_DELETE, "removing stale replicas");
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
	bool		more;

	EventhubRequireCurrentSchema();
	EventhubRetentionNow(&r);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	(void) EventhubRemoveStaleReplicas();
	(void) EventhubRemoveDroppedRoles();
	/* After both: the replicas they removed may have settled a split. */
	(void) EventhubForgetSettledSplits();
	do
	{
		CHECK_FOR_INTERRUPTS();
		total += EventhubDeleteExpiredBatch(&r, batch_size, &more);
	} while (more);
	SPI_finish();

	PG_RETURN_INT64(total);
}

/*
 * Runs one of a cleanup_events' two deletes on eventhub.events, keep
 * with compaction on and all with it off, planned afresh (ForgetPlan),
 * and returns the number of rows deleted.
 */
static int64
DeleteEvents(const EventhubStatement *keep, const EventhubStatement *all, Datum *values)
{
	static EventhubPlan plan;
	int			ret;
	int64		deleted;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	ForgetPlan(&plan);
	ret = EventhubExecuteAsOwner(&plan, eventhub_compaction ? keep : all, values, NULL, 0);
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
	Datum		values[1];

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("older_than must not be null")));
	values[0] = PG_GETARG_DATUM(0);
	PG_RETURN_INT64(DeleteEvents(&EventhubSqlRetentionCleanupBefore,
								 &EventhubSqlRetentionCleanupBeforeNoCompaction, values));
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
	PG_RETURN_INT64(DeleteEvents(&EventhubSqlRetentionCleanupRange,
								 &EventhubSqlRetentionCleanupRangeNoCompaction, values));
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
	PG_RETURN_INT64(DeleteEvents(&EventhubSqlRetentionCleanupBeforeRevision,
								 &EventhubSqlRetentionCleanupBeforeRevisionNoCompaction, values));
}
