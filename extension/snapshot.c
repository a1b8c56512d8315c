/*
 * snapshot.c
 *	  Snapshots of an organization's entities: eventhub.declare_full_state().
 *
 * organization_states.complete_after promises that every entity's latest
 * event above that revision is kept, so that the latest events are the
 * organization's full state.  An organization whose events were removed
 * before 0.4.0 has NULL there (sql/eventhub--0.3.0--0.4.0.sql), and gets the
 * promise back from its publisher: read the head revision H, publish the
 * full state of every live entity, then declare_full_state(org, H).
 *
 * A consumer reads a snapshot in one REPEATABLE READ transaction:
 * snapshot_head(), then the pages of snapshot_entities() (still to come,
 * issue 18), then events_since() from that head.  snapshot_head runs as the
 * caller, with the caller's privileges and row-level security, like
 * events_since.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "eventhub.h"

PG_FUNCTION_INFO_V1(declare_full_state);
PG_FUNCTION_INFO_V1(snapshot_head);

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
	static EventhubPlan plan;
	Oid			argtypes[1] = {TEXTOID};
	TupleDesc	tupdesc;
	Datum		org;
	Datum		values[2];
	bool		nulls[2] = {false, true};
	int			ret;

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
	ret = SPI_execute_plan(EventhubKeptGenericPlan(&plan,
												   "SELECT s.revision, s.version_id, s.complete_after"
												   " FROM eventhub.organization_states s"
												   " WHERE s.organization_id OPERATOR(pg_catalog.=) $1",
												   1, argtypes),
						   &org, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: reading the head failed: %s", SPI_result_code_string(ret));
	values[0] = Int64GetDatum(0);
	values[1] = (Datum) 0;
	if (SPI_processed == 1)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		version;
		pg_uuid_t  *copy;

		(void) SPI_getbinval(tuple, desc, 3, &isnull);
		if (isnull)
			RefuseIncomplete(org);
		values[0] = Int64GetDatum(DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull)));
		version = SPI_getbinval(tuple, desc, 2, &isnull);
		/* Out of SPI's memory, which SPI_finish frees. */
		copy = SPI_palloc(sizeof(pg_uuid_t));
		memcpy(copy, DatumGetUUIDP(version), sizeof(pg_uuid_t));
		values[1] = UUIDPGetDatum(copy);
		nulls[1] = false;
	}
	SPI_finish();
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
	Oid			argtypes[2] = {TEXTOID, INT8OID};
	Datum		values[2];
	Datum		org;
	int64		after;
	int64		head = 0;
	int			ret;

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
	ret = EventhubExecuteAsOwner(&plan,
								 "UPDATE eventhub.organization_states s"
								 " SET complete_after = $2"
								 " WHERE s.organization_id OPERATOR(pg_catalog.=) $1"
								 " RETURNING s.revision",
								 2, argtypes, values, NULL, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "eventhub: declaring the full state failed: %s", SPI_result_code_string(ret));
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
