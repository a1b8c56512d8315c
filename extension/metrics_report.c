/*
 * metrics_report.c
 *	  eventhub.metrics(): what operators alert on, in Prometheus' data
 *	  model, one row per series.
 *
 * The counters come from shared memory (metrics.c); everything else is
 * read from the tables in one statement, as the extension's owner, with
 * the visibility rule of the replica_status view applied for the calling
 * role (under access control: the progress of the organizations it may
 * read, its own replicas, the organizations it may read).  Like
 * replica_status, a replica's configuration hash is compared with those of
 * every live replica, visible or not.
 *
 * No series is per organization: their number grows with replicas only.
 * The statement reads no progress row of a replica that was caught up at
 * its last heartbeat: heartbeat() records each row's head
 * (replica_progress.head_revision), and the rows behind it are in a
 * partial index; it compares hashes only at the pairs heartbeat() found
 * split (eventhub.config_splits).  Its cost grows with the organizations
 * (one count), the rows behind (one index probe each for the oldest event
 * they have not applied) and the split pairs; see docs/sql.md.  A row
 * caught up at its replica's last heartbeat counts as caught up until the
 * next one, even if its organization moved on since: lag is late by at
 * most a heartbeat interval, which the heartbeat age shows.
 *
 * Per replica, as `eventhub status` reports it from replica_status:
 * lag_events is the sum of lag_revisions over its organizations where it is
 * behind; lag_seconds the greatest behind_for (when the oldest event a
 * replica has not applied is no longer kept, the age of the organization's
 * head event, a lower bound, instead of NULL); a configuration hash
 * "mismatches" where, among the live replicas at the same organization and
 * revision, it is not the one hash reported by more replicas than any other
 * (so two replicas that disagree both mismatch).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "common.h"
#include "metrics.h"
#include "guard.h"
#include "access.h"
#include "retention.h"
#include "metrics_report.h"

static int	eventhub_metrics_cache_time = 500;

/*
 * Defines eventhub.metrics_cache_time.
 */
void
EventhubDefineMetricsReportSettings(void)
{
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
}

PG_FUNCTION_INFO_V1(metrics);

/* The series' names, types and help texts, in the order they are returned. */
typedef enum Series
{
	S_PUBLISHED,
	S_ORGANIZATIONS,
	S_EVENTS_KEPT,
	S_REPLICAS,
	S_REPLICA_LAG_EVENTS,
	S_REPLICA_LAG_SECONDS,
	S_REPLICA_HEARTBEAT_AGE,
	S_REPLICA_HASH_MISMATCH,
	S_HASH_DISAGREEING,
	S_ORGS_BEHIND,
	S_LAG_EVENTS_MAX,
	S_OLDEST_UNAPPLIED_AGE,
	S_RETENTION_DELETED,
	S_RETENTION_LAST_PASS,
	S_RETENTION_HELD_BACK,
	S_NOTIFICATIONS_SENT,
	S_NOTIFICATION_QUEUE_USAGE,
	S_STALLED_TERMINATED,
	S_COUNT
} Series;

typedef struct SeriesInfo
{
	const char *name;
	bool		counter;
	const char *help;
} SeriesInfo;

