/*
 * cli_status.c: `eventhub status`, each organization's head and each
 * replica's progress, as tables or JSON, and the --fail-if-lag probe.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Runs a status query; reports failures. */
static PGresult *
status_query(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("status failed", res, conn);
		PQclear(res);
		return NULL;
	}
	return res;
}

/*
 * The status queries.  With 100,000 organizations and ten replicas
 * replica_status has a million rows: without --org, replicas are
 * summarized (one row each, one pass over the view), and rows per replica
 * and organization are shown for one organization at a time (--org, which
 * the view's indexes serve).  Only eventhub.organization_states,
 * eventhub.events and eventhub.replica_status are read: docs/operations.md's
 * operator role may run every one.  Each is one statement: the organization
 * parameter is NULL without --org, and with it the plan (a custom one, for
 * the values given) keeps only the test on the organization.
 */
#define STATUS_ORGS_SQL \
	"SELECT s.organization_id, s.revision, s.version_id," \
	" to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS updated_at," \
	" COALESCE(k.kept_events, 0) AS kept_events" \
	" FROM eventhub.organization_states s" \
	" LEFT JOIN (SELECT e.organization_id, count(*) AS kept_events FROM eventhub.events e" \
	"  GROUP BY e.organization_id) k ON k.organization_id = s.organization_id" \
	" WHERE ($1::text IS NULL OR s.organization_id = $1)" \
	" ORDER BY s.organization_id"

#define STATUS_ORGS_JSON_SQL \
	"SELECT COALESCE(json_agg(json_build_object(" \
	" 'organization_id', s.organization_id, 'revision', s.revision, 'version_id', s.version_id," \
	" 'updated_at', s.updated_at, 'kept_events', COALESCE(k.kept_events, 0))" \
	" ORDER BY s.organization_id), '[]')" \
	" FROM eventhub.organization_states s" \
	" LEFT JOIN (SELECT e.organization_id, count(*) AS kept_events FROM eventhub.events e" \
	"  GROUP BY e.organization_id) k ON k.organization_id = s.organization_id" \
	" WHERE ($1::text IS NULL OR s.organization_id = $1)"

/*
 * One row per replica: how many organizations it follows, on how many it
 * is behind, by how much at most and on which one (the greatest lag,
 * written in 20 digits before the id, is the greatest string), for how
 * long, and on how many it is more than $1 behind (--fail-if-lag).  Then
 * the replica's own fields from any one of its rows.
 */
#define STATUS_SUMMARY_SQL \
	"SELECT g.replica_id AS replica, x.state, COALESCE(x.version, '') AS version," \
	" g.organizations, g.behind, COALESCE(g.max_lag, 0) AS max_lag," \
	" COALESCE(g.most_behind, '') AS most_behind," \
	" CASE WHEN g.behind_for_unknown THEN 'unknown'" \
	"  ELSE COALESCE(date_trunc('second', g.behind_for)::text, '') END AS behind_for," \
	" date_trunc('second', x.since_heartbeat)::text AS since_heartbeat," \
	" g.over_limit, x.labels, to_json(x.started_at) #>> '{}' AS started_at," \
	" to_json(x.last_heartbeat) #>> '{}' AS last_heartbeat," \
	" extract(epoch FROM x.since_heartbeat) AS since_heartbeat_seconds," \
	" extract(epoch FROM g.behind_for) AS behind_for_seconds" \
	" FROM (SELECT replica_id, count(organization_id) AS organizations," \
	"   count(*) FILTER (WHERE lag_revisions > 0) AS behind, max(lag_revisions) AS max_lag," \
	"   substr(max((lpad(lag_revisions::text, 20, '0') || organization_id) COLLATE \"C\")" \
	"    FILTER (WHERE lag_revisions > 0), 21) AS most_behind," \
	"   max(behind_for) AS behind_for," \
	"   COALESCE(bool_or(lag_revisions > 0 AND behind_for IS NULL), false) AS behind_for_unknown," \
	"   count(*) FILTER (WHERE lag_revisions > $1::bigint) AS over_limit" \
	"  FROM eventhub.replica_status" \
	"  WHERE ($2::text IS NULL OR organization_id = $2)" \
	"  GROUP BY replica_id) g" \
	" CROSS JOIN LATERAL (SELECT v.state, v.version, v.labels, v.started_at, v.last_heartbeat," \
	"  v.since_heartbeat FROM eventhub.replica_status v WHERE v.replica_id = g.replica_id" \
	"  ORDER BY v.organization_id LIMIT 1) x" \
	" ORDER BY g.replica_id"

