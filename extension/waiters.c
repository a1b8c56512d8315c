/*
 * waiters.c
 *	  Sessions waiting in eventhub.wait_for_events() (wait.c), in shared
 *	  memory, and the calls that wake them.
 *
 * A waiting session has one slot, the one of its PGPROC: its database, and
 * the organizations it waits for, each with its cursor (or "any
 * organization" when it follows more than EVENTHUB_WAIT_MAX_NAMED).
 * Whoever learns that an organization moved to a revision wakes the
 * sessions whose slot names it below that revision: sets a bit in their
 * "woken" and their latch.  For an organization the session could read
 * when it looked (trusted), the bit is the answer: it returns it without
 * a second look.  Otherwise (an organization it may not read, or not yet
 * registered, an id too long to keep, "any organization", announcements
 * lost) it reads the heads again itself, with its own privileges and a
 * snapshot taken after it was woken, and sleeps again when nothing of its
 * own moved: a session learns nothing here that organization_states would
 * not tell it.

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

/*
 * An organization a session waits for: woken when a commit (or a replay)
 * takes it past cursor.
 */
typedef struct WaitedOrg
{
	uint32		hash;			/* EventhubOrganizationHash() of the id */
	int			len;			/* of id; -1: too long to keep, matched by hash */
	bool		trusted;		/* the waiter may read it: a wake is an answer */
	int64		cursor;
	char		id[EVENTHUB_WAIT_ID_BYTES];
} WaitedOrg;

/* woken's bit for "look at every organization again" */
#define WOKEN_LOOK (1U << 31)

typedef struct WaiterSlot
{
	pg_atomic_uint32 waiting;	/* 1 while its backend waits */
	pg_atomic_uint32 woken;		/* bit i: orgs[i] moved; WOKEN_LOOK: look */
	Oid			dbid;
	int			norgs;			/* -1: any organization of dbid */
	WaitedOrg	orgs[EVENTHUB_WAIT_MAX_NAMED];
} WaiterSlot;

typedef struct WaitersShared
{
	pg_atomic_uint32 nwaiting;	/* slots waiting, in every database */
	pg_atomic_uint32 waker_procno;	/* the standby waker's; INVALID_PGPROCNO: none */
	pg_atomic_uint32 waker_idle;	/* 1: it sleeps until a session begins to wait */
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
 * Publishes this backend's slot: it waits for orgs (n of them; more than
 * EVENTHUB_WAIT_MAX_NAMED: for any organization) of its database to move
 * past their cursors.  None is trusted yet (EventhubWaitTrust).  Call
 * before taking the snapshot the cursors are compared with.
 */
void
EventhubWaitBegin(const EventhubWaitFor *orgs, int n)
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
	slot->norgs = n > EVENTHUB_WAIT_MAX_NAMED ? -1 : n;
	for (int i = 0; i < slot->norgs; i++)
	{
		WaitedOrg  *w = &slot->orgs[i];

		w->hash = EventhubOrganizationHash(orgs[i].id, orgs[i].len);
		w->len = orgs[i].len <= EVENTHUB_WAIT_ID_BYTES ? orgs[i].len : -1;
		if (w->len > 0)
			memcpy(w->id, orgs[i].id, w->len);
		w->cursor = orgs[i].cursor;
		w->trusted = false;
	}
	pg_atomic_write_u32(&slot->woken, 0);
	pg_write_barrier();
	pg_atomic_write_u32(&slot->waiting, 1);
	waiting = true;
	/* A full barrier: the slot is visible before any snapshot taken next. */
	pg_atomic_fetch_add_u32(&shared->nwaiting, 1);

	/*
	 * On a standby, an idle waker starts following the heads.  One that
	 * follows them looks for waiters every few milliseconds anyway: its
	 * latch is not set at every wait.
	 */
	waker = pg_atomic_read_u32(&shared->waker_procno);
	if (waker != INVALID_PGPROCNO && pg_atomic_read_u32(&shared->waker_idle))
		SetLatch(&GetPGProcByNumber(waker)->procLatch);
}