static const SeriesInfo series[S_COUNT] = {
	[S_PUBLISHED] = {"eventhub_events_published_total", true,
	"Events published by committed transactions since the server started."},
	[S_ORGANIZATIONS] = {"eventhub_organizations", false,
	"Registered organizations."},
	[S_EVENTS_KEPT] = {"eventhub_events_kept", false,
	"Events kept in eventhub.events (the planner's estimate, as of the last VACUUM or ANALYZE)."},
	[S_REPLICAS] = {"eventhub_replicas", false,
	"Registered replicas, live or stale (no heartbeat for longer than eventhub.replica_ttl)."},
	[S_REPLICA_LAG_EVENTS] = {"eventhub_replica_lag_events", false,
	"Events the replica has not applied, summed over the organizations it follows."},
	[S_REPLICA_LAG_SECONDS] = {"eventhub_replica_lag_seconds", false,
	"Age of the oldest event the replica has not applied (0 when caught up)."},
	[S_REPLICA_HEARTBEAT_AGE] = {"eventhub_replica_heartbeat_age_seconds", false,
	"Seconds since the replica's last heartbeat."},
	[S_REPLICA_HASH_MISMATCH] = {"eventhub_replica_config_hash_mismatch", false,
	"1 when, for some organization, the replica's configuration hash is not the one most live replicas at its revision report."},
	[S_HASH_DISAGREEING] = {"eventhub_replicas_config_hash_disagreeing", false,
	"Replicas whose configuration hash differs from the one most live replicas report."},
	[S_ORGS_BEHIND] = {"eventhub_organizations_behind", false,
	"Organizations on which some live replica is behind the head."},
	[S_LAG_EVENTS_MAX] = {"eventhub_replica_lag_events_max", false,
	"The most events a live replica has not applied in one organization."},
	[S_OLDEST_UNAPPLIED_AGE] = {"eventhub_oldest_unapplied_event_age_seconds", false,
	"Age of the oldest event some live replica has not applied (0 when all are caught up)."},
	[S_RETENTION_DELETED] = {"eventhub_retention_deleted_events_total", true,
	"Events deleted by retention (the background worker or run_maintenance) since the server started."},
	[S_RETENTION_LAST_PASS] = {"eventhub_retention_last_pass_timestamp_seconds", false,
	"Unix time when the last retention pass ended (0: none since the server started)."},
	[S_RETENTION_HELD_BACK] = {"eventhub_retention_held_back_events", false,
	"Expired events kept because a live replica has not applied them (eventhub.retain_until_applied)."},
	[S_NOTIFICATIONS_SENT] = {"eventhub_notifications_sent_total", true,
	"Notifications sent on channel eventhub (by the notifier or by publishing transactions) since the server started."},
	[S_NOTIFICATION_QUEUE_USAGE] = {"eventhub_notification_queue_usage_ratio", false,
	"Fraction of PostgreSQL's notification queue in use (pg_notification_queue_usage())."},
	[S_STALLED_TERMINATED] = {"eventhub_stalled_clients_terminated_total", true,
	"Client sessions terminated for not reading their notifications (eventhub.stalled_client_timeout) since the server started."},
};

/* Columns of the rows of statement metrics_report.read_tables (statements.c). */
enum
{
	C_REPLICA, C_LIVE, C_HEARTBEAT_AGE, C_LAG_EVENTS, C_LAG_SECONDS, C_MISMATCH,
	C_ORGANIZATIONS, C_BEHIND, C_LAG_MAX, C_OLDEST, C_HELD_BACK, C_KEPT
};

typedef struct MetricsOut
{
	Tuplestorestate *store;
	TupleDesc	desc;
} MetricsOut;

/* One replica's figures in a reading. */
typedef struct ReplicaReading
{
	char	   *labels;			/* {"replica": "<id>"} */
	bool		live;
	bool		mismatch;
	double		heartbeat_age;
	double		lag_events;
	double		lag_seconds;
} ReplicaReading;

/*
 * What metrics() read from the tables, kept in this backend for the next
 * calls (eventhub.metrics_cache_time): a scrape of the shipped exporter
 * calls metrics() three times in a row on one connection, and only the
 * first needs to read the tables.  The counters and the notification
 * queue's usage are not in it: they are read at every call.
 *
 * A reading is reused only by the role that made it, with access control
 * as it was, from a transaction that has written nothing, and while it is
 * younger than eventhub.metrics_cache_time.  A reading made in a
 * transaction that had written is not kept, and a transaction of this
 * backend that wrote forgets the reading when it commits or prepares: a
 * session sees its own changes at once.  (XactLastCommitEnd would not do:
 * a read-only transaction that prunes a page moves it too.)  Ages
 * (heartbeat age, lag in seconds) are moved on by the reading's age when
 * reused.
 */
typedef struct Reading
{
	bool		valid;
	Oid			userid;
	bool		access_control;
	TimestampTz at;				/* the start of the transaction it was read in */
	int			nreplicas;
	ReplicaReading *replicas;
	double		organizations;
	double		behind;
	double		lag_max;
	double		oldest;
	double		held_back;
	double		kept;
} Reading;

static Reading reading;
static MemoryContext reading_context = NULL;
static bool forget_registered = false;

/* Forgets the reading when a transaction of this backend that wrote ends. */
static void
ForgetReadingAtWrite(XactEvent event, void *arg)
{
	(void) arg;
	if ((event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PRE_PREPARE) &&
		TransactionIdIsValid(GetTopTransactionIdIfAny()))
		reading.valid = false;
}

/* Adds one series: labels is a JSON object's text. */
static void
Put(MetricsOut *out, Series s, const char *labels, double value)
{
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	values[0] = CStringGetTextDatum(series[s].name);
	values[1] = DirectFunctionCall1(jsonb_in, CStringGetDatum(labels));
	values[2] = CStringGetTextDatum(series[s].counter ? "counter" : "gauge");
	values[3] = CStringGetTextDatum(series[s].help);
	values[4] = Float8GetDatum(value);
	tuplestore_putvalues(out->store, out->desc, values, nulls);
}

