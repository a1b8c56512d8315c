/*
 * wait.c
 *	  eventhub.wait_for_events(): a session waits, without LISTEN, until one
 *	  of its organizations moves past its cursor.  It works where LISTEN
 *	  cannot: on a hot standby, and through a transaction-pooling proxy (one
 *	  statement per wait).
 *
 * A procedure, so that it can end transactions: it publishes its slot
 * (waiters.c), commits (the CALL's snapshot predates the slot), compares the
 * cursors with the heads in a new snapshot, and commits again before it
 * sleeps.  While it sleeps it holds no snapshot and no lock: on a standby
 * nothing it holds conflicts with replay, and nothing holds back cleanup on
 * the primary through hot_standby_feedback.  Woken, it looks again; it
 * returns the organizations that moved, or none when timeout_ms passed.
 * It reads the heads as the caller, with row-level security: it says no
 * more than organization_states would.  On a standby that is promoted it
 * returns at once, with none: the caller may LISTEN from then on.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "common.h"
#include "waiters.h"

PG_FUNCTION_INFO_V1(wait_for_events);

/* The longest wait one call may ask for, in milliseconds: an hour. */
#define WAIT_MAX_TIMEOUT_MS 3600000

/* What a call waits for, checked. */
typedef struct WaitArgs
{
	Datum		values[3];		/* organizations, revisions, versions */
	char		nulls[3];
	int			n;				/* organizations */
	EventhubWaitFor *orgs;		/* them, with their cursors */
	int			timeout_ms;
} WaitArgs;

static EventhubPlan moved_plan;

/* A one-dimensional array argument of n elements, or an error. */
static ArrayType *
ArrayArg(FunctionCallInfo fcinfo, int argno, const char *argname, int *n)
{
	ArrayType  *a;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
	a = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", argname)));
	*n = ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a));
	return a;
}

/* The organizations, checked, and their hashes into args. */
static void
OrganizationsArg(FunctionCallInfo fcinfo, WaitArgs *args)
{
	ArrayType  *orgs = ArrayArg(fcinfo, 0, "organization_ids", &args->n);
	Datum	   *elems;
	bool	   *elemnulls;
	int			n;

	deconstruct_array(orgs, TEXTOID, -1, false, TYPALIGN_INT, &elems, &elemnulls, &n);
	args->orgs = palloc0(sizeof(EventhubWaitFor) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		text	   *t;

		if (elemnulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("organization_ids must not contain null")));
		t = DatumGetTextPP(elems[i]);
		if (VARSIZE_ANY_EXHDR(t) == 0 || VARSIZE_ANY_EXHDR(t) > EVENTHUB_MAX_ID_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("organization_ids element %d is not an organization id", i + 1),
					 errdetail("An organization id is 1 to %d bytes long.", EVENTHUB_MAX_ID_BYTES)));
		args->orgs[i].id = VARDATA_ANY(t);
		args->orgs[i].len = VARSIZE_ANY_EXHDR(t);
	}
	args->values[0] = PointerGetDatum(orgs);
	args->nulls[0] = ' ';
}

/* The revisions: as many as organizations, none null or negative. */
static void
RevisionsArg(FunctionCallInfo fcinfo, WaitArgs *args)
{
	int			n;
	ArrayType  *revs = ArrayArg(fcinfo, 1, "after_revisions", &n);
	Datum	   *elems;
	bool	   *elemnulls;

	if (n != args->n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("after_revisions has %d elements, organization_ids %d", n, args->n)));
	deconstruct_array(revs, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &elemnulls, &n);
	for (int i = 0; i < n; i++)
	{
		if (elemnulls[i] || DatumGetInt64(elems[i]) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("after_revisions element %d must be a revision, 0 or more", i + 1)));
		args->orgs[i].cursor = DatumGetInt64(elems[i]);
	}
	args->values[1] = PointerGetDatum(revs);
	args->nulls[1] = ' ';
}

/* The versions: NULL (none compared), or as many as organizations. */
static void
VersionsArg(FunctionCallInfo fcinfo, WaitArgs *args)
{
	int			n;

	args->values[2] = (Datum) 0;
	args->nulls[2] = 'n';
	if (PG_ARGISNULL(2))
		return;
	args->values[2] = PointerGetDatum(ArrayArg(fcinfo, 2, "after_versions", &n));
	args->nulls[2] = ' ';
	if (n != args->n)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("after_versions has %d elements, organization_ids %d", n, args->n)));
}

static void
ReadArgs(FunctionCallInfo fcinfo, WaitArgs *args)
{
	OrganizationsArg(fcinfo, args);
	RevisionsArg(fcinfo, args);
	VersionsArg(fcinfo, args);
	if (PG_ARGISNULL(3) || PG_GETARG_INT32(3) < 0 || PG_GETARG_INT32(3) > WAIT_MAX_TIMEOUT_MS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout_ms must be between 0 and %d", WAIT_MAX_TIMEOUT_MS)));
	args->timeout_ms = PG_GETARG_INT32(3);
}

/* Refuses a call that cannot wait: in a transaction, or without the slots. */
static void
RequireWaitable(FunctionCallInfo fcinfo)
{
	CallContext *call = (CallContext *) fcinfo->context;

	if (call == NULL || !IsA(call, CallContext))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("eventhub.wait_for_events is a procedure"),
				 errhint("Run it with CALL.")));
	if (call->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("eventhub.wait_for_events cannot run inside a transaction block"),
				 errdetail("It commits, so that it holds no snapshot while it waits."),
				 errhint("CALL it on its own, in autocommit mode.")));
	if (!EventhubWaitersPresent())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("eventhub.wait_for_events needs eventhub in shared_preload_libraries"),
				 errhint("Poll organization_states instead, or add eventhub to shared_preload_libraries and restart the server.")));
}

