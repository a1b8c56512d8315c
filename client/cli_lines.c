/*
 * cli_lines.c: the lines watch and get print from the client's callbacks,
 * and how they reach standard output: a callback's lines together, never
 * blocking a stop.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

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

/*
 * A transaction's events (or a part of one over the batch limits), one
 * line each.  --count stops only at a transaction's end.  Once signalled,
 * nothing more.
 */
int
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

/*
 * A snapshot: watch prints its begin line, its entities, its end line (or
 * abort); get the entities and the end line, and then it is done (an
 * abort ends it too).  Once signalled, nothing more.
 */
void
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
void
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
	print_resync_line(out, org, reason, head, version);
	if (!end_lines(w, out))
		w->cut = 1;
}
