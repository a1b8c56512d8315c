/*
 * cli.c: the eventhub command-line tool.
 *
 * Exit status: 0 success, 1 an error (connection, server, bad input; `get`
 * of an incomplete state or an interrupted snapshot; a --metrics-file that
 * cannot be written at start), 2 a usage error, 3 `watch --timeout` passed before --count events arrived,
 * 4 `status --fail-if-lag N` found a live replica more than N behind, 130
 * SIGINT or SIGTERM ended the command, 141 the reader of `watch`'s or
 * `get`'s standard output went away.  Neither of the last two says anything
 * on stderr.
 *
 * Strings from the database (organization and replica ids, hashes, labels,
 * server messages) are escaped in tables and on stderr (cli_put_escaped)
 * and in JSON (cli_put_json): a value cannot send the terminal a control
 * sequence, fake a line, or widen every row of a table.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
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
#define EXIT_INTERRUPTED 130	/* 128 + SIGINT, for SIGTERM too */
#define EXIT_PIPE 141			/* 128 + SIGPIPE, as a shell reports a process it killed */

#define STOP_GRACE_MS 250		/* after a signal: for the lines being written */
#define STOP_TICK_MS 100		/* after a signal: SIGALRM this often */
#define STOP_TICKS 30			/* after a signal: 3 s for the whole stop */
#define STOP_CLOSE_MS 500		/* after a signal: for the deregistration */

/*
 * SIGINT and SIGTERM in watch and get: signalled, then a byte to
 * signal_pipe, which every wait of theirs polls (the loop's, with the
 * connection, and write_out's for stdout): a signal that arrives while a
 * query runs or a reader stalls is not lost.
 */
static int signal_pipe[2] = {-1, -1};
static volatile sig_atomic_t signalled;

/*
 * After the first signal, a timer sends SIGALRM every STOP_TICK_MS: each
 * interrupts what the process may be blocked in (a write to a terminal
 * that stopped reading, which poll() called writable), so that the stop
 * goes on; the STOP_TICKS-th ends the process.
 */
static timer_t stop_timer;
static volatile sig_atomic_t stop_ticks;

/*
 * SIGINT and SIGTERM of watch and get: tells their loop, which stops
 * printing and ends as usual (the replica deregisters), and starts the
 * stop timer.  A second signal, or a stop that takes longer than
 * STOP_TICKS ticks, ends the process at once.
 */
static void
on_signal(int signo)
{
	char		byte = (char) signo;
	int			saved = errno;

	struct itimerspec tick = {
		.it_interval = {.tv_nsec = STOP_TICK_MS * 1000000L},
		.it_value = {.tv_nsec = STOP_TICK_MS * 1000000L},
	};

	if (signalled)
		_exit(EXIT_INTERRUPTED);
	signalled = 1;
	timer_settime(stop_timer, 0, &tick, NULL);
	if (write(signal_pipe[1], &byte, 1) < 0)
	{
		/* cannot fail: one byte at most; signalled tells the loop anyway */
	}
	errno = saved;
}

/*
 * Ends the process quietly, as interrupted: SIGINT and SIGTERM of the
 * commands with nothing to undo.
 */
static void
exit_interrupted(int signo)
{
	(void) signo;
	_exit(EXIT_INTERRUPTED);
}

/* A tick of the stop timer: the last one ends a stop that takes too long. */
static void
on_stop_tick(int signo)
{
	(void) signo;
	if (++stop_ticks >= STOP_TICKS)
		_exit(EXIT_INTERRUPTED);
}

/*
 * SIGINT and SIGTERM: watch and get stop through their loop (on_signal),
 * the other commands at once; either way quietly, with EXIT_INTERRUPTED.
 * No SA_RESTART: a wait or write that a signal interrupts returns EINTR,
 * which is no error: the caller looks at signalled.  SIGPIPE is ignored:
 * a closed stdout shows as EPIPE, so that watch can deregister first.
 * Returns 0, or -1 with errno set.
 */
static int
handle_signals(cli_command command)
{
	struct sigaction sa;
	struct sigevent tick = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM};

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	if (command == CMD_WATCH || command == CMD_GET)
	{
		sa.sa_handler = on_stop_tick;
		if (pipe(signal_pipe) != 0 ||
			fcntl(signal_pipe[0], F_SETFL, O_NONBLOCK) != 0 ||
			fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK) != 0 ||
			timer_create(CLOCK_MONOTONIC, &tick, &stop_timer) != 0 ||
			sigaction(SIGALRM, &sa, NULL) != 0)
			return -1;
		sa.sa_handler = on_signal;
	}
	else
		sa.sa_handler = exit_interrupted;
	if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
		return -1;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/*
 * Standard input, output and error that are closed get /dev/null, so that
 * no descriptor the command opens (a pipe, libpq's socket) takes their
 * number and receives what was meant for them.  Returns whether standard
 * output was closed.
 */
