/*
 * snapshot.c
 *	  Snapshots of an organization's entities: snapshot_head(),
 *	  snapshot_entities() and declare_full_state().
 *
 * organization_states.complete_after promises that every entity's latest
 * event above that revision is kept, so that the latest events are the
 * organization's full state.  An organization whose events were removed
 * before 0.4.0 has NULL there (sql/eventhub--0.3.0--0.4.0.sql), and gets the
 * promise back from its publisher: read the head revision H, publish the
 * full state of every live entity, then declare_full_state(org, H).
 *
 * A consumer reads a snapshot in one REPEATABLE READ transaction:
 * snapshot_head(), then the pages of snapshot_entities(), then
 * transactions_since() or events_since() from that head.  Both read
 * functions run as the caller, with the caller's privileges and row-level
 * security, like events_since.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/params.h"
#include "tcop/dest.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

#include "common.h"
#include "guard.h"
#include "access.h"

PG_FUNCTION_INFO_V1(declare_full_state);
PG_FUNCTION_INFO_V1(snapshot_head);
PG_FUNCTION_INFO_V1(snapshot_entities);

/* Columns of the page query and of snapshot_entities' result. */
#define SCOL_EVENT_TYPE 1
#define SCOL_ENTITY_ID 2
#define SCOL_ACTION 5
#define SCOL_EVENT_DATA 6

/* Raises ZE004: the organization's latest events are not its full state. */
static void
RefuseIncomplete(Datum org)
{
	ereport(ERROR,
			(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '4')),
			 errmsg("snapshot of organization \"%s\" is incomplete", TextDatumGetCString(org)),
			 errdetail("Events that were the latest of their entities were removed, before 0.4.0 or with eventhub.compaction off."),
			 errhint("Reload the state from the application, republish it and call eventhub.declare_full_state().")));
}

/* An organization's head, as the snapshot functions read it. */
typedef struct OrgHead
{
	int64		revision;		/* 0 for an organization never registered */
	bool		version_known;
	pg_uuid_t	version;
	int64		complete_after;
} OrgHead;

/*
 * Reads the organization's head in the caller's snapshot, under SPI:
 * ZE004 when its latest events are not its full state (complete_after
 * NULL).
 */
static void
ReadOrgHead(Datum org, OrgHead *head)
{
	static EventhubPlan plan;
	int			ret;

	memset(head, 0, sizeof(*head));
	ret = SPI_execute_plan(EventhubKeptGenericPlan(&plan, &EventhubSqlSnapshotHead),
						   &org, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading the head failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 1)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;

		d = SPI_getbinval(tuple, desc, 3, &isnull);
		if (isnull)
			RefuseIncomplete(org);
		head->complete_after = DatumGetInt64(d);
		head->revision = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		d = SPI_getbinval(tuple, desc, 2, &isnull);
		if (!isnull)
		{
			head->version = *DatumGetUUIDP(d);
			head->version_known = true;
		}
	}
}

/* Sets a page query's parameter i. */
static void
SetParam(ParamListInfo params, int i, Datum value, Oid type)
{
	params->params[i].value = value;
	params->params[i].isnull = false;
	params->params[i].pflags = PARAM_FLAG_CONST;
	params->params[i].ptype = type;
}

/*
 * snapshot_head(organization_id, OUT revision, OUT version_id) -> record
 *
 * The head a snapshot is read at, in the caller's snapshot: (0, NULL) for
 * an organization never registered, ZE004 for one whose latest events are
 * not its full state (complete_after NULL).  Needs the read privilege,
 * checked before anything is read.
 */
