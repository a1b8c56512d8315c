/*
 * access.c
 *	  Per-organization access: eventhub.organization_grants, the functions
 *	  that change and test it, and the checks eventhub's functions make.
 *
 * Access control is opt-in: while organization_grants is empty, every role
 * that may call a function may use it on every organization, as in a
 * single-tenant database.  The first grant turns it on for every role:
 * from then on a role publishes to, and reads, only the organizations it
 * (or a role whose privileges it has) was granted, by exact id or by prefix.
 * Superusers and roles with BYPASSRLS are not restricted, as row-level
 * security does not restrict them either.
 *
 * The role checked is the one calling eventhub's function
 * (EventhubCallingRole): the session's current role (the login role, or the
 * one set with SET ROLE), or inside another role's SECURITY DEFINER function
 * that function's owner.  eventhub's functions are SECURITY INVOKER and take
 * the extension owner's rights only around their own statements (guard.c).
 *
 * Each backend keeps the grants in memory.  Any change to the table fires a
 * trigger that invalidates every backend's copy at commit (guard.c), so the
 * checks on the publish path cost no query.
 *
 * Grantees and replica owners are regrole columns, on which PostgreSQL
 * records no dependency: DROP ROLE removes them itself here (an object
 * access hook), and maintenance removes any left by roles that are gone.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "common.h"
#include "guard.h"
#include "access.h"

PG_FUNCTION_INFO_V1(has_organization_privilege);
PG_FUNCTION_INFO_V1(has_organization_privilege_role);
PG_FUNCTION_INFO_V1(grant_organization);
PG_FUNCTION_INFO_V1(revoke_organization);

/*
 * The grants, loaded into backend memory (grants_cxt): those on an exact
 * organization id in a hash table keyed by the id, each id with its
 * grantees; the prefix grants, usually a handful (one per tenant), in an
 * array scanned in order.  A check costs one hash lookup and the prefix
 * scan, however many organizations are granted.
 */
typedef struct Grantee
{
	Oid			role;
	int			privileges;		/* EventhubPrivilege bits */
} Grantee;

typedef struct OrgKey
{
	const char *id;				/* not NUL-terminated */
	int			len;
} OrgKey;

/* An organization id's exact grants: its hash table entry. */
typedef struct OrgGrants
{
	OrgKey		key;			/* first: the hash key */
	int			ngrantees;
	int			capacity;
	Grantee    *grantees;
} OrgGrants;

/* A grant on every organization whose id starts with prefix. */
typedef struct PrefixGrant
{
	Grantee		grantee;
	int			len;
	char	   *prefix;
} PrefixGrant;

static MemoryContext grants_cxt = NULL;
static HTAB *exact_grants = NULL;	/* OrgKey -> OrgGrants */
static PrefixGrant *prefix_grants = NULL;
static int	nprefix_grants = 0;
static int64 ngrants = 0;		/* rows of organization_grants */
static bool grants_valid = false;
static Oid	grants_relid = InvalidOid;
static uint64 grants_invalidations = 0;

static uint32
OrgKeyHash(const void *key, Size keysize)
{
	const OrgKey *k = (const OrgKey *) key;

	return hash_bytes((const unsigned char *) k->id, k->len);
}

static int
OrgKeyMatch(const void *key1, const void *key2, Size keysize)
{
	const OrgKey *a = (const OrgKey *) key1;
	const OrgKey *b = (const OrgKey *) key2;

	return a->len == b->len && memcmp(a->id, b->id, a->len) == 0 ? 0 : 1;
}

/*
 * Called on a relcache invalidation (eventhub.c): any change to
 * organization_grants (or a reset of the whole cache) makes the next check
 * reload the grants.
 */
void
EventhubGrantsInvalidate(Oid relid)
{
	if (relid == InvalidOid || relid == grants_relid)
	{
		grants_valid = false;
		grants_invalidations++;
	}
}

/*
 * Maps a privilege name to its bit; raises an error for anything else.
 */
static EventhubPrivilege
PrivilegeFromName(const char *name)
{
	if (strcmp(name, "publish") == 0)
		return EVENTHUB_PRIV_PUBLISH;
	if (strcmp(name, "read") == 0)
		return EVENTHUB_PRIV_READ;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized organization privilege \"%s\"", name),
			 errhint("The privileges are publish and read.")));
	pg_unreachable();
}

