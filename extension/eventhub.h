/*
 * eventhub.h
 *	  Declarations shared by the files of the eventhub server extension.
 */
#ifndef EVENTHUB_H
#define EVENTHUB_H

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "storage/itemptr.h"
#include "utils/snapshot.h"
#include "utils/uuid.h"

/*
 * Channels that published events are announced on: both carry the same
 * notifications, and those of EVENTHUB_EVENTS_CHANNEL may also carry the
 * events they announce (an "events" member; the payload on
 * EVENTHUB_CHANNEL keeps its two members, as before 0.5.0).
 */
#define EVENTHUB_CHANNEL "eventhub"
#define EVENTHUB_EVENTS_CHANNEL "eventhub_events"

/* The schema every object of the extension lives in. */
#define EVENTHUB_SCHEMA "eventhub"

/*
 * Longest organization_id and correlation_id accepted, in bytes.  The same
 * bound keeps a correlation id far below the btree entry limit of its unique
 * index, and an organization id cheap to hash into a notification token.
 */
#define EVENTHUB_MAX_ID_BYTES 1024

/* Length of a notification token in hex digits (128 bits of HMAC-SHA-256). */
#define EVENTHUB_TOKEN_HEX_LEN 32

/* eventhub.c: settings */
extern char *eventhub_database;
extern int	eventhub_retention;			/* seconds */
extern int	eventhub_maintenance_interval;	/* milliseconds */
extern int	eventhub_cleanup_batch_size;
extern int	eventhub_cleanup_batch_delay;	/* milliseconds */
extern int	eventhub_replica_ttl;		/* seconds */
extern bool eventhub_retain_until_applied;
extern int	eventhub_max_retention;		/* seconds */
extern bool eventhub_compaction;
extern bool eventhub_protect_tables;
extern bool eventhub_notification_events;
extern int	eventhub_stalled_client_timeout;	/* milliseconds; 0: off */
extern int	eventhub_metrics_cache_time;	/* milliseconds; 0: off */
extern void _PG_init(void);

/* common.c: helpers at the bottom of every file's calls */
extern Oid	EventhubRelid(const char *relname);
extern char *EventhubInstalledVersion(void);
extern bool EventhubSchemaIsCurrent(void);
extern void EventhubRequireCurrentSchema(void);
extern void EventhubSchemaInvalidate(Oid relid);
extern Oid	EventhubExtensionOwner(void);
extern Snapshot EventhubCacheSnapshot(void);
extern bool EventhubRunningOwnScript(void);
extern void EventhubPinSettings(void);
extern Datum EventhubRequiredTextArg(FunctionCallInfo fcinfo, int argno, const char *argname,
									 int maxbytes);
/*
 * A query plan kept for the backend's life, prepared on first use, and
 * prepared again every EVENTHUB_REPLAN_EVERY uses: a plan chosen while a
 * table was small (a sequential scan) does not outlive the table's growth.
 */
typedef struct EventhubPlan
{
	SPIPlanPtr	plan;
	uint32		uses;
} EventhubPlan;

#define EVENTHUB_REPLAN_EVERY 1000

extern SPIPlanPtr EventhubKeptPlan(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes);
extern SPIPlanPtr EventhubKeptGenericPlan(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes);
extern SPIPlanPtr EventhubKeptFastPlan(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes);

/*
 * What a row costs a page's or a batch's max_bytes: the stored size of its
 * variable-length values plus this (snapshot_entities, transactions_since).
 */
#define EVENTHUB_ROW_OVERHEAD_BYTES 160
extern int64 EventhubStoredSize(TupleTableSlot *slot, int col);
extern int64 EventhubMaxBytesArgument(FunctionCallInfo fcinfo, int argno);
extern void EventhubInitResultStore(FunctionCallInfo fcinfo);

/*
 * metrics.c: the counters of eventhub.metrics() in shared memory (zero
 * without preloading).  EventhubCountAtCommit counts for when the current
 * transaction commits (a rolled-back savepoint takes its counts back);
 * EventhubCountNow for what is already done.
 */
typedef enum EventhubCounter
{
	EVENTHUB_COUNTER_PUBLISHED,
	EVENTHUB_COUNTER_RETENTION_DELETED,
	EVENTHUB_COUNTER_NOTIFICATIONS_SENT,
	EVENTHUB_COUNTER_STALLED_TERMINATED,
	EVENTHUB_NUM_COUNTERS
} EventhubCounter;

extern void EventhubCountAtCommit(EventhubCounter c, uint64 n);
extern void EventhubRetentionPassEndsAtCommit(void);
extern void EventhubCountNow(EventhubCounter c, uint64 n);
extern void EventhubReadCounters(uint64 *counts, TimestampTz *retention_pass_ended);
extern void EventhubMetricsShmemInit(void);

/*
 * guard.c: only eventhub's own functions write its tables, through
 * EventhubAsOwner, which runs their statements as the extension's owner.
 */
typedef void (*EventhubOwnerWork) (void *arg);

extern void EventhubAsOwner(EventhubOwnerWork work, void *arg);
extern Oid	EventhubCallingRole(void);
extern int	EventhubExecuteAsOwner(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes,
								   Datum *values, const char *nulls, long count);

/* access.c: per-organization grants and replica ownership */
typedef enum EventhubPrivilege
{
	EVENTHUB_PRIV_PUBLISH = 1,
	EVENTHUB_PRIV_READ = 2
} EventhubPrivilege;

extern bool EventhubAccessControlEnabled(void);
extern void EventhubGrantsInvalidate(Oid relid);
extern bool EventhubHasOrgPrivilege(Oid role, const char *org, int orglen, EventhubPrivilege priv);
extern void EventhubCheckOrgPrivilege(Datum org, EventhubPrivilege priv);
extern int64 EventhubRemoveDroppedRoles(void);
extern void EventhubRoleDropped(Oid role);

/*
 * notify_key.c, notify_queue.c, notify.c, notifier.c: notification tokens,
 * the queue to the notifier, the commit-time announcements, the notifier
 * (their shared internals are in notify.h)
 */
extern void EventhubNotificationToken(const char *org, int orglen, char *out);
extern void EventhubKeyInvalidate(Oid relid);
extern void EventhubRecordPublished(Datum org, const pg_uuid_t *version, int64 revision);
extern int64 EventhubTransactionFirstRevision(Datum org);
extern void EventhubNotifyShmemInit(void);
extern PGDLLEXPORT void eventhub_notifier_main(Datum main_arg);

/* replicas.c */
extern int64 EventhubForgetSettledSplits(void);

/* retention.c */
typedef struct EventhubRetention
{
	TimestampTz expired_before;	/* eventhub.retention */
	TimestampTz forced_before;	/* eventhub.max_retention, or +infinity */
	TimestampTz live_since;		/* heartbeats after this are live replicas */
	TimestampTz resume_from;	/* where the pass's next batch starts: after */
	ItemPointerData resume_tid; /* (resume_from, resume_tid) */
} EventhubRetention;

/* A retention batch looks at no more than this many times its size of events. */
#define EVENTHUB_SCAN_FACTOR 10

extern void EventhubRetentionLimits(EventhubRetention *r, TimestampTz now);
extern void EventhubRetentionNow(EventhubRetention *r);
extern int64 EventhubDeleteExpiredBatch(EventhubRetention *r, int batch_size, bool *more);
extern int64 EventhubRemoveStaleReplicas(void);

/* worker.c */
extern void EventhubRegisterWorkers(void);
extern PGDLLEXPORT void eventhub_worker_main(Datum main_arg);

#endif							/* EVENTHUB_H */
