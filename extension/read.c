/*
 * read.c
 *	  eventhub.events_since() and eventhub.transactions_since(): the read
 *	  cursor.
 *
 * A reader's cursor is the revision and version id of the last event it
 * applied.  events_since returns the events after it, in revision order,
 * and never a gap nor events that follow a history the reader does not
 * have: it raises ZE001 (events the reader needs were removed), ZE002 (the
 * cursor is above the head) or ZE003 (the history at the cursor has another
 * version).  The head and the events come from one snapshot (the function
 * is STABLE and its queries run read-only in the caller's snapshot), so
 * every revision up to the head is either returned or was removed.
 *
 * It runs as the caller, with the caller's privileges and row-level
 * security, like the plain SELECT it replaces, but without PL/pgSQL's row
 * loop: the query's executor hands each row to a receiver that checks its
 * revision and puts it straight into the function's result, with no copy
 * in between.
 *
 * transactions_since reads the same way and cuts its batch where a
 * publishing transaction ends (see its comment below).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/params.h"
#include "tcop/dest.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

#include "common.h"
#include "access.h"

PG_FUNCTION_INFO_V1(events_since);
PG_FUNCTION_INFO_V1(transactions_since);

/* Column numbers of events_since's result (eventhub.events). */
#define COL_REVISION 2

/*
 * Reads the head revision and version of an organization, and the version
 * of its event at after_revision where that is kept.  The caller has
 * connected to SPI.
 */
static void
ReadHead(Datum org, int64 after_revision, int64 *head, pg_uuid_t *head_version,
		 bool *have_head_version, pg_uuid_t *at_cursor, bool *have_at_cursor)
{
	static EventhubPlan plan;
	Datum		values[2] = {org, Int64GetDatum(after_revision)};
	int			ret;

	ret = SPI_execute_plan(EventhubKeptGenericPlan(&plan, &EventhubSqlReadCursor),
						   values, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading the head failed: %s", SPI_result_code_string(ret));
	*head = 0;
	*have_head_version = *have_at_cursor = false;
	if (SPI_processed == 1)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;

		*head = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		d = SPI_getbinval(tuple, desc, 2, &isnull);
		if (!isnull)
		{
			*head_version = *DatumGetUUIDP(d);
			*have_head_version = true;
		}
		d = SPI_getbinval(tuple, desc, 3, &isnull);
		if (!isnull)
		{
			*at_cursor = *DatumGetUUIDP(d);
			*have_at_cursor = true;
		}
	}
}

/*
 * Receives the events query's rows: keeps them, in revision order, up to
 * the first hole (an event missing there was removed).
 */
typedef struct EventsReceiver
{
	DestReceiver pub;
	Tuplestorestate *store;
	int64		expected;		/* the revision the next row must have */
	uint64		returned;
	bool		hole;
} EventsReceiver;

static bool
EventsReceive(TupleTableSlot *slot, DestReceiver *self)
{
	EventsReceiver *r = (EventsReceiver *) self;
	bool		isnull;

	if (r->hole)
		return true;
	if (DatumGetInt64(slot_getattr(slot, COL_REVISION, &isnull)) != r->expected)
	{
		r->hole = true;
		return true;
	}
	tuplestore_puttupleslot(r->store, slot);
	r->expected++;
	r->returned++;
	return true;
}

static char *
UuidText(pg_uuid_t *u)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(u)));
}

/*
 * What events_since and transactions_since are asked, once checked: the
 * organization, the cursor, the batch's limits, and the head read at the
 * start.
 */
typedef struct ReadRequest
{
	Datum		org;
	char	   *org_text;
	int64		after;
	int32		max_events;
	int64		head;
} ReadRequest;

/*
 * Checks the arguments the two functions share (organization_id,
 * after_revision, max_events).  Each function then checks its own, and the
 * caller's read privilege before anything is read: the answer must not
 * tell whether the organization exists.
 */
static void
CheckReadArguments(FunctionCallInfo fcinfo, ReadRequest *req)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("organization_id must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("after_revision must not be null"),
				 errhint("Pass 0 to read an organization from its first kept event.")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_events must not be null")));
	req->org = PG_GETARG_DATUM(0);
	req->org_text = TextDatumGetCString(req->org);
	req->after = PG_GETARG_INT64(1);
	req->max_events = PG_GETARG_INT32(2);
	if (req->after < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("after_revision must not be negative"),
				 errdetail("after_revision is " INT64_FORMAT ".", req->after),
				 errhint("Pass 0 to read an organization from its first kept event.")));
	if (req->max_events <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_events must be greater than zero"),
				 errdetail("max_events is %d.", req->max_events)));
}

/*
 * Reads the head and checks the cursor against it (after_version is
 * argument 3): ZE002 when the cursor is above the head, ZE003 when the
 * history at the cursor is not the one the reader applied.  The caller has
 * connected to SPI.
 */
