/*
 * statement_list.c
 *	  eventhub.statements(): every SQL statement the extension runs
 *	  (statements.c, statements_retention.c), with the types of its
 *	  parameters, for a reviewer to read, PREPARE and EXPLAIN.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "statements.h"
/* Every statement, as eventhub.statements() lists them. */
static const EventhubStatement *const statements_list[] = {
	&EventhubSqlAccessGrantOrganization,
	&EventhubSqlAccessRevokeOrganization,
	&EventhubSqlAccessRemoveGrantsOfDroppedRoles,
	&EventhubSqlAccessRemoveReplicasOfDroppedRoles,
	&EventhubSqlAccessRemoveGrantsOfRole,
	&EventhubSqlAccessRemoveReplicasOfRole,
	&EventhubSqlNotifyKeyInsertKey,
	&EventhubSqlNotifyKeyDeleteKey,
	&EventhubSqlNotifierAnnouncedEvents,
	&EventhubSqlPublishInsertOrganization,
	&EventhubSqlPublishCreateOrganization,
	&EventhubSqlPublishAdvanceOrganization,
	&EventhubSqlPublishRestoreOrganization,
	&EventhubSqlPublishFindCorrelation,
	&EventhubSqlPublishInsertEvent,
	&EventhubSqlPublishInsertEventOnce,
	&EventhubSqlPublishPublish,
	&EventhubSqlPublishPublishOnce,
	&EventhubSqlPublishOrganizationVersion,
	&EventhubSqlReadCursor,
	&EventhubSqlReadEventsSince,
	&EventhubSqlReadTransactionsSince,
	&EventhubSqlWaitMoved,
	&EventhubSqlSnapshotHead,
	&EventhubSqlSnapshotDeclareFullState,
	&EventhubSqlSnapshotEntitiesFirst,
	&EventhubSqlSnapshotEntitiesNext,
	&EventhubSqlReplicasHeadsExceeded,
	&EventhubSqlReplicasRegisterReplica,
	&EventhubSqlReplicasRecordProgress,
	&EventhubSqlReplicasRecordConfigSplits,
	&EventhubSqlReplicasDeleteReplica,
	&EventhubSqlReplicasForgetSettledSplits,
	&EventhubSqlRetentionRemoveStaleReplicas,
	&EventhubSqlRetentionDeleteExpiredBatch,
	&EventhubSqlRetentionDeleteExpiredBatchNoCompaction,
	&EventhubSqlRetentionCleanupBefore,
	&EventhubSqlRetentionCleanupBeforeNoCompaction,
	&EventhubSqlRetentionCleanupRange,
	&EventhubSqlRetentionCleanupRangeNoCompaction,
	&EventhubSqlRetentionCleanupBeforeRevision,
	&EventhubSqlRetentionCleanupBeforeRevisionNoCompaction,
	&EventhubSqlWorkerStalledSessions,
	&EventhubSqlWorkerTerminateSession,
	&EventhubSqlStandbyWakerHeads,
	&EventhubSqlMetricsReportReadTables,
};

PG_FUNCTION_INFO_V1(statements);

/*
 * statements() -> TABLE(name text, statement text, argument_types regtype[])
 *
 * Every statement the extension runs, with the types of its parameters
 * ($1, $2, ...), so that a reviewer can read, PREPARE and EXPLAIN each.
 */
Datum
statements(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (size_t i = 0; i < lengthof(statements_list); i++)
	{
		const EventhubStatement *s = statements_list[i];
		Datum		types[EVENTHUB_STATEMENT_MAX_ARGS];
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		for (int a = 0; a < s->nargs; a++)
			types[a] = ObjectIdGetDatum(s->argtypes[a]);
		values[0] = CStringGetTextDatum(s->name);
		values[1] = CStringGetTextDatum(s->sql);
		values[2] = PointerGetDatum(construct_array(types, s->nargs, REGTYPEOID,
													sizeof(Oid), true, TYPALIGN_INT));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
