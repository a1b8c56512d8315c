/*
 * statements.h
 *	  Every SQL statement the extension runs, each one constant with its
 *	  name and argument types (statements.c, statements_retention.c).
 *	  eventhub.statements() lists them; the helpers that run SQL (common.c,
 *	  guard.c) take nothing else.
 */
#ifndef EVENTHUB_STATEMENTS_H
#define EVENTHUB_STATEMENTS_H

#include "catalog/pg_type.h"

#define EVENTHUB_STATEMENT_MAX_ARGS 11

typedef struct EventhubStatement
{
	const char *name;			/* as eventhub.statements() lists it */
	int			nargs;
	Oid			argtypes[EVENTHUB_STATEMENT_MAX_ARGS];	/* $1, $2, ... */
	const char *sql;
} EventhubStatement;

extern const EventhubStatement EventhubSqlAccessGrantOrganization;
extern const EventhubStatement EventhubSqlAccessRevokeOrganization;
extern const EventhubStatement EventhubSqlAccessRemoveGrantsOfDroppedRoles;
extern const EventhubStatement EventhubSqlAccessRemoveReplicasOfDroppedRoles;
extern const EventhubStatement EventhubSqlAccessRemoveGrantsOfRole;
extern const EventhubStatement EventhubSqlAccessRemoveReplicasOfRole;
extern const EventhubStatement EventhubSqlNotifyKeyInsertKey;
extern const EventhubStatement EventhubSqlNotifyKeyDeleteKey;
extern const EventhubStatement EventhubSqlNotifierAnnouncedEvents;
extern const EventhubStatement EventhubSqlPublishInsertOrganization;
extern const EventhubStatement EventhubSqlPublishCreateOrganization;
extern const EventhubStatement EventhubSqlPublishAdvanceOrganization;
extern const EventhubStatement EventhubSqlPublishRestoreOrganization;
extern const EventhubStatement EventhubSqlPublishFindCorrelation;
extern const EventhubStatement EventhubSqlPublishInsertEvent;
extern const EventhubStatement EventhubSqlPublishInsertEventOnce;
extern const EventhubStatement EventhubSqlPublishPublish;
extern const EventhubStatement EventhubSqlPublishPublishOnce;
extern const EventhubStatement EventhubSqlPublishOrganizationVersion;
extern const EventhubStatement EventhubSqlReadCursor;
extern const EventhubStatement EventhubSqlReadEventsSince;
extern const EventhubStatement EventhubSqlReadTransactionsSince;
extern const EventhubStatement EventhubSqlWaitMoved;
extern const EventhubStatement EventhubSqlSnapshotHead;
extern const EventhubStatement EventhubSqlSnapshotDeclareFullState;
extern const EventhubStatement EventhubSqlSnapshotEntitiesFirst;
extern const EventhubStatement EventhubSqlSnapshotEntitiesNext;
extern const EventhubStatement EventhubSqlReplicasHeadsExceeded;
extern const EventhubStatement EventhubSqlReplicasRegisterReplica;
extern const EventhubStatement EventhubSqlReplicasRecordProgress;
extern const EventhubStatement EventhubSqlReplicasRecordConfigSplits;
extern const EventhubStatement EventhubSqlReplicasDeleteReplica;
extern const EventhubStatement EventhubSqlReplicasForgetSettledSplits;
extern const EventhubStatement EventhubSqlRetentionRemoveStaleReplicas;
extern const EventhubStatement EventhubSqlRetentionDeleteExpiredBatch;
extern const EventhubStatement EventhubSqlRetentionDeleteExpiredBatchNoCompaction;
extern const EventhubStatement EventhubSqlRetentionCleanupBefore;
extern const EventhubStatement EventhubSqlRetentionCleanupBeforeNoCompaction;
extern const EventhubStatement EventhubSqlRetentionCleanupRange;
extern const EventhubStatement EventhubSqlRetentionCleanupRangeNoCompaction;
extern const EventhubStatement EventhubSqlRetentionCleanupBeforeRevision;
extern const EventhubStatement EventhubSqlRetentionCleanupBeforeRevisionNoCompaction;
extern const EventhubStatement EventhubSqlWorkerStalledSessions;
extern const EventhubStatement EventhubSqlWorkerTerminateSession;
extern const EventhubStatement EventhubSqlStandbyWakerHeads;
extern const EventhubStatement EventhubSqlMetricsReportReadTables;

#endif							/* EVENTHUB_STATEMENTS_H */
