/*
 * cli_watch.c: `eventhub watch` and `eventhub get` (a snapshot of one
 * organization, with the same client and loop, that ends once complete):
 * the client's set-up, its event loop in named steps, --metrics-file.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

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


/* What watch's steps share: the options, the client, what it printed, when. */
typedef struct watch_run
{
	const cli_options *o;
	eh_client  *c;
	watch_state w;
	double		deadline;		/* --timeout's end; -1: none */
	double		metrics_interval;	/* --metrics-interval, in seconds */
	double		next_metrics;	/* when the metrics file is written next */
	int			metrics_failing;	/* the last write of the metrics file failed */
} watch_run;

/* Where the organizations given start: a snapshot, a revision or the head. */
static int64_t
start_from(const cli_options *o)
{
	return o->command == CMD_GET || o->snapshot ? EH_FROM_SNAPSHOT : o->after >= 0 ? o->after : EH_FROM_HEAD;
}

/*
 * The client's callbacks and settings, --all included.  Returns -1, or
 * EXIT_USAGE when the library refuses one (said on stderr).
 */
static int
configure_client(eh_client *c, const cli_options *o, watch_state *w)
{
	int			get = o->command == CMD_GET;

	eh_set_transaction_callback(c, print_transaction, w);
	/* get has no resync callback: an incomplete state (ZE004) ends it */
	if (!get)
		eh_set_resync_callback(c, print_resync, w);
	if (start_from(o) == EH_FROM_SNAPSHOT)
		eh_set_snapshot_callback(c, print_snapshot, w);
	eh_set_log_callback(c, log_to_stderr, NULL);
	if (o->no_listen || get)
		eh_set_listen(c, 0);
	if (o->poll_interval_ms)
		eh_set_poll_interval(c, o->poll_interval_ms);
	if (o->fallback_poll_interval_ms)
		eh_set_fallback_poll_interval(c, o->fallback_poll_interval_ms);
	if ((o->batch_bytes && eh_set_batch_bytes(c, o->batch_bytes) != EH_OK) ||
		(o->query_timeout_ms && eh_set_query_timeout(c, o->query_timeout_ms) != EH_OK) ||
		(o->reconnect_backoff_ms &&
		 eh_set_reconnect_backoff(c, o->reconnect_backoff_ms < 100 ? o->reconnect_backoff_ms : 100,
								  o->reconnect_backoff_ms) != EH_OK) ||
		(o->all && eh_subscribe_all(c, o->snapshot ? EH_FROM_SNAPSHOT : o->after == 0 ? 0 : EH_FROM_HEAD) != EH_OK))
	{
		report("", eh_error_message(c));
		return EXIT_USAGE;
	}
	return -1;
}

/*
 * The replica the client reports as, and the organizations it follows.
 * Returns -1, or the exit status of a refusal (said on stderr).
 */
static int
join_organizations(eh_client *c, const cli_options *o)
{
	if (o->replica_id &&
		(eh_set_replica(c, o->replica_id, o->labels, EVENTHUB_VERSION) != EH_OK ||
		 (o->heartbeat_interval_ms && eh_set_heartbeat_interval(c, o->heartbeat_interval_ms) != EH_OK) ||
		 (o->heartbeat_conninfo && eh_set_heartbeat_conninfo(c, o->heartbeat_conninfo) != EH_OK)))
	{
		report("", eh_error_message(c));
		return 1;
	}
	for (int i = 0; i < o->norgs; i++)
		if (eh_subscribe_at(c, o->orgs[i], start_from(o), o->after_version) != EH_OK)
		{
			report("", eh_error_message(c));
			return EXIT_USAGE;
		}
	return -1;
}

/*
 * Sets the client up, writes the first metrics file and connects.
 * Returns -1 to watch, or the exit status of what failed (said on stderr).
 */
static int
watch_start(watch_run *r)
{
	const cli_options *o = r->o;
	char		err[1024];
	int			status;

	r->w.get = o->command == CMD_GET;
	r->w.limit = o->count;
	r->metrics_interval = o->metrics_interval_s > 0 ? o->metrics_interval_s : 10;
	if ((status = configure_client(r->c, o, &r->w)) >= 0 || (status = join_organizations(r->c, o)) >= 0)
		return status;

	/* A metrics file that cannot be written is said now, before watching. */
	if (o->metrics_file)
	{
		if (write_metrics_file(r->c, o->metrics_file, err, sizeof(err)) != 0)
		{
			report("--metrics-file: ", err);
			return 1;
		}
		r->next_metrics = now_seconds() + r->metrics_interval;
	}

	/*
	 * A first connection that fails is retried like any later one (the
	 * library says so on stderr), unless a retry cannot help: a refused
	 * login, a database that does not exist.
	 */
	if (eh_connect(r->c) != EH_OK && !eh_error_retryable(r->c))
	{
		report("", eh_error_message(r->c));
		return 1;
	}
	return -1;
}

/*
 * What a round of eh_process() (n, its result) means for watch: -1 to go
 * on, or the exit status to end with.
 */
