/*
 * notify.c
 *	  Announcing published events on channel "eventhub": notification tokens
 *	  and the NOTIFY sent at commit.
 *
 * Any role that can connect can LISTEN on any channel, so a notification
 * must tell nothing to a role that may not read the organization.  Its
 * payload names the organization by an opaque token,
 *	  {"notification_token": "<32 hex digits>", "version_id": "<uuid>"}
 * where the token is HMAC-SHA-256 of the organization id under a random
 * key kept in eventhub.notification_key (readable by no role but the
 * owner), cut to 128 bits.  A reader asks eventhub.notification_token()
 * for the tokens of the organizations it follows, which needs read
 * privilege on them; version_id is the organization's version after the
 * transaction, a random UUID that tells a reader whether it has already
 * applied that state.  Neither the id nor a revision travels.
 *
 * publish_event records the organizations its transaction moved.  How they
 * are announced depends on the server:
 *
 *  - With the library preloaded, the notifier background worker sends them.
 *    Once the commit is visible (a commit callback: never for an aborted
 *    transaction) the publisher puts each organization's token and last
 *    version into a lock-free queue in shared memory and sets the worker's
 *    latch; the worker takes everything queued, keeps the last version of
 *    each organization, and sends one NOTIFY per organization in one short
 *    transaction of its own.  No publisher takes the lock that NOTIFY takes
 *    at commit (PreCommit_Notify's, on the whole cluster's notification
 *    queue), and a burst of commits costs one lock acquisition and one
 *    signal per listener, not one each.  A full queue drops the entry and
 *    the worker then sends a notification with the zero token, which tells
 *    clients to poll: a lost wake-up costs latency, never an event.
 *  - Otherwise (not preloaded, no notifier for this database yet, or
 *    publishing in another database than eventhub.database) a pre-commit
 *    callback sends the NOTIFYs in the publishing transaction, one per
 *    organization whatever the number of events.
 *
 * Either way NOTIFY is transactional: listeners hear of a transaction only
 * once it commits, and never of a rolled-back one or of a rolled-back
 * savepoint.  Notifications are only wake-ups: readers fetch by cursor, so a
 * lost, forged or repeated notification loses or repeats nothing.
 *
 * A transaction prepared for two-phase commit sends no notification
 * (PostgreSQL cannot prepare one that did); readers learn of its events by
 * polling.  Neither does a session with session_replication_role = replica
 * (a logical replication apply worker, or a superuser loading data), as an
 * ordinary trigger would not fire there either.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "pgstat.h"
#include "port.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "eventhub.h"

PG_FUNCTION_INFO_V1(notification_token);
PG_FUNCTION_INFO_V1(rotate_notification_key);
PG_FUNCTION_INFO_V1(notification_mode);

#define TOKEN_BYTES (EVENTHUB_TOKEN_HEX_LEN / 2)

/* Entries the shared queue holds; a power of two. */
#define QUEUE_SLOTS 65536

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
 */
#define NOTIFIER_GATHER_PER_RATE 4.0
#define NOTIFIER_MAX_GATHER_MS 50

/*
 * One queued announcement.  A bounded multi-producer queue without locks
 * (Dmitry Vyukov's): a slot is free for position p when its seq is p, and
 * holds the entry of position p when its seq is p + 1.
 */
