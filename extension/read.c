/*
 * read.c
 *	  eventhub.events_since(): the read cursor.
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

#include "eventhub.h"

PG_FUNCTION_INFO_V1(events_since);

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
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {org, Int64GetDatum(after_revision)};
	int			ret;

	ret = SPI_execute_plan(EventhubKeptGenericPlan(&plan,
											"SELECT s.revision, s.version_id,"
											" (SELECT c.version_id FROM eventhub.events c"
											"   WHERE c.organization_id OPERATOR(pg_catalog.=) $1"
											"   AND c.revision OPERATOR(pg_catalog.=) $2)"
											" FROM eventhub.organization_states s"
											" WHERE s.organization_id OPERATOR(pg_catalog.=) $1",
											2, argtypes),
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

static void
EventsStartup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
EventsShutdown(DestReceiver *self)
{
}

static void
EventsDestroy(DestReceiver *self)
{
}

/*
 * Sets up the function's result as a tuplestore of the declared row type,
 * into rsinfo->setResult and setDesc: InitMaterializedSRF where PostgreSQL
 * has it (15 and later).
 */
static void
InitResultStore(FunctionCallInfo fcinfo)
{
#if PG_VERSION_NUM >= 150000
	InitMaterializedSRF(fcinfo, 0);
#else
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	rsinfo->setResult = tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0,
											  false, work_mem);
	MemoryContextSwitchTo(old);
#endif
}

static char *
UuidText(pg_uuid_t *u)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(u)));
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
	Oid			argtypes[3] = {TEXTOID, INT8OID, INT4OID};
	Datum		org;
	char	   *org_text;
	int64		after;
	int32		max_events;
	int64		head;
	pg_uuid_t	head_version;
	pg_uuid_t	at_cursor;
	bool		have_head_version;
	bool		have_at_cursor;
	EventsReceiver receiver;
	SPIExecuteOptions options;
	ParamListInfo params;
	int			ret;

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
	org = PG_GETARG_DATUM(0);
	org_text = TextDatumGetCString(org);
	after = PG_GETARG_INT64(1);
	max_events = PG_GETARG_INT32(2);
	if (after < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("after_revision must not be negative"),
				 errdetail("after_revision is " INT64_FORMAT ".", after),
				 errhint("Pass 0 to read an organization from its first kept event.")));
	if (max_events <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_events must be greater than zero"),
				 errdetail("max_events is %d.", max_events)));
	/* Before anything is read: the answer must not tell whether it exists. */
	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_READ);

	InitResultStore(fcinfo);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");

	ReadHead(org, after, &head, &head_version, &have_head_version, &at_cursor, &have_at_cursor);
	if (after > head)
		ereport(ERROR,
				(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '2')),
				 errmsg("revision " INT64_FORMAT " is ahead of organization \"%s\"", after, org_text),
				 errdetail("The head revision of organization \"%s\" is " INT64_FORMAT ".", org_text, head),
				 errhint("The database no longer has history this reader has seen, for example after a failover. Reload the full state and continue from the head revision.")));

	/*
	 * The reader's cursor must be this database's history: the event at the
	 * cursor, where it is kept, or else the head when the cursor is at it,
	 * must have the version the reader applied.
	 */
	if (!PG_ARGISNULL(3) && after > 0)
	{
		pg_uuid_t  *applied = PG_GETARG_UUID_P(3);
		pg_uuid_t  *here = have_at_cursor ? &at_cursor :
			(after == head && have_head_version) ? &head_version : NULL;

		if (here && memcmp(here->data, applied->data, UUID_LEN) != 0)
			ereport(ERROR,
					(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '3')),
					 errmsg("history of organization \"%s\" diverged at revision " INT64_FORMAT, org_text, after),
					 errdetail("Revision " INT64_FORMAT " has version %s here; the reader applied version %s. The head revision is " INT64_FORMAT ".",
							   after, UuidText(here), UuidText(applied), head),
					 errhint("The reader applied history this database does not have, for example before a failover to a standby that had not received it. Reload the full state and continue from the head revision.")));
	}

	params = makeParamList(3);
	for (int i = 0; i < 3; i++)
	{
		params->params[i].isnull = false;
		params->params[i].pflags = PARAM_FLAG_CONST;
		params->params[i].ptype = argtypes[i];
	}
	params->params[0].value = org;
	params->params[1].value = Int64GetDatum(after);
	params->params[2].value = Int32GetDatum(max_events);

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = EventsReceive;
	receiver.pub.rStartup = EventsStartup;
	receiver.pub.rShutdown = EventsShutdown;
	receiver.pub.rDestroy = EventsDestroy;
	receiver.pub.mydest = DestTuplestore;	/* anything but DestNone, which SPI takes for "discard" */
	receiver.store = rsinfo->setResult;
	receiver.expected = after + 1;

	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = true;
	options.dest = (DestReceiver *) &receiver;
	ret = SPI_execute_plan_extended(EventhubKeptGenericPlan(&plan,
													 "SELECT e.* FROM eventhub.events e"
													 " WHERE e.organization_id OPERATOR(pg_catalog.=) $1"
													 " AND e.revision OPERATOR(pg_catalog.>) $2"
													 " ORDER BY e.revision LIMIT $3",
													 3, argtypes),
									&options);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading events failed: %s", SPI_result_code_string(ret));

	/* A short batch must end at the head. */
	if (receiver.returned < (uint64) max_events && receiver.expected <= head)
		ereport(ERROR,
				(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '1')),
				 errmsg("events of organization \"%s\" after revision " INT64_FORMAT " have been removed",
						org_text, receiver.expected - 1),
				 errdetail("Revision " INT64_FORMAT " is no longer kept; the head revision is " INT64_FORMAT ".",
						   receiver.expected, head),
				 errhint("Reload the full state and continue from the head revision in eventhub.organization_states.")));

	SPI_finish();
	return (Datum) 0;
}
