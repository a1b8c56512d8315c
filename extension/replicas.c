/*
 * replicas.c
 *	  The replica registry: eventhub.heartbeat(), deregister_replica(),
 *	  remove_replica() and replica_visible().
 *
 * A replica belongs to the role that registered it (its first heartbeat):
 * heartbeats and deregistration by any other role are refused, so that no
 * reader can forge another replica's progress (which holds retention, and
 * which operators read as its lag and configuration hash).  Members of the
 * owning role and superusers act for it too; remove_replica() is for
 * administrators, and takes no ownership into account.
 */
#include "postgres.h"

#include <ctype.h>

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/uuid.h"

#include "common.h"
#include "guard.h"
#include "access.h"
#include "replicas.h"

/*
 * What a heartbeat may carry.  Each goes into replica_status and the CLI's
 * output, once per replica (labels, version) or per replica and
 * organization (config_hash): the limits keep a replica following 100,000
 * organizations to megabytes there.  A hash is 64 hex digits for SHA-256;
 * 256 bytes leaves room for a prefix or SHA-512 in hex.
 */
#define MAX_LABELS_BYTES 4096	/* as JSON text, labels::text */
#define MAX_VERSION_BYTES 256
#define MAX_CONFIG_HASH_BYTES 256

PG_FUNCTION_INFO_V1(heartbeat);
PG_FUNCTION_INFO_V1(deregister_replica);
PG_FUNCTION_INFO_V1(remove_replica);
PG_FUNCTION_INFO_V1(replica_visible);

/* One organization of a heartbeat's progress, checked. */
typedef struct ProgressEntry
{
	char	   *org;
	int64		revision;
	Datum		version;		/* uuid, or 0 */
	Datum		config_hash;	/* text, or 0 */
} ProgressEntry;

/*
 * Whether a JSON string is a UUID in a form uuid_in accepts: 32 hex digits,
 * a hyphen allowed after any group of four, optionally in braces.
 */
static bool
LooksLikeUuid(const char *s, int len)
{
	int			digits = 0;
	int			i = 0;

	if (len >= 2 && s[0] == '{' && s[len - 1] == '}')
	{
		i = 1;
		len--;
	}
	for (; i < len; i++)
	{
		if (isxdigit((unsigned char) s[i]))
			digits++;
		else if (s[i] != '-' || digits == 0 || digits % 4 != 0 || i + 1 == len || s[i + 1] == '-')
			return false;
	}
	return digits == 32;
}

/*
 * Converts a JSON number to an int64 if it is written as an integer (no
 * fraction: 5 or 5e0, not 5.0) and in range.
 */
static bool
NumericToInt64(Numeric n, int64 *out)
{
	Datum		d = NumericGetDatum(n);

	if (DatumGetInt32(DirectFunctionCall1(numeric_scale, d)) != 0 ||
		DatumGetBool(DirectFunctionCall2(numeric_gt, d,
										 NumericGetDatum(int64_to_numeric(PG_INT64_MAX)))) ||
		DatumGetBool(DirectFunctionCall2(numeric_lt, d,
										 NumericGetDatum(int64_to_numeric(PG_INT64_MIN)))))
		return false;
	*out = DatumGetInt64(DirectFunctionCall1(numeric_int8, d));
	return true;
}

/*
 * Converts a JSON string of decimal digits ("42") to an int64: drivers that
 * return bigint columns as strings (JavaScript's, for one) hand the
 * revision back that way.  Nothing else passes: no sign, space, fraction
 * or exponent, nothing out of range.
 */
static bool
DigitsToInt64(const char *s, int len, int64 *out)
{
	int64		value = 0;

	if (len == 0)
		return false;
	for (int i = 0; i < len; i++)
	{
		int			digit = s[i] - '0';

		if (s[i] < '0' || s[i] > '9' || value > (PG_INT64_MAX - digit) / 10)
			return false;
		value = value * 10 + digit;
	}
	*out = value;
	return true;
}

/* Renders a JSON value for an error message. */
static char *
JsonbValueText(JsonbValue *v)
{
	Jsonb	   *j = JsonbValueToJsonb(v);

	return JsonbToCString(NULL, &j->root, VARSIZE(j));
}

/*
 * Checks one organization's progress object and fills *e from it.
 */