typedef struct NotifySlot
{
	pg_atomic_uint64 seq;
	Oid			dbid;
	uint8		token[TOKEN_BYTES];
	pg_uuid_t	version;
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

/* Bytes of a new notification key. */
#define KEY_BYTES 32
/* The longest key read from the table; longer keys are hashed by HMAC anyway. */
#define MAX_KEY_BYTES 64

/* The notification key, cached until eventhub.notification_key changes. */
static uint8 key[MAX_KEY_BYTES];
static int	key_len = 0;
static bool key_valid = false;
static Oid	key_relid = InvalidOid;
static uint64 key_invalidations = 0;

/* One savepoint level at which an organization was published. */
typedef struct PublishedLevel
{
	SubTransactionId subid;
	pg_uuid_t	version;		/* the organization's version at that level */
} PublishedLevel;

/*
 * An organization the current transaction published to.  levels is a stack:
 * one entry per open savepoint level that published to it, innermost last.
 * A rolled-back savepoint pops its level; a released one merges it into its
 * parent's.  An organization with no level left is not announced.
 */
typedef struct PublishedOrg
{
	uint8		token[TOKEN_BYTES];
	int			depth;
	int			capacity;
	PublishedLevel *levels;
	char		organization[FLEXIBLE_ARRAY_MEMBER];	/* NUL-terminated */
} PublishedOrg;

/*
 * The organizations the current transaction published to, first publish
 * first, in TopTransactionContext; NIL when it published nothing.  Most
 * transactions publish to one: a hash table (published) is built only once
 * there are PUBLISHED_HASH_AT of them.
 */
#define PUBLISHED_HASH_AT 8
static List *published_order = NIL;
static HTAB *published = NULL;		/* organization -> PublishedOrg * */
static bool hand_to_notifier = false;	/* decided at pre-commit */

typedef struct PublishedRef
{
	char		organization[EVENTHUB_MAX_ID_BYTES + 1];	/* hash key */
	PublishedOrg *org;
} PublishedRef;

/*
 * The last token computed, and the key it was computed under: a backend
 * that publishes to one organization computes its HMAC once per key.
 */
static char last_token_org[EVENTHUB_MAX_ID_BYTES + 1];
static int	last_token_orglen = -1;
static uint64 last_token_key = 0;
static uint8 last_token[TOKEN_BYTES];

/*
 * Called on a relcache invalidation (eventhub.c): a change to
 * notification_key (or a reset of the whole cache) makes the next token
 * load the key again.
 */
void
EventhubKeyInvalidate(Oid relid)
{
	if (relid == InvalidOid || relid == key_relid)
	{
		key_valid = false;
		key_invalidations++;
	}
}

/*
 * Loads the notification key unless the cached copy is valid.
 */
static void
EnsureKey(void)
{
	uint64		invalidations_before;
	Relation	rel;
	Snapshot	snapshot;
	TableScanDesc scan;
	HeapTuple	tuple;

	if (key_valid)
		return;

	key_len = 0;
	key_relid = EventhubRelid("notification_key");
	invalidations_before = key_invalidations;
	if (OidIsValid(key_relid))
	{
		rel = table_open(key_relid, AccessShareLock);
		snapshot = RegisterSnapshot(EventhubCacheSnapshot());
		scan = table_beginscan(rel, snapshot, 0, NULL);
		if ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			bool		isnull;
			Datum		d = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);

			if (!isnull)
			{
				bytea	   *b = DatumGetByteaPP(d);

				key_len = Min(VARSIZE_ANY_EXHDR(b), MAX_KEY_BYTES);
				memcpy(key, VARDATA_ANY(b), key_len);
			}
		}
		table_endscan(scan);
		UnregisterSnapshot(snapshot);
		table_close(rel, AccessShareLock);
	}
	if (key_len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("eventhub's notification key is missing"),
				 errhint("A superuser can make a new one with SELECT eventhub.rotate_notification_key().")));
	key_valid = (key_invalidations == invalidations_before);
}

/*
 * Writes the notification token of organization org (orglen bytes) to out:
 * the first TOKEN_BYTES bytes of HMAC-SHA-256 of the id under the key.
 */
static void
TokenBytes(const char *org, int orglen, uint8 *out)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	pg_hmac_ctx *ctx;

	EnsureKey();
	if (orglen == last_token_orglen && last_token_key == key_invalidations &&
		memcmp(org, last_token_org, orglen) == 0)
	{
		memcpy(out, last_token, TOKEN_BYTES);
		return;
	}
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	if (pg_hmac_init(ctx, key, key_len) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) org, orglen) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0)
	{
#if PG_VERSION_NUM >= 150000
		const char *reason = pstrdup(pg_hmac_error(ctx));
#else
		const char *reason = "HMAC failed";
#endif

		pg_hmac_free(ctx);
		elog(ERROR, "eventhub: could not compute a notification token: %s", reason);
	}
	pg_hmac_free(ctx);
	memcpy(out, digest, TOKEN_BYTES);
	if (orglen <= EVENTHUB_MAX_ID_BYTES)
	{
		memcpy(last_token_org, org, orglen);
		memcpy(last_token, digest, TOKEN_BYTES);
		last_token_orglen = orglen;
		last_token_key = key_invalidations;
	}
}