/* Adds one grant row to the loaded grants. */
static void
AddGrant(Oid grantee, const char *org, int len, bool prefix, int privileges)
{
	Grantee    *g;

	if (prefix)
	{
		PrefixGrant *p;

		if (nprefix_grants % 8 == 0)
			prefix_grants = prefix_grants == NULL ?
				MemoryContextAlloc(grants_cxt, 8 * sizeof(PrefixGrant)) :
				repalloc(prefix_grants, (nprefix_grants + 8) * sizeof(PrefixGrant));
		p = &prefix_grants[nprefix_grants++];
		p->prefix = MemoryContextAlloc(grants_cxt, len + 1);
		memcpy(p->prefix, org, len);
		p->prefix[len] = '\0';
		p->len = len;
		g = &p->grantee;
	}
	else
	{
		OrgKey		key = {org, len};
		OrgGrants  *o;
		bool		found;

		o = hash_search(exact_grants, &key, HASH_ENTER, &found);
		if (!found)
		{
			char	   *id = MemoryContextAlloc(grants_cxt, len + 1);

			memcpy(id, org, len);
			id[len] = '\0';
			o->key.id = id;		/* the entry's own copy of the id */
			o->key.len = len;
			o->ngrantees = 0;
			o->capacity = 2;
			o->grantees = MemoryContextAlloc(grants_cxt, o->capacity * sizeof(Grantee));
		}
		for (int i = 0; i < o->ngrantees; i++)
			if (o->grantees[i].role == grantee)
			{
				o->grantees[i].privileges |= privileges;
				return;
			}
		if (o->ngrantees == o->capacity)
		{
			o->capacity *= 2;
			o->grantees = repalloc(o->grantees, o->capacity * sizeof(Grantee));
		}
		g = &o->grantees[o->ngrantees++];
	}
	g->role = grantee;
	g->privileges = privileges;
}

/*
 * Reads every row of organization_grants (relid) into the grants tables.
 */
static void
LoadGrants(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	Snapshot	snapshot = RegisterSnapshot(EventhubCacheSnapshot());
	TableScanDesc scan = table_beginscan(rel, snapshot, 0, NULL);
	HeapTuple	tuple;

	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		text	   *org;
		char	   *privilege;
		int			privileges;

		CHECK_FOR_INTERRUPTS();
		/* Columns 1-4: grantee, organization_id, prefix, privilege. */
		org = DatumGetTextPP(heap_getattr(tuple, 2, desc, &isnull));
		privilege = TextDatumGetCString(heap_getattr(tuple, 4, desc, &isnull));
		privileges = PrivilegeFromName(privilege);
		pfree(privilege);
		AddGrant(DatumGetObjectId(heap_getattr(tuple, 1, desc, &isnull)),
				 VARDATA_ANY(org), VARSIZE_ANY_EXHDR(org),
				 DatumGetBool(heap_getattr(tuple, 3, desc, &isnull)),
				 privileges);
		ngrants++;
	}
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
}

/*
 * Loads organization_grants into backend memory, unless the copy is valid.
 * Reads the table directly (no query, no permission check of the caller):
 * only what the grants decide for the caller ever leaves this file.
 */
static void
EnsureGrants(void)
{
	uint64		invalidations_before;
	Oid			relid;
	HASHCTL		ctl;

	if (grants_valid)
		return;

	if (grants_cxt == NULL)
		grants_cxt = AllocSetContextCreate(TopMemoryContext, "eventhub grants",
										   ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(grants_cxt);
	ctl.keysize = sizeof(OrgKey);
	ctl.entrysize = sizeof(OrgGrants);
	ctl.hash = OrgKeyHash;
	ctl.match = OrgKeyMatch;
	ctl.hcxt = grants_cxt;
	exact_grants = hash_create("eventhub organization grants", 64, &ctl,
							   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	prefix_grants = NULL;
	nprefix_grants = 0;
	ngrants = 0;

	relid = EventhubRelid("organization_grants");
	invalidations_before = grants_invalidations;
	grants_relid = relid;
	if (OidIsValid(relid))
		LoadGrants(relid);

	/* A change that committed while loading makes the next check reload. */
	/* A table that does not exist yet is looked up again next time. */
	grants_valid = OidIsValid(relid) && grants_invalidations == invalidations_before;
}

/*
 * Whether any grant exists, which turns access control on.
 */
bool
EventhubAccessControlEnabled(void)
{
	EnsureGrants();
	return ngrants > 0;
}

/*
 * Whether role may use privilege on organization org (orglen bytes): by a
 * grant on that id or on a prefix of it, to role or to a role whose
 * privileges it has.
 */
bool
EventhubHasOrgPrivilege(Oid role, const char *org, int orglen, EventhubPrivilege priv)
{
	OrgKey		key = {org, orglen};
	OrgGrants  *o;

	EnsureGrants();
	if (ngrants == 0)
		return true;
	if (superuser_arg(role) || has_bypassrls_privilege(role))
		return true;

	o = hash_search(exact_grants, &key, HASH_FIND, NULL);
	if (o != NULL)
		for (int i = 0; i < o->ngrantees; i++)
			if ((o->grantees[i].privileges & priv) != 0 &&
				has_privs_of_role(role, o->grantees[i].role))
				return true;
	for (int i = 0; i < nprefix_grants; i++)
	{
		PrefixGrant *p = &prefix_grants[i];

		if ((p->grantee.privileges & priv) != 0 && orglen >= p->len &&
			memcmp(org, p->prefix, p->len) == 0 &&
			has_privs_of_role(role, p->grantee.role))
			return true;
	}
	return false;
}

/*
 * Raises insufficient_privilege unless the calling role may use privilege on
 * organization org (a text Datum).  The error names only what the caller
 * passed: nothing about the organization leaks, not even whether it exists.
 */
void
EventhubCheckOrgPrivilege(Datum org, EventhubPrivilege priv)
{
	text	   *t = DatumGetTextPP(org);

	if (!EventhubHasOrgPrivilege(EventhubCallingRole(), VARDATA_ANY(t),
								 VARSIZE_ANY_EXHDR(t), priv))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s organization \"%s\"",
						priv == EVENTHUB_PRIV_PUBLISH ? "publish to" : "read",
						text_to_cstring(t)),
				 errhint("An administrator grants it with eventhub.grant_organization().")));
}

