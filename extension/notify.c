/*
 * notify.c
 *	  The trigger that announces published events on channel "eventhub".
 *
 * The payload names the event, never its data:
 *	  {"organization_id": "<JSON-escaped id>", "revision": N, "version_id": "<uuid>"}
 * NOTIFY is transactional, so listeners hear of an event only once the
 * transaction that published it commits, and never of a rolled-back one.
 */
#include "postgres.h"

#include "commands/async.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/uuid.h"

#include "eventhub.h"

PG_FUNCTION_INFO_V1(notify_event);

/*
 * Returns the value of a NOT NULL column of the trigger tuple by name.
 */
static Datum
RequiredColumn(TriggerData *trigdata, const char *name)
{
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	int			attnum = SPI_fnumber(tupdesc, name);
	Datum		value;
	bool		isnull;

	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						name, RelationGetRelationName(trigdata->tg_relation))));
	value = SPI_getbinval(trigdata->tg_trigtuple, tupdesc, attnum, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("column \"%s\" of an event must not be null", name)));
	return value;
}

/*
 * notify_event() trigger: AFTER INSERT FOR EACH ROW on eventhub.events.
 */
Datum
notify_event(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	StringInfoData payload;
	Datum		org;
	Datum		revision;
	Datum		version;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("notify_event() was not called by the trigger manager")));
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("notify_event() must be fired AFTER INSERT FOR EACH ROW")));

	org = RequiredColumn(trigdata, "organization_id");
	revision = RequiredColumn(trigdata, "revision");
	version = RequiredColumn(trigdata, "version_id");

	initStringInfo(&payload);
	appendStringInfoString(&payload, "{\"organization_id\": ");
	escape_json(&payload, TextDatumGetCString(org));
	appendStringInfo(&payload, ", \"revision\": " INT64_FORMAT ", \"version_id\": \"%s\"}",
					 DatumGetInt64(revision),
					 DatumGetCString(DirectFunctionCall1(uuid_out, version)));

	Async_Notify(EVENTHUB_CHANNEL, payload.data);
	pfree(payload.data);

	return PointerGetDatum(NULL);
}