/*
 * Writes the notification token of organization org (orglen bytes) to out,
 * EVENTHUB_TOKEN_HEX_LEN hex digits and a NUL.
 */
void
EventhubNotificationToken(const char *org, int orglen, char *out)
{
	uint8		bytes[TOKEN_BYTES];

	TokenBytes(org, orglen, bytes);
	hex_encode((const char *) bytes, TOKEN_BYTES, out);
	out[EVENTHUB_TOKEN_HEX_LEN] = '\0';
}

/* The payload of one notification. */
static void
FormatPayload(StringInfo buf, const uint8 *token, const pg_uuid_t *version)
{
	char		hex[EVENTHUB_TOKEN_HEX_LEN + 1];

	hex_encode((const char *) token, TOKEN_BYTES, hex);
	hex[EVENTHUB_TOKEN_HEX_LEN] = '\0';
	resetStringInfo(buf);
	appendStringInfo(buf, "{\"notification_token\": \"%s\", \"version_id\": \"%s\"}",
					 hex, DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(version))));
}

/*
 * Whether the notifier background worker announces what this backend's
 * database publishes.
 */
static bool
NotifierServes(void)
{
	return queue != NULL &&
		pg_atomic_read_u32(&queue->notifier_procno) != INVALID_PGPROCNO &&
		pg_atomic_read_u32(&queue->notifier_dbid) == MyDatabaseId;
}

/*
 * Puts one announcement into the queue; false when it is full.  Never
 * waits and never fails otherwise: it runs after the commit.
 */
static bool
QueuePush(const uint8 *token, const pg_uuid_t *version)
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
				memcpy(slot->token, token, TOKEN_BYTES);
				slot->version = *version;
				pg_write_barrier();
				pg_atomic_write_u64(&slot->seq, pos + 1);
				return true;
			}
			/* pos now holds the current head: try again there */
		}
		else if (seq < pos)
			return false;		/* the slot still holds an unread entry */
		else
			pos = pg_atomic_read_u64(&queue->head);
	}
}

/*
 * Hands the committed transaction's organizations to the notifier and
 * wakes it.
 */
static void
QueuePublished(void)
{
	ListCell   *lc;
	uint32		procno;

	foreach(lc, published_order)
	{
		PublishedOrg *p = (PublishedOrg *) lfirst(lc);

		if (p->depth > 0 && !QueuePush(p->token, &p->levels[p->depth - 1].version))
			pg_atomic_fetch_add_u64(&queue->dropped, 1);
	}
	procno = pg_atomic_read_u32(&queue->notifier_procno);
	if (procno != INVALID_PGPROCNO)
		SetLatch(&GetPGProcByNumber(procno)->procLatch);
}

/*
 * Sends one NOTIFY per organization the committing transaction published
 * to, naming its last version, in the transaction itself.
 */
static void
SendPublished(void)
{
	ListCell   *lc;
	StringInfoData payload;

	initStringInfo(&payload);
	foreach(lc, published_order)
	{
		PublishedOrg *p = (PublishedOrg *) lfirst(lc);

		if (p->depth == 0)
			continue;
		FormatPayload(&payload, p->token, &p->levels[p->depth - 1].version);
		Async_Notify(EVENTHUB_CHANNEL, payload.data);
	}
	pfree(payload.data);
}

