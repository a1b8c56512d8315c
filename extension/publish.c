/*
 * publish.c
 *	  eventhub.publish_event(), eventhub.publish_event_result() (the same,
 *	  and whether it was a replay) and eventhub.register_organization().
 *
 * Ordering: a publisher advances its organization's organization_states row
 * with one UPDATE ... SET revision = revision + 1, which takes the row's lock
 * and holds it until the transaction ends, so the publishers of one
 * organization are serialized.  Each writes head + 1, which makes revisions
 * gapless, and a revision commits only after every lower one has committed
 * (or the publisher that held it aborted, taking its revision number with
 * it).
 *
 * All queries run through SPI with plans prepared once per backend.  Nothing
 * here commits: the event, the state change and the caller's own writes
 * share the caller's transaction.  The organization is announced when that
 * transaction commits (notify.c).
 *
 * A correlation id is an idempotency key within its organization: the same
 * id in another organization is another event, so that tenants cannot probe
 * or block each other's ids.
 *
 * publish_event is SECURITY INVOKER without a SET clause (one costs every
 * call about 15% of its throughput).  It checks the calling role's grant,
 * then runs its statements as the extension's owner (EventhubAsOwner), with
 * search_path pinned there; every relation, function and operator in them is
 * schema-qualified all the same, so that nothing in them could ever resolve
 * through the caller's search_path.  Keep it that way.
 */
#include "postgres.h"

#include <uuid/uuid.h>

#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "common.h"
#include "metrics.h"
#include "guard.h"
#include "access.h"
#include "notify.h"

PG_FUNCTION_INFO_V1(publish_event);
PG_FUNCTION_INFO_V1(publish_event_result);
PG_FUNCTION_INFO_V1(register_organization);

StaticAssertDecl(sizeof(uuid_t) == UUID_LEN, "libuuid and PostgreSQL disagree on the size of a UUID");

/* Plans kept for the life of the backend, prepared on first use. */
static EventhubPlan lean_plan;
static EventhubPlan lean_once_plan;
static EventhubPlan advance_plan;
static EventhubPlan create_org_plan;
static EventhubPlan insert_org_plan;
static EventhubPlan select_org_plan;
static EventhubPlan find_correlation_plan;
static EventhubPlan insert_event_plan;
static EventhubPlan insert_event_once_plan;
static EventhubPlan restore_plan;

/* The arguments of one publish, checked. */
typedef struct PublishArgs
{
	Datum		org;
	Datum		event_type;
	Datum		action;
	Datum		entity;
	Datum		correlation;
	bool		correlation_given;
	Datum		data;
	TimestampTz originated;
	pg_uuid_t	version;		/* the organization's version after it */
	int64		first_revision; /* of the transaction in the organization, or 0 */
	int64		revision;		/* out: the event's revision */
	bool		replayed;		/* out: of an event committed before */
} PublishArgs;

/*
 * Fills *out with a new version id: a UUID laid out as version 7 (RFC
 * 9562): the Unix time in milliseconds in its first 48 bits, then the
 * version and variant bits, and 74 random bits from libuuid.  Time first,
 * so that the generated correlation ids (an event's version id as text,
 * when the caller gives none) of an organization sort in the order they
 * are made: each new one goes to the end of the organization's entries in
 * the unique index on (organization_id, correlation_id), the pages a
 * publisher touched last, not to a random page of an index that grows
 * with the history.
 */
