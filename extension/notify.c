/*
 * notify.c
 *	  Announcing published events on channel "eventhub": what each
 *	  transaction published, and how it is announced at commit.
 *
 * A notification names an organization by its token and its version after
 * the transaction (notify_key.c).
 *
 * publish_event records the organizations its transaction moved.  How they
 * are announced depends on the server:
 *
 *  - With the library preloaded, the notifier background worker sends them.
 *    Once the commit is visible (a commit callback: never for an aborted
 *    transaction) the publisher puts each organization's token and last
 *    version into a lock-free queue in shared memory and sets the worker's
 *    latch; the worker (notifier.c) takes everything queued, keeps the
 *    last version of each organization, and sends one NOTIFY per
 *    organization in one short transaction of its own.  No publisher takes the lock that NOTIFY takes
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

#include "access/xact.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "common.h"
#include "metrics.h"
#include "waiters.h"
#include "notify_key.h"
#include "notify_queue.h"
#include "notify.h"

PG_FUNCTION_INFO_V1(notification_mode);
PG_FUNCTION_INFO_V1(notifier_pid);

/* One savepoint level at which an organization was published. */
typedef struct PublishedLevel
{
	SubTransactionId subid;
	pg_uuid_t	version;		/* the organization's version at that level */
	int64		revision;		/* and its revision */
} PublishedLevel;

/*
 * An organization the current transaction published to.  levels is a stack:
 * one entry per open savepoint level that published to it, innermost last.
 * A rolled-back savepoint pops its level; a released one merges it into its
 * parent's.  An organization with no level left is not announced.
 *
 * first_revision is the revision of the transaction's first event in the
 * organization that is still part of it: set when depth goes from 0 to 1.  A
 * savepoint rolled back to depth 0 released the organization's row lock, so
 * that another publisher may have taken the next revisions; the transaction's
 * next event then starts its run of revisions anew.
 */
typedef struct PublishedOrg
{
	uint8		token[EVENTHUB_TOKEN_BYTES];
	int64		first_revision; /* of its first surviving event, when depth > 0 */
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
 * Hands the committed transaction's organizations to the notifier and
 * wakes it.
 */
static void
QueuePublished(void)
{
	ListCell   *lc;

	foreach(lc, published_order)
	{
		PublishedOrg *p = (PublishedOrg *) lfirst(lc);
		EventhubAnnouncement a;
		int			orglen;

		if (p->depth == 0)
			continue;
		memcpy(a.token, p->token, EVENTHUB_TOKEN_BYTES);
		a.version = p->levels[p->depth - 1].version;
		a.first_revision = p->first_revision;
		a.last_revision = p->levels[p->depth - 1].revision;
		orglen = strlen(p->organization);
		a.orghash = EventhubOrganizationHash(p->organization, orglen);
		if (orglen <= EVENTHUB_ANNOUNCED_ORG_BYTES)
		{
			a.orglen = orglen;
			memcpy(a.org, p->organization, orglen);
		}
		else
			a.orglen = -1;
		(void) EventhubQueuePush(&a);
	}
	EventhubWakeNotifier();
}

/*
 * Wakes the sessions waiting for the organizations the committed
 * transaction published to, when no notifier does.
 */
static void
WakePublished(void)
{
	ListCell   *lc;

	foreach(lc, published_order)
	{
		PublishedOrg *p = (PublishedOrg *) lfirst(lc);

		int			len = strlen(p->organization);

		if (p->depth > 0)
			EventhubWakeOrganization(MyDatabaseId, p->organization, len,
									 EventhubOrganizationHash(p->organization, len),
									 p->levels[p->depth - 1].revision);
	}
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
		EventhubFormatPayload(&payload, p->token, &p->levels[p->depth - 1].version, NULL);
		Async_Notify(EVENTHUB_CHANNEL, payload.data);
		Async_Notify(EVENTHUB_EVENTS_CHANNEL, payload.data);
		EventhubCountAtCommit(EVENTHUB_COUNTER_NOTIFICATIONS_SENT, 1);
	}
	pfree(payload.data);
}

