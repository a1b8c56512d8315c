/*
 * worker.c
 *	  The eventhub background worker: retention and housekeeping inside
 *	  PostgreSQL, done once for all replicas.
 *
 * One static worker, registered when the library is preloaded, serves the
 * database named by eventhub.database.  Each cycle it deletes expired events
 * in batches, each batch in a short transaction of its own, then sleeps for
 * eventhub.maintenance_interval.  It waits quietly while the extension is not
 * installed, and does nothing while the server is in recovery.  The shape is
 * PostgreSQL's src/test/modules/worker_spi.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
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
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "eventhub.h"

#define WORKER_TYPE "eventhub maintenance"

/* Seconds the postmaster waits before restarting a worker that died. */
#define WORKER_RESTART_SECONDS 5

/*
 * Registers the static background worker.  Called from _PG_init while
 * shared_preload_libraries is processed.
 */
void
EventhubRegisterWorker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = WORKER_RESTART_SECONDS;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "eventhub");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "eventhub_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "eventhub maintenance worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, WORKER_TYPE);
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
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
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Whether CREATE EXTENSION eventhub has run in this database.
 */
static bool
ExtensionInstalled(void)
{
	bool		installed;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid("eventhub", true));
	CommitTransactionCommand();
	return installed;
}

/*
 * Deletes every event that has expired by now, one batch per transaction.
 * Returns the number deleted; *batches gets the number of transactions.
 */
static int64
DeleteExpiredEvents(int *batches)
{
	EventhubRetention r;
	int64		total = 0;
	int64		deleted;

	EventhubRetentionNow(&r);
	*batches = 0;
	for (;;)
	{
		int			batch_size = eventhub_cleanup_batch_size;

		CHECK_FOR_INTERRUPTS();
		BeginWork("eventhub: deleting expired events");
		deleted = EventhubDeleteExpiredBatch(&r, batch_size);
		EndWork();
		total += deleted;
		(*batches)++;
		if (deleted < batch_size)
			break;
		if (eventhub_cleanup_batch_delay > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 eventhub_cleanup_batch_delay, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}

	return total;
}

/*
 * One maintenance cycle: removes stale replicas, then deletes expired
 * events, logging what it did.
 */
static void
MaintenanceCycle(void)
{
	int			batches;
	int64		deleted;
	int64		replicas;

	BeginWork("eventhub: removing stale replicas");
	replicas = EventhubRemoveStaleReplicas();
	EndWork();
	if (replicas > 0)
		ereport(LOG,
				(errmsg("eventhub removed " INT64_FORMAT " stale replicas", replicas)));

	deleted = DeleteExpiredEvents(&batches);
	if (deleted > 0)
		ereport(LOG,
				(errmsg("eventhub retention deleted " INT64_FORMAT " expired events in %d transactions",
						deleted, batches)));
}

/*
 * The worker's main function.
 */
void
eventhub_worker_main(Datum main_arg)
{
	bool		waiting_logged = false;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(eventhub_database, NULL, 0);
	pgstat_report_appname(WORKER_TYPE);
	ereport(LOG,
			(errmsg("eventhub background worker started for database \"%s\"",
					eventhub_database)));

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* On a standby, nothing: the primary's deletes replicate. */
		if (!RecoveryInProgress())
		{
			if (!ExtensionInstalled())
			{
				if (!waiting_logged)
					ereport(LOG,
							(errmsg("eventhub background worker is waiting for the extension in database \"%s\"",
									eventhub_database),
							 errhint("Run CREATE EXTENSION eventhub in database \"%s\", or set eventhub.database.",
									 eventhub_database)));
				waiting_logged = true;
			}
			else
			{
				if (waiting_logged)
					ereport(LOG,
							(errmsg("eventhub background worker found the extension in database \"%s\"",
									eventhub_database)));
				waiting_logged = false;
				MaintenanceCycle();
			}
		}

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 eventhub_maintenance_interval,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