static int
round_result(watch_run *r, int n)
{
	watch_state *w = &r->w;

	if (w->write_errno)
	{
		/* Nobody reads: end as on SIGTERM, quietly for a closed pipe. */
		if (w->write_errno != EPIPE)
			fprintf(stderr, "eventhub: could not write to standard output: %s\n", strerror(w->write_errno));
		return w->write_errno == EPIPE ? EXIT_PIPE : 1;
	}
	if (w->get && (w->done || w->aborted || (n < 0 && strcmp(eh_error_sqlstate(r->c), "ZE004") == 0)))
	{
		/* Complete, or a state that a retry cannot complete: done either way. */
		if (w->aborted)
			report("", "the snapshot was interrupted (the connection was lost, or the head moved); run get again");
		else if (!w->done)
			report("", eh_error_message(r->c));
		return w->done ? 0 : 1;
	}

	/*
	 * A refusal that a retry can fix (a lock or statement timeout, the
	 * extension being reinstalled) is ridden out: the client retries with
	 * backoff.  One that it cannot (authentication, a missing privilege, a
	 * bad argument) ends watch.
	 */
	if (n < 0 && n != EH_ERR_MEMORY && eh_error_retryable(r->c))
	{
		fputs("eventhub: warning: ", stderr);
		cli_put_escaped(stderr, eh_error_message(r->c), 0);
		fputs(" (retrying)\n", stderr);
	}
	else if (n < 0)
	{
		report("", eh_error_message(r->c));
		return 1;
	}
	if (w->limit > 0 && w->seen >= w->limit)
		return 0;
	return -1;
}

/*
 * --metrics-file: writes the file when it is due and shortens *wait (ms,
 * -1: none) to the next time.  A failure is said once, until a write
 * succeeds again; watch goes on.
 */
static void
metrics_tick(watch_run *r, int *wait)
{
	char		err[1024];
	double		now;
	int			until;

	if (!r->o->metrics_file)
		return;
	now = now_seconds();
	if (now >= r->next_metrics)
	{
		if (write_metrics_file(r->c, r->o->metrics_file, err, sizeof(err)) != 0)
		{
			if (!r->metrics_failing)
				report("warning: --metrics-file: ", err);
			r->metrics_failing = 1;
		}
		else
			r->metrics_failing = 0;
		r->next_metrics = now + r->metrics_interval;
	}
	until = (int) ((r->next_metrics - now) * 1000) + 1;
	if (*wait < 0 || until < *wait)
		*wait = until;
}

/*
 * --timeout: EXIT_TIMEOUT once it has passed (said on stderr); otherwise
 * shortens *wait to it and returns -1.
 */
static int
deadline_wait(watch_run *r, int *wait)
{
	double		left;

	if (r->deadline < 0)
		return -1;
	left = r->deadline - now_seconds();
	if (left <= 0)
	{
		fprintf(stderr, "eventhub: timeout after %g s with %lld events\n",
				r->o->timeout_s, (long long) r->w.seen);
		return EXIT_TIMEOUT;
	}
	if (*wait < 0 || left * 1000 < *wait)
		*wait = (int) (left * 1000) + 1;
	return -1;
}

/*
 * Waits up to wait ms (-1: no limit) on the client's sockets, the signal
 * pipe and stdout.  Returns -1, or the exit status when the wait failed
 * or stdout's reader is gone.
 */
static int
wait_ready(eh_client *c, int wait)
{
	struct pollfd fds[2 + EH_MAX_SOCKETS];
	int			sockets[EH_MAX_SOCKETS];
	int			wants[EH_MAX_SOCKETS];
	int			nfds;

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
		return 1;
	}
	if (!signalled && (fds[1].revents & (POLLERR | POLLHUP)))
		return EXIT_PIPE;		/* the next line would fail with EPIPE: end now, not then */
	return -1;
}

/*
 * The client's own event-loop interface: wait on its sockets, the signal
 * pipe and its next timer, then let it process what is ready.  Returns
 * the exit status (0 when a signal ended it).
 */
static int
watch_loop(watch_run *r)
{
	int			status = -1;

	while (!signalled && status < 0)
	{
		int			n = eh_process(r->c);
		int			wait;

		/* SIGINT, SIGTERM: stop now, quietly, whatever the round found */
		if (signalled)
			break;
		if ((status = round_result(r, n)) >= 0)
			break;
		wait = eh_timeout_ms(r->c);
		metrics_tick(r, &wait);
		if ((status = deadline_wait(r, &wait)) >= 0)
			break;
		status = wait_ready(r->c, wait);
	}
	return status < 0 ? 0 : status;
}

/*
 * Ends watch: the last metrics (the file's mtime then stops moving),
 * unless lines the client counts as delivered were not written; a short
 * deregistration after a signal.  Returns the exit status.
 */
static int
watch_finish(watch_run *r, int status)
{
	char		err[1024];

	if (r->o->metrics_file && !r->w.cut && write_metrics_file(r->c, r->o->metrics_file, err, sizeof(err)) != 0 &&
		!signalled)
		report("warning: --metrics-file: ", err);
	if (signalled)
		eh_set_close_timeout(r->c, STOP_CLOSE_MS);
	eh_client_free(r->c);		/* deregisters the replica */
	return signalled ? EXIT_INTERRUPTED : status;
}

/* watch and get: follows the organizations, printing a line an event. */
int
run_watch(const cli_options *o)
{
	watch_run	r = {.o = o, .deadline = o->timeout_s > 0 ? now_seconds() + o->timeout_s : -1};
	int			status;

	if (!(r.c = eh_client_new(o->conninfo)))
	{
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	if ((status = watch_start(&r)) >= 0)
	{
		eh_client_free(r.c);
		return status;
	}
	return watch_finish(&r, watch_loop(&r));
}