static void
CheckCursor(FunctionCallInfo fcinfo, ReadRequest *req)
{
	pg_uuid_t	head_version;
	pg_uuid_t	at_cursor;
	bool		have_head_version;
	bool		have_at_cursor;

	ReadHead(req->org, req->after, &req->head, &head_version, &have_head_version, &at_cursor, &have_at_cursor);
	if (req->after > req->head)
		ereport(ERROR,
				(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '2')),
				 errmsg("revision " INT64_FORMAT " is ahead of organization \"%s\"", req->after, req->org_text),
				 errdetail("The head revision of organization \"%s\" is " INT64_FORMAT ".", req->org_text, req->head),
				 errhint("The database no longer has history this reader has seen, for example after a failover. Reload the full state and continue from the head revision.")));

	/*
	 * The reader's cursor must be this database's history: the event at the
	 * cursor, where it is kept, or else the head when the cursor is at it,
	 * must have the version the reader applied.
	 */
	if (!PG_ARGISNULL(3) && req->after > 0)
	{
		pg_uuid_t  *applied = PG_GETARG_UUID_P(3);
		pg_uuid_t  *here = have_at_cursor ? &at_cursor :
			(req->after == req->head && have_head_version) ? &head_version : NULL;

		if (here && memcmp(here->data, applied->data, UUID_LEN) != 0)
			ereport(ERROR,
					(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '3')),
					 errmsg("history of organization \"%s\" diverged at revision " INT64_FORMAT, req->org_text, req->after),
					 errdetail("Revision " INT64_FORMAT " has version %s here; the reader applied version %s. The head revision is " INT64_FORMAT ".",
							   req->after, UuidText(here), UuidText(applied), req->head),
					 errhint("The reader applied history this database does not have, for example before a failover to a standby that had not received it. Reload the full state and continue from the head revision.")));
	}
}

/*
 * Raises ZE001 for a batch that stopped short of the head: revision
 * missing, the first after the cursor that is not kept, was removed.  The
 * message names the cursor the reader passed, not the last revision kept
 * before the hole (with compaction, events between the cursor and the
 * hole may be kept, as their entities' latest); the detail names the hole.
 */
static void
RaiseRemoved(ReadRequest *req, int64 missing)
{
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '1')),
			 errmsg("events of organization \"%s\" after revision " INT64_FORMAT " have been removed",
					req->org_text, req->after),
			 errdetail("Revision " INT64_FORMAT " is no longer kept; the head revision is " INT64_FORMAT ".",
					   missing, req->head),
			 errhint("Reload the full state and continue from the head revision in eventhub.organization_states.")));
}

/* A receiver with no work to do at its start, end or destruction. */
static void
ReceiverStartup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
ReceiverShutdown(DestReceiver *self)
{
}

static void
ReceiverDestroy(DestReceiver *self)
{
}

/*
 * Runs a read query, statement s with org ($1), after_revision ($2) and
 * limit ($3), into dest.
 */
static void
RunRead(EventhubPlan *plan, const EventhubStatement *s, ReadRequest *req,
		Oid limit_type, Datum limit, DestReceiver *dest)
{
	ParamListInfo params = makeParamList(3);
	SPIExecuteOptions options;
	int			ret;

	for (int i = 0; i < 3; i++)
	{
		params->params[i].isnull = false;
		params->params[i].pflags = PARAM_FLAG_CONST;
	}
	params->params[0].value = req->org;
	params->params[0].ptype = TEXTOID;
	params->params[1].value = Int64GetDatum(req->after);
	params->params[1].ptype = INT8OID;
	params->params[2].value = limit;
	params->params[2].ptype = limit_type;

	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = true;
	options.dest = dest;
	ret = SPI_execute_plan_extended(EventhubKeptGenericPlan(plan, s), &options);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading events failed: %s", SPI_result_code_string(ret));
}

/*
 * events_since(organization_id text, after_revision bigint,
 *				max_events integer DEFAULT 1000, after_version uuid DEFAULT NULL)
 *	 -> SETOF eventhub.events
 */
Datum
events_since(PG_FUNCTION_ARGS)
{
	static EventhubPlan plan;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ReadRequest req;
	EventsReceiver receiver;

	CheckReadArguments(fcinfo, &req);
	EventhubCheckOrgPrivilege(req.org, EVENTHUB_PRIV_READ);

	EventhubInitResultStore(fcinfo);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	CheckCursor(fcinfo, &req);

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = EventsReceive;
	receiver.pub.rStartup = ReceiverStartup;
	receiver.pub.rShutdown = ReceiverShutdown;
	receiver.pub.rDestroy = ReceiverDestroy;
	receiver.pub.mydest = DestTuplestore;	/* anything but DestNone, which SPI takes for "discard" */
	receiver.store = rsinfo->setResult;
	receiver.expected = req.after + 1;

	RunRead(&plan, &EventhubSqlReadEventsSince, &req, INT4OID, Int32GetDatum(req.max_events),
			(DestReceiver *) &receiver);

	/* A short batch must end at the head. */
	if (receiver.returned < (uint64) req.max_events && receiver.expected <= req.head)
		RaiseRemoved(&req, receiver.expected);

	SPI_finish();
	return (Datum) 0;
}