static void
NotifyXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (published_order != NIL)
			{
				hand_to_notifier = NotifierServes();
				if (!hand_to_notifier)
					SendPublished();
			}
			break;
		case XACT_EVENT_COMMIT:
			if (published_order != NIL && hand_to_notifier)
				QueuePublished();
			/* FALLTHROUGH */
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			/* The memory goes with TopTransactionContext. */
			published = NULL;
			published_order = NIL;
			hand_to_notifier = false;
			break;
		default:
			break;
	}
}

static void
NotifySubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (published_order == NIL ||
		(event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB))
		return;

	foreach(lc, published_order)
	{
		PublishedOrg *p = (PublishedOrg *) lfirst(lc);
		PublishedLevel *top;

		if (p->depth == 0 || p->levels[p->depth - 1].subid != mySubid)
			continue;
		top = &p->levels[p->depth - 1];
		if (event == SUBXACT_EVENT_ABORT_SUB)
			p->depth--;
		else if (p->depth > 1 && p->levels[p->depth - 2].subid == parentSubid)
		{
			p->levels[p->depth - 2].version = top->version;
			p->depth--;
		}
		else
			top->subid = parentSubid;
	}
}

/*
 * Records that the current transaction published version of organization
 * org (a text Datum), to be announced at commit.
 */
void
EventhubRecordPublished(Datum org, const pg_uuid_t *version)
{
	static bool callbacks_registered = false;
	text	   *t = DatumGetTextPP(org);
	const char *id = VARDATA_ANY(t);
	int			idlen = VARSIZE_ANY_EXHDR(t);
	SubTransactionId subid = GetCurrentSubTransactionId();
	PublishedOrg *p = NULL;
	ListCell   *lc;

	Assert(idlen <= EVENTHUB_MAX_ID_BYTES);
	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return;
	if (!callbacks_registered)
	{
		RegisterXactCallback(NotifyXactCallback, NULL);
		RegisterSubXactCallback(NotifySubXactCallback, NULL);
		callbacks_registered = true;
	}

	if (published != NULL)
	{
		char		key[EVENTHUB_MAX_ID_BYTES + 1];
		PublishedRef *ref;

		memcpy(key, id, idlen);
		key[idlen] = '\0';
		ref = hash_search(published, key, HASH_FIND, NULL);
		if (ref != NULL)
			p = ref->org;
	}
	else
	{
		foreach(lc, published_order)
		{
			PublishedOrg *q = (PublishedOrg *) lfirst(lc);

			if (strncmp(q->organization, id, idlen) == 0 && q->organization[idlen] == '\0')
			{
				p = q;
				break;
			}
		}
	}

	if (p == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		p = palloc(offsetof(PublishedOrg, organization) + idlen + 1);
		memcpy(p->organization, id, idlen);
		p->organization[idlen] = '\0';
		TokenBytes(id, idlen, p->token);
		p->depth = 0;
		p->capacity = 2;
		p->levels = palloc(sizeof(PublishedLevel) * p->capacity);
		published_order = lappend(published_order, p);

		if (published == NULL && list_length(published_order) >= PUBLISHED_HASH_AT)
		{
			HASHCTL		ctl;

			ctl.keysize = EVENTHUB_MAX_ID_BYTES + 1;
			ctl.entrysize = sizeof(PublishedRef);
			ctl.hcxt = TopTransactionContext;
			published = hash_create("eventhub published organizations", 64, &ctl,
									HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
			foreach(lc, published_order)
				((PublishedRef *) hash_search(published, ((PublishedOrg *) lfirst(lc))->organization,
											  HASH_ENTER, NULL))->org = lfirst(lc);
		}
		else if (published != NULL)
			((PublishedRef *) hash_search(published, p->organization, HASH_ENTER, NULL))->org = p;
		MemoryContextSwitchTo(old);
	}
	if (p->depth > 0 && p->levels[p->depth - 1].subid == subid)
		p->levels[p->depth - 1].version = *version;
	else
	{
		if (p->depth == p->capacity)
		{
			MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

			p->capacity *= 2;
			p->levels = repalloc(p->levels, sizeof(PublishedLevel) * p->capacity);
			MemoryContextSwitchTo(old);
		}
		p->levels[p->depth].subid = subid;
		p->levels[p->depth].version = *version;
		p->depth++;
	}
}

/*
 * notification_token(organization_id text) -> text
 *
 * The token that notifications about an organization carry.  Needs read
 * privilege on the organization.  Tokens change only when the notification
 * key is rotated.
 */
Datum
notification_token(PG_FUNCTION_ARGS)
{
	Datum		org = EventhubRequiredTextArg(fcinfo, 0, "organization_id", EVENTHUB_MAX_ID_BYTES);
	text	   *t = DatumGetTextPP(org);
	char		token[EVENTHUB_TOKEN_HEX_LEN + 1];

	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_READ);
	EventhubNotificationToken(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), token);
	PG_RETURN_TEXT_P(cstring_to_text(token));
}

