/*
 * waiters.c
 *	  Sessions waiting in eventhub.wait_for_events() (wait.c), in shared
 *	  memory, and the calls that wake them.
 *
 * A waiting session has one slot, the one of its PGPROC: its database, and
 * the hashes of the organizations it waits for (or "any organization" when
 * it follows more than EVENTHUB_WAIT_MAX_NAMED).  Whoever learns that an
 * organization moved wakes the sessions whose slot names its hash: sets
 * their latch, and their "woken" flag.  A woken session reads its
 * organizations' heads itself, with its own privileges and a snapshot taken
 * after it was woken, and sleeps again when nothing of its own moved: a
 * hash that two organizations share, or a wake for "any organization",
 * costs it a look, never a wrong answer.
 *
 * Who wakes:
 *  - on a primary, the notifier, for each organization a committed
 *    transaction announces to it (notifier.c), and every session of the
 *    database when announcements were dropped; without a notifier, the
 *    publishing transaction itself once its commit is visible (notify.c);
 *  - on a hot standby, the standby waker (standby_waker.c), for each
 *    organization whose head changed in what was replayed.
 *
 * No wake-up is lost: a waiter publishes its slot before it takes the
 * snapshot it compares its cursors with, and a waker looks at the slots only
 * after the change is visible.  So a change is either in the waiter's
 * snapshot, or made visible after the slot was published, and woken.
 *
 * Nothing here is taken by a waker but atomics: a waker never waits, and
 * with nobody waiting a wake costs one read of a counter.
 */
#include "postgres.h"

#include "access/twophase.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "postmaster/autovacuum.h"
#include "postmaster/postmaster.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "waiters.h"

typedef struct WaiterSlot
{
	pg_atomic_uint32 waiting;	/* 1 while its backend waits */
	pg_atomic_uint32 woken;		/* set by a waker, cleared by the waiter */
	Oid			dbid;
	int			nhashes;		/* -1: any organization of dbid */
	uint32		hashes[EVENTHUB_WAIT_MAX_NAMED];
} WaiterSlot;

typedef struct WaitersShared
{
	pg_atomic_uint32 nwaiting;	/* slots waiting, in every database */
	pg_atomic_uint32 waker_procno;	/* the standby waker's; INVALID_PGPROCNO: none */
	int			nslots;
	WaiterSlot	slots[FLEXIBLE_ARRAY_MEMBER];	/* one per PGPROC, by pgprocno */
} WaitersShared;

/* In shared memory when the library is preloaded; NULL otherwise. */
static WaitersShared *shared = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/* Whether this backend's slot says it waits. */
static bool waiting = false;

/* Whether waiting sessions can be kept: the library is preloaded. */
bool
EventhubWaitersPresent(void)
{
	return shared != NULL;
}

/* The hash a waiter and its wakers agree on for organization id. */
uint32
EventhubOrganizationHash(const char *id, int idlen)
{
	return hash_bytes((const unsigned char *) id, idlen);
}

/* Leaves the waiters: at the end of a wait, and at exit. */
void
EventhubWaitEnd(void)
{
	if (!waiting)
		return;
	pg_atomic_write_u32(&shared->slots[MyProc->pgprocno].waiting, 0);
	pg_atomic_fetch_sub_u32(&shared->nwaiting, 1);
	waiting = false;
}

static void
WaitEndAtExit(int code, Datum arg)
{
	EventhubWaitEnd();
}

/*
 * Publishes this backend's slot: it waits for the organizations of hashes
 * (nhashes of them; more than EVENTHUB_WAIT_MAX_NAMED, or -1: any) of its
 * database.  Call before taking the snapshot the cursors are compared with.
 */
void
EventhubWaitBegin(const uint32 *hashes, int nhashes)
{
	static bool exit_callback = false;
	WaiterSlot *slot;
	uint32		waker;

	Assert(shared != NULL && !waiting);
	if (!exit_callback)
	{
		before_shmem_exit(WaitEndAtExit, (Datum) 0);
		exit_callback = true;
	}
	slot = &shared->slots[MyProc->pgprocno];
	slot->dbid = MyDatabaseId;
	slot->nhashes = nhashes < 0 || nhashes > EVENTHUB_WAIT_MAX_NAMED ? -1 : nhashes;
	for (int i = 0; i < slot->nhashes; i++)
		slot->hashes[i] = hashes[i];
	pg_atomic_write_u32(&slot->woken, 0);
	pg_write_barrier();
	pg_atomic_write_u32(&slot->waiting, 1);
	waiting = true;
	/* A full barrier: the slot is visible before any snapshot taken next. */
	pg_atomic_fetch_add_u32(&shared->nwaiting, 1);

	/* On a standby, the waker starts following the heads. */
	waker = pg_atomic_read_u32(&shared->waker_procno);
	if (waker != INVALID_PGPROCNO)
		SetLatch(&GetPGProcByNumber(waker)->procLatch);
}

