/*
 * common.c
 *	  The helpers every file of the extension uses, at the bottom of its
 *	  calls: it calls no other file of the extension.  The installed
 *	  version and the extension's owner, table lookups, argument checks,
 *	  kept query plans, the snapshot backend caches load with, and the
 *	  settings the background workers pin.
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "common.h"

char	   *eventhub_database = NULL;

/*
 * Defines eventhub.database, the database both background workers connect to.
 */
void
EventhubDefineCommonSettings(void)
{
	/*
	 * PostgreSQL allows a PGC_POSTMASTER setting only while preloading (a
	 * library loaded later that defines one is a FATAL error), and only the
	 * worker needs this one.
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomStringVariable("eventhub.database",
								   "Sets the database the eventhub background worker maintains.",
								   "The worker waits quietly until CREATE EXTENSION eventhub has run there.",
								   &eventhub_database,
								   "postgres",
								   PGC_POSTMASTER,
								   0,
								   NULL, NULL, NULL);
}

/*
 * The organization_states table of a database whose eventhub SQL objects
 * this library has found at its own version; InvalidOid until then, and
 * again once anything invalidates that table (DROP EXTENSION does).
 */
static Oid	current_schema_relid = InvalidOid;
static Oid	extension_owner = InvalidOid;	/* valid with current_schema_relid */

/*
 * Called on a relcache invalidation: DROP EXTENSION, or an update, makes
 * the next call look at the installed version again.
 */
void
EventhubSchemaInvalidate(Oid relid)
{
	if (!OidIsValid(relid) || relid == current_schema_relid)
		current_schema_relid = InvalidOid;
}

/*
 * The version of eventhub's SQL objects in this database
 * (pg_extension.extversion), palloc'd, or NULL when it is not installed.
 */
static char *InstalledVersion(Oid *owner);

char *
EventhubInstalledVersion(void)
{
	return InstalledVersion(NULL);
}

/* The same, and the extension's owner into *owner when not NULL. */
static char *
InstalledVersion(Oid *owner)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("eventhub"));
	rel = table_open(ExtensionRelationId, AccessShareLock);
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
		if (owner)
			*owner = ((Form_pg_extension) GETSTRUCT(tuple))->extowner;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * Whether this database's eventhub SQL objects are at this library's
 * version.  One catalog lookup per session while the answer is yes.
 */
bool
EventhubSchemaIsCurrent(void)
{
	Oid			owner = InvalidOid;
	Oid			relid;
	char	   *installed;

	if (OidIsValid(current_schema_relid))
		return true;
	/* The table first: an invalidation from now on resets what follows. */
	relid = EventhubRelid("organization_states");
	installed = InstalledVersion(&owner);
	if (installed == NULL || strcmp(installed, EVENTHUB_EXTVERSION) != 0)
		return false;
	extension_owner = owner;
	current_schema_relid = relid;
	return true;
}

/*
 * Refuses to go on while this database's eventhub SQL objects are older (or
 * newer) than this library: new binaries installed, ALTER EXTENSION eventhub
 * UPDATE not yet run.  The library's queries name the current objects, so
 * it says so plainly instead of failing on a missing column halfway.  No
 * catalog lookup during CREATE or ALTER EXTENSION, whose scripts may call
 * eventhub's functions.
 */
void
EventhubRequireCurrentSchema(void)
{
	char	   *installed;

	if (OidIsValid(current_schema_relid) || EventhubRunningOwnScript() ||
		EventhubSchemaIsCurrent())
		return;
	installed = InstalledVersion(NULL);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("eventhub's SQL objects in this database are at version %s, its library at version %s",
					installed ? installed : "(none)", EVENTHUB_EXTVERSION),
			 errdetail("New binaries were installed; the database has not been updated yet."),
			 errhint("Run ALTER EXTENSION eventhub UPDATE in this database.")));
}

/*
 * The role that owns the extension, whose rights eventhub's functions take
 * for their own statements; during CREATE or ALTER EXTENSION, the role
 * running it (it becomes the owner).
 */
Oid
EventhubExtensionOwner(void)
{
	EventhubRequireCurrentSchema();
	return OidIsValid(current_schema_relid) ? extension_owner : GetUserId();
}

