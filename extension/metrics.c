/*
 * metrics.c
 *	  The counters of eventhub.metrics() in shared memory: events published,
 *	  events deleted by retention, notifications sent, stalled client
 *	  sessions terminated, and when the last retention pass ended.
 *
 * They live in shared memory when the library is preloaded, start at zero
 * with the server, and only grow (Prometheus counters: a restart is a
 * reset, which rate() handles).  Without preloading there are none and
 * eventhub.metrics() reports 0.
 *
 * What a transaction does counts only if it commits.  A backend adds to a
 * pending count of its own (EventhubCountAtCommit), and a commit callback
 * adds that to shared memory once the commit is done; an abort, or a
 * PREPARE TRANSACTION (a prepared transaction's events are not counted:
 * its commit may come from another session, or never), drops it.  A
 * savepoint that rolls back takes back what was counted since it began:
 * the first count inside a subtransaction saves the pending counts it
 * started from on a stack, its rollback restores them, and its release
 * hands the entry on to its parent (or drops it when the parent has one of
 * its own, or is the top-level transaction).  A count made after a commit
 * (a worker counting what its committed transaction did, a terminated
 * session) goes to shared memory at once (EventhubCountNow).
 *
 * The counters are atomics: publishers add without a lock and never wait.
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "metrics.h"

typedef struct MetricsShared
{
	pg_atomic_uint64 counters[EVENTHUB_NUM_COUNTERS];
	pg_atomic_uint64 retention_pass_ended;	/* a TimestampTz; 0: none yet */
} MetricsShared;

/* In shared memory when the library is preloaded; NULL otherwise. */
static MetricsShared *shared = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/* What the current transaction will add at commit. */
typedef struct Pending
{
	uint64		counts[EVENTHUB_NUM_COUNTERS];
	bool		retention_pass_ended;
} Pending;

static Pending pending;
static bool pending_any = false;

/*
 * One open subtransaction that counted: the pending counts as they were
 * before its first count.  Innermost last; each entry's subtransaction is
 * an ancestor of (or is) the current one.
 */
typedef struct SavedLevel
{
	SubTransactionId subid;
	Pending		before;
} SavedLevel;

static SavedLevel *levels = NULL;
static int	nlevels = 0;
static int	levels_capacity = 0;

static void
ForgetPending(void)
{
	memset(&pending, 0, sizeof(pending));
	pending_any = false;
	nlevels = 0;
}

static void
MetricsXactCallback(XactEvent event, void *arg)
{
	if (!pending_any)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			for (int i = 0; i < EVENTHUB_NUM_COUNTERS; i++)
				if (pending.counts[i] > 0)
					pg_atomic_fetch_add_u64(&shared->counters[i], pending.counts[i]);
			if (pending.retention_pass_ended)
				pg_atomic_write_u64(&shared->retention_pass_ended, (uint64) GetCurrentTimestamp());
			ForgetPending();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			ForgetPending();
			break;
		default:
			break;
	}
}

static void
MetricsSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	SavedLevel *top;

	if (nlevels == 0 || levels[nlevels - 1].subid != mySubid)
		return;
	top = &levels[nlevels - 1];
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		/* Rolled back: what it counted goes. */
		pending = top->before;
		nlevels--;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/*
		 * Released: its counts are its parent's now.  The parent's own entry
		 * (or, for the top-level transaction, none) already holds what to go
		 * back to; otherwise this entry, which saved what the parent started
		 * from too, becomes the parent's.
		 */
		if (parentSubid == TopSubTransactionId ||
			(nlevels > 1 && levels[nlevels - 2].subid == parentSubid))
			nlevels--;
		else
			top->subid = parentSubid;
	}
}

/*
 * Adds n to counter c when the current transaction commits.
 */
void
EventhubCountAtCommit(EventhubCounter c, uint64 n)
{
	static bool callbacks_registered = false;

	if (shared == NULL)
		return;
	if (!callbacks_registered)
	{
		RegisterXactCallback(MetricsXactCallback, NULL);
		RegisterSubXactCallback(MetricsSubXactCallback, NULL);
		callbacks_registered = true;
	}
	if (GetCurrentTransactionNestLevel() > 1)
	{
		SubTransactionId subid = GetCurrentSubTransactionId();

		if (nlevels == 0 || levels[nlevels - 1].subid != subid)
		{
			if (nlevels == levels_capacity)
			{
				levels_capacity = Max(8, levels_capacity * 2);
				levels = levels == NULL ?
					MemoryContextAlloc(TopMemoryContext, sizeof(SavedLevel) * levels_capacity) :
					repalloc(levels, sizeof(SavedLevel) * levels_capacity);
			}
			levels[nlevels].subid = subid;
			levels[nlevels].before = pending;
			nlevels++;
		}
	}
	pending.counts[c] += n;
	pending_any = true;
}

/*
 * Records, for when the current transaction commits, that a retention pass
 * ended in it.
 */
void
EventhubRetentionPassEndsAtCommit(void)
{
	EventhubCountAtCommit(EVENTHUB_COUNTER_RETENTION_DELETED, 0);
	if (shared != NULL)
		pending.retention_pass_ended = true;
}

/*
 * Adds n to counter c now: for what has already committed, or cannot be
 * undone.
 */
void
EventhubCountNow(EventhubCounter c, uint64 n)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->counters[c], n);
}

/*
 * The counters' values, and when the last retention pass ended (0: none
 * since the server started).  All zero without shared memory.
 */
void
EventhubReadCounters(uint64 *counts, TimestampTz *retention_pass_ended)
{
	for (int i = 0; i < EVENTHUB_NUM_COUNTERS; i++)
		counts[i] = shared != NULL ? pg_atomic_read_u64(&shared->counters[i]) : 0;
	*retention_pass_ended = shared != NULL ?
		(TimestampTz) pg_atomic_read_u64(&shared->retention_pass_ended) : 0;
}

#if PG_VERSION_NUM >= 150000
static void
MetricsShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(MetricsShared));
}
#endif

static void
MetricsShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("eventhub metrics", sizeof(MetricsShared), &found);
	if (!found)
	{
		for (int i = 0; i < EVENTHUB_NUM_COUNTERS; i++)
			pg_atomic_init_u64(&shared->counters[i], 0);
		pg_atomic_init_u64(&shared->retention_pass_ended, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Asks for the counters' shared memory; called from _PG_init while
 * shared_preload_libraries is processed.
 */
void
EventhubMetricsShmemInit(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = MetricsShmemRequest;
#else
	RequestAddinShmemSpace(sizeof(MetricsShared));
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = MetricsShmemStartup;
}
