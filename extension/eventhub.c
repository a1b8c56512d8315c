/*
 * eventhub.c
 *	  Module entry point of the eventhub extension: settings, the background
 *	  worker's registration, and the few helpers every file uses.
 *
 * The SQL-callable functions live in publish.c (writing events), notify.c
 * (notification tokens and the NOTIFY at commit), access.c (grants and the
 * replica registry), guard.c (the write guard), retention.c (cleanup); the
 * worker in worker.c.
 */
#include "postgres.h"

#include <limits.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "eventhub.h"

PG_MODULE_MAGIC;

char	   *eventhub_database = NULL;
int			eventhub_retention = 3600;
int			eventhub_maintenance_interval = 60000;
int			eventhub_cleanup_batch_size = 10000;
int			eventhub_cleanup_batch_delay = -1;
int			eventhub_replica_ttl = 300;
bool		eventhub_retain_until_applied = true;
int			eventhub_max_retention = 86400;
bool		eventhub_protect_tables = true;
int			eventhub_stalled_client_timeout = 30000;

/*
 * Defines the eventhub.* settings.
 */
static void
DefineSettings(void)
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

	DefineCustomIntVariable("eventhub.retention",
							"Sets how long events are kept.",
							"Retention deletes events whose processed_timestamp is older than this.",
							&eventhub_retention,
							3600,
							1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.maintenance_interval",
							"Sets the time between two maintenance cycles of the background worker.",
							NULL,
							&eventhub_maintenance_interval,
							60000,
							10, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.cleanup_batch_size",
							"Sets the most events one retention transaction deletes.",
							"Each batch commits on its own, so that a publisher never waits long behind retention.",
							&eventhub_cleanup_batch_size,
							10000,
							1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.cleanup_batch_delay",
							"Sets the pause of the background worker between two retention batches.",
							"Spreads a large cleanup out so that it leaves the machine to publishers; -1 pauses three times as long as the last batch took.",
							&eventhub_cleanup_batch_delay,
							-1,
							-1, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.replica_ttl",
							"Sets how long a replica may go without a heartbeat before it is stale.",
							"A stale replica holds no retention; maintenance removes it after twice this time.",
							&eventhub_replica_ttl,
							300,
							1, INT_MAX / 2,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("eventhub.retain_until_applied",
							 "Keeps expired events until every live replica has applied them.",
							 "Up to eventhub.max_retention; stale replicas hold nothing.",
							 &eventhub_retain_until_applied,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.max_retention",
							"Sets the longest an event is kept for a live replica that has not applied it.",
							"After this, retention deletes it anyway and that replica resyncs.",
							&eventhub_max_retention,
							86400,
							1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("eventhub.protect_tables",
							 "Refuses writes to eventhub's tables except by eventhub's own functions.",
							 "Only a superuser may turn it off, for a repair; eventhub's functions do not need it.",
							 &eventhub_protect_tables,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("eventhub.stalled_client_timeout",
							"Sets how long a client session may be blocked on a peer that does not read its notifications.",
							"The background worker terminates a session of its database that stays idle yet blocked writing to its client "
							"(wait event ClientWrite) for longer than this. 0 turns the check off.",
							&eventhub_stalled_client_timeout,
							30000,
							0, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("eventhub");
#else
	EmitWarningsOnPlaceholders("eventhub");
#endif
}

/*
 * The one relcache callback of the library (PostgreSQL allows ten per
 * backend, shared by every extension): each backend cache that rests on
 * one of eventhub's tables drops its copy when that table, or the whole
 * relcache, is invalidated.
 */
static void
RelcacheInvalidate(Datum arg, Oid relid)
{
	EventhubSchemaInvalidate(relid);
	EventhubGrantsInvalidate(relid);
	EventhubKeyInvalidate(relid);
}

static object_access_hook_type prev_object_access_hook = NULL;

/*
 * Object access hook: DROP ROLE takes the role's organization grants and
 * replicas in this database with it (access.c).
 */
static void
ObjectAccess(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == AuthIdRelationId)
		EventhubRoleDropped(objectId);
}

/*
 * Library load.  Every SQL function works without preloading; only the
 * background worker needs shared_preload_libraries = 'eventhub'.
 */
void
_PG_init(void)
{
	DefineSettings();
	CacheRegisterRelcacheCallback(RelcacheInvalidate, (Datum) 0);
	prev_object_access_hook = object_access_hook;
	object_access_hook = ObjectAccess;

	if (process_shared_preload_libraries_in_progress)
	{
		EventhubNotifyShmemInit();
		EventhubRegisterWorkers();
	}
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

static SPIPlanPtr
KeptPlan(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes, int options)
{
	if (cache->plan != NULL && ++cache->uses >= EVENTHUB_REPLAN_EVERY)
	{
		SPI_freeplan(cache->plan);
		cache->plan = NULL;
	}
	if (cache->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare_cursor(query, nargs, argtypes, options);

		if (plan == NULL)
			elog(ERROR, "could not prepare eventhub query \"%s\": %s",
				 query, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "could not keep eventhub query plan");
		cache->plan = plan;
		cache->uses = 0;
	}
	return cache->plan;
}

/*
 * Returns the cached plan for a query, preparing and keeping it on first use
 * and again every EVENTHUB_REPLAN_EVERY uses (PostgreSQL replans a kept plan
 * only when a table's definition or statistics change, not when it grows).
 * The caller has connected to SPI.  Every name in the query must be
 * schema-qualified, operators included: the plan is prepared under whatever
 * search_path the caller has.
 */
SPIPlanPtr
EventhubKeptPlan(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes)
{
	return KeptPlan(cache, query, nargs, argtypes, 0);
}

/*
 * The same, for a query that must always use one generic plan: PostgreSQL
 * would otherwise plan it anew on every call whenever the plan for the
 * call's values looks cheaper than the generic one (a read near the head
 * does).  Only for key lookups, whose best plan does not depend on the
 * values.
 */
SPIPlanPtr
EventhubKeptGenericPlan(EventhubPlan *cache, const char *query, int nargs, Oid *argtypes)
{
	return KeptPlan(cache, query, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
}