Datum
snapshot_head(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		org;
	OrgHead		head;
	Datum		values[2];
	bool		nulls[2] = {false, true};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("organization_id must not be null")));
	org = PG_GETARG_DATUM(0);
	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_READ);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	ReadOrgHead(org, &head);
	SPI_finish();

	values[0] = Int64GetDatum(head.revision);
	values[1] = (Datum) 0;
	if (head.version_known)
	{
		pg_uuid_t  *copy = palloc(sizeof(pg_uuid_t));

		*copy = head.version;
		values[1] = UUIDPGetDatum(copy);
		nulls[1] = false;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * declare_full_state(organization_id, after_revision) -> void
 *
 * Sets the organization's complete_after to after_revision, which must lie
 * between 0 and its head revision.  Needs the publish privilege: it is the
 * publisher who knows that the events above after_revision hold every live
 * entity.  The UPDATE takes the organization's row lock, so it waits for
 * the transactions publishing to it, and the head it checks is the one
 * after them.  An organization never published to has head 0: declaring 0
 * there changes nothing.
 */
Datum
declare_full_state(PG_FUNCTION_ARGS)
{
	static EventhubPlan plan;
	Datum		values[2];
	Datum		org;
	int64		after;
	int64		head = 0;

	EventhubRequireCurrentSchema();
	org = EventhubRequiredTextArg(fcinfo, 0, "organization_id", EVENTHUB_MAX_ID_BYTES);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("after_revision must not be null"),
				 errhint("Pass the head revision read before the full state was published.")));
	after = PG_GETARG_INT64(1);
	if (after < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("after_revision must not be negative"),
				 errdetail("after_revision is " INT64_FORMAT ".", after)));
	/* Before anything is read: the answer must not tell whether it exists. */
	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_PUBLISH);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	values[0] = org;
	values[1] = Int64GetDatum(after);
	EventhubRunAsOwner(&plan, &EventhubSqlSnapshotDeclareFullState, values,
					   SPI_OK_UPDATE_RETURNING, "declaring the full state");
	if (SPI_processed == 1)
	{
		bool		isnull;

		head = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	/* The error undoes the UPDATE with the rest of the statement. */
	if (after > head)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("after_revision " INT64_FORMAT " is above the head revision " INT64_FORMAT " of organization \"%s\"",
						after, head, TextDatumGetCString(org)),
				 errhint("Read the head revision before publishing the full state, and declare that revision.")));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * Receives the page query's rows, each entity's in revision order, and
 * keeps one row per entity: the last one, unless it is a DELETE.  Holds the
 * current entity's latest row so far in held; stops the scan (returns
 * false) once the page is full.
 */
typedef struct EntitiesReceiver
{
	DestReceiver pub;
	Tuplestorestate *store;
	TupleTableSlot *held;
	bool		have_held;
	bool		full;
	int32		max_entities;
	int64		max_bytes;		/* 0: no limit */
	int64		entities;
	int64		bytes;
} EntitiesReceiver;

/* Whether two rows' text column col are equal byte for byte. */
static bool
SameText(TupleTableSlot *a, TupleTableSlot *b, int col)
{
	bool		isnull;
	text	   *x = DatumGetTextPP(slot_getattr(a, col, &isnull));
	text	   *y = DatumGetTextPP(slot_getattr(b, col, &isnull));

	return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
		memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

/* Puts the held row into the page unless it is a tombstone. */
static void
EmitHeld(EntitiesReceiver *r)
{
	bool		isnull;
	text	   *action;

	r->have_held = false;
	action = DatumGetTextPP(slot_getattr(r->held, SCOL_ACTION, &isnull));
	if (VARSIZE_ANY_EXHDR(action) == 6 && memcmp(VARDATA_ANY(action), "DELETE", 6) == 0)
		return;
	tuplestore_puttupleslot(r->store, r->held);
	r->entities++;
	r->bytes += EventhubStoredSize(r->held, SCOL_EVENT_TYPE) + EventhubStoredSize(r->held, SCOL_ENTITY_ID) +
		EventhubStoredSize(r->held, SCOL_EVENT_DATA) + EVENTHUB_ROW_OVERHEAD_BYTES;
	if (r->entities >= r->max_entities || (r->max_bytes > 0 && r->bytes >= r->max_bytes))
		r->full = true;
}

static bool
EntitiesReceive(TupleTableSlot *slot, DestReceiver *self)
{
	EntitiesReceiver *r = (EntitiesReceiver *) self;

	CHECK_FOR_INTERRUPTS();
	if (r->have_held &&
		!(SameText(slot, r->held, SCOL_EVENT_TYPE) && SameText(slot, r->held, SCOL_ENTITY_ID)))
	{
		EmitHeld(r);
		if (r->full)
			return false;		/* this row starts the next page */
	}
	ExecCopySlot(r->held, slot);
	r->have_held = true;
	return true;
}

static void
EntitiesStartup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
EntitiesShutdown(DestReceiver *self)
{
}

static void
EntitiesDestroy(DestReceiver *self)
{
}

/*
 * Checks snapshot_entities' arguments; returns max_entities.
 */
static int32
CheckEntitiesArgs(FunctionCallInfo fcinfo)
{
	int32		max_entities;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("organization_id must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("at_revision must not be null"),
				 errhint("Pass the revision eventhub.snapshot_head() returned.")));
	if (PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_entities must not be null")));
	if (PG_ARGISNULL(2) != PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("after_event_type and after_entity_id must be given together"),
				 errhint("Pass both from the last row of the previous page, or neither for the first page.")));
	max_entities = PG_GETARG_INT32(4);
	if (max_entities <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_entities must be greater than zero"),
				 errdetail("max_entities is %d.", max_entities)));
	return max_entities;
}

/*
 * Refuses a page when the organization's head is no longer at_revision
 * (and at_version, when given: argument 6).
 */