/*
 * has_organization_privilege(organization_id text, privilege text) -> boolean
 *
 * Whether the calling role may publish to or read an organization.  The
 * row-level security policies of eventhub's tables call it.
 */
Datum
has_organization_privilege(PG_FUNCTION_ARGS)
{
	text	   *org = PG_GETARG_TEXT_PP(0);
	char	   *privilege = text_to_cstring(PG_GETARG_TEXT_PP(1));

	PG_RETURN_BOOL(EventhubHasOrgPrivilege(EventhubCallingRole(), VARDATA_ANY(org),
										   VARSIZE_ANY_EXHDR(org),
										   PrivilegeFromName(privilege)));
}

/*
 * has_organization_privilege(role regrole, organization_id text,
 *							  privilege text) -> boolean
 *
 * The same for another role.
 */
Datum
has_organization_privilege_role(PG_FUNCTION_ARGS)
{
	Oid			role = PG_GETARG_OID(0);
	text	   *org = PG_GETARG_TEXT_PP(1);
	char	   *privilege = text_to_cstring(PG_GETARG_TEXT_PP(2));

	PG_RETURN_BOOL(EventhubHasOrgPrivilege(role, VARDATA_ANY(org), VARSIZE_ANY_EXHDR(org),
										   PrivilegeFromName(privilege)));
}

/*
 * Reads the arguments that grant_organization and revoke_organization
 * share: (role, organization_id, privilege, prefix).
 */
static void
GrantArgs(FunctionCallInfo fcinfo, Datum *values)
{
	static const char *const names[4] = {"role", "organization_id", "privilege", "prefix"};
	char	   *privilege;
	bool		prefix;

	for (int i = 0; i < 4; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", names[i])));
	if (!OidIsValid(PG_GETARG_OID(0)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("organizations cannot be granted to PUBLIC"),
				 errhint("Grant them to a role, and that role to its members.")));
	prefix = PG_GETARG_BOOL(3);
	values[0] = PG_GETARG_DATUM(0);
	/* A prefix may be empty (every organization); an id may not. */
	if (prefix && VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(1)) == 0)
		values[1] = PG_GETARG_DATUM(1);
	else
		values[1] = EventhubRequiredTextArg(fcinfo, 1, "organization_id", EVENTHUB_MAX_ID_BYTES);
	privilege = text_to_cstring(PG_GETARG_TEXT_PP(2));
	(void) PrivilegeFromName(privilege);
	values[2] = CStringGetTextDatum(privilege);
	values[3] = BoolGetDatum(prefix);
}

/*
 * Runs one write on organization_grants and returns the number of rows.
 */
static uint64
WriteGrants(EventhubPlan *plan, const EventhubStatement *statement, Datum *values)
{
	uint64		processed;
	int			ret;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	ret = EventhubExecuteAsOwner(plan, statement, values, NULL, 0);
	if (ret < 0)
		elog(ERROR, "eventhub: writing organization_grants failed: %s",
			 SPI_result_code_string(ret));
	processed = SPI_processed;
	SPI_finish();
	return processed;
}

/*
 * grant_organization(role regrole, organization_id text, privilege text,
 *					  prefix boolean DEFAULT false) -> boolean
 *
 * Grants role publish or read on an organization, or on every organization
 * whose id starts with organization_id when prefix is true.  Returns
 * whether the grant is new.  The first grant turns access control on.
 */