/*
 * Whether a waker woke this backend since the wait began or since the last
 * call; clears the flag.
 */
bool
EventhubWaitWoken(void)
{
	WaiterSlot *slot = &shared->slots[MyProc->pgprocno];

	if (pg_atomic_read_u32(&slot->woken) == 0)
		return false;
	pg_atomic_write_u32(&slot->woken, 0);
	/* The flag is cleared before the heads are read again. */
	pg_memory_barrier();
	return true;
}

/* How many sessions of database dbid wait. */
int
EventhubWaitersOfDatabase(Oid dbid)
{
	int			n = 0;

	if (shared == NULL || pg_atomic_read_u32(&shared->nwaiting) == 0)
		return 0;
	for (int i = 0; i < shared->nslots; i++)
		if (pg_atomic_read_u32(&shared->slots[i].waiting) && shared->slots[i].dbid == dbid)
			n++;
	return n;
}

/* Whether slot waits for the organization of hash (any: for every one). */
static bool
SlotWants(const WaiterSlot *slot, Oid dbid, uint32 hash, bool any)
{
	if (slot->dbid != dbid)
		return false;
	if (any || slot->nhashes < 0)
		return true;
	for (int i = 0; i < slot->nhashes; i++)
		if (slot->hashes[i] == hash)
			return true;
	return false;
}

static void
Wake(Oid dbid, uint32 hash, bool any)
{
	if (shared == NULL)
		return;
	/* The change is visible before the slots are read. */
	pg_memory_barrier();
	if (pg_atomic_read_u32(&shared->nwaiting) == 0)
		return;
	for (int i = 0; i < shared->nslots; i++)
	{
		WaiterSlot *slot = &shared->slots[i];

		if (!pg_atomic_read_u32(&slot->waiting) || !SlotWants(slot, dbid, hash, any))
			continue;
		pg_atomic_write_u32(&slot->woken, 1);
		SetLatch(&GetPGProcByNumber(i)->procLatch);
	}
}

/*
 * Wakes the sessions of database dbid that wait for the organization of
 * hash (EventhubOrganizationHash): it moved.
 */
void
EventhubWakeOrganization(Oid dbid, uint32 hash)
{
	Wake(dbid, hash, false);
}

/* Wakes every waiting session of database dbid: any organization may have moved. */
void
EventhubWakeDatabase(Oid dbid)
{
	Wake(dbid, 0, true);
}

static void
WakerDetach(int code, Datum arg)
{
	pg_atomic_write_u32(&shared->waker_procno, INVALID_PGPROCNO);
}

/*
 * Makes this process the standby waker, whose latch a session sets when it
 * begins to wait, until it exits.
 */
void
EventhubWaitersAttachWaker(void)
{
	if (shared == NULL)
		elog(ERROR, "eventhub: the waiting sessions are not in shared memory");
	before_shmem_exit(WakerDetach, (Datum) 0);
	pg_atomic_write_u32(&shared->waker_procno, MyProc->pgprocno);
}

/* A slot for every PGPROC there can be. */
static int
SlotCount(void)
{
#if PG_VERSION_NUM >= 150000
	int			backends = MaxBackends;
#else
	/* InitializeMaxBackends()'s sum: _PG_init runs before it. */
	int			backends = MaxConnections + autovacuum_max_workers + 1 +
		max_worker_processes + max_wal_senders;
#endif

	return backends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
WaitersSize(void)
{
	return add_size(offsetof(WaitersShared, slots),
					mul_size(SlotCount(), sizeof(WaiterSlot)));
}

#if PG_VERSION_NUM >= 150000
static void
WaitersShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(WaitersSize());
}
#endif

static void
WaitersShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("eventhub waiting sessions", WaitersSize(), &found);
	if (!found)
	{
		pg_atomic_init_u32(&shared->nwaiting, 0);
		pg_atomic_init_u32(&shared->waker_procno, INVALID_PGPROCNO);
		shared->nslots = SlotCount();
		for (int i = 0; i < shared->nslots; i++)
		{
			pg_atomic_init_u32(&shared->slots[i].waiting, 0);
			pg_atomic_init_u32(&shared->slots[i].woken, 0);
			shared->slots[i].dbid = InvalidOid;
			shared->slots[i].nhashes = 0;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Asks for the slots' shared memory; called from _PG_init while
 * shared_preload_libraries is processed.
 */
void
EventhubWaitersShmemInit(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = WaitersShmemRequest;
#else
	RequestAddinShmemSpace(WaitersSize());
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = WaitersShmemStartup;
}