static void
ParseProgressEntry(const char *org, JsonbValue *value, ProgressEntry *e)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		have_revision = false;

	if (value->type != jbvBinary || !JsonContainerIsObject(value->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress of organization \"%s\" must be a JSON object", org),
				 errhint("Pass {\"revision\": <applied revision>, \"version_id\": \"<uuid>\", \"config_hash\": \"<hash>\"}.")));

	e->org = pstrdup(org);
	e->version = (Datum) 0;
	e->config_hash = (Datum) 0;
	it = JsonbIteratorInit(value->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (strcmp(key, "revision") == 0)
		{
			if (!(v.type == jbvNumeric && NumericToInt64(v.val.numeric, &e->revision)) &&
				!(v.type == jbvString && DigitsToInt64(v.val.string.val, v.val.string.len, &e->revision)))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("revision of organization \"%s\" must be an integer", org),
						 errdetail("It is %s.", JsonbValueText(&v)),
						 errhint("Pass a JSON number, or a string of decimal digits such as \"42\".")));
			if (e->revision < 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("revision of organization \"%s\" must not be negative", org),
						 errdetail("It is %s.", JsonbValueText(&v))));
			have_revision = true;
		}
		else if (strcmp(key, "version_id") == 0)
		{
			if (v.type == jbvString && LooksLikeUuid(v.val.string.val, v.val.string.len))
				e->version = DirectFunctionCall1(uuid_in,
												 CStringGetDatum(pnstrdup(v.val.string.val,
																		  v.val.string.len)));
			else if (v.type != jbvNull)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("version_id of organization \"%s\" must be a UUID string", org),
						 errdetail("It is %s.", JsonbValueText(&v))));
		}
		else if (strcmp(key, "config_hash") == 0)
		{
			if (v.type == jbvString && v.val.string.len > MAX_CONFIG_HASH_BYTES)
				ereport(ERROR,
						(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
						 errmsg("config_hash of organization \"%s\" is too long", org),
						 errdetail("It is %d bytes long; the limit is %d bytes.",
								   v.val.string.len, MAX_CONFIG_HASH_BYTES),
						 errhint("Report a hash of the configuration, not the configuration.")));
			if (v.type == jbvString)
				e->config_hash = PointerGetDatum(cstring_to_text_with_len(v.val.string.val,
																		  v.val.string.len));
			else if (v.type != jbvNull)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("config_hash of organization \"%s\" must be a string", org)));
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in progress of organization \"%s\"", key, org),
					 errhint("The keys are revision, version_id and config_hash.")));
	}
	if (!have_revision)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress of organization \"%s\" has no revision", org)));
}

/*
 * Checks a heartbeat's progress argument, and the caller's read privilege
 * on every organization in it.  Returns the entries; *count gets how many.
 */
static ProgressEntry *
ParseProgress(Jsonb *progress, int *count)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	ProgressEntry *entries;
	int			n = 0;
	Oid			caller = EventhubCallingRole();

	if (!JB_ROOT_IS_OBJECT(progress))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress must be a JSON object"),
				 errhint("Pass {\"<organization>\": {\"revision\": <applied revision>, \"version_id\": \"<uuid>\", \"config_hash\": \"<hash>\"}, ...}.")));

	entries = palloc0(sizeof(ProgressEntry) * Max(JB_ROOT_COUNT(progress), 1));
	it = JsonbIteratorInit(&progress->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *org;
		int			len;

		if (tok != WJB_KEY)
			continue;
		CHECK_FOR_INTERRUPTS();
		len = v.val.string.len;
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("organization id in progress must not be empty")));
		if (len > EVENTHUB_MAX_ID_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("organization id in progress is too long"),
					 errdetail("It is %d bytes long; the limit is %d bytes.", len, EVENTHUB_MAX_ID_BYTES)));
		org = pnstrdup(v.val.string.val, len);
		if (!EventhubHasOrgPrivilege(caller, org, len, EVENTHUB_PRIV_READ))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to read organization \"%s\"", org),
					 errhint("A replica reports progress only for organizations its role may read.")));
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		ParseProgressEntry(org, &v, &entries[n++]);
	}
	*count = n;
	return entries;
}

/*
 * Checks a heartbeat's labels: a JSON object of at most MAX_LABELS_BYTES
 * as text.
 */