/*
 * The organizations whose head is past their cursor, in a new snapshot: a
 * text[] in context cxt (empty when none).  Tells the slot which ones the
 * caller can read (EventhubWaitTrust).
 */
static Datum
ReadMoved(WaitArgs *args, MemoryContext cxt)
{
	SPIPlanPtr	plan = EventhubKeptPlan(&moved_plan, &EventhubSqlWaitMoved);
	bool		isnull;
	Datum		moved;
	Datum		visible;
	MemoryContext old;

	if (SPI_execute_plan(plan, args->values, args->nulls, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "eventhub: reading the heads to wait for failed");
	visible = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (!isnull)
	{
		Datum	   *elems;
		bool	   *elemnulls;
		bool	   *trusted = palloc0(sizeof(bool) * Max(args->n, 1));
		int			n;

		deconstruct_array(DatumGetArrayTypeP(visible), BOOLOID, 1, true, TYPALIGN_CHAR,
						  &elems, &elemnulls, &n);
		for (int i = 0; i < n && i < args->n; i++)
			trusted[i] = !elemnulls[i] && DatumGetBool(elems[i]);
		EventhubWaitTrust(trusted, args->n);
	}
	moved = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	old = MemoryContextSwitchTo(cxt);
	moved = isnull ? PointerGetDatum(construct_empty_array(TEXTOID)) : datumCopy(moved, false, -1);
	MemoryContextSwitchTo(old);
	return moved;
}

/* The organizations of the bits a waker set (EventhubWaitWoken): a text[] in cxt. */
static Datum
WokenOrganizations(WaitArgs *args, uint32 woken, MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	Datum	   *elems = palloc(sizeof(Datum) * EVENTHUB_WAIT_MAX_NAMED);
	int			n = 0;
	ArrayType  *moved;

	for (int i = 0; i < args->n && i < EVENTHUB_WAIT_MAX_NAMED; i++)
		if (woken & (1U << i))
			elems[n++] = PointerGetDatum(cstring_to_text_with_len(args->orgs[i].id,
																  args->orgs[i].len));
	moved = construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT);
	MemoryContextSwitchTo(old);
	return PointerGetDatum(moved);
}

/*
 * Sleeps until a waker says something or deadline passes: what it said
 * (EventhubWaitWoken), 0 at the deadline.
 */
static uint32
SleepUntilWoken(TimestampTz deadline)
{
	for (;;)
	{
		long		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		uint32		woken = EventhubWaitWoken();

		if (woken != 0)
			return woken;
		if (remaining <= 0)
			return 0;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 remaining, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Whether array (a text[]) has elements. */
static bool
NotEmpty(Datum array)
{
	ArrayType  *a = DatumGetArrayTypeP(array);

	return ArrayGetNItems(ARR_NDIM(a), ARR_DIMS(a)) > 0;
}

/*
 * Commits, looks, sleeps while nothing moved: the organizations that moved
 * (a text[] in cxt), or none at the deadline or once the standby it waits
 * on is promoted.  A wake that names trusted organizations is the answer;
 * any other makes it look again.
 */
static Datum
WaitForMoves(WaitArgs *args, MemoryContext cxt)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), args->timeout_ms);
	bool		standby = RecoveryInProgress();
	Datum		moved;
	uint32		woken;

	SPI_commit();				/* the CALL's snapshot predates the slot */
	for (;;)
	{
		moved = ReadMoved(args, cxt);
		SPI_commit();			/* asleep without a snapshot or a lock */
		if (NotEmpty(moved))
			return moved;
		woken = SleepUntilWoken(deadline);
		/* At its timeout, or promoted: the caller may LISTEN now. */
		if (woken == 0 || (standby && !RecoveryInProgress()))
			return moved;
		if (woken != EVENTHUB_WOKEN_LOOK)
			return WokenOrganizations(args, woken, cxt);
	}
}

/*
 * wait_for_events(organization_ids text[], after_revisions bigint[],
 *				   after_versions uuid[], timeout_ms integer,
 *				   OUT moved text[])
 */
Datum
wait_for_events(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = CurrentMemoryContext;
	WaitArgs	args;
	TupleDesc	tupdesc;
	Datum		moved;
	bool		isnull = false;

	EventhubRequireCurrentSchema();
	RequireWaitable(fcinfo);
	ReadArgs(fcinfo, &args);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "eventhub: wait_for_events must return a record");
	tupdesc = BlessTupleDesc(tupdesc);

	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	EventhubWaitBegin(args.orgs, args.n);
	PG_TRY();
	{
		moved = WaitForMoves(&args, cxt);
	}
	PG_FINALLY();
	{
		EventhubWaitEnd();
	}
	PG_END_TRY();
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, &moved, &isnull)));
}