static void
NewUuid(pg_uuid_t *out)
{
	uuid_t		u;
	uint64		ms = (uint64) ((GetCurrentTimestamp() / 1000) +
							   (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000);

	uuid_generate_random(u);
	for (int i = 0; i < 6; i++)
		u[i] = (unsigned char) (ms >> (40 - 8 * i));
	u[6] = (unsigned char) (0x70 | (u[6] & 0x0f));
	u[8] = (unsigned char) (0x80 | (u[8] & 0x3f));
	memcpy(out->data, u, UUID_LEN);
}

/*
 * Returns the action argument, refusing anything but CREATE, UPDATE and
 * DELETE (spelt in upper case, as stored).
 */
static Datum
RequiredActionArg(FunctionCallInfo fcinfo, int argno)
{
	Datum		value = EventhubRequiredTextArg(fcinfo, argno, "action", 0);
	text	   *t = DatumGetTextPP(value);
	int			len = VARSIZE_ANY_EXHDR(t);
	const char *s = VARDATA_ANY(t);

	if (len == 6 &&
		(memcmp(s, "CREATE", 6) == 0 ||
		 memcmp(s, "UPDATE", 6) == 0 ||
		 memcmp(s, "DELETE", 6) == 0))
		return value;

	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid action \"%s\"", text_to_cstring(t)),
			 errhint("The action must be CREATE, UPDATE or DELETE.")));
	pg_unreachable();
}

/*
 * Inserts an organization at revision 0 with a new version id unless it
 * already exists.  Returns true, with *version set, when this call inserted
 * it.  A concurrent registration of the same organization makes this wait
 * for that transaction to end.
 */
static bool
InsertOrganization(Datum org, pg_uuid_t *version)
{
	Datum		values[3];
	SPIPlanPtr	plan;
	int			ret;

	plan = EventhubKeptPlan(&insert_org_plan, &EventhubSqlPublishInsertOrganization);

	NewUuid(version);
	values[0] = org;
	values[1] = UUIDPGetDatum(version);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "eventhub: inserting an organization failed: %s",
			 SPI_result_code_string(ret));
	return SPI_processed == 1;
}

/*
 * Registers a new organization at revision 1 with version id *version or, when
 * a concurrent first publish registered it meanwhile, moves its head to the
 * next revision; returns the revision;
 * *processed gets the server clock at which it was assigned (read after the
 * row lock was obtained, so that it follows revision order).  The row lock
 * is held until the transaction ends.
 */
static int64
AdvanceOrganization(Datum org, const pg_uuid_t *version, TimestampTz *processed)
{
	Datum		values[2];
	SPIPlanPtr	advance;
	SPIPlanPtr	create;
	int			attempt;

	advance = EventhubKeptPlan(&advance_plan, &EventhubSqlPublishAdvanceOrganization);
	create = EventhubKeptPlan(&create_org_plan, &EventhubSqlPublishCreateOrganization);
	values[0] = org;
	values[1] = UUIDPGetDatum(version);

	for (attempt = 0; attempt < 3; attempt++)
	{
		int			ret;

		CHECK_FOR_INTERRUPTS();

		/*
		 * A concurrent first publish makes the insert wait for its
		 * transaction; if that one committed, advance its row.
		 */
		ret = SPI_execute_plan(create, values, NULL, false, 1);
		if (ret != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "eventhub: registering an organization failed: %s",
				 SPI_result_code_string(ret));
		if (SPI_processed == 0)
		{
			ret = SPI_execute_plan(advance, values, NULL, false, 1);
			if (ret != SPI_OK_UPDATE_RETURNING)
				elog(ERROR, "eventhub: advancing an organization failed: %s",
					 SPI_result_code_string(ret));
		}
		if (SPI_processed == 1)
		{
			bool		isnull;

			*processed = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc, 2, &isnull));
			return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 1, &isnull));
		}
	}

	/* Only reachable if someone keeps deleting the row we keep inserting. */
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("could not advance organization \"%s\"", TextDatumGetCString(org)),
			 errdetail("Its row in eventhub.organization_states was deleted concurrently.")));
	pg_unreachable();
}

/*
 * Undoes AdvanceOrganization: puts the organization's state back to its
 * event at revision, the head before.  Returns false if that event is gone.
 */
static bool
RestoreOrganization(Datum org, int64 revision)
{
	Datum		values[2];
	SPIPlanPtr	plan;
	int			ret;

	plan = EventhubKeptPlan(&restore_plan, &EventhubSqlPublishRestoreOrganization);
	values[0] = org;
	values[1] = Int64GetDatum(revision);
	ret = SPI_execute_plan(plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "eventhub: restoring an organization failed: %s",
			 SPI_result_code_string(ret));
	return SPI_processed == 1;
}