static void
CheckLabels(Jsonb *labels)
{
	int			len;

	if (!JB_ROOT_IS_OBJECT(labels))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("labels must be a JSON object")));
	len = strlen(JsonbToCString(NULL, &labels->root, VARSIZE(labels)));
	if (len > MAX_LABELS_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("labels are too long"),
				 errdetail("They are %d bytes long as JSON text; the limit is %d bytes.",
						   len, MAX_LABELS_BYTES)));
}

/*
 * Builds a one-dimensional array of n datums of type elemtype; with
 * nullable, a datum of 0 (a null pointer) stands for NULL.
 */
static Datum
MakeArray(Datum *elems, int n, Oid elemtype, bool nullable)
{
	bool	   *nulls = palloc(sizeof(bool) * Max(n, 1));
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int16		typlen;
	bool		typbyval;
	char		typalign;

	for (int i = 0; i < n; i++)
		nulls[i] = nullable && elems[i] == (Datum) 0;
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, elemtype,
											  typlen, typbyval, typalign));
}

/*
 * Refuses an action on a replica registered by a role whose privileges the
 * caller does not have.
 */
static void
CheckReplicaOwner(Datum replica_id, Oid owner)
{
	if (!has_privs_of_role(EventhubCallingRole(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for replica \"%s\"", TextDatumGetCString(replica_id)),
				 errdetail("The replica was registered by another role."),
				 errhint("Choose a replica id of your own; an administrator can remove a replica with eventhub.remove_replica().")));
}

/*
 * Adds to eventhub.config_splits the (organization, revision) pairs of the
 * rows a heartbeat changed (changed: organization, revision and hash, from
 * RecordHeartbeat) at which another replica reports a different hash.
 *
 * Two replicas that arrive at a pair with different hashes at once must
 * not both miss the other's row, uncommitted when each looks: each first
 * takes a transaction-level lock on the bucket of every organization it
 * compares (in bucket order, so that two heartbeats never wait for each
 * other in a cycle), then compares with a snapshot taken once it holds
 * them.  The second to get a bucket sees the first's row committed, in
 * READ COMMITTED (a heartbeat sent in a REPEATABLE READ transaction reads
 * its transaction's snapshot and can miss it; maintenance does not look
 * for splits).  The locks are advisory locks of a class of their own, which
 * the SQL advisory lock functions cannot take.
 *
 * A pair already there is updated all the same (to itself): a new row
 * version, which tells EventhubForgetSettledSplits, if it decided from an
 * older snapshot that the pair had settled, to keep it.
 */
#define SPLIT_LOCK_BUCKETS 16
#define SPLIT_LOCK_CLASS 0x4548	/* "EH" */

static void
RecordConfigSplits(Datum replica_id, SPITupleTable *changed, uint64 n)
{
	static EventhubPlan plan;
	Datum		values[4];
	Datum	   *orgs = palloc(sizeof(Datum) * n);
	Datum	   *revs = palloc(sizeof(Datum) * n);
	Datum	   *hashes = palloc(sizeof(Datum) * n);
	bool		bucket[SPLIT_LOCK_BUCKETS] = {false};
	bool		isnull;
	int			ret;

	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = changed->vals[i];
		text	   *org;

		orgs[i] = SPI_getbinval(tuple, changed->tupdesc, 1, &isnull);
		revs[i] = SPI_getbinval(tuple, changed->tupdesc, 2, &isnull);
		hashes[i] = SPI_getbinval(tuple, changed->tupdesc, 3, &isnull);
		org = DatumGetTextPP(orgs[i]);
		bucket[hash_bytes((unsigned char *) VARDATA_ANY(org), VARSIZE_ANY_EXHDR(org)) %
			   SPLIT_LOCK_BUCKETS] = true;
	}
	for (int b = 0; b < SPLIT_LOCK_BUCKETS; b++)
	{
		LOCKTAG		tag;

		if (!bucket[b])
			continue;
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) b, 0, SPLIT_LOCK_CLASS);
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
	}

	/* Not read-only: SPI takes the statement's snapshot now, after the locks. */

	values[0] = replica_id;
	values[1] = MakeArray(orgs, (int) n, TEXTOID, false);
	values[2] = MakeArray(revs, (int) n, INT8OID, false);
	values[3] = MakeArray(hashes, (int) n, TEXTOID, false);
	ret = SPI_execute_plan(EventhubKeptPlan(&plan, &EventhubSqlReplicasRecordConfigSplits),
						   values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "eventhub: recording configuration splits failed: %s", SPI_result_code_string(ret));
}

