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
#include "utils/uuid.h"

#include "common.h"
#include "guard.h"
#include "access.h"
#include "heartbeat_args.h"
#include "replicas.h"

PG_FUNCTION_INFO_V1(heartbeat);
PG_FUNCTION_INFO_V1(deregister_replica);
PG_FUNCTION_INFO_V1(remove_replica);
PG_FUNCTION_INFO_V1(replica_visible);

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
 * Refuses a heartbeat that reports a revision above its organization's
 * head (orgs and revs: arrays of the reported organizations and
 * revisions), in one query for them all.
 */
static void
CheckHeads(Datum orgs, Datum revs)
{
	static EventhubPlan plan;
	Datum		values[2] = {orgs, revs};
	int			ret;

	ret = SPI_execute_plan(EventhubKeptPlan(&plan, &EventhubSqlReplicasHeadsExceeded),
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
}

/*
 * Registers or refreshes the replica; it must be the caller's.
 */
static void
RegisterReplica(Datum replica_id, Datum labels, bool labels_null, Datum version,
				bool version_null)
{
	static EventhubPlan plan;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		isnull;
	int			ret;

	values[0] = replica_id;
	values[1] = labels;
	nulls[1] = labels_null ? 'n' : ' ';
	values[2] = version;
	nulls[2] = version_null ? 'n' : ' ';
	values[3] = ObjectIdGetDatum(EventhubCallingRole());
	ret = SPI_execute_plan(EventhubKeptPlan(&plan, &EventhubSqlReplicasRegisterReplica),
						   values, nulls, false, 1);
	if (ret != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
		elog(ERROR, "eventhub: registering a replica failed: %s", SPI_result_code_string(ret));
	/* The error rolls the refresh back with everything else. */
	CheckReplicaOwner(replica_id,
					  DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull)));
}

/*
 * Records a checked heartbeat.  The caller has connected to SPI.
 */
static void
RecordHeartbeat(Datum replica_id, Datum labels, bool labels_null, Datum version,
				bool version_null, ProgressEntry *entries, int n)
{
	static EventhubPlan progress_plan;
	Datum	   *orgs = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *revs = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *versions = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *hashes = palloc(sizeof(Datum) * Max(n, 1));
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			ret;

	for (int i = 0; i < n; i++)
	{
		orgs[i] = CStringGetTextDatum(entries[i].org);
		revs[i] = Int64GetDatum(entries[i].revision);
		versions[i] = entries[i].version;
		hashes[i] = entries[i].config_hash;
	}

	CheckHeads(MakeArray(orgs, n, TEXTOID, false), MakeArray(revs, n, INT8OID, false));
	RegisterReplica(replica_id, labels, labels_null, version, version_null);

	if (n == 0)
		return;
	values[0] = replica_id;
	values[1] = MakeArray(orgs, n, TEXTOID, false);
	values[2] = MakeArray(revs, n, INT8OID, false);
	values[3] = MakeArray(versions, n, UUIDOID, true);
	values[4] = MakeArray(hashes, n, TEXTOID, true);

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
		EventhubCheckLabels(PG_GETARG_JSONB_P(2));
	if (!PG_ARGISNULL(3) && VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(3)) > EVENTHUB_MAX_VERSION_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("version is too long"),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   (int) VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(3)), EVENTHUB_MAX_VERSION_BYTES)));
	entries = EventhubParseProgress(PG_GETARG_JSONB_P(1), &n);

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

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("replica_id must not be null")));
	replica_id = PG_GETARG_DATUM(0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	EventhubRunAsOwner(&plan, &EventhubSqlReplicasDeleteReplica, &replica_id,
					   SPI_OK_DELETE_RETURNING, "removing a replica");
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

	EventhubRunAsOwner(&plan, &EventhubSqlReplicasForgetSettledSplits, NULL,
					   SPI_OK_DELETE, "removing settled configuration splits");
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
