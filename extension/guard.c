/*
 * guard.c
 *	  Only eventhub's own functions write eventhub's tables.
 *
 * The ordering guarantee rests on every event being written by
 * publish_event, which assigns the revision under the organization's row
 * lock and rotates its version; the replica registry rests on heartbeat()
 * checking who reports.  A role granted table privileges (GRANT ALL ON ALL
 * TABLES IN SCHEMA eventhub is a common habit) must not get around them.
 *
 *  - protect_table(), a BEFORE ... FOR EACH STATEMENT trigger on every table
 *    (INSERT, UPDATE, DELETE and TRUNCATE), refuses the statement unless one
 *    of eventhub's C functions runs it (EventhubAsOwner), the extension's
 *    own script runs it, a superuser turned eventhub.protect_tables off, or
 *    a superuser restores a dump (RestoringDump below).
 *  - protect_ddl(), an event trigger, refuses CREATE TRIGGER on eventhub's
 *    tables: such a trigger would run inside eventhub's statements, with
 *    the privileges of the extension's owner (usually a superuser), so the
 *    TRIGGER privilege would be a way to become superuser.
 *  - invalidate_cache(), an AFTER ... FOR EACH STATEMENT trigger on the
 *    tables that backends cache (grants, the notification key), makes every
 *    backend reload them once the change commits, however it was made.
 *
 * Row-level security (sql/eventhub.sql) is the second wall: without a policy
 * for INSERT, UPDATE or DELETE, no role but the owner can change a row even
 * with the guard off.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "nodes/plannodes.h"
#include "tcop/pquery.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"

#include "common.h"
#include "guard.h"

static bool eventhub_protect_tables = true;

/*
 * Defines eventhub.protect_tables, which turns the write guard off.
 */