static void
NotifyXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			/* Tracked all the same: publish.c reads first_revision. */
			if (published_order != NIL &&
				SessionReplicationRole != SESSION_REPLICATION_ROLE_REPLICA)
			{
				hand_to_notifier = EventhubNotifierServes();
				if (!hand_to_notifier)
					SendPublished();
			}
			break;
		case XACT_EVENT_COMMIT:
			if (published_order != NIL && hand_to_notifier)
				QueuePublished();
			else if (published_order != NIL &&
					 SessionReplicationRole != SESSION_REPLICATION_ROLE_REPLICA)
				WakePublished();
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
			p->levels[p->depth - 2].revision = top->revision;
			p->depth--;
		}
		else
			top->subid = parentSubid;
	}
}

/*
 * The current transaction's entry for organization id (idlen bytes, not
 * NUL-terminated), or NULL when it has published nothing there.
 */
static PublishedOrg *
FindPublished(const char *id, int idlen)
{
	ListCell   *lc;

	if (published != NULL)
	{
		char		key[EVENTHUB_MAX_ID_BYTES + 1];
		PublishedRef *ref;

		memcpy(key, id, idlen);
		key[idlen] = '\0';
		ref = hash_search(published, key, HASH_FIND, NULL);
		return ref != NULL ? ref->org : NULL;
	}
	foreach(lc, published_order)
	{
		PublishedOrg *q = (PublishedOrg *) lfirst(lc);

		if (strncmp(q->organization, id, idlen) == 0 && q->organization[idlen] == '\0')
			return q;
	}
	return NULL;
}

/*
 * The revision of the current transaction's first event in organization org
 * (a text Datum) that no savepoint rollback undid, or 0 when there is none:
 * the transaction_first_revision of the event it publishes next there.
 */
int64
EventhubTransactionFirstRevision(Datum org)
{
	text	   *t = DatumGetTextPP(org);
	PublishedOrg *p;

	if (published_order == NIL)
		return 0;
	p = FindPublished(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	return p != NULL && p->depth > 0 ? p->first_revision : 0;
}

/*
 * Adds organization id (idlen bytes) to what the transaction published,
 * in the transaction's memory; past PUBLISHED_HASH_AT organizations, they
 * are found through a hash table too.
 */
static PublishedOrg *
AddPublished(const char *id, int idlen)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	PublishedOrg *p;
	ListCell   *lc;

	p = palloc(offsetof(PublishedOrg, organization) + idlen + 1);
	memcpy(p->organization, id, idlen);
	p->organization[idlen] = '\0';
	EventhubTokenBytes(id, idlen, p->token);
	p->first_revision = 0;
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
	return p;
}

/*
 * Records that the current transaction published version of organization
 * org (a text Datum) as an event at revision, to be announced at commit.
 * Call it only once the event was inserted.  Under session_replication_role
 * = replica this is tracked too, but not announced.
 */
void
EventhubRecordPublished(Datum org, const pg_uuid_t *version, int64 revision)
{
	static bool callbacks_registered = false;
	text	   *t = DatumGetTextPP(org);
	const char *id = VARDATA_ANY(t);
	int			idlen = VARSIZE_ANY_EXHDR(t);
	SubTransactionId subid = GetCurrentSubTransactionId();
	PublishedOrg *p = NULL;

	Assert(idlen <= EVENTHUB_MAX_ID_BYTES);
	if (!callbacks_registered)
	{
		RegisterXactCallback(NotifyXactCallback, NULL);
		RegisterSubXactCallback(NotifySubXactCallback, NULL);
		callbacks_registered = true;
	}

	p = FindPublished(id, idlen);
	if (p == NULL)
		p = AddPublished(id, idlen);
	if (p->depth == 0)
		p->first_revision = revision;
	if (p->depth > 0 && p->levels[p->depth - 1].subid == subid)
	{
		p->levels[p->depth - 1].version = *version;
		p->levels[p->depth - 1].revision = revision;
	}
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
		p->levels[p->depth].revision = revision;
		p->depth++;
	}
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
	PG_RETURN_TEXT_P(cstring_to_text(EventhubNotifierServes() ? "worker" : "transaction"));
}

/*
 * notifier_pid() -> integer
 *
 * The process id of the notifier worker that announces what this database
 * publishes, NULL when none does.  Clients take the events a notification
 * carries only from this process.
 */
Datum
notifier_pid(PG_FUNCTION_ARGS)
{
	int			pid = EventhubNotifierPid();

	if (pid == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(pid);
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