/*
 * rotate_notification_key() -> void
 *
 * Replaces the notification key with a new random one, so that every token
 * changes: a role whose read privilege was revoked can no longer tell its
 * former organizations' notifications apart.  Clients fetch the new tokens
 * when they reconnect or poll.
 */
Datum
rotate_notification_key(PG_FUNCTION_ARGS)
{
	static EventhubPlan delete_plan;
	static EventhubPlan insert_plan;
	Oid			argtypes[1] = {BYTEAOID};
	bytea	   *newkey = palloc(VARHDRSZ + KEY_BYTES);
	Datum		value;

	SET_VARSIZE(newkey, VARHDRSZ + KEY_BYTES);
	if (!pg_strong_random(VARDATA(newkey), KEY_BYTES))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random notification key")));
	value = PointerGetDatum(newkey);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	if (EventhubExecuteAsOwner(&delete_plan, "DELETE FROM eventhub.notification_key",
							   0, NULL, NULL, NULL, 0) != SPI_OK_DELETE ||
		EventhubExecuteAsOwner(&insert_plan, "INSERT INTO eventhub.notification_key (key) VALUES ($1)",
							   1, argtypes, &value, NULL, 0) != SPI_OK_INSERT)
		elog(ERROR, "eventhub: replacing the notification key failed");
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * notification_mode() -> text
 *
 * 'worker' when the notifier background worker announces what this
 * database publishes, 'transaction' when each publishing transaction sends
 * its own notifications.
 */
Datum
notification_mode(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(NotifierServes() ? "worker" : "transaction"));
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

/* The notifier leaves: publishers notify by themselves again. */
static void
NotifierDetach(int code, Datum arg)
{
	pg_atomic_write_u32(&queue->notifier_procno, INVALID_PGPROCNO);
}

/* A coalesced announcement: an organization's token and last version. */
typedef struct PendingNotify
{
	uint8		token[TOKEN_BYTES];	/* hash key */
	pg_uuid_t	version;
	int			order;
} PendingNotify;

static int
PendingOrder(const void *a, const void *b)
{
	const PendingNotify *const *x = a;
	const PendingNotify *const *y = b;

	return (*x)->order - (*y)->order;
}

/*
 * Takes up to NOTIFIER_BATCH queued announcements, keeps each
 * organization's last version, and sends them in one transaction, after a
 * notification with the zero token ("poll now") when announcements were
 * dropped since *dropped_seen or *poll_now is set.  Returns the number of
 * announcements taken (NOTIFIER_BATCH: more may wait).
 */
static int
SendQueued(MemoryContext cxt, uint64 *dropped_seen, bool *poll_now)
{
	uint64		tail = pg_atomic_read_u64(&queue->tail);
	uint64		dropped = pg_atomic_read_u64(&queue->dropped);
	HASHCTL		ctl;
	HTAB	   *pending;
	PendingNotify **order;
	int			n = 0;
	int			taken = 0;
	MemoryContext old = MemoryContextSwitchTo(cxt);
	StringInfoData payload;

	ctl.keysize = TOKEN_BYTES;
	ctl.entrysize = sizeof(PendingNotify);
	ctl.hcxt = cxt;
	pending = hash_create("eventhub pending notifications", 256, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	order = palloc(sizeof(PendingNotify *) * NOTIFIER_BATCH);
	for (; taken < NOTIFIER_BATCH; taken++)
	{
		NotifySlot *slot = &queue->slots[tail % QUEUE_SLOTS];
		PendingNotify *p;
		bool		found;

		if (pg_atomic_read_u64(&slot->seq) != tail + 1)
			break;				/* empty, or still being written */
		pg_read_barrier();
		if (slot->dbid == MyDatabaseId)
		{
			p = hash_search(pending, slot->token, HASH_ENTER, &found);
			if (!found)
			{
				p->order = n;
				order[n++] = p;
			}
			p->version = slot->version;
		}
		pg_atomic_write_u64(&slot->seq, tail + QUEUE_SLOTS);
		tail++;
	}
	pg_atomic_write_u64(&queue->tail, tail);

	if (n > 0 || dropped != *dropped_seen || *poll_now)
	{
		static const uint8 zero_token[TOKEN_BYTES] = {0};
		static const pg_uuid_t zero_version = {{0}};

		initStringInfo(&payload);
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
			FormatPayload(&payload, zero_token, &zero_version);
			Async_Notify(EVENTHUB_CHANNEL, payload.data);
		}
		qsort(order, n, sizeof(PendingNotify *), PendingOrder);
		for (int i = 0; i < n; i++)
		{
			FormatPayload(&payload, order[i]->token, &order[i]->version);
			Async_Notify(EVENTHUB_CHANNEL, payload.data);
		}
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
		*dropped_seen = dropped;
		*poll_now = false;
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(cxt);
	return taken;
}

/*
 * The notifier background worker's main function: waits on its latch and
 * sends what publishers queued.
 */
void
eventhub_notifier_main(Datum main_arg)
{
	MemoryContext cxt;
	uint64		dropped_seen;
	bool		poll_now;
	double		rate = 0;		/* announcements per ms lately */
	TimestampTz last_send;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(eventhub_database, NULL, 0);
	EventhubPinSettings();
	/* Its transactions write no data: nothing to wait for at commit. */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	pgstat_report_appname("eventhub notifier");
	if (queue == NULL)
		elog(ERROR, "eventhub: the notification queue is not in shared memory");

	cxt = AllocSetContextCreate(TopMemoryContext, "eventhub notifier", ALLOCSET_DEFAULT_SIZES);
	dropped_seen = pg_atomic_read_u64(&queue->dropped);
	/*
	 * A notifier that stopped may have taken announcements it never sent,
	 * and publishers may have queued some just before it stopped (they
	 * decide at pre-commit): everyone polls once now.
	 */
	poll_now = true;
	before_shmem_exit(NotifierDetach, (Datum) 0);
	pg_atomic_write_u32(&queue->notifier_dbid, MyDatabaseId);
	pg_write_barrier();
	pg_atomic_write_u32(&queue->notifier_procno, MyProc->pgprocno);
	ereport(LOG,
			(errmsg("eventhub notifier started for database \"%s\"", eventhub_database)));

	last_send = GetCurrentTimestamp();
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
		taken = SendQueued(cxt, &dropped_seen, &poll_now);
		now = GetCurrentTimestamp();
		rate = (rate + taken / Max((now - last_send) / 1000.0, 1.0)) / 2;
		last_send = now;
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

/*
 * The per-event trigger function of eventhub 0.1.0, whose install script
 * names it: kept so that a database still at 0.1.0 loads this library and
 * can be updated.  ALTER EXTENSION eventhub UPDATE drops the trigger; until
 * then publish_event refuses first, so nothing reaches it.
 */
PG_FUNCTION_INFO_V1(notify_event);

Datum
notify_event(PG_FUNCTION_ARGS)
{
	EventhubRequireCurrentSchema();
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("eventhub.notify_event() belongs to eventhub 0.1.0 and is no longer used")));
	PG_RETURN_NULL();			/* not reached */
}
