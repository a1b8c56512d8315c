/*
 * standby_waker.c
 *	  The standby waker: on a hot standby, wakes the sessions waiting in
 *	  eventhub.wait_for_events() (wait.c, waiters.c) when what the standby
 *	  replayed moved their organizations.
 *
 * Nothing runs on a standby when a transaction commits there: its changes
 * arrive by replay.  While sessions of its database wait, the waker looks
 * at the replay position every eventhub.standby_wake_interval; when it moved
 * on, it reads every organization's head in a short transaction of its own
 * and wakes the sessions waiting for each organization whose head differs
 * from the last read.  One process looks for every waiting session: the
 * cost is one read of the heads per replay advance, whatever the number of
 * waiters, and nothing when nobody waits.
 *
 * The first read after nobody waited has nothing to compare with: the
 * waker then wakes every waiting session once, and each looks for itself.
 * So a change replayed between a waiter's look and the waker's first read
 * is not missed.  When the standby is promoted the waker wakes everyone and
 * exits: on a primary, publishers and the notifier wake waiters.  A waker
 * that stops (an error, a conflict with replay) comes back after a second;
 * until then a waiter wakes at its timeout.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"
#include "utils/wait_event.h"

#include "common.h"
#include "waiters.h"
#include "standby_waker.h"

static int	standby_wake_interval_ms = 1;

/*
 * Defines eventhub.standby_wake_interval, which the standby waker reads.
 */
void
EventhubDefineStandbyWakerSettings(void)
{
	DefineCustomIntVariable("eventhub.standby_wake_interval",
							"Sets how often, on a hot standby, the standby waker looks whether replay moved on while sessions wait in eventhub.wait_for_events().",
							"Each look reads the replay position; only when it moved does the waker read the organizations' heads.",
							&standby_wake_interval_ms,
							1, 1, 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* An organization's head, as the last read saw it. */
typedef struct Head
{
	char		org[EVENTHUB_MAX_ID_BYTES + 1];	/* hash key */
	int64		revision;
	pg_uuid_t	version;
	uint64		seen;			/* the read that saw it last */
} Head;

static HTAB *heads = NULL;		/* NULL: no read to compare with */
static uint64 reads = 0;
static XLogRecPtr last_replayed = InvalidXLogRecPtr;
static EventhubPlan heads_plan;

/* Forgets the heads: nobody waits. */
static void
ForgetHeads(void)
{
	if (heads != NULL)
		hash_destroy(heads);
	heads = NULL;
}

static HTAB *
NewHeads(void)
{
	HASHCTL		ctl;

	ctl.keysize = EVENTHUB_MAX_ID_BYTES + 1;
	ctl.entrysize = sizeof(Head);
	ctl.hcxt = TopMemoryContext;
	return hash_create("eventhub standby heads", 256, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/*
 * Records row's head in heads; wakes its waiters when it differs from the
 * last read's (compare: there was one).
 */
static void
CompareHead(HeapTuple row, TupleDesc desc, bool compare)
{
	bool		isnull;
	text	   *org = DatumGetTextPP(SPI_getbinval(row, desc, 1, &isnull));
	int64		revision = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
	Datum		version = SPI_getbinval(row, desc, 3, &isnull);
	char		key[EVENTHUB_MAX_ID_BYTES + 1];
	int			len = Min(VARSIZE_ANY_EXHDR(org), EVENTHUB_MAX_ID_BYTES);
	Head	   *h;
	bool		found;
	pg_uuid_t	v = {{0}};

	memcpy(key, VARDATA_ANY(org), len);
	key[len] = '\0';
	if (!isnull)
		v = *DatumGetUUIDP(version);
	h = hash_search(heads, key, HASH_ENTER, &found);
	if (compare && (!found || h->revision != revision || memcmp(&h->version, &v, sizeof(v)) != 0))
		EventhubWakeOrganization(MyDatabaseId, key, len, EventhubOrganizationHash(key, len), revision);
	h->revision = revision;
	h->version = v;
	h->seen = reads;
}

/* Drops the heads the last read did not see; whether there were any. */
static bool
DropUnseen(void)
{
	HASH_SEQ_STATUS seq;
	Head	   *h;
	bool		dropped = false;

	hash_seq_init(&seq, heads);
	while ((h = hash_seq_search(&seq)) != NULL)
		if (h->seen != reads)
		{
			(void) hash_search(heads, h->org, HASH_REMOVE, NULL);
			dropped = true;
		}
	return dropped;
}

/*
 * Reads every head, in a short transaction, and wakes the waiters of each
 * one that moved since the last read; every waiter after a first read.
 */
static void
ReadHeads(void)
{
	bool		compare = heads != NULL;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!compare)
		heads = NewHeads();
	reads++;
	/* Not while the extension is being dropped, or not there. */
	if (OidIsValid(EventhubRelid("organization_states")))
	{
		SPIPlanPtr	plan = EventhubKeptPlan(&heads_plan, &EventhubSqlStandbyWakerHeads);

		if (SPI_execute_plan(plan, NULL, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "eventhub: reading organization_states failed");
		for (uint64 i = 0; i < SPI_processed; i++)
			CompareHead(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, compare);
	}
	if (DropUnseen() || !compare)
		EventhubWakeDatabase(MyDatabaseId);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * While sessions wait: reads the heads when replay moved on since the last
 * read.  The replay position is taken before the read, so that what is
 * replayed during it is read again next time.
 */
static void
FollowReplay(void)
{
	XLogRecPtr	replayed = GetXLogReplayRecPtr(NULL);

	if (heads != NULL && replayed == last_replayed)
		return;
	last_replayed = replayed;
	ReadHeads();
}

/* Sleeps until the next look, or until a session begins to wait. */
static void
WaitForNextLook(bool waiters)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 waiters ? standby_wake_interval_ms : 1000L, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

/*
 * The standby waker's main function.  On a primary it exits at once, and
 * is not started again.
 */
void
eventhub_standby_waker_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (!RecoveryInProgress())
		proc_exit(0);
	BackgroundWorkerInitializeConnection(eventhub_database, NULL, 0);
	EventhubPinSettings();
	pgstat_report_appname("eventhub standby waker");
	EventhubWaitersAttachWaker();
	ereport(LOG,
			(errmsg("eventhub standby waker started for database \"%s\"", eventhub_database)));

	for (;;)
	{
		bool		waiters;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (!RecoveryInProgress())
		{
			EventhubWakeDatabase(MyDatabaseId);
			ereport(LOG, (errmsg("eventhub standby waker stopped: the server was promoted")));
			proc_exit(0);
		}
		waiters = EventhubWakerIdle(MyDatabaseId) > 0;
		if (waiters)
		{
			EventhubWakerBusy();
			FollowReplay();
		}
		else
			ForgetHeads();
		WaitForNextLook(waiters);
	}
}
