/*
 * eventhub.c
 *	  Module entry point of the eventhub extension: settings and the
 *	  background worker's registration.
 *
 * The SQL-callable functions live in publish.c (writing), notify.c (the
 * NOTIFY trigger) and retention.c (cleanup); the worker in worker.c.
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "eventhub.h"

PG_MODULE_MAGIC;

char	   *eventhub_database = NULL;
int			eventhub_retention = 3600;
int			eventhub_maintenance_interval = 60000;
int			eventhub_cleanup_batch_size = 10000;
int			eventhub_cleanup_batch_delay = 0;
int			eventhub_replica_ttl = 300;
bool		eventhub_retain_until_applied = true;
int			eventhub_max_retention = 86400;

/*
 * Defines the eventhub.* settings.
 */
static void
DefineSettings(void)
{
	DefineCustomStringVariable("eventhub.database",
							   "Sets the database the eventhub background worker maintains.",
							   "The worker waits quietly until CREATE EXTENSION eventhub has run there.",
							   &eventhub_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.retention",
							"Sets how long events are kept.",
							"Retention deletes events whose processed_timestamp is older than this.",
							&eventhub_retention,
							3600,
							1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.maintenance_interval",
							"Sets the time between two maintenance cycles of the background worker.",
							NULL,
							&eventhub_maintenance_interval,
							60000,
							10, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
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

	DefineCustomIntVariable("eventhub.cleanup_batch_delay",
							"Sets the pause of the background worker between two retention batches.",
							"Spreads a large cleanup out so that it leaves the machine to publishers.",
							&eventhub_cleanup_batch_delay,
							0,
							0, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
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

#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("eventhub");
#else
	EmitWarningsOnPlaceholders("eventhub");
#endif
}

/*
 * Library load.  Every SQL function works without preloading; only the
 * background worker needs shared_preload_libraries = 'eventhub'.
 */
void
_PG_init(void)
{
	DefineSettings();

	if (process_shared_preload_libraries_in_progress)
		EventhubRegisterWorker();
}
