/*
 * eventhub.c
 *	  Module entry point of the eventhub extension: the settings, and what
 *	  _PG_init sets up (the relcache callback, the object access hook, the
 *	  notification queue, the metrics' counters, the background workers).
 *
 * The files, from the bottom of the calls up (a file calls only files
 * listed before it):
 *	  common.c		helpers every file uses: installed version, owner, table
 *					lookups, argument checks, kept plans
 *	  metrics.c		the counters in shared memory, counted at commit
 *	  guard.c		the write guard: statements run as the extension owner
 *					(EventhubAsOwner), and the triggers that refuse others
 *	  access.c		per-organization grants and the checks made with them;
 *					what dropped roles leave behind
 *	  notify_key.c	the notification key, tokens and payloads
 *	  notify_queue.c the lock-free queue in shared memory to the notifier
 *	  notify.c		what a transaction published, announced at commit
 *	  notifier.c	the notifier background worker
 *	  publish.c		publish_event and register_organization
 *	  read.c		events_since, the read cursor
 *	  replicas.c	the replica registry: heartbeat and its kin
 *	  retention.c	deleting expired events: run_maintenance, cleanup_events
 *	  worker.c		the maintenance background worker
 *	  metrics_report.c eventhub.metrics(): the counters and what the tables say
 *	  eventhub.c	this file
 */
#include "postgres.h"

#include <limits.h>

#include "catalog/objectaccess.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/inval.h"

#include "eventhub.h"

PG_MODULE_MAGIC;

char	   *eventhub_database = NULL;
int			eventhub_retention = 3600;
int			eventhub_maintenance_interval = 60000;
int			eventhub_cleanup_batch_size = 10000;
int			eventhub_cleanup_batch_delay = -1;
int			eventhub_replica_ttl = 300;
bool		eventhub_retain_until_applied = true;
int			eventhub_max_retention = 86400;
bool		eventhub_compaction = true;
bool		eventhub_protect_tables = true;
bool		eventhub_notification_events = true;
int			eventhub_stalled_client_timeout = 30000;
int			eventhub_metrics_cache_time = 500;

/*
 * Defines the eventhub.* settings.
 */
static void
DefineSettings(void)
{
	/*
	 * PostgreSQL allows a PGC_POSTMASTER setting only while preloading (a
	 * library loaded later that defines one is a FATAL error), and only the
	 * worker needs this one.
	 */
	if (process_shared_preload_libraries_in_progress)
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
							"Spreads a large cleanup out so that it leaves the machine to publishers; -1 pauses three times as long as the last batch took.",
							&eventhub_cleanup_batch_delay,
							-1,
							-1, 60000,
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

	DefineCustomBoolVariable("eventhub.compaction",
							 "Sets whether retention keeps each entity's latest event.",
							 "On: retention removes only superseded events and deleted entities' tombstones, so that a snapshot is each entity's current state. Off (events carry partial updates): retention removes every expired event, as before 0.4.0, and an organization that loses an entity's latest event is marked incomplete (its snapshots raise ZE004).",
							 &eventhub_compaction,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("eventhub.notification_events",
							 "Sets whether notifications carry the events they announce.",
							 "On: the notifier seals a notification's events (up to 16 and about 5,600 bytes) under the organization's data key, and clients that hold the key deliver them without a query. Off: notifications are wake-ups only and clients fetch every event.",
							 &eventhub_notification_events,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("eventhub.protect_tables",
							 "Refuses writes to eventhub's tables except by eventhub's own functions.",
							 "Only a superuser may turn it off, for a repair; eventhub's functions do not need it.",
							 &eventhub_protect_tables,
							 true,
							 PGC_SUSET,
							 0,
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

	DefineCustomIntVariable("eventhub.metrics_cache_time",
							"Sets how long eventhub.metrics() reuses what it last read from the tables in this session.",
							"A scrape calls it several times in a row; only the first reads the tables. "
							"A session that committed a change reads them anew. 0 reads them at every call.",
							&eventhub_metrics_cache_time,
							500,
							0, 60000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("eventhub");
#else
	EmitWarningsOnPlaceholders("eventhub");
#endif
}

/*
 * The one relcache callback of the library (PostgreSQL allows ten per
 * backend, shared by every extension): each backend cache that rests on
 * one of eventhub's tables drops its copy when that table, or the whole
 * relcache, is invalidated.
 */
static void
RelcacheInvalidate(Datum arg, Oid relid)
{
	EventhubSchemaInvalidate(relid);
	EventhubGrantsInvalidate(relid);
	EventhubKeyInvalidate(relid);
}

static object_access_hook_type prev_object_access_hook = NULL;

/*
 * Object access hook: DROP ROLE takes the role's organization grants and
 * replicas in this database with it (access.c).
 */
static void
ObjectAccess(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == AuthIdRelationId)
		EventhubRoleDropped(objectId);
}

/*
 * Library load.  Every SQL function works without preloading; only the
 * background worker needs shared_preload_libraries = 'eventhub'.
 */
void
_PG_init(void)
{
	DefineSettings();
	CacheRegisterRelcacheCallback(RelcacheInvalidate, (Datum) 0);
	prev_object_access_hook = object_access_hook;
	object_access_hook = ObjectAccess;

	if (process_shared_preload_libraries_in_progress)
	{
		EventhubNotifyShmemInit();
		EventhubMetricsShmemInit();
		EventhubRegisterWorkers();
	}
}