/* Each replica's progress on one organization ($1). */
#define STATUS_PROGRESS_SQL \
	"SELECT replica_id AS replica, state, organization_id," \
	" applied_revision AS applied, head_revision AS head, lag_revisions AS lag," \
	" COALESCE(date_trunc('second', behind_for)::text, 'unknown') AS behind_for," \
	" date_trunc('second', since_heartbeat)::text AS since_heartbeat," \
	" COALESCE(config_hash, '') AS config_hash," \
	" CASE hash_agrees WHEN true THEN 'yes' WHEN false THEN 'NO' ELSE '' END AS hash_agrees" \
	" FROM eventhub.replica_status WHERE organization_id = $1" \
	" ORDER BY replica_id"

#define STATUS_PROGRESS_JSON_SQL \
	"SELECT COALESCE(json_agg(json_build_object(" \
	" 'replica_id', r.replica_id, 'state', r.state, 'organization_id', r.organization_id," \
	" 'head_revision', r.head_revision, 'applied_revision', r.applied_revision," \
	" 'lag_revisions', r.lag_revisions," \
	" 'behind_for_seconds', extract(epoch FROM r.behind_for)," \
	" 'since_heartbeat_seconds', extract(epoch FROM r.since_heartbeat)," \
	" 'applied_version_id', r.applied_version_id, 'applied_at', r.applied_at," \
	" 'config_hash', r.config_hash, 'hash_agrees', r.hash_agrees)" \
	" ORDER BY r.replica_id), '[]')" \
	" FROM eventhub.replica_status r WHERE r.organization_id = $1"


/* Columns of the summary printed as a table; the others serve the probe and --json. */
#define SUMMARY_TABLE_COLUMNS 9
enum
{
	SUM_REPLICA, SUM_STATE, SUM_VERSION, SUM_ORGANIZATIONS, SUM_BEHIND, SUM_MAX_LAG,
	SUM_MOST_BEHIND, SUM_BEHIND_FOR, SUM_SINCE_HEARTBEAT, SUM_OVER_LIMIT, SUM_LABELS,
	SUM_STARTED_AT, SUM_LAST_HEARTBEAT, SUM_SINCE_HEARTBEAT_SECONDS, SUM_BEHIND_FOR_SECONDS
};

/* Writes the summary as a JSON array of objects. */
static void
print_summary_json(const PGresult *res)
{
	static const struct
	{
		int			column;
		const char *key;
		char		kind;		/* s: string, n: number, j: JSON */
	}			fields[] = {
		{SUM_REPLICA, "replica_id", 's'}, {SUM_STATE, "state", 's'}, {SUM_VERSION, "version", 's'},
		{SUM_LABELS, "labels", 'j'}, {SUM_STARTED_AT, "started_at", 's'},
		{SUM_LAST_HEARTBEAT, "last_heartbeat", 's'},
		{SUM_SINCE_HEARTBEAT_SECONDS, "since_heartbeat_seconds", 'n'},
		{SUM_ORGANIZATIONS, "organizations", 'n'}, {SUM_BEHIND, "organizations_behind", 'n'},
		{SUM_MAX_LAG, "max_lag_revisions", 'n'}, {SUM_MOST_BEHIND, "most_behind_organization", 's'},
		{SUM_BEHIND_FOR_SECONDS, "max_behind_for_seconds", 'n'},
	};

	fputc('[', stdout);
	for (int i = 0; i < PQntuples(res); i++)
	{
		fputs(i ? ", {" : "{", stdout);
		for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
		{
			const char *v = PQgetvalue(res, i, fields[f].column);

			printf("%s\"%s\": ", f ? ", " : "", fields[f].key);
			if (PQgetisnull(res, i, fields[f].column) ||
				(fields[f].column == SUM_MOST_BEHIND && !v[0]) ||
				(fields[f].column == SUM_VERSION && !v[0]))
				fputs("null", stdout);
			else if (fields[f].kind == 's')
				json_string(stdout, v);
			else
				cli_put_json(stdout, v);
		}
		fputc('}', stdout);
	}
	fputc(']', stdout);
}

/*
 * --fail-if-lag: names, on stderr, each live replica more than the limit
 * behind, with the organization it is most behind on.  Returns how many.
 */