/*
 * The snapshot the backend caches (grants, notification key) are loaded
 * with: the latest, so that a change committed since the statement began is
 * seen; in parallel mode, where no new snapshot may be taken (row-level
 * security calls eventhub's functions in parallel workers and in their
 * leader), the statement's own.
 */
Snapshot
EventhubCacheSnapshot(void)
{
	return IsInParallelMode() ? GetActiveSnapshot() : GetLatestSnapshot();
}

/*
 * Returns the OID of table relname in schema eventhub, or InvalidOid when
 * the extension is not installed.
 */
Oid
EventhubRelid(const char *relname)
{
	Oid			nsp = get_namespace_oid(EVENTHUB_SCHEMA, true);

	return OidIsValid(nsp) ? get_relname_relid(relname, nsp) : InvalidOid;
}

/*
 * Returns text argument argno, refusing NULL, the empty string and, when
 * maxbytes > 0, a value longer than maxbytes bytes.
 */
Datum
EventhubRequiredTextArg(FunctionCallInfo fcinfo, int argno, const char *argname, int maxbytes)
{
	text	   *value;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));

	value = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(value);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname)));
	if (maxbytes > 0 && len > maxbytes)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", argname),
				 errdetail("The value is %d bytes long; the limit is %d bytes.",
						   len, maxbytes)));
	return PointerGetDatum(value);
}

/*
 * The kept plan of statement s in cache, prepared with options.
 */
static SPIPlanPtr
KeptPlan(EventhubPlan *cache, const EventhubStatement *s, int options)
{
	if (cache->plan != NULL && ++cache->uses >= EVENTHUB_REPLAN_EVERY)
	{
		SPI_freeplan(cache->plan);
		cache->plan = NULL;
	}
	if (cache->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare_cursor(s->sql, s->nargs, unconstify(Oid *, &s->argtypes[0]),
											  options);

		if (plan == NULL)
			elog(ERROR, "could not prepare eventhub statement %s: %s",
				 s->name, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "could not keep eventhub query plan");
		cache->plan = plan;
		cache->uses = 0;
	}
	return cache->plan;
}

/*
 * Returns the cached plan for a statement, preparing and keeping it on first use
 * and again every EVENTHUB_REPLAN_EVERY uses (PostgreSQL replans a kept plan
 * only when a table's definition or statistics change, not when it grows).
 * The caller has connected to SPI.  Every name in the statement must be
 * schema-qualified, operators included: the plan is prepared under whatever
 * search_path the caller has.
 */
SPIPlanPtr
EventhubKeptPlan(EventhubPlan *cache, const EventhubStatement *s)
{
	return KeptPlan(cache, s, 0);
}

/*
 * The same, for a query that must always use one generic plan: PostgreSQL
 * would otherwise plan it anew on every call whenever the plan for the
 * call's values looks cheaper than the generic one (a read near the head
 * does).  Only for key lookups, whose best plan does not depend on the
 * values.
 */
SPIPlanPtr
EventhubKeptGenericPlan(EventhubPlan *cache, const EventhubStatement *s)
{
	return KeptPlan(cache, s, CURSOR_OPT_GENERIC_PLAN);
}

/*
 * The same as EventhubKeptGenericPlan, planned for its first rows
 * (cursor_tuple_fraction): for a query read through a receiver that may
 * stop it early, whose generic plan would otherwise sort the whole
 * organization's rows before the first one comes out.
 */
SPIPlanPtr
EventhubKeptFastPlan(EventhubPlan *cache, const EventhubStatement *s)
{
	return KeptPlan(cache, s, CURSOR_OPT_GENERIC_PLAN | CURSOR_OPT_FAST_PLAN);
}

/*
 * Runs statement s once, without keeping its plan, and returns
 * SPI_execute_with_args' status.  The caller has connected to SPI.
 */
int
EventhubExecuteOnce(const EventhubStatement *s, Datum *values, const char *nulls,
					bool read_only, long count)
{
	return SPI_execute_with_args(s->sql, s->nargs, unconstify(Oid *, &s->argtypes[0]),
								 values, nulls, read_only, count);
}