static bool
open_standard_fds(void)
{
	bool		stdout_closed = false;

	for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
		{
			stdout_closed |= fd == STDOUT_FILENO;
			if (open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY) != fd)
				return true;	/* no /dev/null: fail as for a closed stdout */
		}
	return stdout_closed;
}

/* Writes str as a JSON string. */
static void
json_string(FILE *out, const char *str)
{
	char	   *quoted = ehi_json_quote(str);

	cli_put_json(out, quoted ? quoted : "null");
	free(quoted);
}

/*
 * Writes "eventhub: <prefix><message>" and a newline to stderr, each line of
 * the message escaped (a server's message quotes what it was given) and the
 * newline libpq ends its own with dropped.  libpq's line breaks stay: its
 * connection errors come as two lines, the second indented.
 */
static void
report(const char *prefix, const char *message)
{
	size_t		len = strlen(message);
	char	   *copy = malloc(len + 1);

	while (len > 0 && message[len - 1] == '\n')
		len--;
	fprintf(stderr, "eventhub: %s", prefix);
	if (copy)
	{
		char	   *line = copy;
		char	   *end;

		memcpy(copy, message, len);
		copy[len] = '\0';
		while ((end = strchr(line, '\n')) != NULL)
		{
			*end = '\0';
			cli_put_escaped(stderr, line, 0);
			fputs("\n\t", stderr);
			line = end[1] == '\t' ? end + 2 : end + 1;
		}
		cli_put_escaped(stderr, line, 0);
		free(copy);
	}
	fputc('\n', stderr);
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
		report("could not connect: ", conn ? PQerrorMessage(conn) : "out of memory");
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

	fprintf(stderr, "eventhub: %s: ", what);
	cli_put_escaped(stderr, primary ? primary : PQerrorMessage(conn), 0);
	fputc('\n', stderr);
	if (detail)
	{
		fputs("DETAIL: ", stderr);
		cli_put_escaped(stderr, detail, 0);
		fputc('\n', stderr);
	}
	if (hint)
	{
		fputs("HINT: ", stderr);
		cli_put_escaped(stderr, hint, 0);
		fputc('\n', stderr);
	}
}

/*
 * Library log lines go to stderr; errors the caller sees returned (and
 * reports itself) only at debug level, so that each is said once.
 */