/*
 * transactions_since: events_since's batch, cut at a transaction boundary.
 *
 * The query reads the events after the cursor in revision order (the
 * columns of eventhub.events, transaction_first_revision filled in where
 * it is NULL), at most max_events + 1 of them.  A row starts a transaction
 * when its transaction_first_revision is its own revision: one
 * transaction's events have consecutive revisions (publish.c), so a row
 * ends its transaction when the next row starts one, or, with no next row,
 * when it is the head (a transaction's events commit together).
 *
 * The receiver takes rows up to the limits (max_events, and max_bytes of
 * stored size: the row that reaches it is the last), then one row more to
 * learn whether the last one ended its transaction, and stops at a hole.
 * The current transaction's rows wait in a private tuplestore (bounded by
 * work_mem, as the result is) until a row shows that it ended; then they go
 * into the result.  At the end a transaction still open is dropped, unless
 * nothing went into the result: a transaction alone over the limits comes
 * in parts, each ending with transaction_end false.
 */

/* Columns of the query, and of eventhub.transaction_event after them. */
#define TCOL_REVISION 2
#define TCOL_EVENT_TYPE 6
#define TCOL_ENTITY_ID 8
#define TCOL_CORRELATION_ID 9
#define TCOL_EVENT_DATA 10
#define TCOL_FIRST_REVISION 11
#define TCOL_QUERY_COUNT 11
#define TCOL_TRANSACTION_END 12
#define TCOL_HEAD_REVISION 13
#define TCOL_COUNT 13

typedef struct TransactionsReceiver
{
	DestReceiver pub;
	Tuplestorestate *result;	/* rows of ended transactions */
	Tuplestorestate *open;		/* rows of the transaction under way, but the last */
	TupleDesc	desc;			/* eventhub.transaction_event */
	TupleTableSlot *last;		/* the last row taken (query columns) */
	TupleTableSlot *moving;		/* for rows moved from open to result */
	bool		have_last;
	int64		head;
	int64		expected;		/* the revision the next row must have */
	int32		max_events;
	int64		max_bytes;		/* 0: no limit */
	int32		taken;
	int64		bytes;
	bool		full;			/* the next row only tells where the last one stands */
	uint64		returned;		/* rows in result */
} TransactionsReceiver;

/* Puts the last row taken into store, with its transaction_end. */
static void
PutLast(TransactionsReceiver *r, Tuplestorestate *store, bool ends)
{
	Datum		values[TCOL_COUNT];
	bool		nulls[TCOL_COUNT];

	slot_getallattrs(r->last);
	memcpy(values, r->last->tts_values, TCOL_QUERY_COUNT * sizeof(Datum));
	memcpy(nulls, r->last->tts_isnull, TCOL_QUERY_COUNT * sizeof(bool));
	values[TCOL_TRANSACTION_END - 1] = BoolGetDatum(ends);
	nulls[TCOL_TRANSACTION_END - 1] = false;
	values[TCOL_HEAD_REVISION - 1] = Int64GetDatum(r->head);
	nulls[TCOL_HEAD_REVISION - 1] = false;
	tuplestore_putvalues(store, r->desc, values, nulls);
	r->have_last = false;
}

/* Moves the open transaction's rows into the result, and empties it. */
static void
MoveOpen(TransactionsReceiver *r)
{
	while (tuplestore_gettupleslot(r->open, true, false, r->moving))
	{
		tuplestore_puttupleslot(r->result, r->moving);
		r->returned++;
	}
	tuplestore_clear(r->open);
}

/*
 * The last row taken ended its transaction (ends) or not: into the result
 * with the rest of its transaction, or into the open transaction.
 */
static void
PlaceLast(TransactionsReceiver *r, bool ends)
{
	if (ends)
	{
		MoveOpen(r);
		PutLast(r, r->result, true);
		r->returned++;
	}
	else
		PutLast(r, r->open, false);
}