/*
 * Raises the error for a correlation id that the organization's event at
 * revision already has, with other content.
 */
static void
CorrelationConflict(const PublishArgs *a, int64 revision)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNIQUE_VIOLATION),
			 errmsg("correlation id \"%s\" is already used by a different event",
					TextDatumGetCString(a->correlation)),
			 errdetail("Revision " INT64_FORMAT " of organization \"%s\" has this correlation id with a different event type, action, entity id or event data.",
					   revision, TextDatumGetCString(a->org)),
			 errhint("Use a new correlation id for a new change; repeat the original event unchanged to get its revision back.")));
}

/*
 * Looks up the organization's event with a correlation id.  Returns false
 * when there is none.  When there is one with the same content, returns true
 * and its revision in *revision; when its content differs, raises
 * unique_violation.
 */
static bool
FindCorrelation(const PublishArgs *a, int64 *revision)
{
	Datum		values[8] = {a->org, (Datum) 0, (Datum) 0, a->event_type, a->action, a->entity,
	a->correlation, a->data};
	char		nulls[8] = {' ', 'n', 'n', ' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	int			ret;

	ret = SPI_execute_plan(EventhubKeptPlan(&find_correlation_plan, &EventhubSqlPublishFindCorrelation),
						   values, nulls, false, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: looking up a correlation id failed: %s",
			 SPI_result_code_string(ret));
	if (SPI_processed == 0)
		return false;
	*revision = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		CorrelationConflict(a, *revision);
	return true;
}

/*
 * This publish advanced its organization to revision, but a concurrent
 * publisher of the organization committed the same correlation id after
 * this statement's snapshot was taken.  With different content
 * FindCorrelation raises unique_violation; with the same content, puts the
 * head back and returns the original revision.
 */
static int64
GiveBack(const PublishArgs *a, int64 revision)
{
	int64		original;

	if (FindCorrelation(a, &original) && RestoreOrganization(a->org, revision - 1))
		return original;
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not publish with correlation id \"%s\" due to a concurrent publish",
					TextDatumGetCString(a->correlation)),
			 errhint("Retry the transaction.")));
	pg_unreachable();
}

/*
 * The slow path: the organization is new (or was deleted concurrently).
 * Registers it at revision 1, or advances it if a concurrent first publish
 * registered it, and inserts the event.  Returns the revision; with
 * *replayed, the original revision of an event a concurrent publisher
 * committed with the same correlation id.
 */
static int64
PublishFirst(const PublishArgs *a, bool *replayed)
{
	Datum		values[11];
	char		nulls[11] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	TimestampTz processed;
	int64		revision;
	SPIPlanPtr	plan;
	int			ret;

	revision = AdvanceOrganization(a->org, &a->version, &processed);
	if (a->correlation_given)
		plan = EventhubKeptPlan(&insert_event_once_plan, &EventhubSqlPublishInsertEventOnce);
	else
		plan = EventhubKeptPlan(&insert_event_plan, &EventhubSqlPublishInsertEvent);
	values[0] = a->org;
	values[1] = Int64GetDatum(revision);
	values[2] = UUIDPGetDatum(&a->version);
	values[3] = TimestampTzGetDatum(processed);
	values[4] = TimestampTzGetDatum(a->originated);
	values[5] = a->event_type;
	values[6] = a->action;
	values[7] = a->entity;
	values[8] = a->correlation;
	values[9] = a->data;
	values[10] = Int64GetDatum(a->first_revision);
	if (a->first_revision == 0)
		nulls[10] = 'n';
	ret = SPI_execute_plan(plan, values, nulls, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "eventhub: inserting an event failed: %s",
			 SPI_result_code_string(ret));
	*replayed = false;
	if (SPI_processed == 1)
		return revision;
	*replayed = true;
	return GiveBack(a, revision);
}

/*
 * The event a has been inserted at revision: announced and counted when
 * the transaction commits.
 */
static void
Published(const PublishArgs *a, int64 revision)
{
	EventhubRecordPublished(a->org, &a->version, revision);
	EventhubCountAtCommit(EVENTHUB_COUNTER_PUBLISHED, 1);
}

