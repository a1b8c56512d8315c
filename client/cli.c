/*
 * cli.c: the eventhub command-line tool.
 *
 * Exit status: 0 success, 1 an error (connection, server, bad input), 2 a
 * usage error, 3 `watch --timeout` passed before --count events arrived,
 * 4 `status --fail-if-lag N` found a live replica more than N behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cli_options.h"
#include "eventhub.h"
#include "internal.h"

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3
#define EXIT_LAGGING 4

/*
 * SIGINT and SIGTERM write a byte to this pipe, which the watch loop polls
 * together with the connection: a signal that arrives while a query runs is
 * not lost.
 */
static int signal_pipe[2] = {-1, -1};

static void
on_signal(int signo)
{
	char		byte = (char) signo;
	int			saved = errno;

	if (write(signal_pipe[1], &byte, 1) < 0)
	{
		/* the pipe is full: a signal is already pending */
	}
	errno = saved;
}

/* Writes str as a JSON string. */
static void
json_string(FILE *out, const char *str)
{
	char	   *quoted = ehi_json_quote(str);

	fputs(quoted ? quoted : "null", out);
	free(quoted);
}

/* Writes ,"key": "value" */
static void
json_field(FILE *out, const char *key, const char *value)
{
	fprintf(out, ", \"%s\": ", key);
	json_string(out, value);
}

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Connects with libpq for the commands that run plain SQL. */
static PGconn *
connect_or_report(const char *conninfo)
{
	const char *keys[] = {"fallback_application_name", "dbname", NULL};
	const char *values[] = {"eventhub", conninfo, NULL};
	PGconn	   *conn = PQconnectdbParams(keys, values, 1);

	if (!conn || PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "eventhub: could not connect: %s", conn ? PQerrorMessage(conn) : "out of memory\n");
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/* Prints a failed result the way psql would, on one or two lines. */
static void
report_result_error(const char *what, const PGresult *res, const PGconn *conn)
{
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

	if (primary)
		fprintf(stderr, "eventhub: %s: %s\n", what, primary);
	else
		fprintf(stderr, "eventhub: %s: %s", what, PQerrorMessage(conn));
	if (detail)
		fprintf(stderr, "DETAIL: %s\n", detail);
	if (hint)
		fprintf(stderr, "HINT: %s\n", hint);
}

/*
 * Library log lines go to stderr; errors the caller sees returned (and
 * reports itself) only at debug level, so that each is said once.
 */
static void
log_to_stderr(eh_client *client, eh_log_level level, const char *message, void *arg)
{
	(void) client;
	(void) arg;
	if (level >= EH_LOG_INFO && level < EH_LOG_ERROR)
		fprintf(stderr, "eventhub: %s: %s\n", eh_log_level_name(level), message);
}

static int
run_publish(const cli_options *o)
{
	eh_client  *c = eh_client_new(o->conninfo);
	int64_t		revision;
	int			rc;

	if (!c)
	{
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	rc = eh_connect(c);
	if (rc == EH_OK)
		rc = eh_publish(c, o->org, o->type, o->action, o->entity, o->correlation_id, o->data, &revision);
	if (rc != EH_OK)
	{
		fprintf(stderr, "eventhub: %s", eh_error_message(c));
		if (eh_error_sqlstate(c)[0])
			fprintf(stderr, " (SQLSTATE %s)", eh_error_sqlstate(c));
		fputc('\n', stderr);
		eh_client_free(c);
		return 1;
	}
	printf("%lld\n", (long long) revision);
	eh_client_free(c);
	return 0;
}

typedef struct watch_state
{
	int64_t		limit;			/* 0: none */
	int64_t		seen;
} watch_state;

static int
print_event(eh_client *client, const eh_event *ev, void *arg)
{
	watch_state *w = arg;

	(void) client;
	fputs("{\"organization_id\": ", stdout);
	json_string(stdout, ev->organization_id);
	printf(", \"revision\": %lld", (long long) ev->revision);
	json_field(stdout, "version_id", ev->version_id);
	json_field(stdout, "processed_timestamp", ev->processed_timestamp);
	json_field(stdout, "originated_timestamp", ev->originated_timestamp);
	json_field(stdout, "event_type", ev->event_type);
	json_field(stdout, "action", ev->action);
	json_field(stdout, "entity_id", ev->entity_id);
	json_field(stdout, "correlation_id", ev->correlation_id);
	/* event_data is jsonb's own output: valid JSON, written as a value */
	printf(", \"event_data\": %s}\n", ev->event_data);
	fflush(stdout);
	w->seen++;
	return w->limit > 0 && w->seen >= w->limit;
}

/*
 * A resync line carries the new cursor to store: the head's revision and
 * version.
 */
static void
print_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	const char *version = eh_cursor_version(client, org);

	(void) arg;
	fputs("{\"resync\": true, \"organization_id\": ", stdout);
	json_string(stdout, org);
	printf(", \"reason\": \"%s\", \"head_revision\": %lld", eh_resync_reason_name(reason), (long long) head);
	if (version)
		json_field(stdout, "head_version_id", version);
	fputs("}\n", stdout);
	fflush(stdout);
}

static int
run_watch(const cli_options *o)
{
	eh_client  *c = eh_client_new(o->conninfo);
	watch_state w = {o->count, 0};
	double		deadline = o->timeout_s > 0 ? now_seconds() + o->timeout_s : -1;
	int			status = 0;
	int			interrupted = 0;

	if (!c)
	{
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	eh_set_event_callback(c, print_event, &w);
	eh_set_resync_callback(c, print_resync, NULL);
	eh_set_log_callback(c, log_to_stderr, NULL);
	if (o->no_listen)
		eh_set_listen(c, 0);
	if (o->poll_interval_ms)
		eh_set_poll_interval(c, o->poll_interval_ms);
	if (o->fallback_poll_interval_ms)
		eh_set_fallback_poll_interval(c, o->fallback_poll_interval_ms);
	if (o->replica_id &&
		(eh_set_replica(c, o->replica_id, o->labels, EVENTHUB_VERSION) != EH_OK ||
		 (o->heartbeat_interval_ms && eh_set_heartbeat_interval(c, o->heartbeat_interval_ms) != EH_OK) ||
		 (o->heartbeat_conninfo && eh_set_heartbeat_conninfo(c, o->heartbeat_conninfo) != EH_OK)))
	{
		fprintf(stderr, "eventhub: %s\n", eh_error_message(c));
		eh_client_free(c);
		return 1;
	}
	for (int i = 0; i < o->norgs; i++)
		if (eh_subscribe_at(c, o->orgs[i], o->after >= 0 ? o->after : EH_FROM_HEAD, o->after_version) != EH_OK)
		{
			fprintf(stderr, "eventhub: %s\n", eh_error_message(c));
			eh_client_free(c);
			return EXIT_USAGE;
		}

	/*
	 * A first connection that fails is retried like any later one (the
	 * library says so on stderr), unless a retry cannot help: a refused
	 * login, a database that does not exist.
	 */
	if (eh_connect(c) != EH_OK && !eh_error_retryable(c))
	{
		fprintf(stderr, "eventhub: %s\n", eh_error_message(c));
		eh_client_free(c);
		return 1;
	}

	/*
	 * The client's own event-loop interface: wait on its socket, the signal
	 * pipe and its next timer, then let it process what is ready.
	 */
	while (!interrupted)
	{
		struct pollfd fds[2];
		int			wait;
		int			n = eh_process(c);

		/*
		 * A refusal that a retry can fix (a lock or statement timeout, the
		 * extension being reinstalled) is ridden out: the client retries with
		 * backoff.  One that it cannot (authentication, a missing privilege,
		 * a bad argument) ends watch.
		 */
		if (n < 0 && n != EH_ERR_MEMORY && eh_error_retryable(c))
			fprintf(stderr, "eventhub: warning: %s (retrying)\n", eh_error_message(c));
		else if (n < 0)
		{
			fprintf(stderr, "eventhub: %s\n", eh_error_message(c));
			status = 1;
			break;
		}
		if (w.limit > 0 && w.seen >= w.limit)
			break;
		wait = eh_next_timeout_ms(c);
		if (deadline >= 0)
		{
			double		left = deadline - now_seconds();

			if (left <= 0)
			{
				fprintf(stderr, "eventhub: timeout after %g s with %lld events\n",
						o->timeout_s, (long long) w.seen);
				status = EXIT_TIMEOUT;
				break;
			}
			if (wait < 0 || left * 1000 < wait)
				wait = (int) (left * 1000) + 1;
		}
		fds[0].fd = signal_pipe[0];
		fds[0].events = POLLIN;
		fds[1].fd = eh_socket(c);	/* changes after a reconnect */
		fds[1].events = (short) (((eh_socket_wants(c) & EH_WANT_READ) ? POLLIN : 0) |
								 ((eh_socket_wants(c) & EH_WANT_WRITE) ? POLLOUT : 0));
		fds[0].revents = fds[1].revents = 0;
		if (poll(fds, fds[1].fd >= 0 ? 2 : 1, wait) < 0 && errno != EINTR)
		{
			fprintf(stderr, "eventhub: poll failed: %s\n", strerror(errno));
			status = 1;
			break;
		}
		if (fds[0].revents & POLLIN)
			interrupted = 1;
	}
	eh_client_free(c);
	return interrupted ? 130 : status;
}

/* Prints a result as an aligned table, numbers to the right. */
static void
print_table(const PGresult *res)
{
	int			ncols = PQnfields(res);
	int			nrows = PQntuples(res);
	int			width[16];
	int			right[16];

	if (ncols > 16)
		ncols = 16;
	for (int j = 0; j < ncols; j++)
	{
		Oid			type = PQftype(res, j);

		width[j] = (int) strlen(PQfname(res, j));
		right[j] = (type == 20 || type == 21 || type == 23 || type == 1700);	/* int8, int2, int4, numeric */
		for (int i = 0; i < nrows; i++)
		{
			int			len = (int) strlen(PQgetvalue(res, i, j));

			if (len > width[j])
				width[j] = len;
		}
	}
	for (int i = -1; i < nrows; i++)
	{
		for (int j = 0; j < ncols; j++)
		{
			const char *v = i < 0 ? PQfname(res, j) : PQgetvalue(res, i, j);

			if (i < 0)
			{
				for (const char *p = v; *p; p++)
					putchar(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
				printf("%*s", width[j] - (int) strlen(v), "");
			}
			else
				printf(right[j] ? "%*s" : "%-*s", width[j], v);
			if (j < ncols - 1)
				fputs("  ", stdout);
		}
		putchar('\n');
	}
}

/* Runs a query with the --org filter as $1; reports failures. */
static PGresult *
status_query(PGconn *conn, const char *sql, const cli_options *o)
{
	const char *params[1] = {o->norgs ? o->orgs[0] : NULL};
	PGresult   *res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("status failed", res, conn);
		PQclear(res);
		return NULL;
	}
	return res;
}

#define STATUS_ORGS_SQL \
	"SELECT s.organization, s.revision, s.version_id," \
	" to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS updated_at," \
	" (SELECT count(*) FROM eventhub.events e WHERE e.organization_id = s.organization) AS kept_events" \
	" FROM eventhub.organization_states s" \
	" WHERE $1::text IS NULL OR s.organization = $1" \
	" ORDER BY s.organization"

#define STATUS_REPLICAS_SQL \
	"SELECT replica_id AS replica, state, COALESCE(organization_id, '') AS organization," \
	" applied_revision AS applied, head_revision AS head, lag_revisions AS lag," \
	" COALESCE(date_trunc('second', behind_for)::text, 'unknown') AS behind_for," \
	" date_trunc('second', since_heartbeat)::text AS since_heartbeat," \
	" COALESCE(config_hash, '') AS config_hash," \
	" CASE hash_agrees WHEN true THEN 'yes' WHEN false THEN 'NO' ELSE '' END AS hash_agrees" \
	" FROM eventhub.replica_status" \
	" WHERE $1::text IS NULL OR organization_id = $1" \
	" ORDER BY replica_id, organization_id"

#define STATUS_JSON_SQL \
	"SELECT json_build_object(" \
	" 'organizations', COALESCE((SELECT json_agg(json_build_object(" \
	"   'organization', s.organization, 'revision', s.revision, 'version_id', s.version_id," \
	"   'updated_at', s.updated_at," \
	"   'kept_events', (SELECT count(*) FROM eventhub.events e WHERE e.organization_id = s.organization))" \
	"   ORDER BY s.organization)" \
	"  FROM eventhub.organization_states s WHERE $1::text IS NULL OR s.organization = $1), '[]')," \
	" 'replicas', COALESCE((SELECT json_agg(json_build_object(" \
	"   'replica_id', r.replica_id, 'state', r.state, 'organization_id', r.organization_id," \
	"   'head_revision', r.head_revision, 'applied_revision', r.applied_revision," \
	"   'lag_revisions', r.lag_revisions," \
	"   'behind_for_seconds', extract(epoch FROM r.behind_for)," \
	"   'since_heartbeat_seconds', extract(epoch FROM r.since_heartbeat)," \
	"   'applied_version_id', r.applied_version_id, 'applied_at', r.applied_at," \
	"   'config_hash', r.config_hash, 'hash_agrees', r.hash_agrees, 'labels', r.labels," \
	"   'version', r.version, 'started_at', r.started_at, 'last_heartbeat', r.last_heartbeat)" \
	"   ORDER BY r.replica_id, r.organization_id)" \
	"  FROM eventhub.replica_status r WHERE $1::text IS NULL OR r.organization_id = $1), '[]'))"

#define STATUS_LAGGING_SQL \
	"SELECT replica_id, organization_id, lag_revisions FROM eventhub.replica_status" \
	" WHERE state = 'live' AND lag_revisions > $2::bigint" \
	" AND ($1::text IS NULL OR organization_id = $1)" \
	" ORDER BY lag_revisions DESC, replica_id, organization_id"

static int
run_status(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	PGresult   *res;
	int			status = 0;

	if (!conn)
		return 1;
	if (o->json)
	{
		if (!(res = status_query(conn, STATUS_JSON_SQL, o)))
			status = 1;
		else
		{
			printf("%s\n", PQgetvalue(res, 0, 0));
			PQclear(res);
		}
	}
	else if (!(res = status_query(conn, STATUS_ORGS_SQL, o)))
		status = 1;
	else
	{
		if (PQntuples(res) == 0 && o->norgs)
		{
			fprintf(stderr, "eventhub: organization \"%s\" is not registered\n", o->orgs[0]);
			status = 1;
		}
		else
			print_table(res);
		PQclear(res);
		if (status == 0 && (res = status_query(conn, STATUS_REPLICAS_SQL, o)) != NULL)
		{
			putchar('\n');
			if (PQntuples(res) == 0)
				printf("no replicas report heartbeats\n");
			else
				print_table(res);
			PQclear(res);
		}
		else
			status = 1;
	}

	if (status == 0 && o->fail_if_lag >= 0)
	{
		char		limit[24];
		const char *params[2] = {o->norgs ? o->orgs[0] : NULL, limit};

		snprintf(limit, sizeof(limit), "%lld", (long long) o->fail_if_lag);
		res = PQexecParams(conn, STATUS_LAGGING_SQL, 2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			report_result_error("status failed", res, conn);
			status = 1;
		}
		else
		{
			for (int i = 0; i < PQntuples(res); i++)
				fprintf(stderr, "eventhub: replica \"%s\" is %s revisions behind on organization \"%s\"\n",
						PQgetvalue(res, i, 0), PQgetvalue(res, i, 2), PQgetvalue(res, i, 1));
			if (PQntuples(res) > 0)
				status = EXIT_LAGGING;
		}
		PQclear(res);
	}
	PQfinish(conn);
	return status;
}

static int
run_cleanup(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	const char *params[1] = {o->older_than};
	PGresult   *res;

	if (!conn)
		return 1;
	res = PQexecParams(conn,
					   "SELECT $1::interval < interval '0',"
					   " CASE WHEN $1::interval >= interval '0'"
					   " THEN eventhub.cleanup_events(now() - $1::interval) END",
					   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("cleanup failed", res, conn);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
	{
		fprintf(stderr, "eventhub: --older-than must not be negative, not \"%s\"\n", o->older_than);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	printf("%s\n", PQgetvalue(res, 0, 1));
	PQclear(res);
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	cli_options o;
	char		err[256];
	struct sigaction sa;

	if (argc == 2 && strcmp(argv[1], "--version") == 0)
	{
		printf("eventhub %s\n", eh_version());
		return 0;
	}
	if (cli_parse(argc, argv, &o, err, sizeof(err)) != 0)
	{
		fprintf(stderr, "eventhub: %s\n", err);
		fprintf(stderr, "Try \"eventhub%s%s --help\".\n", o.command ? " " : "",
				o.command == CMD_PUBLISH ? "publish" : o.command == CMD_WATCH ? "watch" :
				o.command == CMD_STATUS ? "status" : o.command == CMD_CLEANUP ? "cleanup" : "");
		return EXIT_USAGE;
	}
	if (o.help)
	{
		fputs(cli_usage(o.command), stdout);
		return 0;
	}

	if (pipe(signal_pipe) != 0 ||
		fcntl(signal_pipe[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK) != 0)
	{
		fprintf(stderr, "eventhub: could not create a pipe: %s\n", strerror(errno));
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESETHAND;	/* a second signal ends the process at once */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	switch (o.command)
	{
		case CMD_PUBLISH:
			return run_publish(&o);
		case CMD_WATCH:
			return run_watch(&o);
		case CMD_STATUS:
			return run_status(&o);
		case CMD_CLEANUP:
			return run_cleanup(&o);
		default:
			return EXIT_USAGE;
	}
}
