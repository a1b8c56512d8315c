/*
 * notify_queue.c
 *	  The queue in shared memory through which publishers hand what their
 *	  committed transactions published to the notifier (notifier.c).
 *
 * A bounded multi-producer, single-consumer queue without locks: a
 * publisher never waits on it, and a full queue drops the entry, counted,
 * so that the notifier tells every client to poll (a lost wake-up costs
 * latency, never an event).  It lives in shared memory when the library is
 * preloaded; otherwise there is none and publishers notify by themselves.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/uuid.h"

#include "notify_queue.h"

/*
 * Entries the shared queue holds; a power of two.  An entry takes 128
 * bytes (it carries a short organization id), so the queue 4 MB: about
 * two seconds of commits at the fastest rate the bench reaches, which the
 * notifier empties in batches of up to 8,192 at least every 50 ms.
 */
#define QUEUE_SLOTS 32768

/*
 * One queued announcement.  A bounded multi-producer queue without locks
 * (Dmitry Vyukov's): a slot is free for position p when its seq is p, and
 * holds the entry of position p when its seq is p + 1.
 */
typedef struct NotifySlot
{
	pg_atomic_uint64 seq;
	Oid			dbid;
	EventhubAnnouncement a;
} NotifySlot;

typedef struct NotifyQueue
{
	pg_atomic_uint64 head;		/* next position a publisher takes */
	pg_atomic_uint64 tail;		/* next position the notifier reads */
	pg_atomic_uint64 dropped;	/* entries not queued: the queue was full */
	pg_atomic_uint32 notifier_procno;	/* INVALID_PGPROCNO: no notifier */
	pg_atomic_uint32 notifier_dbid;
	NotifySlot	slots[QUEUE_SLOTS];
} NotifyQueue;

/* In shared memory when the library is preloaded; NULL otherwise. */
static NotifyQueue *queue = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/*
 * Whether the notifier background worker announces what this backend's
 * database publishes.
 */
bool
EventhubNotifierServes(void)
{
	return queue != NULL &&
		pg_atomic_read_u32(&queue->notifier_procno) != INVALID_PGPROCNO &&
		pg_atomic_read_u32(&queue->notifier_dbid) == MyDatabaseId;
}

/*
 * The process id of the notifier serving this backend's database; 0 when
 * none does.  Clients take the data a notification carries only from this
 * process (PostgreSQL stamps every notification with its sender's pid).
 */
int
EventhubNotifierPid(void)
{
	uint32		procno;

	if (!EventhubNotifierServes())
		return 0;
	procno = pg_atomic_read_u32(&queue->notifier_procno);
	if (procno == INVALID_PGPROCNO)
		return 0;
	return GetPGProcByNumber(procno)->pid;
}

/*
 * Puts one announcement into the queue; false when it is full (counted in
 * the queue's dropped entries, which tells the notifier to have everyone
 * poll).  Never waits and never fails otherwise: it runs after the commit.
 */
bool
EventhubQueuePush(const EventhubAnnouncement *a)
{
	uint64		pos = pg_atomic_read_u64(&queue->head);

	for (;;)
	{
		NotifySlot *slot = &queue->slots[pos % QUEUE_SLOTS];
		uint64		seq = pg_atomic_read_u64(&slot->seq);

		if (seq == pos)
		{
			if (pg_atomic_compare_exchange_u64(&queue->head, &pos, pos + 1))
			{
				slot->dbid = MyDatabaseId;
				slot->a = *a;
				pg_write_barrier();
				pg_atomic_write_u64(&slot->seq, pos + 1);
				return true;
			}
			/* pos now holds the current head: try again there */
		}
		else if (seq < pos)
		{
			/* the slot still holds an unread entry */
			pg_atomic_fetch_add_u64(&queue->dropped, 1);
			return false;
		}
		else
			pos = pg_atomic_read_u64(&queue->head);
	}
}

/*
 * Wakes the notifier, if there is one.
 */
void
EventhubWakeNotifier(void)
{
	uint32		procno = pg_atomic_read_u32(&queue->notifier_procno);

	if (procno != INVALID_PGPROCNO)
		SetLatch(&GetPGProcByNumber(procno)->procLatch);
}

/*
 * The number of entries dropped so far because the queue was full.
 */
uint64
EventhubQueueDropped(void)
{
	return pg_atomic_read_u64(&queue->dropped);
}

/*
 * Takes the oldest entry: its token and version, and whether it comes from
 * this backend's database (*ours).  False when the queue is empty (or its
 * oldest entry is still being written).  Only the notifier calls it.
 */
bool
EventhubQueuePop(EventhubAnnouncement *a, bool *ours)
{
	uint64		tail = pg_atomic_read_u64(&queue->tail);
	NotifySlot *slot = &queue->slots[tail % QUEUE_SLOTS];

	if (pg_atomic_read_u64(&slot->seq) != tail + 1)
		return false;
	pg_read_barrier();
	*ours = slot->dbid == MyDatabaseId;
	*a = slot->a;
	pg_atomic_write_u64(&slot->seq, tail + QUEUE_SLOTS);
	pg_atomic_write_u64(&queue->tail, tail + 1);
	return true;
}

/* The notifier leaves: publishers notify by themselves again. */
static void
NotifierDetach(int code, Datum arg)
{
	pg_atomic_write_u32(&queue->notifier_procno, INVALID_PGPROCNO);
}


/*
 * Makes this process the notifier of its database: publishers of this
 * database queue what they publish from now on, until it exits.
 */
void
EventhubQueueAttachNotifier(void)
{
	if (queue == NULL)
		elog(ERROR, "eventhub: the notification queue is not in shared memory");
	before_shmem_exit(NotifierDetach, (Datum) 0);
	pg_atomic_write_u32(&queue->notifier_dbid, MyDatabaseId);
	pg_write_barrier();
	pg_atomic_write_u32(&queue->notifier_procno, MyProc->pgprocno);
}

#if PG_VERSION_NUM >= 150000
static void
NotifyShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(NotifyQueue));
}
#endif

static void
NotifyShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	queue = ShmemInitStruct("eventhub notification queue", sizeof(NotifyQueue), &found);
	if (!found)
	{
		pg_atomic_init_u64(&queue->head, 0);
		pg_atomic_init_u64(&queue->tail, 0);
		pg_atomic_init_u64(&queue->dropped, 0);
		pg_atomic_init_u32(&queue->notifier_procno, INVALID_PGPROCNO);
		pg_atomic_init_u32(&queue->notifier_dbid, InvalidOid);
		for (uint64 i = 0; i < QUEUE_SLOTS; i++)
			pg_atomic_init_u64(&queue->slots[i].seq, i);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Asks for the queue's shared memory; called from _PG_init while
 * shared_preload_libraries is processed.
 */
void
EventhubNotifyShmemInit(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = NotifyShmemRequest;
#else
	RequestAddinShmemSpace(sizeof(NotifyQueue));
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = NotifyShmemStartup;
}
