/*
 * cli.c: the eventhub command-line tool.
 *
 * Exit status: 0 success, 1 an error (connection, server, bad input), 2 a
 * usage error, 3 `watch --timeout` passed before --count events arrived.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "cli_options.h"
#include "eventhub.h"

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3

static volatile sig_atomic_t interrupted = 0;

static void
on_signal(int signo)
{
	(void) signo;
	interrupted = 1;
}

/* Writes str as a JSON string. */
static void
json_string(FILE *out, const char *str)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *) str; *p; p++)
	{
		switch (*p)
		{
			case '"':
				fputs("\\\"", out);
				break;
			case '\\':
				fputs("\\\\", out);
				break;
			case '\n':
				fputs("\\n", out);
				break;
			case '\r':
				fputs("\\r", out);
				break;
			case '\t':
				fputs("\\t", out);
				break;
			default:
				if (*p < 0x20)
					fprintf(out, "\\u%04x", *p);
				else
					fputc(*p, out);
		}
	}
	fputc('"', out);
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

/* Library log lines go to stderr. */
static void
log_to_stderr(eh_client *client, eh_log_level level, const char *message, void *arg)
{
	static const char *const names[] = {"debug", "info", "warning", "error"};

	(void) client;
	(void) arg;
	if (level >= EH_LOG_INFO)
		fprintf(stderr, "eventhub: %s: %s\n", names[level], message);
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

static void
print_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	static const char *const reasons[] = {"", "history_removed", "cursor_ahead", "version_mismatch"};

	(void) client;
	(void) arg;
	fputs("{\"resync\": true, \"organization_id\": ", stdout);
	json_string(stdout, org);
	printf(", \"reason\": \"%s\", \"head_revision\": %lld}\n", reasons[reason], (long long) head);
	fflush(stdout);
}

static int
run_watch(const cli_options *o)
{
	eh_client  *c = eh_client_new(o->conninfo);
	watch_state w = {o->count, 0};
	double		deadline = o->timeout_s > 0 ? now_seconds() + o->timeout_s : -1;
	int			status = 0;

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
	for (int i = 0; i < o->norgs; i++)
		eh_subscribe(c, o->orgs[i], o->after >= 0 ? o->after : EH_FROM_HEAD);

	/* The first connection must work; later losses are retried. */
	if (eh_connect(c) != EH_OK)
	{
		fprintf(stderr, "eventhub: %s\n", eh_error_message(c));
		eh_client_free(c);
		return 1;
	}

	while (!interrupted && !(w.limit > 0 && w.seen >= w.limit))
	{
		int			slice = 1000;
		int			n;

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
			if (left * 1000 < slice)
				slice = (int) (left * 1000) + 1;
		}
		n = eh_wait(c, slice);
		if (n < 0 && n != EH_ERR_CONNECTION)
		{
			fprintf(stderr, "eventhub: %s\n", eh_error_message(c));
			status = 1;
			break;
		}
	}
	eh_client_free(c);
	return interrupted ? 130 : status;
}

static int
run_status(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	const char *params[1];
	PGresult   *res;
	int			n;
	int			width[5] = {12, 8, 36, 20, 11};
	static const char *const headers[5] = {"ORGANIZATION", "REVISION", "VERSION_ID", "UPDATED_AT", "KEPT_EVENTS"};

	if (!conn)
		return 1;
	params[0] = o->norgs ? o->orgs[0] : NULL;
	res = PQexecParams(conn,
					   "SELECT s.organization, s.revision, s.version_id,"
					   " to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
					   " (SELECT count(*) FROM eventhub.events e WHERE e.organization_id = s.organization)"
					   " FROM eventhub.organization_states s"
					   " WHERE $1::text IS NULL OR s.organization = $1"
					   " ORDER BY s.organization",
					   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("status failed", res, conn);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	n = PQntuples(res);
	if (n == 0 && o->norgs)
	{
		fprintf(stderr, "eventhub: organization \"%s\" is not registered\n", o->orgs[0]);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	for (int i = 0; i < n; i++)
		for (int j = 0; j < 5; j++)
		{
			int			len = (int) strlen(PQgetvalue(res, i, j));

			if (len > width[j])
				width[j] = len;
		}
	printf("%-*s  %*s  %-*s  %-*s  %*s\n", width[0], headers[0], width[1], headers[1],
		   width[2], headers[2], width[3], headers[3], width[4], headers[4]);
	for (int i = 0; i < n; i++)
		printf("%-*s  %*s  %-*s  %-*s  %*s\n",
			   width[0], PQgetvalue(res, i, 0), width[1], PQgetvalue(res, i, 1),
			   width[2], PQgetvalue(res, i, 2), width[3], PQgetvalue(res, i, 3),
			   width[4], PQgetvalue(res, i, 4));
	PQclear(res);
	PQfinish(conn);
	return 0;
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

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
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
