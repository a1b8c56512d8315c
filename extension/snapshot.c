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
 * Still to come here (issue 18, docs in /work/notes/issue18-design.md §2):
 * snapshot_head() and snapshot_entities().
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "eventhub.h"

PG_FUNCTION_INFO_V1(declare_full_state);

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