static bool
TransactionsReceive(TupleTableSlot *slot, DestReceiver *self)
{
	TransactionsReceiver *r = (TransactionsReceiver *) self;
	bool		isnull;
	int64		revision;

	CHECK_FOR_INTERRUPTS();
	revision = DatumGetInt64(slot_getattr(slot, TCOL_REVISION, &isnull));
	if (revision != r->expected)
		return false;			/* a hole: there is no next row */
	if (r->have_last)
		PlaceLast(r, DatumGetInt64(slot_getattr(slot, TCOL_FIRST_REVISION, &isnull)) == revision);
	if (r->full)
		return false;			/* it only told where the last one stands */

	ExecCopySlot(r->last, slot);
	r->have_last = true;
	r->expected++;
	r->taken++;
	r->bytes += EventhubStoredSize(slot, TCOL_EVENT_TYPE) + EventhubStoredSize(slot, TCOL_ENTITY_ID) +
		EventhubStoredSize(slot, TCOL_CORRELATION_ID) + EventhubStoredSize(slot, TCOL_EVENT_DATA) + EVENTHUB_ROW_OVERHEAD_BYTES;
	if (r->taken >= r->max_events || (r->max_bytes > 0 && r->bytes >= r->max_bytes))
		r->full = true;
	return true;
}

/*
 * Sets up transactions_since's receiver for the function's result, the
 * request and max_bytes.  In SPI's memory, which SPI_finish frees.
 */
static void
InitTransactionsReceiver(TransactionsReceiver *receiver, ReturnSetInfo *rsinfo,
						 const ReadRequest *req, int64 max_bytes)
{
	TupleDesc	query_desc;

	memset(receiver, 0, sizeof(*receiver));
	receiver->pub.receiveSlot = TransactionsReceive;
	receiver->pub.rStartup = ReceiverStartup;
	receiver->pub.rShutdown = ReceiverShutdown;
	receiver->pub.rDestroy = ReceiverDestroy;
	receiver->pub.mydest = DestTuplestore;	/* anything but DestNone, which SPI takes for "discard" */
	receiver->result = rsinfo->setResult;
	receiver->open = tuplestore_begin_heap(false, false, work_mem);
	receiver->desc = rsinfo->setDesc;
	query_desc = CreateTemplateTupleDesc(TCOL_QUERY_COUNT);
	for (int i = 1; i <= TCOL_QUERY_COUNT; i++)
		TupleDescCopyEntry(query_desc, i, rsinfo->setDesc, i);
	receiver->last = MakeSingleTupleTableSlot(query_desc, &TTSOpsMinimalTuple);
	receiver->moving = MakeSingleTupleTableSlot(rsinfo->setDesc, &TTSOpsMinimalTuple);
	receiver->head = req->head;
	receiver->expected = req->after + 1;
	receiver->max_events = req->max_events;
	receiver->max_bytes = max_bytes;
}

/*
 * transactions_since(organization_id text, after_revision bigint,
 *					  max_events integer DEFAULT 1000, after_version uuid DEFAULT NULL,
 *					  max_bytes integer DEFAULT NULL)
 *	 -> SETOF eventhub.transaction_event
 *
 * The events after the cursor as events_since returns them, plus
 * transaction_first_revision (never NULL), transaction_end and the head;
 * the batch ends where a transaction does, unless one transaction alone is
 * over the limits.  The batch is caught up when it is empty or its last
 * row is the head.  ZE001-ZE003 as events_since.
 */
Datum
transactions_since(PG_FUNCTION_ARGS)
{
	static EventhubPlan plan;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ReadRequest req;
	int64		max_bytes = 0;
	TransactionsReceiver receiver;

	CheckReadArguments(fcinfo, &req);
	max_bytes = EventhubMaxBytesArgument(fcinfo, 4);
	EventhubCheckOrgPrivilege(req.org, EVENTHUB_PRIV_READ);

	EventhubInitResultStore(fcinfo);
	if (rsinfo->setDesc->natts != TCOL_COUNT)
		elog(ERROR, "eventhub: transactions_since must return eventhub.transaction_event");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	CheckCursor(fcinfo, &req);

	InitTransactionsReceiver(&receiver, rsinfo, &req, max_bytes);

	/* max_events rows, and one more that tells whether the last ended its transaction */
	RunRead(&plan, &EventhubSqlReadTransactionsSince, &req,
			INT8OID, Int64GetDatum((int64) req.max_events + 1), (DestReceiver *) &receiver);

	/*
	 * With no next row, the last one ended its transaction at the head.  A
	 * short batch must end at the head, as in events_since.
	 */
	if (receiver.have_last)
		PlaceLast(&receiver, receiver.expected - 1 == req.head);
	if (!receiver.full && receiver.expected <= req.head)
		RaiseRemoved(&req, receiver.expected);
	/* A transaction alone over the limits: as much of it as they allow. */
	if (receiver.returned == 0)
		MoveOpen(&receiver);

	tuplestore_end(receiver.open);
	ExecDropSingleTupleTableSlot(receiver.last);
	ExecDropSingleTupleTableSlot(receiver.moving);
	SPI_finish();
	return (Datum) 0;
}