void
EventhubDefineGuardSettings(void)
{
	DefineCustomBoolVariable("eventhub.protect_tables",
							 "Refuses writes to eventhub's tables except by eventhub's own functions.",
							 "Only a superuser may turn it off, for a repair; eventhub's functions do not need it.",
							 &eventhub_protect_tables,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
}

PG_FUNCTION_INFO_V1(protect_table);
PG_FUNCTION_INFO_V1(protect_ddl);
PG_FUNCTION_INFO_V1(invalidate_cache);

/*
 * How many of eventhub's C functions are writing right now, and what the
 * outermost one switched from: its caller's user id and security context.
 */
static int	write_depth = 0;
static Oid	write_caller = InvalidOid;
static int	write_caller_sec = 0;

/*
 * Ends what EventhubAsOwner started (its outermost call opened nestlevel;
 * the others pass -1), committing or abandoning the pinned settings, and
 * puts back the depth and the caller saved when it began.
 */
static void
PutBackCaller(int nestlevel, bool commit, int depth, Oid caller, int caller_sec)
{
	if (nestlevel >= 0)
	{
		AtEOXact_GUC(commit, nestlevel);
		SetUserIdAndSecContext(write_caller, write_caller_sec);
	}
	write_depth = depth;
	write_caller = caller;
	write_caller_sec = caller_sec;
}

/*
 * Runs work(arg) with writing eventhub's tables allowed, as the extension's
 * owner, in the shape of analyze.c's switch to a table's owner: eventhub's
 * functions are SECURITY INVOKER, so that the role they check is the one
 * calling them (inside another role's SECURITY DEFINER function, that
 * role, never the session's), and they take the owner's rights only for
 * their own statements.  The outermost call switches the user id, in a
 * security-restricted operation (no SET ROLE, no temporary objects), and
 * opens a GUC nest level in which search_path is pinned to pg_catalog,
 * pg_temp; the work's statements name everything with its schema anyway.
 * Everything is put back when work returns or fails, so that an error
 * caught by a savepoint cannot leave writing allowed.  work may connect to
 * SPI or use the caller's connection.
 */
void
EventhubAsOwner(EventhubOwnerWork work, void *arg)
{
	int			saved_depth = write_depth;
	Oid			saved_caller = write_caller;
	int			saved_caller_sec = write_caller_sec;
	volatile int nestlevel = -1;

	if (write_depth == 0)
	{
		Oid			owner = EventhubExtensionOwner();

		GetUserIdAndSecContext(&write_caller, &write_caller_sec);
		SetUserIdAndSecContext(owner, write_caller_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		nestlevel = NewGUCNestLevel();
#if PG_VERSION_NUM >= 170000
		RestrictSearchPath();
#else
		(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
#endif
	}
	write_depth++;

	PG_TRY();
	{
		work(arg);
	}
	PG_CATCH();
	{
		/*
		 * The (sub)transaction's abort would put the user id and the
		 * settings back too; the depth is this file's alone.
		 */
		PutBackCaller(nestlevel, false, saved_depth, saved_caller, saved_caller_sec);
		PG_RE_THROW();
	}
	PG_END_TRY();

	PutBackCaller(nestlevel, true, saved_depth, saved_caller, saved_caller_sec);
}

typedef struct ExecuteArgs
{
	EventhubPlan *cache;
	const EventhubStatement *statement;
	Datum	   *values;
	const char *nulls;
	long		count;
	int			ret;
} ExecuteArgs;

static void
ExecuteWork(void *arg)
{
	ExecuteArgs *a = (ExecuteArgs *) arg;

	a->ret = SPI_execute_plan(EventhubKeptPlan(a->cache, a->statement),
							  a->values, a->nulls, false, a->count);
}

/*
 * Runs statement s, which writes eventhub's tables, from a plan kept in
 * cache (prepared, like the statement runs, as the owner), as
 * EventhubAsOwner does, and returns SPI_execute_plan's status;
 * SPI_processed and SPI_tuptable hold its result.  The caller has
 * connected to SPI.
 */
int
EventhubExecuteAsOwner(EventhubPlan *cache, const EventhubStatement *s,
					   Datum *values, const char *nulls, long count)
{
	ExecuteArgs a = {cache, s, values, nulls, count, 0};

	EventhubAsOwner(ExecuteWork, &a);
	return a.ret;
}

/*
 * The same, for a statement whose result the caller reads only from
 * SPI_processed and SPI_tuptable: fails unless SPI returned expected, the
 * error saying that what (e.g. "removing a replica") failed.
 */
void
EventhubRunAsOwner(EventhubPlan *cache, const EventhubStatement *s,
				   Datum *values, int expected, const char *what)
{
	int			ret = EventhubExecuteAsOwner(cache, s, values, NULL, 0);

	if (ret != expected)
		elog(ERROR, "eventhub: %s failed: %s", what, SPI_result_code_string(ret));
}

/*
 * The role eventhub's functions act for: the one that called the function
 * now running (the current user, before it took the owner's rights).
 */
Oid
EventhubCallingRole(void)
{
	return write_depth > 0 ? write_caller : GetUserId();
}

/*
 * Whether the statement writing rel is a superuser's restore of a dump:
 * COPY rel FROM, as the statement the client sent (not one run from inside
 * a function or a trigger), by a superuser, with row_security off, as
 * pg_dump's scripts and pg_restore set it.  A restore loads each table's
 * rows with exactly that; a superuser's INSERT, UPDATE, DELETE or TRUNCATE,
 * or a COPY in an ordinary session (row_security is on by default), stays
 * refused.  A superuser could turn the guard off anyway, so this lets
 * nobody do more than before; a non-superuser never passes.
 */
static bool
RestoringDump(Relation rel)
{
	PlannedStmt *stmt;
	CopyStmt   *copy;

	if (row_security || !superuser() || ActivePortal == NULL ||
		ActivePortal->commandTag != CMDTAG_COPY ||
		list_length(ActivePortal->stmts) != 1)
		return false;
	stmt = linitial_node(PlannedStmt, ActivePortal->stmts);
	if (stmt->commandType != CMD_UTILITY || stmt->utilityStmt == NULL ||
		!IsA(stmt->utilityStmt, CopyStmt))
		return false;
	copy = (CopyStmt *) stmt->utilityStmt;
	/* The table the client's COPY names, not one written from inside it. */
	return copy->is_from && copy->relation != NULL && copy->query == NULL &&
		RangeVarGetRelid(copy->relation, NoLock, true) == RelationGetRelid(rel);
}

/*
 * protect_table() trigger: BEFORE INSERT OR UPDATE OR DELETE FOR EACH
 * STATEMENT, and BEFORE TRUNCATE.  Its one argument is a hint naming the
 * functions that write the table.
 */
Datum
protect_table(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const char *verb;
	Relation	rel;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("protect_table() was not called by the trigger manager")));
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("protect_table() must be fired BEFORE ... FOR EACH STATEMENT")));

	if (write_depth > 0 || !eventhub_protect_tables || EventhubRunningOwnScript())
		return PointerGetDatum(NULL);
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) && RestoringDump(trigdata->tg_relation))
		return PointerGetDatum(NULL);

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		verb = "insert into";
	else if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		verb = "update";
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		verb = "delete from";
	else
		verb = "truncate";

	rel = trigdata->tg_relation;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("cannot %s table %s.%s directly", verb,
					get_namespace_name(RelationGetNamespace(rel)),
					RelationGetRelationName(rel)),
			 errdetail("Only eventhub's functions write its tables; a superuser can SET eventhub.protect_tables = off for a repair."),
			 trigdata->tg_trigger->tgnargs > 0 ?
			 errhint("%s", trigdata->tg_trigger->tgargs[0]) : 0));
	pg_unreachable();
}

/*
 * protect_ddl() event trigger: ddl_command_start, tag CREATE TRIGGER.
 * Refuses a trigger on any table of schema eventhub, except from the
 * extension's own script or with eventhub.protect_tables off.
 */
Datum
protect_ddl(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	CreateTrigStmt *stmt;
	Oid			relid;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("protect_ddl() was not called by the event trigger manager")));

	if (!IsA(trigdata->parsetree, CreateTrigStmt) ||
		!eventhub_protect_tables || EventhubRunningOwnScript())
		PG_RETURN_VOID();

	stmt = (CreateTrigStmt *) trigdata->parsetree;
	/* The same lookup CREATE TRIGGER is about to make. */
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (OidIsValid(relid) &&
		get_rel_namespace(relid) == get_namespace_oid(EVENTHUB_SCHEMA, true))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot create trigger \"%s\" on table %s.%s",
						stmt->trigname, EVENTHUB_SCHEMA, get_rel_name(relid)),
				 errdetail("A trigger on eventhub's tables would run inside eventhub's functions, with the privileges of their owner."),
				 errhint("A superuser can SET eventhub.protect_tables = off to add one deliberately.")));

	PG_RETURN_VOID();
}

/*
 * invalidate_cache() trigger: AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
 * FOR EACH STATEMENT on a table that backends cache.  Every backend drops
 * its copy when the change commits (this one at the next command).
 */
Datum
invalidate_cache(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("invalidate_cache() was not called by the trigger manager")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}
