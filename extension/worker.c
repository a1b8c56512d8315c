/*
 * worker.c
 *	  The eventhub background worker: retention and housekeeping inside
 *	  PostgreSQL, done once for all replicas.
 *
 * One static worker, registered when the library is preloaded, serves the
 * database named by eventhub.database.  Each cycle it removes stale replicas
 * and what dropped roles left behind, and deletes expired events in batches, each batch in a short transaction
 * of its own and a step of the main loop, which reloads the configuration
 * and looks for stalled clients between two batches; then it sleeps for
 * eventhub.maintenance_interval.  More often
 * (a quarter of eventhub.stalled_client_timeout) it looks for client
 * sessions stuck writing notifications to a client that does not read them,
 * and terminates those that hold back the xmin horizon for too long.  It
 * waits quietly while the extension is not installed, and does nothing while
 * the server is in recovery.  The shape is PostgreSQL's
 * src/test/modules/worker_spi.
 *
 * The worker is a superuser session, and a database owner who is not a
 * superuser can reach its settings with ALTER DATABASE ... SET: it pins the
 * ones its queries depend on (search_path above all, common.c) before the
 * first query, and every name in its queries is schema-qualified.
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "common.h"
#include "metrics.h"
#include "access.h"
#include "replicas.h"
#include "retention.h"
#include "worker.h"

static int	eventhub_maintenance_interval = 60000;
static int	eventhub_cleanup_batch_delay = -1;
static int	eventhub_stalled_client_timeout = 30000;

/*
 * Defines the settings of the maintenance worker's cycle.
 */
void
EventhubDefineWorkerSettings(void)
{
	DefineCustomIntVariable("eventhub.maintenance_interval",
							"Sets the time between two maintenance cycles of the background worker.",
							NULL,
							&eventhub_maintenance_interval,
							60000,
							10, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.cleanup_batch_delay",
							"Sets the pause of the background worker between two retention batches.",
							"Spreads a large cleanup out so that it leaves the machine to publishers; -1 pauses three times as long as the last batch took.",
							&eventhub_cleanup_batch_delay,
							-1,
							-1, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.stalled_client_timeout",
							"Sets how long a client session may be blocked on a peer that does not read its notifications.",
							"The background worker terminates a session of its database that stays idle yet blocked writing to its client "
							"(wait event ClientWrite) for longer than this. 0 turns the check off.",
							&eventhub_stalled_client_timeout,
							30000,
							0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

#define WORKER_TYPE "eventhub maintenance"

/* Seconds the postmaster waits before restarting a worker that died. */
#define WORKER_RESTART_SECONDS 5

/* The shortest pause between two looks for stalled client sessions. */
#define MIN_STALL_CHECK_MS 100

/*
 * A client session seen blocked in ClientWrite while idle, with the same
 * xmin ("" for none), in every look since `since`.
 */
typedef struct StalledSession
{
	int			pid;
	TimestampTz backend_start;
	char	   *xmin;
	TimestampTz since;
} StalledSession;

static StalledSession *stalled = NULL;
static int	nstalled = 0;
static MemoryContext stalled_cxt = NULL;

/*
 * Registers one static background worker.
 */
static void
RegisterWorker(const char *function, const char *name, const char *type,
			   BgWorkerStartTime start, int restart_seconds)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = start;
	worker.bgw_restart_time = restart_seconds;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "eventhub");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", type);
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}

/*
 * Registers the maintenance worker, the notifier (notifier.c) and the
 * standby waker (standby_waker.c, which starts on a hot standby too, and
 * exits at once on a primary).  Called from _PG_init while
 * shared_preload_libraries is processed.  The notifier comes back after a
 * second: until it does, publishers notify by themselves.
 */
void
EventhubRegisterWorkers(void)
{
	RegisterWorker("eventhub_worker_main", "eventhub maintenance worker", WORKER_TYPE,
				   BgWorkerStart_RecoveryFinished, WORKER_RESTART_SECONDS);
	RegisterWorker("eventhub_notifier_main", "eventhub notifier", "eventhub notifier",
				   BgWorkerStart_RecoveryFinished, 1);
	RegisterWorker("eventhub_standby_waker_main", "eventhub standby waker",
				   "eventhub standby waker", BgWorkerStart_ConsistentState, 1);
}

/*
 * Starts a transaction for one unit of work, with SPI and a snapshot.
 */
