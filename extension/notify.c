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
 * Notifications are coalesced per transaction: publish_event records the
 * organizations it moved, and a pre-commit callback sends one NOTIFY per
 * organization, naming its last version, whatever the number of events.
 * NOTIFY is transactional, so listeners hear of a transaction only once it
 * commits, and never of a rolled-back one or of a rolled-back savepoint.
 * Notifications are only wake-ups: readers fetch by cursor, so a lost,
 * forged or repeated notification loses or repeats nothing.
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
#include "port.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"

#include "eventhub.h"

PG_FUNCTION_INFO_V1(notification_token);
PG_FUNCTION_INFO_V1(rotate_notification_key);

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
	char		organization[EVENTHUB_MAX_ID_BYTES + 1];	/* hash key */
	char		token[EVENTHUB_TOKEN_HEX_LEN + 1];
	int			depth;
	int			capacity;
	PublishedLevel *levels;
} PublishedOrg;

/* In TopTransactionContext; NULL when the transaction published nothing. */
static HTAB *published = NULL;
static List *published_order = NIL;	/* PublishedOrg *, first publish first */

static void
KeyInvalidate(Datum arg, Oid relid)
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
	static bool callback_registered = false;
	uint64		invalidations_before;
	Relation	rel;
	Snapshot	snapshot;
	TableScanDesc scan;
	HeapTuple	tuple;

	if (key_valid)
		return;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(KeyInvalidate, (Datum) 0);
		callback_registered = true;
	}

	key_len = 0;
	key_relid = EventhubRelid("notification_key");
	invalidations_before = key_invalidations;
	if (OidIsValid(key_relid))
	{
		rel = table_open(key_relid, AccessShareLock);
		snapshot = RegisterSnapshot(GetLatestSnapshot());
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
 * Writes the notification token of organization org (orglen bytes) to out,
 * EVENTHUB_TOKEN_HEX_LEN hex digits and a NUL.
 */
void
EventhubNotificationToken(const char *org, int orglen, char *out)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	pg_hmac_ctx *ctx;

	EnsureKey();
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
	hex_encode((const char *) digest, EVENTHUB_TOKEN_HEX_LEN / 2, out);
	out[EVENTHUB_TOKEN_HEX_LEN] = '\0';
}

/*
 * Sends one NOTIFY per organization the committing transaction published
 * to, naming its last version.
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
		resetStringInfo(&payload);
		appendStringInfo(&payload, "{\"notification_token\": \"%s\", \"version_id\": \"%s\"}",
						 p->token,
						 DatumGetCString(DirectFunctionCall1(uuid_out,
															 UUIDPGetDatum(&p->levels[p->depth - 1].version))));
		Async_Notify(EVENTHUB_CHANNEL, payload.data);
	}
	pfree(payload.data);
}

static void
NotifyXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_COMMIT && published != NULL)
		SendPublished();
	if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PRE_PREPARE &&
		event != XACT_EVENT_PARALLEL_PRE_COMMIT)
	{
		/* The memory goes with TopTransactionContext. */
		published = NULL;
		published_order = NIL;
	}
}

static void
NotifySubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (published == NULL ||
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
	char	   *id;
	SubTransactionId subid = GetCurrentSubTransactionId();
	PublishedOrg *p;
	bool		found;

	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return;
	id = TextDatumGetCString(org);
	if (!callbacks_registered)
	{
		RegisterXactCallback(NotifyXactCallback, NULL);
		RegisterSubXactCallback(NotifySubXactCallback, NULL);
		callbacks_registered = true;
	}
	if (published == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = EVENTHUB_MAX_ID_BYTES + 1;
		ctl.entrysize = sizeof(PublishedOrg);
		ctl.hcxt = TopTransactionContext;
		published = hash_create("eventhub published organizations", 16, &ctl,
								HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		published_order = NIL;
	}

	p = hash_search(published, id, HASH_ENTER, &found);
	if (!found)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		EventhubNotificationToken(id, strlen(id), p->token);
		p->depth = 0;
		p->capacity = 2;
		p->levels = palloc(sizeof(PublishedLevel) * p->capacity);
		published_order = lappend(published_order, p);
		MemoryContextSwitchTo(old);
	}
	if (p->depth > 0 && p->levels[p->depth - 1].subid == subid)
		p->levels[p->depth - 1].version = *version;
	else
	{
		if (p->depth == p->capacity)
		{
			p->capacity *= 2;
			p->levels = repalloc(p->levels, sizeof(PublishedLevel) * p->capacity);
		}
		p->levels[p->depth].subid = subid;
		p->levels[p->depth].version = *version;
		p->depth++;
	}
	pfree(id);
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
	static SPIPlanPtr delete_plan = NULL;
	static SPIPlanPtr insert_plan = NULL;
	Oid			argtypes[1] = {BYTEAOID};
	bytea	   *newkey = palloc(VARHDRSZ + KEY_BYTES);
	Datum		value;
	int			saved;

	SET_VARSIZE(newkey, VARHDRSZ + KEY_BYTES);
	if (!pg_strong_random(VARDATA(newkey), KEY_BYTES))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random notification key")));
	value = PointerGetDatum(newkey);

	saved = EventhubBeginWrite();
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "eventhub: SPI_connect failed");
		if (SPI_execute_plan(EventhubKeptPlan(&delete_plan, "DELETE FROM eventhub.notification_key",
											  0, NULL), NULL, NULL, false, 0) != SPI_OK_DELETE ||
			SPI_execute_plan(EventhubKeptPlan(&insert_plan,
											  "INSERT INTO eventhub.notification_key (key) VALUES ($1)",
											  1, argtypes), &value, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "eventhub: replacing the notification key failed");
		SPI_finish();
	}
	PG_FINALLY();
	{
		EventhubEndWrite(saved);
	}
	PG_END_TRY();
	PG_RETURN_VOID();
}
