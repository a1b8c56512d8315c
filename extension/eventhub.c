/*
 * eventhub.c
 *	  Module entry point of the eventhub extension: what _PG_init sets up
 *	  (each module's settings, the relcache callback, the object access
 *	  hook, the notification queue, the metrics' counters, the background
 *	  workers).
 *
 * The files, from the bottom of the calls up: a file calls only files
 * listed before it, and includes only their headers (each X.c declares
 * what it offers the files above it in X.h).  check_layers.sh reads these
 * "layer:" lines and proves both from the object files and the #include
 * lines.  PostgreSQL enters at every level (SQL-callable functions,
 * background workers, callbacks and hooks); the order is about the calls
 * the files make to each other.
 *	  layer: statements.c	the SQL statements the files run, each one
 *							constant, with its parameters' types
 *	  layer: statements_retention.c retention's statements
 *	  layer: common.c		helpers every file uses: installed version, owner,
 *							table lookups, argument checks, kept plans
 *	  layer: metrics.c		the counters in shared memory, counted at commit
 *	  layer: waiters.c		the sessions waiting in wait_for_events, in
 *							shared memory, and the calls that wake them
 *	  layer: guard.c		the write guard: statements run as the extension
 *							owner (EventhubAsOwner), the triggers that refuse
 *							others
 *	  layer: access.c		per-organization grants and the checks made with
 *							them; what dropped roles leave behind
 *	  layer: notify_key.c	the notification key, tokens and payloads
 *	  layer: notify_queue.c	the lock-free queue in shared memory to the
 *							notifier
 *	  layer: notify.c		what a transaction published, announced at commit
 *	  layer: notifier.c		the notifier background worker
 *	  layer: publish.c		publish_event and register_organization
 *	  layer: read.c			events_since and transactions_since, the read
 *							cursor
 *	  layer: wait.c			wait_for_events: waiting without LISTEN
 *	  layer: standby_waker.c the worker that wakes waiters on a hot standby
 *	  layer: snapshot.c		snapshot_head, snapshot_entities, declare_full_state
 *	  layer: heartbeat_args.c what a heartbeat reports, checked
 *	  layer: replicas.c		the replica registry: heartbeat and its kin
 *	  layer: retention.c	deleting expired events: run_maintenance,
 *							cleanup_events
 *	  layer: worker.c		the maintenance background worker
 *	  layer: metrics_report.c eventhub.metrics(): the counters and what the
 *							tables say
 *	  layer: statement_list.c eventhub.statements(): every statement
 *	  layer: eventhub.c		this file
 */
#include "postgres.h"

#include "catalog/objectaccess.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/inval.h"

#include "common.h"
#include "metrics.h"
#include "access.h"
#include "notify_key.h"
#include "notify_queue.h"
#include "notifier.h"
#include "standby_waker.h"
#include "waiters.h"
#include "retention.h"
#include "worker.h"
#include "metrics_report.h"
#include "guard.h"

PG_MODULE_MAGIC;

extern void _PG_init(void);

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
	EventhubDefineCommonSettings();
	EventhubDefineGuardSettings();
	EventhubDefineNotifierSettings();
	EventhubDefineStandbyWakerSettings();
	EventhubDefineRetentionSettings();
	EventhubDefineWorkerSettings();
	EventhubDefineMetricsReportSettings();
#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("eventhub");
#else
	EmitWarningsOnPlaceholders("eventhub");
#endif

	CacheRegisterRelcacheCallback(RelcacheInvalidate, (Datum) 0);
	prev_object_access_hook = object_access_hook;
	object_access_hook = ObjectAccess;

	if (process_shared_preload_libraries_in_progress)
	{
		EventhubNotifyShmemInit();
		EventhubMetricsShmemInit();
		EventhubWaitersShmemInit();
		EventhubRegisterWorkers();
	}
}