static void
log_to_stderr(eh_client *client, eh_log_level level, const char *message, void *arg)
{
	char		prefix[16];

	(void) client;
	(void) arg;
	if (signalled)
		return;					/* stopping: quietly */
	snprintf(prefix, sizeof(prefix), "%s: ", eh_log_level_name(level));
	if (level >= EH_LOG_INFO && level < EH_LOG_ERROR)
		report(prefix, message);
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
	eh_set_listen(c, 0);		/* it follows nothing: no LISTEN probe */
	rc = eh_connect(c);
	if (rc == EH_OK)
		rc = eh_publish(c, o->org, o->type, o->action, o->entity, o->correlation_id, o->data, &revision);
	if (rc != EH_OK)
	{
		fputs("eventhub: ", stderr);
		cli_put_escaped(stderr, eh_error_message(c), 0);
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
	int			get;			/* `get`: entity lines, the end line, done */
	int64_t		limit;			/* 0: none */
	int64_t		seen;
	int			write_errno;	/* writing to stdout failed with this */
	int			done;			/* get: the snapshot ended */
	int			aborted;		/* get: the snapshot was interrupted */
	int64_t		entities;		/* of the snapshot under way (one at a time) */
	char	   *lines;			/* the lines begun by begin_lines() */
	size_t		lines_len;
	int			cut;			/* a callback's lines were dropped or cut short */
} watch_state;

/* Records why stdout cannot be written any more (the first reason); false. */
static bool
output_failed(watch_state *w, int err)
{
	if (w->write_errno == 0)
		w->write_errno = err ? err : EIO;
	return false;
}

/*
 * How much of buf (len bytes) to write at once: at most PIPE_BUF, which a
 * pipe that poll() called writable takes whole, and up to a line's end
 * where one falls in it, so that a stop or another writer of the same pipe
 * meets whole lines.
 */
static size_t
next_chunk(const char *buf, size_t len)
{
	size_t		end = PIPE_BUF;

	if (len <= PIPE_BUF)
		return len;
	while (end > 0 && buf[end - 1] != '\n')
		end--;
	return end > 0 ? end : PIPE_BUF;
}

/*
 * Writes len bytes of lines to stdout once poll() says that stdout takes
 * more, a chunk at a time (next_chunk): watch waits for a reader that
 * stopped reading in poll(), which the signal pipe wakes.  After SIGINT or
 * SIGTERM the reader has STOP_GRACE_MS more to take them, then they are
 * given up; the stop timer's ticks interrupt a write that blocks all the
 * same (a terminal can call itself writable and then block).  False when
 * stdout cannot be written any more (w->write_errno says why: EPIPE when
 * its reader went away, as with `watch ... | head -1`) or a signal cut the
 * lines short.
 */
static bool
write_out(watch_state *w, const char *buf, size_t len)
{
	double		give_up = 0;

	for (size_t done = 0; done < len;)
	{
		struct pollfd fds[2] = {
			{.fd = STDOUT_FILENO, .events = POLLOUT},
			{.fd = signalled ? -1 : signal_pipe[0], .events = POLLIN},
		};
		int			wait = -1;
		ssize_t		n;

		if (signalled)
		{
			if (give_up == 0)
				give_up = now_seconds() + STOP_GRACE_MS / 1000.0;
			wait = (int) ((give_up - now_seconds()) * 1000);
			if (wait <= 0)
				return false;
		}
		if (poll(fds, 2, wait) < 0 && errno != EINTR)
			return output_failed(w, errno);
		if (fds[0].revents & POLLNVAL)
			return output_failed(w, EBADF);
		if (fds[0].revents & POLLHUP)
			return output_failed(w, EPIPE); /* its reader went away */
		if (!(fds[0].revents & (POLLOUT | POLLERR)))
			continue;			/* a signal, or the grace is over */
		/* POLLERR: the write says why (EPIPE: SIGPIPE is ignored) */
		n = write(STDOUT_FILENO, buf + done, next_chunk(buf + done, len - done));
		if (n > 0)
			done += (size_t) n;
		else if (n < 0 && errno != EINTR && errno != EAGAIN)
			return output_failed(w, errno);
	}
	return true;
}

/*
 * Starts the lines of one callback, in memory: stdout is written by
 * end_lines(), a transaction's lines together.  NULL when out of memory.
 */
static FILE *
begin_lines(watch_state *w)
{
	FILE	   *out = open_memstream(&w->lines, &w->lines_len);

	if (!out)
		output_failed(w, errno);
	return out;
}

/* Writes the lines begun by begin_lines() out; false as write_out(). */
static bool
end_lines(watch_state *w, FILE *out)
{
	bool		ok;

	if (fclose(out) != 0)
		ok = output_failed(w, ENOMEM);
	else
		ok = write_out(w, w->lines, w->lines_len);
	free(w->lines);
	w->lines = NULL;
	return ok;
}

/* An event's line, as in 0.3.0 with the transaction's two keys appended. */
static void
print_event(FILE *out, const eh_event *ev)
{
	fputs("{\"organization_id\": ", out);
	json_string(out, ev->organization_id);
	fprintf(out, ", \"revision\": %lld", (long long) ev->revision);
	json_field(out, "version_id", ev->version_id);
	json_field(out, "processed_timestamp", ev->processed_timestamp);
	json_field(out, "originated_timestamp", ev->originated_timestamp);
	json_field(out, "event_type", ev->event_type);
	json_field(out, "action", ev->action);
	json_field(out, "entity_id", ev->entity_id);
	json_field(out, "correlation_id", ev->correlation_id);
	/* event_data is jsonb's own output: valid JSON, written as a value */
	fputs(", \"event_data\": ", out);
	cli_put_json(out, ev->event_data);
	fprintf(out, ", \"transaction_first_revision\": %lld, \"transaction_end\": %s}\n",
			(long long) ev->transaction_first_revision, ev->transaction_end ? "true" : "false");
}

/*
 * A transaction's events (or a part of one over the batch limits), one
 * line each.  --count stops only at a transaction's end.  Once signalled,
 * nothing more.
 */
static int
print_transaction(eh_client *client, const char *org, const eh_event *const *events, int n,
				  int ends_transaction, void *arg)
{
	watch_state *w = arg;
	FILE	   *out;

	(void) client;
	(void) org;
	if (signalled || !(out = begin_lines(w)))
	{
		w->cut = 1;
		return 1;				/* stop */
	}
	for (int i = 0; i < n; i++)
		print_event(out, events[i]);
	if (!end_lines(w, out))
	{
		w->cut = 1;
		return 1;				/* stop: the output is gone, or cut short */
	}
	w->seen += n;
	return ends_transaction && w->limit > 0 && w->seen >= w->limit;
}

/* Writes , "head_revision": N, "head_version_id": "..." (null without events). */
static void
print_head(FILE *out, int64_t head, const char *version)
{
	fprintf(out, ", \"head_revision\": %lld, \"head_version_id\": ", (long long) head);
	if (version)
		json_string(out, version);
	else
		fputs("null", out);
}

/*
 * An entity's line of a snapshot: its type as event_type, as the SQL
 * (eventhub.snapshot_entities) names it, then the same as entity_type,
 * the name of 0.4.0, deprecated: it goes in the next release.
 */
static void
print_entity(FILE *out, const eh_entity *e)
{
	fputs("{\"organization_id\": ", out);
	json_string(out, e->organization_id);
	json_field(out, "event_type", e->event_type);
	json_field(out, "entity_type", e->event_type);
	json_field(out, "entity_id", e->entity_id);
	fprintf(out, ", \"revision\": %lld", (long long) e->revision);
	json_field(out, "version_id", e->version_id);
	fputs(", \"event_data\": ", out);
	cli_put_json(out, e->event_data);
	fputs("}\n", out);
}

/* A snapshot's marker line: begin, end or abort. */
static void
print_snapshot_marker(FILE *out, const char *org, eh_snapshot_phase phase, int reason,
					  int64_t head, const char *head_version, int64_t entities)
{
	fprintf(out, "{\"snapshot\": \"%s\", \"organization_id\": ", eh_snapshot_phase_name(phase));
	json_string(out, org);
	if (phase == EH_SNAPSHOT_BEGIN)
		fprintf(out, ", \"reason\": \"%s\"", reason ? eh_resync_reason_name((eh_resync_reason) reason) : "initial");
	if (phase != EH_SNAPSHOT_ABORT)
		print_head(out, head, head_version);
	if (phase == EH_SNAPSHOT_END)
		fprintf(out, ", \"entities\": %lld", (long long) entities);
	fputs("}\n", out);
}

/*
 * A snapshot: watch prints its begin line, its entities, its end line (or
 * abort); get the entities and the end line, and then it is done (an
 * abort ends it too).  Once signalled, nothing more.
 */
static void
print_snapshot(eh_client *client, const char *org, eh_snapshot_phase phase, int reason,
			   const eh_entity *const *entities, int n, int64_t head, const char *head_version, void *arg)
{
	watch_state *w = arg;
	FILE	   *out;

	(void) client;
	if (w->done || w->aborted)
		return;
	if (signalled || w->write_errno)
	{
		w->cut = 1;
		return;
	}
	if (phase == EH_SNAPSHOT_BEGIN)
		w->entities = 0;
	else if (phase == EH_SNAPSHOT_ENTITIES)
		w->entities += n;
	else if (phase == EH_SNAPSHOT_ABORT && w->get)
		w->aborted = 1;
	/* get prints neither a begin line nor an abort line */
	if (w->get && (phase == EH_SNAPSHOT_BEGIN || phase == EH_SNAPSHOT_ABORT))
		return;
	if (!(out = begin_lines(w)))
	{
		w->cut = 1;
		return;
	}
	if (phase == EH_SNAPSHOT_ENTITIES)
		for (int i = 0; i < n; i++)
			print_entity(out, entities[i]);
	else
		print_snapshot_marker(out, org, phase, reason, head, head_version, w->entities);
	if (!end_lines(w, out))
		w->cut = 1;
	else if (w->get && phase == EH_SNAPSHOT_END)
		w->done = 1;
}

/*
 * A resync line carries the new cursor to store: the head's revision and
 * version.  Once signalled, nothing more.
 */
static void
print_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	const char *version = eh_cursor_version(client, org);
	watch_state *w = arg;
	FILE	   *out;

	if (signalled || w->write_errno || !(out = begin_lines(w)))
	{
		w->cut = 1;
		return;
	}
	fputs("{\"resync\": true, \"organization_id\": ", out);
	json_string(out, org);
	fprintf(out, ", \"reason\": \"%s\", \"head_revision\": %lld", eh_resync_reason_name(reason), (long long) head);
	if (version)
		json_field(out, "head_version_id", version);
	fputs("}\n", out);
	if (!end_lines(w, out))
		w->cut = 1;
}