/*
 * Marks the organizations the waiter could read when it looked (visible[i]
 * for its i-th): a wake that takes one of them past its cursor is then the
 * answer, with no second look.  A wake for another makes it look again, so
 * that it learns nothing of an organization it may not read.
 */
void
EventhubWaitTrust(const bool *visible, int n)
{
	WaiterSlot *slot = &shared->slots[MyProc->pgprocno];

	for (int i = 0; i < slot->norgs && i < n; i++)
		slot->orgs[i].trusted = visible[i] && slot->orgs[i].len > 0;
}

/*
 * What wakers said since the wait began or the last call, and clears it:
 * 0 (nothing), EVENTHUB_WOKEN_LOOK (look at every organization again), or
 * bit i for the i-th organization, which moved past its cursor.
 */
uint32
EventhubWaitWoken(void)
{
	uint32		woken = pg_atomic_exchange_u32(&shared->slots[MyProc->pgprocno].woken, 0);

	return woken & WOKEN_LOOK ? EVENTHUB_WOKEN_LOOK : woken;
}

/*
 * The standby waker is about to sleep until a session begins to wait:
 * returns how many sessions of database dbid wait (none: it sleeps).
 * Saying so before counting, as a waiter publishes its slot before it
 * reads waker_idle, one of the two sees the other.
 */
int
EventhubWakerIdle(Oid dbid)
{
	pg_atomic_write_u32(&shared->waker_idle, 1);
	pg_memory_barrier();
	return EventhubWaitersOfDatabase(dbid);
}

/* The standby waker follows the heads: waiters need not set its latch. */
void
EventhubWakerBusy(void)
{
	pg_atomic_write_u32(&shared->waker_idle, 0);
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

/*
 * What a move of organization id (len bytes; NULL: only its hash is known)
 * to revision means to slot: the bits to set in its woken.
 */
static uint32
SlotWoken(const WaiterSlot *slot, const char *id, int len, uint32 hash, int64 revision)
{
	uint32		bits = 0;

	if (slot->norgs < 0)
		return WOKEN_LOOK;
	for (int i = 0; i < slot->norgs; i++)
	{
		const WaitedOrg *w = &slot->orgs[i];

		if (w->hash != hash || revision <= w->cursor)
			continue;
		if (id == NULL || w->len < 0)
			bits |= WOKEN_LOOK;
		else if (w->len == len && memcmp(w->id, id, len) == 0)
			bits |= w->trusted ? 1U << i : WOKEN_LOOK;
	}
	return bits;
}

/* Sets bits in the woken of every slot of dbid that wants them, and its latch. */
static void
Wake(Oid dbid, const char *id, int len, uint32 hash, int64 revision, bool any)
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
		uint32		bits;

		if (!pg_atomic_read_u32(&slot->waiting) || slot->dbid != dbid)
			continue;
		bits = any ? WOKEN_LOOK : SlotWoken(slot, id, len, hash, revision);
		if (bits == 0)
			continue;
		pg_atomic_fetch_or_u32(&slot->woken, bits);
		SetLatch(&GetPGProcByNumber(i)->procLatch);
	}
}

/*
 * Wakes the sessions of database dbid that wait for organization id (len
 * bytes, hash its EventhubOrganizationHash(); id NULL when only the hash is
 * known) at a cursor below revision: it moved there.
 */
void
EventhubWakeOrganization(Oid dbid, const char *id, int len, uint32 hash, int64 revision)
{
	Wake(dbid, id, len, hash, revision, false);
}

/* Wakes every waiting session of database dbid: any organization may have moved. */
void
EventhubWakeDatabase(Oid dbid)
{
	Wake(dbid, NULL, 0, 0, 0, true);
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
		pg_atomic_init_u32(&shared->waker_idle, 0);
		shared->nslots = SlotCount();
		for (int i = 0; i < shared->nslots; i++)
		{
			pg_atomic_init_u32(&shared->slots[i].waiting, 0);
			pg_atomic_init_u32(&shared->slots[i].woken, 0);
			shared->slots[i].dbid = InvalidOid;
			shared->slots[i].norgs = 0;
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