/*
 * Records a checked heartbeat.  The caller has connected to SPI.
 */
static void
RecordHeartbeat(Datum replica_id, Datum labels, bool labels_null, Datum version,
				bool version_null, ProgressEntry *entries, int n)
{
	static EventhubPlan head_plan;
	static EventhubPlan replica_plan;
	static EventhubPlan progress_plan;
	Datum	   *orgs = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *revs = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *versions = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *hashes = palloc(sizeof(Datum) * Max(n, 1));
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	int			ret;

	for (int i = 0; i < n; i++)
	{
		orgs[i] = CStringGetTextDatum(entries[i].org);
		revs[i] = Int64GetDatum(entries[i].revision);
		versions[i] = entries[i].version;
		hashes[i] = entries[i].config_hash;
	}

	/* No revision above its organization's head: one query for them all. */
	values[0] = MakeArray(orgs, n, TEXTOID, false);
	values[1] = MakeArray(revs, n, INT8OID, false);
	ret = SPI_execute_plan(EventhubKeptPlan(&head_plan, &EventhubSqlReplicasHeadsExceeded),
						   values, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: checking heartbeat revisions failed: %s", SPI_result_code_string(ret));
	if (SPI_processed == 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("revision %s of organization \"%s\" is above its head revision",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errdetail("The head revision is %s.",
						   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)),
				 errhint("Report the revision of the last event applied, from this database.")));

	/* Register or refresh the replica; it must be the caller's. */
	values[0] = replica_id;
	values[1] = labels;
	nulls[1] = labels_null ? 'n' : ' ';
	values[2] = version;
	nulls[2] = version_null ? 'n' : ' ';
	values[3] = ObjectIdGetDatum(EventhubCallingRole());
	ret = SPI_execute_plan(EventhubKeptPlan(&replica_plan, &EventhubSqlReplicasRegisterReplica),
						   values, nulls, false, 1);
	if (ret != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
		elog(ERROR, "eventhub: registering a replica failed: %s", SPI_result_code_string(ret));
	/* The error rolls the refresh back with everything else. */
	CheckReplicaOwner(replica_id,
					  DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull)));

	if (n == 0)
		return;
	values[0] = replica_id;
	values[1] = MakeArray(orgs, n, TEXTOID, false);
	values[2] = MakeArray(revs, n, INT8OID, false);
	values[3] = MakeArray(versions, n, UUIDOID, true);
	values[4] = MakeArray(hashes, n, TEXTOID, true);
	memset(nulls, ' ', sizeof(nulls));

	/*
	 * up: the upsert, with the organization's head as of now (NULL for one
	 * never registered).  The main query reads the rows as they were before
	 * it (a data-modifying WITH does not see its own changes): it returns
	 * the reported rows with a hash that are new or whose revision or hash
	 * changed, the only ones RecordConfigSplits compares with the other
	 * replicas.
	 */
	ret = SPI_execute_plan(EventhubKeptPlan(&progress_plan, &EventhubSqlReplicasRecordProgress),
						   values, nulls, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "eventhub: recording replica progress failed: %s", SPI_result_code_string(ret));
	if (SPI_processed > 0)
		RecordConfigSplits(replica_id, SPI_tuptable, SPI_processed);
}

/* A checked heartbeat, for HeartbeatWork. */
typedef struct HeartbeatArgs
{
	Datum		replica_id;
	Datum		labels;
	bool		labels_null;
	Datum		version;
	bool		version_null;
	ProgressEntry *entries;
	int			n;
} HeartbeatArgs;

/* RecordHeartbeat(), connected to SPI, as the owner (EventhubAsOwner). */
static void
HeartbeatWork(void *arg)
{
	HeartbeatArgs *h = (HeartbeatArgs *) arg;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	RecordHeartbeat(h->replica_id, h->labels, h->labels_null, h->version, h->version_null,
					h->entries, h->n);
	SPI_finish();
}

/*
 * heartbeat(replica_id text, progress jsonb, labels jsonb DEFAULT NULL,
 *			 version text DEFAULT NULL) -> void
 *
 * Registers the replica for the calling role if it is new, records its
 * progress {"<organization>": {"revision": N, "version_id": "...",
 * "config_hash": "..."}} and refreshes its last_heartbeat.  Everything is
 * checked before anything is written.
 */