/*
 * Publish without a correlation id: a generated one is new, so advance and
 * insert (statement publish.publish, with values and nulls).
 */
static int64
PublishNew(const PublishArgs *a, Datum *values, const char *nulls, bool *replayed)
{
	int64		revision;
	bool		isnull;
	int			ret;

	ret = SPI_execute_plan(EventhubKeptPlan(&lean_plan, &EventhubSqlPublishPublish),
						   values, nulls, false, 0);
	if (ret != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "eventhub: publishing failed: %s", SPI_result_code_string(ret));
	*replayed = false;
	if (SPI_processed == 1)
		revision = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	else
		revision = PublishFirst(a, replayed);
	Published(a, revision);
	return revision;
}

/*
 * Publish with a correlation id given (statement publish.publish_once,
 * with values and nulls): a replay, an insert, a new organization, or an
 * id committed concurrently.
 */
static int64
PublishOnce(const PublishArgs *a, Datum *values, const char *nulls, bool *replayed)
{
	int64		revision;
	bool		isnull;
	HeapTuple	row;
	TupleDesc	desc;
	int			ret;

	ret = SPI_execute_plan(EventhubKeptPlan(&lean_once_plan, &EventhubSqlPublishPublishOnce),
						   values, nulls, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "eventhub: publishing failed: %s", SPI_result_code_string(ret));
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;

	/* A replay of a committed event: its revision, and nothing changed. */
	revision = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
	if (!isnull)
	{
		if (!DatumGetBool(SPI_getbinval(row, desc, 2, &isnull)))
			CorrelationConflict(a, revision);
		*replayed = true;
		return revision;
	}
	/* Inserted. */
	*replayed = false;
	revision = DatumGetInt64(SPI_getbinval(row, desc, 4, &isnull));
	if (!isnull)
	{
		Published(a, revision);
		return revision;
	}
	revision = DatumGetInt64(SPI_getbinval(row, desc, 3, &isnull));
	if (isnull)
	{
		/* A new organization. */
		revision = PublishFirst(a, replayed);
		if (!*replayed)
			Published(a, revision);
		return revision;
	}

	/* Advanced, but the correlation id was committed concurrently. */
	*replayed = true;
	return GiveBack(a, revision);
}

/*
 * Appends the event and returns its revision, or returns the original
 * revision of a replayed correlation id and sets *replayed.  The caller has
 * connected to SPI and allowed writes.
 */
static int64
Publish(const PublishArgs *a, bool *replayed)
{
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = a->org;
	values[1] = UUIDPGetDatum(&a->version);
	values[2] = TimestampTzGetDatum(a->originated);
	values[3] = a->event_type;
	values[4] = a->action;
	values[5] = a->entity;
	values[6] = a->correlation;
	values[7] = a->data;
	values[8] = Int64GetDatum(a->first_revision);
	if (a->first_revision == 0)
		nulls[8] = 'n';
	if (!a->correlation_given)
		return PublishNew(a, values, nulls, replayed);
	return PublishOnce(a, values, nulls, replayed);
}

/* Publish(), connected to SPI, as the owner (EventhubAsOwner). */
static void
PublishWork(void *arg)
{
	PublishArgs *a = (PublishArgs *) arg;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	a->first_revision = EventhubTransactionFirstRevision(a->org);
	a->revision = Publish(a, &a->replayed);
	SPI_finish();
}

/*
 * Checks the arguments of publish_event and publish_event_result (the same)
 * and the caller's privilege, and publishes into *a.
 */