/* {"replica": "<id>"}, the id escaped. */
static char *
ReplicaLabels(const char *replica_id)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"replica\": ");
	escape_json(&buf, replica_id);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static double
Float8Column(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col + 1, &isnull);

	return isnull ? 0 : DatumGetFloat8(d);
}

static bool
BoolColumn(HeapTuple tuple, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, col + 1, &isnull);

	return !isnull && DatumGetBool(d);
}

/*
 * Whether the kept reading may answer a call in this transaction, which
 * started at now; sets *age to its age in seconds.
 */
static bool
ReadingUsable(TimestampTz now, bool access_control, double *age)
{
	if (!reading.valid || eventhub_metrics_cache_time <= 0)
		return false;
	if (reading.userid != GetUserId() || reading.access_control != access_control)
		return false;
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return false;
	if (now < reading.at ||
		now - reading.at >= (int64) eventhub_metrics_cache_time * 1000)
		return false;
	*age = (double) (now - reading.at) / USECS_PER_SEC;
	return true;
}

/*
 * Keeps the per-replica rows of the metrics statement (rows, n of them) in
 * reading, in reading_context.
 */
static void
KeepReplicaRows(SPITupleTable *rows, uint64 n)
{
	TupleDesc	desc = rows->tupdesc;
	MemoryContext old = MemoryContextSwitchTo(reading_context);

	reading.replicas = palloc0(sizeof(ReplicaReading) * n);
	reading.nreplicas = 0;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = rows->vals[i];
		char	   *id = SPI_getvalue(tuple, desc, C_REPLICA + 1);
		ReplicaReading *r;

		/* No visible replica: one row of NULLs carrying the global figures. */
		if (id == NULL)
			continue;
		r = &reading.replicas[reading.nreplicas++];
		r->labels = ReplicaLabels(id);
		r->live = BoolColumn(tuple, desc, C_LIVE);
		r->mismatch = BoolColumn(tuple, desc, C_MISMATCH);
		r->heartbeat_age = Float8Column(tuple, desc, C_HEARTBEAT_AGE);
		r->lag_events = Float8Column(tuple, desc, C_LAG_EVENTS);
		r->lag_seconds = Float8Column(tuple, desc, C_LAG_SECONDS);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Reads the tables into the kept reading, with one statement run as the
 * owner, as of now (the transaction's start).
 */
static void
ReadTables(TimestampTz now, bool access_control)
{
	static EventhubPlan plan;
	Datum		args[4];
	EventhubRetention limits;
	SPITupleTable *rows;
	TupleDesc	desc;
	HeapTuple	first;
	int			ret;

	/*
	 * Retention's limits, and the replica_status view's live replicas, as
	 * of now.
	 */
	EventhubRetentionLimits(&limits, now);
	args[0] = TimestampTzGetDatum(limits.live_since);
	args[1] = TimestampTzGetDatum(limits.expired_before);
	args[2] = TimestampTzGetDatum(limits.forced_before);
	args[3] = BoolGetDatum(access_control);

	reading.valid = false;
	if (!forget_registered)
	{
		RegisterXactCallback(ForgetReadingAtWrite, NULL);
		forget_registered = true;
	}
	if (reading_context == NULL)
		reading_context = AllocSetContextCreate(TopMemoryContext, "eventhub metrics reading",
												ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(reading_context);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	ret = EventhubExecuteAsOwner(&plan, &EventhubSqlMetricsReportReadTables, args, NULL, 0);
	if (ret != SPI_OK_SELECT || SPI_processed < 1)
		elog(ERROR, "eventhub: reading the metrics failed: %s", SPI_result_code_string(ret));
	rows = SPI_tuptable;
	desc = rows->tupdesc;
	first = rows->vals[0];

	KeepReplicaRows(rows, SPI_processed);
	reading.organizations = Float8Column(first, desc, C_ORGANIZATIONS);
	reading.behind = Float8Column(first, desc, C_BEHIND);
	reading.lag_max = Float8Column(first, desc, C_LAG_MAX);
	reading.oldest = Float8Column(first, desc, C_OLDEST);
	reading.held_back = Float8Column(first, desc, C_HELD_BACK);
	reading.kept = Float8Column(first, desc, C_KEPT);
	SPI_finish();

	reading.userid = GetUserId();
	reading.access_control = access_control;
	reading.at = now;
	/* What a transaction that wrote read may include its own changes. */
	reading.valid = !TransactionIdIsValid(GetTopTransactionIdIfAny());
}

/* pg_notification_queue_usage(), a function of no argument. */
static double
NotificationQueueUsage(void)
{
	LOCAL_FCINFO(fcinfo, 0);

	InitFunctionCallInfoData(*fcinfo, NULL, 0, InvalidOid, NULL, NULL);
	return DatumGetFloat8(pg_notification_queue_usage(fcinfo));
}

/* An age that is 0 when there is none, moved on by age seconds. */
static double
Aged(double value, double age)
{
	return value > 0 ? value + age : 0;
}

/*
 * Puts the per-replica series, each family's series together, from the
 * reading; age: how much older the reading is than the call.
 */
static void
PutReplicaSeries(MetricsOut *out, double age)
{
	for (int i = 0; i < reading.nreplicas; i++)
		Put(out, S_REPLICA_LAG_EVENTS, reading.replicas[i].labels, reading.replicas[i].lag_events);
	for (int i = 0; i < reading.nreplicas; i++)
		Put(out, S_REPLICA_LAG_SECONDS, reading.replicas[i].labels,
			Aged(reading.replicas[i].lag_seconds, age));
	for (int i = 0; i < reading.nreplicas; i++)
		Put(out, S_REPLICA_HEARTBEAT_AGE, reading.replicas[i].labels,
			reading.replicas[i].heartbeat_age + age);
	for (int i = 0; i < reading.nreplicas; i++)
		Put(out, S_REPLICA_HASH_MISMATCH, reading.replicas[i].labels,
			reading.replicas[i].mismatch ? 1 : 0);
}

/*
 * metrics() -> TABLE (name text, labels jsonb, type text, help text, value
 *					   double precision)
 *
 * Every series, the families in a fixed order, per-replica series by
 * replica id.
 */
Datum
metrics(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	bool		access_control;
	MetricsOut	out;
	uint64		counts[EVENTHUB_NUM_COUNTERS];
	TimestampTz pass_ended;
	double		age = 0;
	int			live = 0,
				stale = 0,
				mismatched = 0;

	EventhubRequireCurrentSchema();
	EventhubInitResultStore(fcinfo);
	out.store = rsinfo->setResult;
	out.desc = rsinfo->setDesc;

	access_control = EventhubAccessControlEnabled();
	if (!ReadingUsable(now, access_control, &age))
		ReadTables(now, access_control);
	EventhubReadCounters(counts, &pass_ended);

	for (int i = 0; i < reading.nreplicas; i++)
	{
		if (reading.replicas[i].live)
			live++;
		else
			stale++;
		if (reading.replicas[i].mismatch)
			mismatched++;
	}

	Put(&out, S_PUBLISHED, "{}", (double) counts[EVENTHUB_COUNTER_PUBLISHED]);
	Put(&out, S_ORGANIZATIONS, "{}", reading.organizations);
	Put(&out, S_EVENTS_KEPT, "{}", reading.kept);
	Put(&out, S_REPLICAS, "{\"state\": \"live\"}", live);
	Put(&out, S_REPLICAS, "{\"state\": \"stale\"}", stale);
	PutReplicaSeries(&out, age);
	Put(&out, S_HASH_DISAGREEING, "{}", mismatched);
	Put(&out, S_ORGS_BEHIND, "{}", reading.behind);
	Put(&out, S_LAG_EVENTS_MAX, "{}", reading.lag_max);
	Put(&out, S_OLDEST_UNAPPLIED_AGE, "{}", Aged(reading.oldest, age));
	Put(&out, S_RETENTION_DELETED, "{}", (double) counts[EVENTHUB_COUNTER_RETENTION_DELETED]);
	Put(&out, S_RETENTION_LAST_PASS, "{}", pass_ended == 0 ? 0 :
		(double) (pass_ended - SetEpochTimestamp()) / USECS_PER_SEC);
	Put(&out, S_RETENTION_HELD_BACK, "{}", reading.held_back);
	Put(&out, S_NOTIFICATIONS_SENT, "{}", (double) counts[EVENTHUB_COUNTER_NOTIFICATIONS_SENT]);
	Put(&out, S_NOTIFICATION_QUEUE_USAGE, "{}", NotificationQueueUsage());
	Put(&out, S_STALLED_TERMINATED, "{}", (double) counts[EVENTHUB_COUNTER_STALLED_TERMINATED]);

	return (Datum) 0;
}
