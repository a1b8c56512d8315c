/*
 * common.h
 *	  What every file of the eventhub server extension shares: the limits on
 *	  ids, kept query plans and the helpers of common.c, at the bottom of the
 *	  calls.  Each other module's header declares what that module offers.
 */
#ifndef EVENTHUB_COMMON_H
#define EVENTHUB_COMMON_H

#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/snapshot.h"

#include "statements.h"

/* The schema every object of the extension lives in. */
#define EVENTHUB_SCHEMA "eventhub"

/*
 * Longest organization_id and correlation_id accepted, in bytes.  The same
 * bound keeps a correlation id far below the btree entry limit of its unique
 * index, and an organization id cheap to hash into a notification token.
 */
#define EVENTHUB_MAX_ID_BYTES 1024

/* eventhub.database: the database both background workers connect to. */
extern char *eventhub_database;
extern void EventhubDefineCommonSettings(void);

extern Oid	EventhubRelid(const char *relname);
extern char *EventhubInstalledVersion(void);
extern bool EventhubSchemaIsCurrent(void);
extern void EventhubRequireCurrentSchema(void);
extern void EventhubSchemaInvalidate(Oid relid);
extern Oid	EventhubExtensionOwner(void);
extern Snapshot EventhubCacheSnapshot(void);
extern bool EventhubRunningOwnScript(void);
extern void EventhubPinSettings(void);
extern Datum EventhubRequiredTextArg(FunctionCallInfo fcinfo, int argno, const char *argname,
									 int maxbytes);
/*
 * A query plan kept for the backend's life, prepared on first use, and
 * prepared again every EVENTHUB_REPLAN_EVERY uses: a plan chosen while a
 * table was small (a sequential scan) does not outlive the table's growth.
 */
typedef struct EventhubPlan
{
	SPIPlanPtr	plan;
	uint32		uses;
} EventhubPlan;

#define EVENTHUB_REPLAN_EVERY 1000

extern SPIPlanPtr EventhubKeptPlan(EventhubPlan *cache, const EventhubStatement *s);
extern SPIPlanPtr EventhubKeptGenericPlan(EventhubPlan *cache, const EventhubStatement *s);
extern SPIPlanPtr EventhubKeptFastPlan(EventhubPlan *cache, const EventhubStatement *s);
extern int	EventhubExecuteOnce(const EventhubStatement *s, Datum *values, const char *nulls,
								bool read_only, long count);

/*
 * What a row costs a page's or a batch's max_bytes: the stored size of its
 * variable-length values plus this (snapshot_entities, transactions_since).
 * Its twin is in the client library (client/), whose fetch statement
 * sizes a row of its batches with the same 160 bytes: change both.
 */
#define EVENTHUB_ROW_OVERHEAD_BYTES 160
extern int64 EventhubStoredSize(TupleTableSlot *slot, int col);
extern int64 EventhubMaxBytesArgument(FunctionCallInfo fcinfo, int argno);
extern void EventhubInitResultStore(FunctionCallInfo fcinfo);

#endif							/* EVENTHUB_COMMON_H */
