/*
 * notifier.c
 *	  The notifier background worker: sends, in short transactions of its
 *	  own, the notifications publishers queued after their commits
 *	  (notify_queue.c), one per organization per batch, with its last
 *	  version.
 *
 * No publisher takes the lock that NOTIFY takes at commit (on the whole
 * cluster's notification queue), and a burst of commits costs one lock
 * acquisition and one signal per listener, not one each.  See notify.c
 * for when publishers send their notifications themselves instead.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "common.h"
#include "metrics.h"
#include "waiters.h"
#include "notify_key.h"
#include "notify_queue.h"
#include "notify.h"
#include "notifier.h"

static bool eventhub_notification_events = true;

/*
 * Defines eventhub.notification_events, which the notifier reads.
 */
void
EventhubDefineNotifierSettings(void)
{
	DefineCustomBoolVariable("eventhub.notification_events",
							 "Sets whether notifications carry the events they announce.",
							 "On: the notifier seals a notification's events (up to 16 and about 5,600 bytes) under the organization's data key, and clients that hold the key deliver them without a query. Off: notifications are wake-ups only and clients fetch every event.",
							 &eventhub_notification_events,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
}

/* The most entries the notifier takes into one transaction. */
#define NOTIFIER_BATCH 8192

/*
 * How long the notifier, once woken, lets publishers' commits gather before
 * it sends, in milliseconds: 4 r + r^2, where r is the rate at which
 * announcements arrived lately (per millisecond), at most
 * NOTIFIER_MAX_GATHER_MS.  A commit that comes alone (under about 250 per
 * second) is announced at once.  Under load each notification transaction
 * announces many commits: every notification transaction signals every
 * listening backend, and with 64 idle listeners on two cores, 20 of them a
 * second (4 r alone, at 12,000 commits/s) took 6% of the machine from
 * publishers.  The square makes the wake-ups fall as the rate nears what
 * the machine can take: at 1,000 commits/s 5 ms (about 200 a second), at
 * 5,000/s 45 ms, from about 12,000/s 200 ms (5 a second).
 *
 * The rate is counted over windows of at least NOTIFIER_RATE_WINDOW_MS, the
 * last complete window's counting.  Not from one wake-up to the next: at a
 * few hundred commits a second, one in five comes within a millisecond of
 * the one before (they arrive at random), and a rate read off that one gap
 * made the next commits wait milliseconds for company that was not coming.
 */
#define NOTIFIER_GATHER_PER_RATE 4.0
#define NOTIFIER_MAX_GATHER_MS 200
#define NOTIFIER_RATE_WINDOW_MS 100

/* A coalesced announcement: an organization's token and last version. */
typedef struct PendingNotify
{
	uint8		token[EVENTHUB_TOKEN_BYTES];	/* hash key */
	pg_uuid_t	version;
	/* The events announced, first..last, when they may travel sealed */
	bool		sealable;
	int64		first;
	int64		last;
	int			orglen;
	char		org[EVENTHUB_ANNOUNCED_ORG_BYTES];
} PendingNotify;

/*
 * A notification carries the events it announces, sealed, when they are
 * at most this many and their sealed form fits in the notification (NOTIFY
 * takes payloads under 8000 bytes: base64 makes 4 bytes of 3, and the
 * token, version and keys take about 120).  Otherwise readers fetch them.
 */
#define NOTIFIER_SEAL_MAX_EVENTS 16
#define NOTIFIER_SEAL_MAX_BYTES 5600

/* The version of the sealed events' layout (protocol.md). */
#define SEALED_FORMAT 1

/*
 * What one batch gathers, allocated once: each organization's last version
 * (pending), the organizations in the order they first came (order), and
 * the payload buffer.  A wake-up allocates nothing.
 */
static HTAB *pending = NULL;
static PendingNotify **order = NULL;
static StringInfoData payload;
static StringInfoData plain;
static StringInfoData sealed;

static void
InitBatch(void)
{
	HASHCTL		ctl;
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "eventhub notifier",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	ctl.keysize = EVENTHUB_TOKEN_BYTES;
	ctl.entrysize = sizeof(PendingNotify);
	ctl.hcxt = cxt;
	pending = hash_create("eventhub pending notifications", 256, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	order = palloc(sizeof(PendingNotify *) * NOTIFIER_BATCH);
	initStringInfo(&payload);
	initStringInfo(&plain);
	initStringInfo(&sealed);
	MemoryContextSwitchTo(old);
}

static void
PutInt64(StringInfo buf, int64 v)
{
	uint64		u = (uint64) v;
	char		b[8];

	for (int i = 7; i >= 0; i--, u >>= 8)
		b[i] = (char) (u & 0xff);
	appendBinaryStringInfo(buf, b, 8);
}

static void
PutText(StringInfo buf, Datum d)
{
	text	   *t = DatumGetTextPP(d);
	uint32		len = VARSIZE_ANY_EXHDR(t);
	char		b[4] = {(char) (len >> 24), (char) (len >> 16), (char) (len >> 8), (char) len};

	appendBinaryStringInfo(buf, b, 4);
	appendBinaryStringInfo(buf, VARDATA_ANY(t), len);
}

/* A timestamptz as microseconds since the Unix epoch. */
static int64
UnixMicros(TimestampTz t)
{
	return t + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/*
 * Lays out the events read (tab, n rows from revision from: the event
 * before the first announced one when skip is 1) into plain, as
 * protocol.md describes; false when they are not the ones announced or do
 * not fit.
 */
static bool
LayOutEvents(PendingNotify *p, int64 from, uint64 skip, SPITupleTable *tab, uint64 n)
{
	resetStringInfo(&plain);
	appendStringInfoChar(&plain, SEALED_FORMAT);
	PutInt64(&plain, UnixMicros(GetCurrentTimestamp()));

	/*
	 * The version of the event before the first: a reader delivers them only
	 * if that is the version at its cursor, as transactions_since checks
	 * after_version (a history rewritten by a failover).
	 */
	appendStringInfoChar(&plain, skip ? 1 : 0);
	if (skip)
	{
		bool		isnull;

		appendBinaryStringInfo(&plain,
							   (const char *) DatumGetUUIDP(SPI_getbinval(tab->vals[0], tab->tupdesc, 2,
																		  &isnull))->data,
							   UUID_LEN);
	}
	appendStringInfoChar(&plain, (char) ((n - skip) >> 8));
	appendStringInfoChar(&plain, (char) (n - skip));
	for (uint64 i = skip; i < n; i++)
	{
		HeapTuple	tuple = tab->vals[i];
		TupleDesc	desc = tab->tupdesc;
		bool		isnull;
		int64		revision = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		pg_uuid_t  *version = DatumGetUUIDP(SPI_getbinval(tuple, desc, 2, &isnull));
		bool		ends = true;

		if (revision != from + (int64) i)
			return false;
		if (i + 1 == n && memcmp(version, &p->version, UUID_LEN) != 0)
			return false;		/* not the state announced */
		if (i + 1 < n)
		{
			HeapTuple	next = tab->vals[i + 1];

			ends = DatumGetInt64(SPI_getbinval(next, desc, 10, &isnull)) ==
				DatumGetInt64(SPI_getbinval(next, desc, 1, &isnull));
		}
		PutInt64(&plain, revision);
		PutInt64(&plain, DatumGetInt64(SPI_getbinval(tuple, desc, 10, &isnull)));
		appendStringInfoChar(&plain, ends ? 1 : 0);
		appendBinaryStringInfo(&plain, (const char *) version->data, UUID_LEN);
		PutInt64(&plain, UnixMicros(DatumGetTimestampTz(SPI_getbinval(tuple, desc, 3, &isnull))));
		PutInt64(&plain, UnixMicros(DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull))));
		for (int col = 5; col <= 9; col++)
			PutText(&plain, SPI_getbinval(tuple, desc, col, &isnull));
		if (plain.len > NOTIFIER_SEAL_MAX_BYTES)
			return false;
	}
	return true;
}

/*
 * Seals the events p announces into sealed (base64), as protocol.md lays
 * them out; false when they cannot travel: not all kept (retention), more
 * than fit, or the version read is not the one announced.  Runs in the
 * notification transaction, connected to SPI.  The notifier reads as the
 * bootstrap superuser: every name and operator is qualified.
 */
static bool
SealEvents(PendingNotify *p)
{
	static EventhubPlan plan;
	Datum		values[3];
	uint8		key[EVENTHUB_DATA_KEY_BYTES];
	uint8		aad[EVENTHUB_TOKEN_BYTES + UUID_LEN];
	int			ret;
	int64		from = p->first > 1 ? p->first - 1 : p->first;
	uint64		skip;
	bool		ok;

	values[0] = PointerGetDatum(cstring_to_text_with_len(p->org, p->orglen));
	values[1] = Int64GetDatum(from);
	values[2] = Int64GetDatum(p->last);
	ret = SPI_execute_plan(EventhubKeptGenericPlan(&plan, &EventhubSqlNotifierAnnouncedEvents),
						   values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading the announced events failed: %s", SPI_result_code_string(ret));
	/* Every event announced, and the one before (its version: see below). */
	skip = from < p->first ? 1 : 0;
	ok = SPI_processed == (uint64) (p->last - from + 1) &&
		LayOutEvents(p, from, skip, SPI_tuptable, SPI_processed);
	/* Freed now: a batch reads for up to NOTIFIER_BATCH organizations. */
	SPI_freetuptable(SPI_tuptable);
	if (!ok)
		return false;
	EventhubDataKey(p->org, p->orglen, key);
	memcpy(aad, p->token, EVENTHUB_TOKEN_BYTES);
	memcpy(aad + EVENTHUB_TOKEN_BYTES, p->version.data, UUID_LEN);
	resetStringInfo(&sealed);
	return EventhubSeal(key, aad, sizeof(aad), plain.data, plain.len, &sealed);
}

/*
 * Takes up to NOTIFIER_BATCH announcements from the queue into pending,
 * one entry per organization (in order, n of them), keeping the last
 * version of each.  Returns how many it took; *n gets the organizations.
 */
static int
TakeQueued(int *n)
{
	int			taken = 0;
	EventhubAnnouncement a;
	bool		ours;

	*n = 0;
	for (; taken < NOTIFIER_BATCH && EventhubQueuePop(&a, &ours); taken++)
	{
		PendingNotify *p;
		bool		found;

		if (!ours)
			continue;
		EventhubWakeOrganization(MyDatabaseId, a.orglen >= 0 ? a.org : NULL, a.orglen, a.orghash,
								 a.last_revision);
		p = hash_search(pending, a.token, HASH_ENTER, &found);
		if (!found)
		{
			order[(*n)++] = p;
			p->sealable = a.orglen >= 0;
			p->first = a.first_revision;
			p->orglen = Max(a.orglen, 0);
			memcpy(p->org, a.org, p->orglen);
		}
		else if (a.first_revision != p->last + 1)
			p->sealable = false;	/* an announcement between them was dropped */
		p->last = a.last_revision;
		p->version = a.version;
	}
	return taken;
}

/*
 * Tells every client to poll (the zero token), since announcements were
 * lost; logs how many the full queue dropped since the last batch.
 */
static void
NotifyPollAll(uint64 dropped, uint64 dropped_seen)
{
	static const uint8 zero_token[EVENTHUB_TOKEN_BYTES] = {0};
	static const pg_uuid_t zero_version = {{0}};

	if (dropped != dropped_seen)
	{
		ereport(LOG,
				(errmsg("eventhub notification queue was full: " UINT64_FORMAT " announcements were dropped",
						dropped - dropped_seen),
				 errdetail("Clients were told to poll instead.")));
	}
	EventhubWakeDatabase(MyDatabaseId);
	EventhubFormatPayload(&payload, zero_token, &zero_version, NULL);
	Async_Notify(EVENTHUB_CHANNEL, payload.data);
	Async_Notify(EVENTHUB_EVENTS_CHANNEL, payload.data);
	EventhubCountAtCommit(EVENTHUB_COUNTER_NOTIFICATIONS_SENT, 1);
}

/*
 * Sends one notification per organization taken on each channel, those on
 * EVENTHUB_EVENTS_CHANNEL with the events sealed in when they can be.
 */
static void
NotifyTaken(int n)
{
	/* Not while the extension is being dropped or not there. */
	bool		readable = eventhub_notification_events && OidIsValid(EventhubRelid("events"));

	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	for (int i = 0; i < n; i++)
	{
		PendingNotify *p = order[i];
		bool		seal = readable && p->sealable &&
			p->last - p->first < NOTIFIER_SEAL_MAX_EVENTS && SealEvents(p);

		EventhubFormatPayload(&payload, p->token, &p->version, NULL);
		Async_Notify(EVENTHUB_CHANNEL, payload.data);
		if (seal)
			EventhubFormatPayload(&payload, p->token, &p->version, sealed.data);
		Async_Notify(EVENTHUB_EVENTS_CHANNEL, payload.data);
	}
	SPI_finish();
	PopActiveSnapshot();
	EventhubCountAtCommit(EVENTHUB_COUNTER_NOTIFICATIONS_SENT, (uint64) n);
}

/*
 * Takes up to NOTIFIER_BATCH queued announcements, keeps each
 * organization's last version, and sends them in one transaction, in the
 * order the organizations first came, after a notification with the zero
 * token ("poll now") when announcements were dropped since *dropped_seen or
 * *poll_now is set.  Returns the number of announcements taken
 * (NOTIFIER_BATCH: more may wait).
 */
static int
SendQueued(uint64 *dropped_seen, bool *poll_now)
{
	uint64		dropped = EventhubQueueDropped();
	int			n;
	int			taken = TakeQueued(&n);

	if (n > 0 || dropped != *dropped_seen || *poll_now)
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		pgstat_report_activity(STATE_RUNNING, "eventhub: sending notifications");
		if (dropped != *dropped_seen || *poll_now)
			NotifyPollAll(dropped, *dropped_seen);
		NotifyTaken(n);
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
		*dropped_seen = dropped;
		*poll_now = false;
	}
	/* Empty the table for the next batch; its entries are kept for reuse. */
	for (int i = 0; i < n; i++)
		(void) hash_search(pending, order[i]->token, HASH_REMOVE, NULL);
	return taken;
}

/* The rate of announcements, measured over windows of NOTIFIER_RATE_WINDOW_MS. */
typedef struct NotifierRate
{
	double		per_ms;			/* announcements per ms in the last window */
	TimestampTz window_start;
	uint64		window_taken;
} NotifierRate;

/*
 * Counts the announcements a batch took, and measures the rate when a
 * window ends.
 */
static void
CountTaken(NotifierRate *rate, int taken)
{
	TimestampTz now = GetCurrentTimestamp();

	rate->window_taken += taken;
	if (now - rate->window_start >= NOTIFIER_RATE_WINDOW_MS * 1000L)
	{
		rate->per_ms = rate->window_taken / ((now - rate->window_start) / 1000.0);
		rate->window_start = now;
		rate->window_taken = 0;
	}
}

/*
 * Sleeps until a publisher sets the latch (or a second passes), then,
 * under load, lets commits gather.  The rate is read once awake: a window
 * that the sleep ended counts the sleep, so that quiet after a burst is
 * not taken for the burst's rate.  Not waiting on the latch meanwhile also
 * spares publishers the signal: setting a latch nobody sleeps on costs no
 * system call.
 */
static void
WaitForAnnouncements(NotifierRate *rate)
{
	long		gather_ms;

	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 1000L, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);

	CountTaken(rate, 0);
	gather_ms = Min((long) (NOTIFIER_GATHER_PER_RATE * rate->per_ms + rate->per_ms * rate->per_ms),
					NOTIFIER_MAX_GATHER_MS);
	if (gather_ms > 0)
		(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 gather_ms, PG_WAIT_EXTENSION);
}

/*
 * The notifier background worker's main function: waits on its latch and
 * sends what publishers queued.
 */
void
eventhub_notifier_main(Datum main_arg)
{
	uint64		dropped_seen;
	bool		poll_now;
	NotifierRate rate = {0, 0, 0};

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(eventhub_database, NULL, 0);
	EventhubPinSettings();
	/* Its transactions write no data: nothing to wait for at commit. */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("eventhub notifier");
	InitBatch();
	dropped_seen = EventhubQueueDropped();
	/*
	 * A notifier that stopped may have taken announcements it never sent,
	 * and publishers may have queued some just before it stopped (they
	 * decide at pre-commit): everyone polls once now.
	 */
	poll_now = true;
	EventhubQueueAttachNotifier();
	ereport(LOG,
			(errmsg("eventhub notifier started for database \"%s\"", eventhub_database)));

	rate.window_start = GetCurrentTimestamp();
	for (;;)
	{
		int			taken;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		taken = SendQueued(&dropped_seen, &poll_now);
		CountTaken(&rate, taken);
		if (taken == NOTIFIER_BATCH)
			continue;
		WaitForAnnouncements(&rate);
	}
}
