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
#include "commands/async.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "eventhub.h"
#include "notify.h"

/* The most entries the notifier takes into one transaction. */
#define NOTIFIER_BATCH 8192

/*
 * How long the notifier, once woken, lets publishers' commits gather before
 * it sends, in milliseconds: NOTIFIER_GATHER_PER_RATE times the rate at
 * which announcements arrived lately (per millisecond), at most
 * NOTIFIER_MAX_GATHER_MS.  A commit that comes alone (under about 500 per
 * second) is announced at once; under load each notification transaction
 * announces many commits, so that listeners are woken at most about 100
 * times a second however fast publishers commit (every notification
 * transaction signals every listening backend).
 *
 * The rate is counted over windows of at least NOTIFIER_RATE_WINDOW_MS, the
 * last complete window's counting.  Not from one wake-up to the next: at a
 * few hundred commits a second, one in five comes within a millisecond of
 * the one before (they arrive at random), and a rate read off that one gap
 * made the next commits wait milliseconds for company that was not coming.
 */
#define NOTIFIER_GATHER_PER_RATE 4.0
#define NOTIFIER_MAX_GATHER_MS 50
#define NOTIFIER_RATE_WINDOW_MS 100

/* A coalesced announcement: an organization's token and last version. */
typedef struct PendingNotify
{
	uint8		token[EVENTHUB_TOKEN_BYTES];	/* hash key */
	pg_uuid_t	version;
} PendingNotify;

/*
 * What one batch gathers, allocated once: each organization's last version
 * (pending), the organizations in the order they first came (order), and
 * the payload buffer.  A wake-up allocates nothing.
 */
static HTAB *pending = NULL;
static PendingNotify **order = NULL;
static StringInfoData payload;

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
	MemoryContextSwitchTo(old);
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
	int			n = 0;
	int			taken = 0;
	uint8		token[EVENTHUB_TOKEN_BYTES];
	pg_uuid_t	version;
	bool		ours;

	for (; taken < NOTIFIER_BATCH && EventhubQueuePop(token, &version, &ours); taken++)
	{
		PendingNotify *p;
		bool		found;

		if (!ours)
			continue;
		p = hash_search(pending, token, HASH_ENTER, &found);
		if (!found)
			order[n++] = p;
		p->version = version;
	}

	if (n > 0 || dropped != *dropped_seen || *poll_now)
	{
		static const uint8 zero_token[EVENTHUB_TOKEN_BYTES] = {0};
		static const pg_uuid_t zero_version = {{0}};

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		pgstat_report_activity(STATE_RUNNING, "eventhub: sending notifications");
		if (dropped != *dropped_seen)
		{
			ereport(LOG,
					(errmsg("eventhub notification queue was full: " UINT64_FORMAT " announcements were dropped",
							dropped - *dropped_seen),
					 errdetail("Clients were told to poll instead.")));
		}
		if (dropped != *dropped_seen || *poll_now)
		{
			/* Announcements were lost: everyone polls now. */
			EventhubFormatPayload(&payload, zero_token, &zero_version);
			Async_Notify(EVENTHUB_CHANNEL, payload.data);
			EventhubCountAtCommit(EVENTHUB_COUNTER_NOTIFICATIONS_SENT, 1);
		}
		for (int i = 0; i < n; i++)
		{
			EventhubFormatPayload(&payload, order[i]->token, &order[i]->version);
			Async_Notify(EVENTHUB_CHANNEL, payload.data);
		}
		EventhubCountAtCommit(EVENTHUB_COUNTER_NOTIFICATIONS_SENT, (uint64) n);
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

/*
 * The notifier background worker's main function: waits on its latch and
 * sends what publishers queued.
 */
void
eventhub_notifier_main(Datum main_arg)
{
	uint64		dropped_seen;
	bool		poll_now;
	double		rate = 0;		/* announcements per ms in the last window */
	TimestampTz window_start;
	uint64		window_taken = 0;

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

	window_start = GetCurrentTimestamp();
	for (;;)
	{
		int			taken;
		TimestampTz now;
		long		gather_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		taken = SendQueued(&dropped_seen, &poll_now);
		window_taken += taken;
		now = GetCurrentTimestamp();
		if (now - window_start >= NOTIFIER_RATE_WINDOW_MS * 1000L)
		{
			rate = window_taken / ((now - window_start) / 1000.0);
			window_start = now;
			window_taken = 0;
		}
		if (taken == NOTIFIER_BATCH)
			continue;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);

		/*
		 * Under load, let commits gather.  Not waiting on the latch meanwhile
		 * also spares publishers the signal: setting a latch nobody sleeps on
		 * costs no system call.
		 */
		gather_ms = Min((long) (NOTIFIER_GATHER_PER_RATE * rate), NOTIFIER_MAX_GATHER_MS);
		if (gather_ms > 0)
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 gather_ms, PG_WAIT_EXTENSION);
	}
}