Datum
grant_organization(PG_FUNCTION_ARGS)
{
	static EventhubPlan plan;
	Datum		values[5];

	GrantArgs(fcinfo, values);
	values[4] = ObjectIdGetDatum(EventhubCallingRole());
	PG_RETURN_BOOL(WriteGrants(&plan, &EventhubSqlAccessGrantOrganization, values) == 1);
}

/*
 * revoke_organization(role regrole, organization_id text, privilege text,
 *					   prefix boolean DEFAULT false) -> boolean
 *
 * Revokes a grant made with the same arguments; returns whether there was
 * one.  Revoking the last grant turns access control off.
 */
Datum
revoke_organization(PG_FUNCTION_ARGS)
{
	static EventhubPlan plan;
	Datum		values[4];

	GrantArgs(fcinfo, values);
	PG_RETURN_BOOL(WriteGrants(&plan, &EventhubSqlAccessRevokeOrganization, values) == 1);
}

/*
 * Runs one of the statements below that remove what dropped roles left
 * behind, as the owner, with role as $1 when it is valid, and fails unless
 * SPI returned expected; what names the step in the error.
 */
static void
RemoveAsOwner(EventhubPlan *plan, const EventhubStatement *statement, Oid role, int expected,
			  const char *what)
{
	Datum		values[1] = {ObjectIdGetDatum(role)};

	EventhubRunAsOwner(plan, statement, values, expected, what);
}

/*
 * Removes what roles dropped since the last cycle left behind: their
 * grants, and the replicas they registered (with their progress).  Grants
 * and replica owners are regrole columns, which PostgreSQL records no
 * dependency for, so DROP ROLE leaves them; a role created later could get
 * the same OID and with it the grants.  Logs what it removed and returns
 * how many rows.  The caller has connected to SPI and set up a transaction.
 */
int64
EventhubRemoveDroppedRoles(void)
{
	static EventhubPlan grants_plan;
	static EventhubPlan replicas_plan;
	int64		removed = 0;

	RemoveAsOwner(&grants_plan, &EventhubSqlAccessRemoveGrantsOfDroppedRoles, InvalidOid, SPI_OK_SELECT, "removing the grants of dropped roles");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			role = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1, &isnull));
		int64		count = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
														SPI_tuptable->tupdesc, 2, &isnull));

		ereport(LOG,
				(errmsg("eventhub removed " INT64_FORMAT " organization grants of dropped role %u",
						count, role)));
		removed += count;
	}

	/* Owner 0: registered before 0.2.0, claimed by its next heartbeat. */
	RemoveAsOwner(&replicas_plan, &EventhubSqlAccessRemoveReplicasOfDroppedRoles, InvalidOid, SPI_OK_DELETE_RETURNING, "removing the replicas of dropped roles");
	for (uint64 i = 0; i < SPI_processed; i++)
		ereport(LOG,
				(errmsg("eventhub removed replica \"%s\" of dropped role %s",
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2))));
	removed += SPI_processed;
	return removed;
}

/*
 * DROP ROLE role is running in this database's session (eventhub.c's
 * object access hook): removes the role's grants and replicas here at once,
 * in the same transaction, so that they go if and only if the role goes.
 * Other databases are cleaned by their next maintenance cycle.  Nothing
 * here depends on anything the role dropping it can create or set: two
 * fixed statements on eventhub's tables, run as the owner with
 * search_path pinned, with the role's OID from the catalog.
 */
void
EventhubRoleDropped(Oid role)
{
	static EventhubPlan grants_plan;
	static EventhubPlan replicas_plan;
	uint64		grants_removed;

	/* Not installed here, or not at this library's version: maintenance. */
	if (EventhubRunningOwnScript() || !EventhubSchemaIsCurrent() ||
		!OidIsValid(EventhubRelid("organization_grants")))
		return;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	RemoveAsOwner(&grants_plan, &EventhubSqlAccessRemoveGrantsOfRole, role, SPI_OK_DELETE, "removing the grants of a dropped role");
	grants_removed = SPI_processed;
	RemoveAsOwner(&replicas_plan, &EventhubSqlAccessRemoveReplicasOfRole, role, SPI_OK_DELETE, "removing the replicas of a dropped role");
	if (grants_removed > 0 || SPI_processed > 0)
		ereport(LOG,
				(errmsg("eventhub removed " UINT64_FORMAT " organization grants and " UINT64_FORMAT " replicas of dropped role %u",
						grants_removed, SPI_processed, role)));
	SPI_finish();
}