/* The text of eh_render_metrics(), malloc'd; NULL when out of memory. */
static char *
render_metrics(const eh_client *c, size_t *len)
{
	size_t		size = 8192;
	char	   *text = NULL;

	for (;;)
	{
		char	   *p = realloc(text, size);
		int			n;

		if (!p)
		{
			free(text);
			return NULL;
		}
		text = p;
		n = eh_render_metrics(c, text, size);
		if (n < 0)
		{
			free(text);
			return NULL;
		}
		if ((size_t) n < size)
		{
			*len = (size_t) n;
			return text;
		}
		size = (size_t) n + 256;	/* a freshness may gain a digit meanwhile */
	}
}

/*
 * --metrics-file: writes the client's metrics to path, atomically for a
 * reader (node_exporter's textfile collector): path.tmp in the same
 * directory, fsync, rename over path.  Returns 0, or -1 with the reason
 * in err.
 */
static int
write_metrics_file(const eh_client *c, const char *path, char *err, size_t errlen)
{
	size_t		len = 0;
	char	   *text = render_metrics(c, &len);
	size_t		tmplen = strlen(path) + 5;
	char	   *tmp = malloc(tmplen);
	const char *failed = NULL;	/* the call that failed */
	int			fd = -1;

	if (!text || !tmp)
	{
		free(text);
		free(tmp);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	snprintf(tmp, tmplen, "%s.tmp", path);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
		failed = "create";
	for (size_t done = 0; !failed && done < len;)
	{
		ssize_t		n = write(fd, text + done, len - done);

		if (n < 0 && errno != EINTR)
			failed = "write";
		else if (n > 0)
			done += (size_t) n;
	}
	if (!failed && fsync(fd) != 0)
		failed = "fsync";
	if (fd >= 0 && close(fd) != 0 && !failed)
		failed = "close";
	if (!failed && rename(tmp, path) != 0)
		failed = "rename";
	if (failed)
	{
		int			saved = errno;

		if (strcmp(failed, "rename") == 0)
			snprintf(err, errlen, "could not rename \"%s\" to \"%s\": %s", tmp, path, strerror(saved));
		else
			snprintf(err, errlen, "could not %s \"%s\": %s", failed, tmp, strerror(saved));
		if (fd >= 0)
			unlink(tmp);
	}
	free(text);
	free(tmp);
	return failed ? -1 : 0;
}

/*
 * watch, and get: a snapshot of one organization with the same client and
 * loop, which ends once it is complete.
 */
static int
run_watch(const cli_options *o)
{
	eh_client  *c = eh_client_new(o->conninfo);
	int			get = o->command == CMD_GET;
	int64_t		from = get || o->snapshot ? EH_FROM_SNAPSHOT : o->after >= 0 ? o->after : EH_FROM_HEAD;
	watch_state w = {0};
	double		deadline = o->timeout_s > 0 ? now_seconds() + o->timeout_s : -1;
	int			status = 0;
	double		metrics_interval = o->metrics_interval_s > 0 ? o->metrics_interval_s : 10;
	double		next_metrics = 0;
	int			metrics_failing = 0;
	char		metrics_err[1024];

	if (!c)
	{
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	w.get = get;
	w.limit = o->count;
	eh_set_transaction_callback(c, print_transaction, &w);
	/* get has no resync callback: an incomplete state (ZE004) ends it */
	if (!get)
		eh_set_resync_callback(c, print_resync, &w);
	if (from == EH_FROM_SNAPSHOT)
		eh_set_snapshot_callback(c, print_snapshot, &w);
	eh_set_log_callback(c, log_to_stderr, NULL);
	if (o->no_listen || get)
		eh_set_listen(c, 0);
	if (o->poll_interval_ms)
		eh_set_poll_interval(c, o->poll_interval_ms);
	if (o->fallback_poll_interval_ms)
		eh_set_fallback_poll_interval(c, o->fallback_poll_interval_ms);
	if ((o->batch_bytes && eh_set_batch_bytes(c, o->batch_bytes) != EH_OK) ||
		(o->query_timeout_ms && eh_set_query_timeout(c, o->query_timeout_ms) != EH_OK) ||
		(o->all && eh_subscribe_all(c, o->snapshot ? EH_FROM_SNAPSHOT : o->after == 0 ? 0 : EH_FROM_HEAD) != EH_OK))
	{
		report("", eh_error_message(c));
		eh_client_free(c);
		return EXIT_USAGE;
	}
	if (o->replica_id &&
		(eh_set_replica(c, o->replica_id, o->labels, EVENTHUB_VERSION) != EH_OK ||
		 (o->heartbeat_interval_ms && eh_set_heartbeat_interval(c, o->heartbeat_interval_ms) != EH_OK) ||
		 (o->heartbeat_conninfo && eh_set_heartbeat_conninfo(c, o->heartbeat_conninfo) != EH_OK)))
	{
		report("", eh_error_message(c));
		eh_client_free(c);
		return 1;
	}
	for (int i = 0; i < o->norgs; i++)
		if (eh_subscribe_at(c, o->orgs[i], from, o->after_version) != EH_OK)
		{
			report("", eh_error_message(c));
			eh_client_free(c);
			return EXIT_USAGE;
		}

	/* A metrics file that cannot be written is said now, before watching. */
	if (o->metrics_file)
	{
		if (write_metrics_file(c, o->metrics_file, metrics_err, sizeof(metrics_err)) != 0)
		{
			report("--metrics-file: ", metrics_err);
			eh_client_free(c);
			return 1;
		}
		next_metrics = now_seconds() + metrics_interval;
	}

	/*
	 * A first connection that fails is retried like any later one (the
	 * library says so on stderr), unless a retry cannot help: a refused
	 * login, a database that does not exist.
	 */
	if (eh_connect(c) != EH_OK && !eh_error_retryable(c))
	{
		report("", eh_error_message(c));
		eh_client_free(c);
		return 1;
	}

	/*
	 * The client's own event-loop interface: wait on its sockets, the signal
	 * pipe and its next timer, then let it process what is ready.
	 */
	while (!signalled)
	{
		struct pollfd fds[2 + EH_MAX_SOCKETS];
		int			sockets[EH_MAX_SOCKETS];
		int			wants[EH_MAX_SOCKETS];
		int			nfds;
		int			wait;
		int			n = eh_process(c);

		/* SIGINT, SIGTERM: stop now, quietly, whatever the round found */
		if (signalled)
			break;

		/*
		 * A refusal that a retry can fix (a lock or statement timeout, the
		 * extension being reinstalled) is ridden out: the client retries with
		 * backoff.  One that it cannot (authentication, a missing privilege,
		 * a bad argument) ends watch.
		 */
		if (w.write_errno)
		{
			/* Nobody reads: end as on SIGTERM, quietly for a closed pipe. */
			if (w.write_errno != EPIPE)
				fprintf(stderr, "eventhub: could not write to standard output: %s\n", strerror(w.write_errno));
			status = w.write_errno == EPIPE ? EXIT_PIPE : 1;
			break;
		}
		if (get && (w.done || w.aborted || (n < 0 && strcmp(eh_error_sqlstate(c), "ZE004") == 0)))
		{
			/* Complete, or a state that a retry cannot complete: done either way. */
			if (w.aborted)
				report("", "the snapshot was interrupted (the connection was lost, or the head moved); run get again");
			else if (!w.done)
				report("", eh_error_message(c));
			status = w.done ? 0 : 1;
			break;
		}
		if (n < 0 && n != EH_ERR_MEMORY && eh_error_retryable(c))
		{
			fputs("eventhub: warning: ", stderr);
			cli_put_escaped(stderr, eh_error_message(c), 0);
			fputs(" (retrying)\n", stderr);
		}
		else if (n < 0)
		{
			report("", eh_error_message(c));
			status = 1;
			break;
		}
		if (w.limit > 0 && w.seen >= w.limit)
			break;
		wait = eh_timeout_ms(c);
		if (o->metrics_file)
		{
			double		now = now_seconds();
			int			until;

			if (now >= next_metrics)
			{
				/* A failure is said once, until a write succeeds again; watch goes on. */
				if (write_metrics_file(c, o->metrics_file, metrics_err, sizeof(metrics_err)) != 0)
				{
					if (!metrics_failing)
						report("warning: --metrics-file: ", metrics_err);
					metrics_failing = 1;
				}
				else
					metrics_failing = 0;
				next_metrics = now + metrics_interval;
			}
			until = (int) ((next_metrics - now) * 1000) + 1;
			if (wait < 0 || until < wait)
				wait = until;
		}
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
		fds[1].fd = STDOUT_FILENO;	/* POLLERR once a pipe's reader is gone */
		fds[1].events = 0;
		/* The client's sockets change after a reconnect: asked each round. */
		nfds = 2 + eh_sockets(c, sockets, wants, EH_MAX_SOCKETS);
		for (int i = 2; i < nfds; i++)
		{
			fds[i].fd = sockets[i - 2];
			fds[i].events = (short) (((wants[i - 2] & EH_WANT_READ) ? POLLIN : 0) |
									 ((wants[i - 2] & EH_WANT_WRITE) ? POLLOUT : 0));
		}
		for (int i = 0; i < nfds; i++)
			fds[i].revents = 0;
		if (poll(fds, (nfds_t) nfds, wait) < 0 && errno != EINTR)
		{
			fprintf(stderr, "eventhub: poll failed: %s\n", strerror(errno));
			status = 1;
			break;
		}
		if (!signalled && (fds[1].revents & (POLLERR | POLLHUP)))
		{
			/* The next line would fail with EPIPE: end now, not then. */
			status = EXIT_PIPE;
			break;
		}
	}
	/*
	 * The last metrics, as watch ends (the file's mtime then stops moving),
	 * unless lines the client counts as delivered were not written.
	 */
	if (o->metrics_file && !w.cut && write_metrics_file(c, o->metrics_file, metrics_err, sizeof(metrics_err)) != 0 &&
		!signalled)
		report("warning: --metrics-file: ", metrics_err);
	if (signalled)
		eh_set_close_timeout(c, STOP_CLOSE_MS);
	eh_client_free(c);			/* deregisters the replica */
	return signalled ? EXIT_INTERRUPTED : status;
}

/*
 * Prints the first ncols columns of a result as an aligned table, numbers to
 * the right.  Cells are escaped and at most CLI_CELL_WIDTH wide, so that one
 * long value cannot widen every row.
 */
static void
print_table(const PGresult *res, int ncols)
{
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
			int			w = cli_put_escaped(NULL, PQgetvalue(res, i, j), CLI_CELL_WIDTH);

			if (w > width[j])
				width[j] = w;
		}
	}
	for (int i = -1; i < nrows; i++)
	{
		for (int j = 0; j < ncols; j++)
		{
			const char *v = i < 0 ? PQfname(res, j) : PQgetvalue(res, i, j);
			int			w = cli_put_escaped(NULL, v, CLI_CELL_WIDTH);

			if (right[j] && i >= 0)
				printf("%*s", width[j] - w, "");
			if (i < 0)
				for (const char *p = v; *p; p++)
					putchar(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
			else
				cli_put_escaped(stdout, v, CLI_CELL_WIDTH);
			if (j < ncols - 1)
				printf("%*s", (right[j] && i >= 0 ? 0 : width[j] - w) + 2, "");
		}
		putchar('\n');
	}
}

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
 * operator role may run every one.
 */
#define STATUS_ORGS_SQL(WHERE) \
	"SELECT s.organization_id, s.revision, s.version_id," \
	" to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS updated_at," \
	" COALESCE(k.kept_events, 0) AS kept_events" \
	" FROM eventhub.organization_states s" \
	" LEFT JOIN (SELECT e.organization_id, count(*) AS kept_events FROM eventhub.events e" \
	"  GROUP BY e.organization_id) k ON k.organization_id = s.organization_id" \
	WHERE \
	" ORDER BY s.organization_id"

#define STATUS_ORGS_JSON_SQL(WHERE) \
	"SELECT COALESCE(json_agg(json_build_object(" \
	" 'organization_id', s.organization_id, 'revision', s.revision, 'version_id', s.version_id," \
	" 'updated_at', s.updated_at, 'kept_events', COALESCE(k.kept_events, 0))" \
	" ORDER BY s.organization_id), '[]')" \
	" FROM eventhub.organization_states s" \
	" LEFT JOIN (SELECT e.organization_id, count(*) AS kept_events FROM eventhub.events e" \
	"  GROUP BY e.organization_id) k ON k.organization_id = s.organization_id" \
	WHERE

/*
 * One row per replica: how many organizations it follows, on how many it
 * is behind, by how much at most and on which one (the greatest lag,
 * written in 20 digits before the id, is the greatest string), for how
 * long, and on how many it is more than $1 behind (--fail-if-lag).  Then
 * the replica's own fields from any one of its rows.
 */
#define STATUS_SUMMARY_SQL(WHERE) \
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
	WHERE \
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

#define ORG_FILTER " WHERE s.organization_id = $1"
#define ORG_FILTER_VIEW " WHERE organization_id = $2"

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

static int
run_status(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	const char *org = o->norgs ? o->orgs[0] : NULL;
	char		limit[24];
	const char *summary_params[2];
	PGresult   *orgs = NULL;
	PGresult   *summary = NULL;
	PGresult   *progress = NULL;
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

	snprintf(limit, sizeof(limit), "%lld", (long long) (o->fail_if_lag >= 0 ? o->fail_if_lag : INT64_MAX));
	summary_params[0] = limit;
	summary_params[1] = org;
	if (!(orgs = status_query(conn, o->json ? (org ? STATUS_ORGS_JSON_SQL(ORG_FILTER) : STATUS_ORGS_JSON_SQL(""))
							  : (org ? STATUS_ORGS_SQL(ORG_FILTER) : STATUS_ORGS_SQL("")),
							  org ? 1 : 0, &org)))
		goto done;
	if (org && !o->json && PQntuples(orgs) == 0)
	{
		fputs("eventhub: organization \"", stderr);
		cli_put_escaped(stderr, org, 0);
		fputs("\" is not registered\n", stderr);
		goto done;
	}
	if ((o->json || o->fail_if_lag >= 0 || !org) &&
		!(summary = status_query(conn, org ? STATUS_SUMMARY_SQL(ORG_FILTER_VIEW) : STATUS_SUMMARY_SQL(""),
								 org ? 2 : 1, summary_params)))
		goto done;
	if (org && !(progress = status_query(conn, o->json ? STATUS_PROGRESS_JSON_SQL : STATUS_PROGRESS_SQL, 1, &org)))
		goto done;

	if (o->json)
	{
		fputs("{\"organizations\": ", stdout);
		cli_put_json(stdout, PQgetvalue(orgs, 0, 0));
		fputs(", \"replicas\": ", stdout);
		print_summary_json(summary);
		if (progress)
		{
			fputs(", \"progress\": ", stdout);
			cli_put_json(stdout, PQgetvalue(progress, 0, 0));
		}
		fputs("}\n", stdout);
	}
	else
	{
		print_table(orgs, PQnfields(orgs));
		putchar('\n');
		if (progress && PQntuples(progress) > 0)
			print_table(progress, PQnfields(progress));
		else if (!progress && PQntuples(summary) > 0)
			print_table(summary, SUMMARY_TABLE_COLUMNS);
		else
			printf("no replicas report heartbeats%s\n", org ? " on this organization" : "");
	}
	status = 0;
	if (o->fail_if_lag >= 0 && report_lagging(summary, o->fail_if_lag) > 0)
		status = EXIT_LAGGING;

done:
	PQclear(orgs);
	PQclear(summary);
	PQclear(progress);
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
		fputs("eventhub: --older-than must not be negative, not \"", stderr);
		cli_put_escaped(stderr, o->older_than, 0);
		fputs("\"\n", stderr);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	printf("%s\n", PQgetvalue(res, 0, 1));
	PQclear(res);
	PQfinish(conn);
	return 0;
}

/*
 * eventhub.metrics(), a row per series, with its labels a row each
 * (jsonb_each_text), ordered so that a family's series are together and
 * each series' labels follow one another in key order: the output is the
 * same for the same metrics.
 */
#define METRICS_SQL \
	"SELECT m.n, m.name, m.type, m.help, m.value, l.key, l.value" \
	" FROM (SELECT row_number() OVER () AS n, f.* FROM eventhub.metrics() f) m" \
	" LEFT JOIN LATERAL jsonb_each_text(m.labels) l ON true" \
	" ORDER BY m.name COLLATE \"C\", m.labels::text COLLATE \"C\", m.n, l.key COLLATE \"C\""

enum
{
	MET_N, MET_NAME, MET_TYPE, MET_HELP, MET_VALUE, MET_KEY, MET_LABEL
};

/* A float8's text as Prometheus writes it: +Inf, -Inf, NaN. */
static const char *
prometheus_value(const char *v)
{
	if (strcmp(v, "Infinity") == 0)
		return "+Inf";
	if (strcmp(v, "-Infinity") == 0)
		return "-Inf";
	return v;
}

/*
 * The rows of METRICS_SQL in the text exposition format: # HELP and # TYPE
 * once per family (its first series'), label values and help texts
 * escaped by the library's builder.  A series without a value is left out.
 */
static void
format_metrics(const PGresult *res, ehi_strbuf *out)
{
	int			nrows = PQntuples(res);
	const char *family = NULL;

	for (int i = 0; i < nrows;)
	{
		const char *name = PQgetvalue(res, i, MET_NAME);
		const char *n = PQgetvalue(res, i, MET_N);
		int			first = i;

		if (!family || strcmp(family, name) != 0)
		{
			const char *type = PQgetvalue(res, i, MET_TYPE);

			family = name;
			if (!PQgetisnull(res, i, MET_HELP))
			{
				ehi_sb_printf(out, "# HELP %s ", name);
				ehi_sb_prometheus(out, PQgetvalue(res, i, MET_HELP), 1);
				ehi_sb_puts(out, "\n");
			}
			ehi_sb_printf(out, "# TYPE %s %s\n", name,
						  strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ? type : "untyped");
		}
		/* The series: its rows, one per label (one with NULLs without labels). */
		while (i < nrows && strcmp(PQgetvalue(res, i, MET_N), n) == 0)
			i++;
		if (PQgetisnull(res, first, MET_VALUE))
			continue;
		ehi_sb_puts(out, name);
		for (int j = first; j < i; j++)
		{
			if (PQgetisnull(res, j, MET_KEY))
				continue;
			ehi_sb_printf(out, "%s%s=\"", j == first ? "{" : ",", PQgetvalue(res, j, MET_KEY));
			ehi_sb_prometheus(out, PQgetvalue(res, j, MET_LABEL), 0);
			ehi_sb_puts(out, j == i - 1 ? "\"}" : "\"");
		}
		ehi_sb_printf(out, " %s\n", prometheus_value(PQgetvalue(res, first, MET_VALUE)));
	}
}

/* metrics: eventhub.metrics() in Prometheus' text exposition format. */
static int
run_metrics(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	PGresult   *res;
	ehi_strbuf	out = {0};

	if (!conn)
		return 1;
	res = PQexec(conn, METRICS_SQL);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("metrics failed", res, conn);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	format_metrics(res, &out);
	PQclear(res);
	PQfinish(conn);
	if (out.oom)
	{
		ehi_sb_free(&out);
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	if (out.len)
		fwrite(out.data, 1, out.len, stdout);
	ehi_sb_free(&out);
	return 0;
}

int
main(int argc, char **argv)
{
	cli_options o;
	char		err[256];
	int			status;

	/* Every command prints: a closed standard output is an error at once. */
	if (open_standard_fds())
	{
		fprintf(stderr, "eventhub: could not write to standard output: %s\n", strerror(EBADF));
		return 1;
	}
	if (argc == 2 && strcmp(argv[1], "--version") == 0)
	{
		printf("eventhub %s\n", eh_version());
		return 0;
	}
	if (cli_parse(argc, argv, &o, err, sizeof(err)) != 0)
	{
		report("", err);
		fprintf(stderr, "Try \"eventhub%s%s --help\".\n", o.command ? " " : "", cli_command_name(o.command));
		return EXIT_USAGE;
	}
	if (o.help)
	{
		fputs(cli_usage(o.command), stdout);
		return 0;
	}

	if (handle_signals(o.command) != 0)
	{
		fprintf(stderr, "eventhub: could not set up signal handling: %s\n", strerror(errno));
		return 1;
	}

	switch (o.command)
	{
		case CMD_PUBLISH:
			status = run_publish(&o);
			break;
		case CMD_WATCH:
		case CMD_GET:
			status = run_watch(&o);
			break;
		case CMD_STATUS:
			status = run_status(&o);
			break;
		case CMD_CLEANUP:
			status = run_cleanup(&o);
			break;
		case CMD_METRICS:
			status = run_metrics(&o);
			break;
		default:
			status = EXIT_USAGE;
			break;
	}
	/* What a command printed last may still wait in the buffer. */
	if ((fflush(stdout) != 0 || ferror(stdout)) && status == 0)
		status = errno == EPIPE ? EXIT_PIPE : 1;
	return status;
}