static int
report_lagging(const PGresult *summary, int64_t limit)
{
	int			lagging = 0;

	for (int i = 0; i < PQntuples(summary); i++)
	{
		long long	over = atoll(PQgetvalue(summary, i, SUM_OVER_LIMIT));

		if (over == 0 || strcmp(PQgetvalue(summary, i, SUM_STATE), "live") != 0)
			continue;
		lagging++;
		fputs("eventhub: replica \"", stderr);
		cli_put_escaped(stderr, PQgetvalue(summary, i, SUM_REPLICA), 0);
		fprintf(stderr, "\" is %s revisions behind on organization \"", PQgetvalue(summary, i, SUM_MAX_LAG));
		cli_put_escaped(stderr, PQgetvalue(summary, i, SUM_MOST_BEHIND), 0);
		fputc('"', stderr);
		if (over > 1)
			fprintf(stderr, " (and more than %lld behind on %lld other organizations)", (long long) limit, over - 1);
		fputc('\n', stderr);
	}
	return lagging;
}


/* What status prints: the organizations, the replicas, one's progress. */
typedef struct status_results
{
	PGresult   *orgs;
	PGresult   *summary;		/* NULL: not needed for one organization's table */
	PGresult   *progress;		/* NULL without --org */
} status_results;

/*
 * Runs the queries that the options need into *r.  False when one failed
 * or the --org is not registered (said on stderr).
 */
static bool
status_fetch(PGconn *conn, const cli_options *o, status_results *r)
{
	const char *org = o->norgs ? o->orgs[0] : NULL;
	char		limit[24];
	const char *summary_params[2] = {limit, org};

	snprintf(limit, sizeof(limit), "%lld", (long long) (o->fail_if_lag >= 0 ? o->fail_if_lag : INT64_MAX));
	if (!(r->orgs = status_query(conn, o->json ? STATUS_ORGS_JSON_SQL : STATUS_ORGS_SQL, 1, &org)))
		return false;
	if (org && !o->json && PQntuples(r->orgs) == 0)
	{
		fputs("eventhub: organization \"", stderr);
		cli_put_escaped(stderr, org, 0);
		fputs("\" is not registered\n", stderr);
		return false;
	}
	if ((o->json || o->fail_if_lag >= 0 || !org) &&
		!(r->summary = status_query(conn, STATUS_SUMMARY_SQL, 2, summary_params)))
		return false;
	if (org && !(r->progress = status_query(conn, o->json ? STATUS_PROGRESS_JSON_SQL : STATUS_PROGRESS_SQL,
											1, &org)))
		return false;
	return true;
}

/* status --json: one object, the progress only with --org. */
static void
status_print_json(const status_results *r)
{
	fputs("{\"organizations\": ", stdout);
	cli_put_json(stdout, PQgetvalue(r->orgs, 0, 0));
	fputs(", \"replicas\": ", stdout);
	print_summary_json(r->summary);
	if (r->progress)
	{
		fputs(", \"progress\": ", stdout);
		cli_put_json(stdout, PQgetvalue(r->progress, 0, 0));
	}
	fputs("}\n", stdout);
}

/* status: the organizations' table, then the replicas' (or a line for none). */
static void
status_print_tables(const status_results *r, const char *org)
{
	print_table(r->orgs, PQnfields(r->orgs));
	putchar('\n');
	if (r->progress && PQntuples(r->progress) > 0)
		print_table(r->progress, PQnfields(r->progress));
	else if (!r->progress && PQntuples(r->summary) > 0)
		print_table(r->summary, SUMMARY_TABLE_COLUMNS);
	else
		printf("no replicas report heartbeats%s\n", org ? " on this organization" : "");
}

/* status: prints the organizations and replicas; 4 when --fail-if-lag finds one behind. */
int
run_status(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	status_results r = {0};
	int			status = 1;

	if (!conn)
		return 1;

	/*
	 * No JIT: it compiles longer than these queries run.  No parallel plan:
	 * the row-level security of organization_states and events calls
	 * eventhub.has_organization_privilege(), which a parallel worker cannot
	 * run.
	 */
	PQclear(PQexec(conn, "SET jit = off; SET max_parallel_workers_per_gather = 0"));
	if (status_fetch(conn, o, &r))
	{
		if (o->json)
			status_print_json(&r);
		else
			status_print_tables(&r, o->norgs ? o->orgs[0] : NULL);
		status = 0;
		if (o->fail_if_lag >= 0 && report_lagging(r.summary, o->fail_if_lag) > 0)
			status = EXIT_LAGGING;
	}
	PQclear(r.orgs);
	PQclear(r.summary);
	PQclear(r.progress);
	PQfinish(conn);
	return status;
}