static void
BeginWork(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	debug_query_string = activity;
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * Commits the unit of work started by BeginWork.
 */
static void
EndWork(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	debug_query_string = NULL;
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * What CREATE EXTENSION eventhub and ALTER EXTENSION eventhub UPDATE have
 * left in this database: no extension, SQL objects at another version than
 * this library's (the installed version goes into version), or current.
 */
typedef enum ExtensionState
{
	EXTENSION_MISSING,
	EXTENSION_OUTDATED,
	EXTENSION_CURRENT
} ExtensionState;

static ExtensionState
GetExtensionState(char *version, size_t len)
{
	char	   *installed;
	ExtensionState state;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	installed = EventhubInstalledVersion();
	if (installed == NULL)
		state = EXTENSION_MISSING;
	else
	{
		strlcpy(version, installed, len);
		state = strcmp(installed, EVENTHUB_EXTVERSION) == 0 ? EXTENSION_CURRENT : EXTENSION_OUTDATED;
	}
	CommitTransactionCommand();
	return state;
}

/*
 * A retention pass under way: the worker deletes one batch per step, and
 * its main loop reloads the configuration and looks for stalled clients
 * between two steps, so a large backlog holds up nothing else.
 */
typedef struct CleanupPass
{
	bool		active;
	EventhubRetention r;
	TimestampTz started;
	TimestampTz next_batch;		/* when the next step is due */
	int64		deleted;
	int			batches;
	int64		busy_us;		/* time spent in the batches themselves */
} CleanupPass;

static CleanupPass cleanup;

/*
 * Starts a maintenance cycle: removes stale replicas and what dropped roles
 * left behind (access.c), then begins a retention pass, whose first batch
 * is due at once.
 */
static void
BeginCycle(void)
{
	int64		replicas;

	BeginWork("eventhub: removing stale replicas");
	replicas = EventhubRemoveStaleReplicas();
	EndWork();
	BeginWork("eventhub: removing what dropped roles left");
	(void) EventhubRemoveDroppedRoles();
	EndWork();
	/* After both: the replicas they removed may have settled a split. */
	BeginWork("eventhub: forgetting settled configuration splits");
	(void) EventhubForgetSettledSplits();
	EndWork();
	if (replicas > 0)
		ereport(LOG,
				(errmsg("eventhub removed " INT64_FORMAT " stale replicas", replicas)));

	memset(&cleanup, 0, sizeof(cleanup));
	cleanup.active = true;
	cleanup.started = GetCurrentTimestamp();
	cleanup.next_batch = 0;
	EventhubRetentionNow(&cleanup.r);
}

/*
 * Deletes one batch of expired events in a transaction of its own.  When
 * the batch comes back short, the pass is over: logs what it did and
 * returns true.  Otherwise sets when the next batch is due.
 */
static bool
CleanupStep(void)
{
	int			batch_size = eventhub_cleanup_batch_size;
	TimestampTz started = GetCurrentTimestamp();
	TimestampTz now;
	int64		deleted;
	bool		more;
	long		delay_ms;

	BeginWork("eventhub: deleting expired events");
	deleted = EventhubDeleteExpiredBatch(&cleanup.r, batch_size, &more);
	EndWork();
	now = GetCurrentTimestamp();
	cleanup.deleted += deleted;
	cleanup.batches++;
	cleanup.busy_us += now - started;

	if (!more)
	{
		long		elapsed_ms = (now - cleanup.started) / 1000;

		cleanup.active = false;
		if (cleanup.deleted > 0)
			ereport(LOG,
					(errmsg("eventhub retention deleted " INT64_FORMAT " expired events in %d transactions over %ld ms, %ld ms of them paused",
							cleanup.deleted, cleanup.batches, elapsed_ms,
							Max(elapsed_ms - (long) (cleanup.busy_us / 1000), 0))));
		return true;
	}

	/*
	 * By default (-1) the worker paces itself: it pauses three times as long
	 * as the batch took, so that a large cleanup keeps at most a quarter of
	 * one core and of the disk, and spreads its WAL and its pressure on
	 * shared buffers out, leaving the rest to publishers.
	 */
	delay_ms = eventhub_cleanup_batch_delay >= 0 ? eventhub_cleanup_batch_delay :
		Max(3 * (now - started) / 1000, 1);
	cleanup.next_batch = now + (int64) delay_ms * 1000;
	return false;
}

/*
 * Whether a session seen in the previous look had the same pid, start and
 * xmin; returns since when.
 */
static TimestampTz
StalledSince(int pid, TimestampTz backend_start, const char *xmin, TimestampTz now)
{
	for (int i = 0; i < nstalled; i++)
		if (stalled[i].pid == pid && stalled[i].backend_start == backend_start &&
			strcmp(stalled[i].xmin, xmin) == 0)
			return stalled[i].since;
	return now;
}

/*
 * Keeps the sessions a look saw stalled (and not terminated) for the next
 * look; everything older goes.
 */
static void
KeepStalled(StalledSession *seen, int nseen)
{
	for (int i = 0; i < nstalled; i++)
		pfree(stalled[i].xmin);
	if (stalled)
		pfree(stalled);
	stalled = seen;
	nstalled = nseen;
}

/*
 * Terminates the stalled session of pid (a row of CheckStalledClients'
 * look, stalled for secs seconds, holding back xmin or ""), and logs who
 * it was.
 */
static void
TerminateStalled(HeapTuple tuple, TupleDesc desc, int pid, long secs, const char *xmin)
{
	Datum		pidarg = Int32GetDatum(pid);
	char	   *user = SPI_getvalue(tuple, desc, 4);
	char	   *app = SPI_getvalue(tuple, desc, 5);
	char	   *client = SPI_getvalue(tuple, desc, 6);
	bool		isnull;
	int			ret;

	ret = EventhubExecuteOnce(&EventhubSqlWorkerTerminateSession, &pidarg, NULL, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eventhub: terminating a session failed: %s", SPI_result_code_string(ret));
	/* Signalled: done, whatever becomes of this transaction. */
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		EventhubCountNow(EVENTHUB_COUNTER_STALLED_TERMINATED, 1);
	ereport(LOG,
			(errmsg("eventhub terminated client session %d, stalled for %ld s", pid, secs),
			 errdetail("The session of user \"%s\" (application \"%s\", client %s) was blocked sending notifications to a client that does not read them%s%s%s.",
					   user ? user : "", app ? app : "", client ? client : "local",
					   xmin[0] ? ", holding back the xmin horizon (xmin " : "",
					   xmin, xmin[0] ? ")" : ""),
			 errhint("The client catches up from its cursor when it reconnects. eventhub.stalled_client_timeout sets how long a session may stall.")));
}

/*
 * Finds client sessions of this database that are idle yet blocked writing
 * to their client (what an idle backend writes is notifications), and
 * terminates those found so in every look for eventhub.stalled_client_timeout.
 * Such a session's client stopped reading (a stopped process, a hung network
 * peer).  While it holds the transaction in which it reads the notification
 * queue, no dead row version of organization_states since its xmin can be
 * removed and publishing slows down for every organization; in any case it
 * holds back the notification queue, which fills up.  The client, once it
 * runs again, reconnects and catches up from its cursor.
 */
static void
CheckStalledClients(void)
{
	Datum		values[1] = {ObjectIdGetDatum(MyDatabaseId)};
	TimestampTz now = GetCurrentTimestamp();
	StalledSession *seen;
	SPITupleTable *sessions;
	uint64		nsessions;
	int			nseen = 0;
	int			ret;

	if (stalled_cxt == NULL)
		stalled_cxt = AllocSetContextCreate(TopMemoryContext, "eventhub stalled sessions",
											ALLOCSET_SMALL_SIZES);

	BeginWork("eventhub: looking for stalled client sessions");
	ret = EventhubExecuteOnce(&EventhubSqlWorkerStalledSessions, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading pg_stat_activity failed: %s", SPI_result_code_string(ret));

	/* Kept: terminating a session below replaces SPI_tuptable. */
	sessions = SPI_tuptable;
	nsessions = SPI_processed;
	seen = MemoryContextAlloc(stalled_cxt, sizeof(StalledSession) * Max(nsessions, 1));
	for (uint64 i = 0; i < nsessions; i++)
	{
		HeapTuple	tuple = sessions->vals[i];
		TupleDesc	desc = sessions->tupdesc;
		bool		isnull;
		int			pid = DatumGetInt32(SPI_getbinval(tuple, desc, 1, &isnull));
		TimestampTz started = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 2, &isnull));
		char	   *xmin = SPI_getvalue(tuple, desc, 3) ? SPI_getvalue(tuple, desc, 3) : "";
		TimestampTz since = StalledSince(pid, started, xmin, now);
		long		secs;
		int			usecs;

		TimestampDifference(since, now, &secs, &usecs);
		if ((int64) secs * 1000 + usecs / 1000 >= eventhub_stalled_client_timeout)
		{
			TerminateStalled(tuple, desc, pid, secs, xmin);
			continue;
		}
		seen[nseen].pid = pid;
		seen[nseen].backend_start = started;
		seen[nseen].xmin = MemoryContextStrdup(stalled_cxt, xmin);
		seen[nseen].since = since;
		nseen++;
	}
	EndWork();
	KeepStalled(seen, nseen);
}

/*
 * When the loop's next steps are due, and what it last logged of the
 * extension's state.
 */
static TimestampTz next_cycle = 0;
static TimestampTz next_check = 0;
static ExtensionState logged_state = EXTENSION_CURRENT;

/*
 * Milliseconds from now until t, at least 0.
 */
static long
MsUntil(TimestampTz t, TimestampTz now)
{
	return t <= now ? 0 : (long) ((t - now) / 1000);
}

/*
 * Reloads the configuration when SIGHUP asked for it.  New settings take
 * effect at once, in a retention pass under way too.
 */
static void
ReloadSettings(void)
{
	if (!ConfigReloadPending)
		return;
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	next_cycle = next_check = 0;
	if (cleanup.active)
	{
		TimestampTz resume_from = cleanup.r.resume_from;
		ItemPointerData resume_tid = cleanup.r.resume_tid;

		EventhubRetentionNow(&cleanup.r);
		cleanup.r.resume_from = resume_from;
		cleanup.r.resume_tid = resume_tid;
		cleanup.next_batch = 0;
	}
}

/*
 * Does nothing until the next cycle, a maintenance interval from now: no
 * pass under way, no look for stalled clients before then.
 */
static void
WaitForNextCycle(TimestampTz now)
{
	next_cycle = next_check = now + (int64) eventhub_maintenance_interval * 1000;
	cleanup.active = false;
}

/*
 * Logs the extension's state in the worker's database when it changed
 * since the last time; returns whether it is current.
 */
static bool
ExtensionIsCurrent(void)
{
	char		version[NAMEDATALEN];
	ExtensionState state = GetExtensionState(version, sizeof(version));

	if (state == logged_state)
		return state == EXTENSION_CURRENT;
	logged_state = state;
	if (state == EXTENSION_MISSING)
		ereport(LOG,
				(errmsg("eventhub background worker is waiting for the extension in database \"%s\"",
						eventhub_database),
				 errhint("Run CREATE EXTENSION eventhub in database \"%s\", or set eventhub.database.",
						 eventhub_database)));
	/* An outdated one: its queries name this version's objects; retain all. */
	else if (state == EXTENSION_OUTDATED)
		ereport(LOG,
				(errmsg("eventhub background worker is waiting for the extension in database \"%s\" to be updated from version %s to %s",
						eventhub_database, version, EVENTHUB_EXTVERSION),
				 errdetail("Retention and housekeeping are paused until then."),
				 errhint("Run ALTER EXTENSION eventhub UPDATE in database \"%s\".",
						 eventhub_database)));
	else
		ereport(LOG,
				(errmsg("eventhub background worker found the extension in database \"%s\"",
						eventhub_database)));
	return state == EXTENSION_CURRENT;
}

/*
 * Runs the steps that are due, one short step at a time, each its own
 * transaction: the start of a cycle, a retention batch, a look for stalled
 * clients.
 */
static void
RunDueSteps(TimestampTz now)
{
	if (!cleanup.active && next_cycle <= now)
		BeginCycle();
	if (cleanup.active && cleanup.next_batch <= now && CleanupStep())
		next_cycle = GetCurrentTimestamp() + (int64) eventhub_maintenance_interval * 1000;
	if (eventhub_stalled_client_timeout == 0)
		next_check = cleanup.active ? cleanup.next_batch : next_cycle;
	else if (next_check <= now)
	{
		CheckStalledClients();
		next_check = GetCurrentTimestamp() +
			(int64) Max(MIN_STALL_CHECK_MS, eventhub_stalled_client_timeout / 4) * 1000;
	}
}

/*
 * Sleeps on the latch until the next step is due.
 */
static void
WaitForNextStep(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		wait_ms = Min(MsUntil(cleanup.active ? cleanup.next_batch : next_cycle, now),
							  MsUntil(next_check, now));

	(void) WaitLatch(MyLatch,
					 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Max(wait_ms, 1),
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

/*
 * The worker's main function: reload, run what is due, wait.  On a standby
 * it does nothing (the primary's deletes replicate), nor while the
 * extension is missing or outdated in its database.
 */
void
eventhub_worker_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(eventhub_database, NULL, 0);
	EventhubPinSettings();
	pgstat_report_appname(WORKER_TYPE);
	ereport(LOG,
			(errmsg("eventhub background worker started for database \"%s\"",
					eventhub_database)));

	for (;;)
	{
		TimestampTz now;

		CHECK_FOR_INTERRUPTS();
		ReloadSettings();
		now = GetCurrentTimestamp();
		if (RecoveryInProgress())
			WaitForNextCycle(now);
		else if ((cleanup.active ? cleanup.next_batch : next_cycle) <= now || next_check <= now)
		{
			if (ExtensionIsCurrent())
				RunDueSteps(now);
			else
				WaitForNextCycle(now);
		}
		WaitForNextStep();
	}
}