static void
PublishFromArgs(FunctionCallInfo fcinfo, PublishArgs *a)
{
	EventhubRequireCurrentSchema();
	a->org = EventhubRequiredTextArg(fcinfo, 0, "organization_id", EVENTHUB_MAX_ID_BYTES);
	a->event_type = EventhubRequiredTextArg(fcinfo, 1, "event_type", 0);
	a->action = RequiredActionArg(fcinfo, 2);
	a->entity = EventhubRequiredTextArg(fcinfo, 3, "entity_id", 0);
	NewUuid(&a->version);
	a->correlation_given = !PG_ARGISNULL(4);
	if (a->correlation_given)
		a->correlation = EventhubRequiredTextArg(fcinfo, 4, "correlation_id", EVENTHUB_MAX_ID_BYTES);
	else
	{
		/*
		 * Without one, the correlation id is the event's version id: random,
		 * so new, and one UUID less to generate.
		 */
		char		buf[UUID_STR_LEN];

		uuid_unparse_lower(a->version.data, buf);
		a->correlation = CStringGetTextDatum(buf);
	}

	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event_data must not be null"),
				 errhint("Pass '{}'::jsonb or 'null'::jsonb for an event without data.")));
	a->data = PG_GETARG_DATUM(5);

	if (PG_ARGISNULL(6))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("originated_timestamp must not be null"),
				 errhint("Leave the argument out to use the transaction's start time.")));
	a->originated = PG_GETARG_TIMESTAMPTZ(6);
	if (TIMESTAMP_NOT_FINITE(a->originated))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("originated_timestamp must be finite")));

	/* Before anything is looked up: a replay must not reveal an event. */
	EventhubCheckOrgPrivilege(a->org, EVENTHUB_PRIV_PUBLISH);

	EventhubAsOwner(PublishWork, a);
}

/*
 * publish_event(organization_id, event_type, action, entity_id,
 *				 correlation_id, event_data, originated_timestamp) -> bigint
 *
 * Appends an event to its organization's log in the caller's transaction and
 * returns its revision.  See the file header for the ordering argument.
 */
Datum
publish_event(PG_FUNCTION_ARGS)
{
	PublishArgs a;

	PublishFromArgs(fcinfo, &a);
	PG_RETURN_INT64(a.revision);
}

/*
 * publish_event_result(the arguments of publish_event,
 *						OUT revision bigint, OUT replayed boolean)
 *
 * publish_event, and whether the correlation id was a replay: a client
 * that retried a publish whose commit it did not see learns that the first
 * attempt committed.
 */
Datum
publish_event_result(PG_FUNCTION_ARGS)
{
	PublishArgs a;
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("publish_event_result must be called where a record is accepted")));
	PublishFromArgs(fcinfo, &a);
	values[0] = Int64GetDatum(a.revision);
	values[1] = BoolGetDatum(a.replayed);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

typedef struct RegisterArgs
{
	Datum		org;
	pg_uuid_t  *version;		/* out */
} RegisterArgs;

/*
 * Registers r->org unless it exists and reads its version into r->version,
 * as the owner (EventhubAsOwner).
 */
static void
RegisterWork(void *arg)
{
	RegisterArgs *r = (RegisterArgs *) arg;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	if (!InsertOrganization(r->org, r->version))
	{
		SPIPlanPtr	plan;
		bool		isnull;
		int			ret;

		plan = EventhubKeptPlan(&select_org_plan, &EventhubSqlPublishOrganizationVersion);
		ret = SPI_execute_plan(plan, &r->org, NULL, false, 1);
		if (ret != SPI_OK_SELECT || SPI_processed != 1)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("could not register organization \"%s\"", TextDatumGetCString(r->org)),
					 errdetail("Its row in eventhub.organization_states was deleted concurrently.")));
		memcpy(r->version,
			   DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull)),
			   sizeof(pg_uuid_t));
	}
	SPI_finish();
}

/*
 * register_organization(organization_id) -> uuid
 *
 * Registers an organization at revision 0 if it is new and returns its
 * current version id.  Idempotent.
 */
Datum
register_organization(PG_FUNCTION_ARGS)
{
	RegisterArgs r;

	EventhubRequireCurrentSchema();
	r.org = EventhubRequiredTextArg(fcinfo, 0, "organization_id", EVENTHUB_MAX_ID_BYTES);
	r.version = palloc(sizeof(pg_uuid_t));

	EventhubCheckOrgPrivilege(r.org, EVENTHUB_PRIV_PUBLISH);

	EventhubAsOwner(RegisterWork, &r);
	PG_RETURN_UUID_P(r.version);
}