/*
 * Whether the extension's own install or update script is running.
 */
bool
EventhubRunningOwnScript(void)
{
	return creating_extension &&
		CurrentExtensionObject == get_extension_oid("eventhub", true);
}

/*
 * Pins the settings the background workers' queries depend on.  A database
 * owner can set any of these for a worker's session with ALTER DATABASE ...
 * SET; an override source takes precedence over all of them.
 */
void
EventhubPinSettings(void)
{
	static const char *const pinned[][2] = {
		{"search_path", "pg_catalog, pg_temp"},
		{"role", "none"},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_read_only", "off"},
		{"statement_timeout", "0"},
		{"lock_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
	};

	for (size_t i = 0; i < lengthof(pinned); i++)
		SetConfigOption(pinned[i][0], pinned[i][1], PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * The stored size of a column's value, as pg_column_size() gives it: a
 * value kept out of line counts its stored bytes, not its pointer's.
 */
int64
EventhubStoredSize(TupleTableSlot *slot, int col)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, col, &isnull);

	return isnull ? 0 : (int64) toast_datum_size(d);
}

/*
 * The memory a set-returning function's rows wait in, kept from one call
 * to the next.  A batch of 1000 events is about 300 kB of rows; allocated
 * afresh for every call, glibc hands it back to the kernel when the query
 * ends and takes it again (brk, page faults and TLB flushes) at the next
 * one, which cost events_since a fifth against the plain SELECT it
 * replaces.  Its first block (KEPT_RESULT_BYTES) stays mapped for the
 * backend's life; larger results spill into further blocks, freed with
 * the rest when the query that read them ends.
 *
 * One query at a time uses it: a second set in the same query (a join of
 * two calls, a rescan), or any set while a cursor holds one open, gets
 * memory of its own as any set-returning function does.
 */
#define KEPT_RESULT_BYTES (512 * 1024)
static MemoryContext kept_result = NULL;
static bool kept_result_busy = false;

/* When the query that read the result ends (or fails): empty it for the next. */
static void
ReleaseKeptResult(void *arg)
{
	MemoryContextReset(kept_result);
	kept_result_busy = false;
}

/*
 * Sets up a set-returning function's result as a tuplestore of the declared
 * row type, into rsinfo->setResult and setDesc (InitMaterializedSRF, but
 * with the rows in the kept memory above when it is free).
 */
void
EventhubInitResultStore(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext query_cxt;
	MemoryContext rows_cxt;
	TupleDesc	tupdesc;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if ((rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("materialize mode required, but it is not allowed in this context")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	query_cxt = rsinfo->econtext->ecxt_per_query_memory;
	rows_cxt = query_cxt;
	if (!kept_result_busy)
	{
		MemoryContextCallback *release;

		if (kept_result == NULL)
			kept_result = AllocSetContextCreate(TopMemoryContext, "eventhub kept result",
												KEPT_RESULT_BYTES, KEPT_RESULT_BYTES,
												ALLOCSET_DEFAULT_MAXSIZE);
		release = MemoryContextAlloc(query_cxt, sizeof(MemoryContextCallback));
		release->func = ReleaseKeptResult;
		release->arg = NULL;
		MemoryContextRegisterResetCallback(query_cxt, release);
		kept_result_busy = true;
		rows_cxt = kept_result;
	}

	old = MemoryContextSwitchTo(query_cxt);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(rows_cxt);
	rsinfo->setResult = tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0,
											  false, work_mem);
	MemoryContextSwitchTo(old);
}

/*
 * The max_bytes argument at argno of snapshot_entities and
 * transactions_since: 0 (no limit) when NULL, else greater than zero.
 */
int64
EventhubMaxBytesArgument(FunctionCallInfo fcinfo, int argno)
{
	int32		max_bytes;

	if (PG_ARGISNULL(argno))
		return 0;
	max_bytes = PG_GETARG_INT32(argno);
	if (max_bytes <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_bytes must be greater than zero"),
				 errdetail("max_bytes is %d.", max_bytes),
				 errhint("Pass NULL for no limit in bytes.")));
	return max_bytes;
}