Datum
heartbeat(PG_FUNCTION_ARGS)
{
	Datum		replica_id = EventhubRequiredTextArg(fcinfo, 0, "replica_id", EVENTHUB_MAX_ID_BYTES);
	ProgressEntry *entries;
	int			n;
	HeartbeatArgs h;

	/* Up front: a standby's refusal names the heartbeat, not eventhub's INSERT. */
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot send a heartbeat to a hot standby"),
				 errdetail("A heartbeat records the replica's progress, and a standby is read-only."),
				 errhint("Send heartbeats to the primary, for example on a connection with target_session_attrs=read-write; events can still be read from the standby.")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("progress must not be null"),
				 errhint("Pass '{}' for a replica that follows no organization.")));
	if (!PG_ARGISNULL(2))
		CheckLabels(PG_GETARG_JSONB_P(2));
	if (!PG_ARGISNULL(3) && VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(3)) > MAX_VERSION_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("version is too long"),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   (int) VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(3)), MAX_VERSION_BYTES)));
	entries = ParseProgress(PG_GETARG_JSONB_P(1), &n);

	h.replica_id = replica_id;
	h.labels = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	h.labels_null = PG_ARGISNULL(2);
	h.version = PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3);
	h.version_null = PG_ARGISNULL(3);
	h.entries = entries;
	h.n = n;
	EventhubAsOwner(HeartbeatWork, &h);
	PG_RETURN_VOID();
}

/*
 * Deletes a replica (its progress goes with it) and returns whether it was
 * registered; with check_owner, only the owner's.
 */
static bool
DeleteReplica(FunctionCallInfo fcinfo, bool check_owner)
{
	static EventhubPlan plan;
	Datum		replica_id;
	bool		found;
	bool		isnull;
	int			ret;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("replica_id must not be null")));
	replica_id = PG_GETARG_DATUM(0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	ret = EventhubExecuteAsOwner(&plan, &EventhubSqlReplicasDeleteReplica, &replica_id, NULL, 0);
	if (ret != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "eventhub: removing a replica failed: %s", SPI_result_code_string(ret));
	found = SPI_processed == 1;
	/* The error rolls the delete back. */
	if (found && check_owner)
		CheckReplicaOwner(replica_id,
						  DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
														 SPI_tuptable->tupdesc, 1, &isnull)));
	SPI_finish();
	return found;
}

/*
 * Deletes the pairs of eventhub.config_splits at which the replicas' rows
 * no longer report two different hashes (a replica moved on, changed its
 * hash or was removed), live or not: a stale replica's row still counts,
 * since it counts again, unchanged, once the replica is back.  Returns how
 * many.  One index probe per pair; the caller has connected to SPI and set
 * up a transaction.
 *
 * A heartbeat may find a pair split again after this statement's snapshot
 * (RecordConfigSplits): it updates the pair, and the delete, which waits
 * for it, then finds a row version other than the one it judged (xmin)
 * and leaves it.
 */
int64
EventhubForgetSettledSplits(void)
{
	static EventhubPlan plan;
	int			ret;

	ret = EventhubExecuteAsOwner(&plan, &EventhubSqlReplicasForgetSettledSplits, NULL, NULL, 0);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "eventhub: removing settled configuration splits failed: %s",
			 SPI_result_code_string(ret));
	return (int64) SPI_processed;
}

/*
 * deregister_replica(replica_id text) -> boolean
 *
 * Removes one of the caller's replicas with its progress; returns whether it
 * was registered.
 */
Datum
deregister_replica(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(DeleteReplica(fcinfo, true));
}

/*
 * remove_replica(replica_id text) -> boolean
 *
 * Removes any replica with its progress, whoever registered it: for
 * administrators.
 */
Datum
remove_replica(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(DeleteReplica(fcinfo, false));
}

/*
 * replica_visible(owner regrole) -> boolean
 *
 * Whether the calling role sees a replica registered by owner that follows
 * no organization it may read: always while access control is off, else
 * only its own (and a superuser's).  The row-level security of
 * eventhub.replicas and the replica_status view call it.
 */
Datum
replica_visible(PG_FUNCTION_ARGS)
{
	Oid			caller = EventhubCallingRole();

	PG_RETURN_BOOL(!EventhubAccessControlEnabled() ||
				   superuser_arg(caller) || has_bypassrls_privilege(caller) ||
				   has_privs_of_role(caller, PG_GETARG_OID(0)));
}