static void
CheckHeadUnmoved(FunctionCallInfo fcinfo, Datum org, int64 at_revision, const OrgHead *head)
{
	if (at_revision != head->revision ||
		(!PG_ARGISNULL(6) &&
		 (!head->version_known || memcmp(PG_GETARG_UUID_P(6), &head->version, sizeof(pg_uuid_t)) != 0)))
		ereport(ERROR,
				(errcode(MAKE_SQLSTATE('Z', 'E', '0', '0', '5')),
				 errmsg("organization \"%s\" moved during the snapshot", TextDatumGetCString(org)),
				 at_revision != head->revision ?
				 errdetail("The snapshot was read at revision " INT64_FORMAT "; the head is now " INT64_FORMAT ".",
						   at_revision, head->revision) :
				 errdetail("The head is at revision " INT64_FORMAT " with another version than at_version.",
						   head->revision),
				 errhint("Read the snapshot's pages in one REPEATABLE READ transaction.")));
}

/*
 * Reads one page of entities from complete_after on (after the keyset of
 * arguments 2 and 3 when given) into the function's result.  The caller
 * has connected to SPI.
 */
static void
ReadEntitiesPage(FunctionCallInfo fcinfo, Datum org, int64 complete_after,
				 int32 max_entities, int64 max_bytes)
{
	static EventhubPlan first_plan;
	static EventhubPlan next_plan;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		keyset = !PG_ARGISNULL(2);
	EntitiesReceiver receiver;
	SPIExecuteOptions options;
	ParamListInfo params;
	SPIPlanPtr	plan;
	int			ret;

	if (keyset)
		plan = EventhubKeptFastPlan(&next_plan, &EventhubSqlSnapshotEntitiesNext);
	else
		plan = EventhubKeptFastPlan(&first_plan, &EventhubSqlSnapshotEntitiesFirst);

	params = makeParamList(keyset ? 4 : 2);
	SetParam(params, 0, org, TEXTOID);
	SetParam(params, 1, Int64GetDatum(complete_after), INT8OID);
	if (keyset)
	{
		SetParam(params, 2, PG_GETARG_DATUM(2), TEXTOID);
		SetParam(params, 3, PG_GETARG_DATUM(3), TEXTOID);
	}

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = EntitiesReceive;
	receiver.pub.rStartup = EntitiesStartup;
	receiver.pub.rShutdown = EntitiesShutdown;
	receiver.pub.rDestroy = EntitiesDestroy;
	receiver.pub.mydest = DestTuplestore;	/* anything but DestNone, which SPI takes for "discard" */
	receiver.store = rsinfo->setResult;
	receiver.held = MakeSingleTupleTableSlot(rsinfo->setDesc, &TTSOpsMinimalTuple);
	receiver.max_entities = max_entities;
	receiver.max_bytes = max_bytes;

	memset(&options, 0, sizeof(options));
	options.params = params;
	options.read_only = true;
	options.dest = (DestReceiver *) &receiver;
	ret = SPI_execute_plan_extended(plan, &options);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading the snapshot failed: %s", SPI_result_code_string(ret));
	if (receiver.have_held && !receiver.full)
		EmitHeld(&receiver);
	ExecDropSingleTupleTableSlot(receiver.held);
}

/*
 * snapshot_entities(organization_id, at_revision, after_event_type,
 *     after_entity_id, max_entities, max_bytes, at_version)
 *   -> TABLE (event_type, entity_id, revision, version_id, action,
 *             event_data, originated_timestamp)
 *
 * One page of the organization's snapshot at head at_revision: each live
 * entity's latest event above complete_after, in (event_type, entity_id)
 * byte order, after the keyset (after_event_type, after_entity_id) when
 * given.  A page holds max_entities rows, or fewer once their stored size
 * reaches max_bytes (never none).  A page with no rows ends the snapshot,
 * and so does one short of max_entities when max_bytes is NULL; a client
 * cannot tell a page cut by max_bytes from the last (the size counted is
 * the stored one).
 * ZE004 when the organization's latest events are not its full state, ZE005
 * when its head is no longer at_revision (and at_version): read the pages
 * in one REPEATABLE READ transaction.  Runs as the caller, with the
 * caller's privileges and row-level security; memory holds one page and
 * one row.
 */
Datum
snapshot_entities(PG_FUNCTION_ARGS)
{
	int32		max_entities = CheckEntitiesArgs(fcinfo);
	Datum		org = PG_GETARG_DATUM(0);
	int64		at_revision = PG_GETARG_INT64(1);
	int64		max_bytes = EventhubMaxBytesArgument(fcinfo, 5);
	OrgHead		head;

	/* Before anything is read: the answer must not tell whether it exists. */
	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_READ);

	EventhubInitResultStore(fcinfo);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	ReadOrgHead(org, &head);
	CheckHeadUnmoved(fcinfo, org, at_revision, &head);
	ReadEntitiesPage(fcinfo, org, head.complete_after, max_entities, max_bytes);
	SPI_finish();
	return (Datum) 0;
}
