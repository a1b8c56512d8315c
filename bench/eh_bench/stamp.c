/*
 * stamp.c: eh_bench's latencies of other programs' output: the lines of
 * watch processes as they arrive (stamp) and pgbench's logs (pctl).
 */
#include "eh_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * One FIFO being read: what it has sent of its current line, its lines, and
 * the revisions it printed.  The warm-up's revision is BASE; the events
 * expected are BASE + 1 to BASE + LINES, SEEN marks those printed.
 */
typedef struct stamp_stream
{
	int			fd;
	char		buf[65536];
	size_t		len;
	long long	lines;
	long long	base;			/* the warm-up's revision */
	long long	high;			/* the highest revision printed */
	long long	distinct;		/* expected revisions printed */
	long long	duplicated;		/* lines of a revision printed before */
	long long	reordered;		/* lines below a revision printed before */
	char	   *seen;			/* [i]: revision BASE + i printed */
} stamp_stream;

/*
 * Per stream, the expected events not printed (missing), the lines of a
 * revision printed before (duplicated) and the lines that came after a
 * higher revision (reordered), summed; the streams with any go to stderr.
 * Returns whether there were none.
 */
static int
stamp_order_report(const char *prefix, stamp_stream *streams, int nfifos, char **fifos,
				   long long expect, int with_missing)
{
	long long	missing = 0,
				duplicated = 0,
				reordered = 0;

	for (int i = 0; i < nfifos; i++)
	{
		stamp_stream *s = &streams[i];
		long long	m = with_missing ? expect - s->distinct : 0;

		if (m || s->duplicated || s->reordered)
			fprintf(stderr, "eh_bench: %s: missing=%lld duplicated=%lld reordered=%lld\n",
					fifos[i], m, s->duplicated, s->reordered);
		missing += m;
		duplicated += s->duplicated;
		reordered += s->reordered;
	}
	printf("%s", prefix);
	if (with_missing)
		printf("missing=%lld ", missing);
	printf("duplicated=%lld reordered=%lld", duplicated, reordered);
	return missing + duplicated + reordered == 0;
}

/* What the streams have brought so far. */
typedef struct stamp_state
{
	double	   *lat;			/* latencies, ms */
	size_t		n,
				cap;
	long long	expect;			/* events expected per stream */
	int			ready;			/* streams that printed the warm-up */
	int			complete;		/* streams that printed every event */
	long long	disorder;		/* duplicated + reordered lines, when reported */
} stamp_state;

/* The duplicated and reordered lines of the NFIFOS STREAMS. */
static long long
stamp_disorder(const stamp_stream *streams, int nfifos)
{
	long long	d = 0;

	for (int i = 0; i < nfifos; i++)
		d += streams[i].duplicated + streams[i].reordered;
	return d;
}

/*
 * The latencies to LAT_FILE, the percentiles and the order of the streams'
 * lines to stdout; then DONE_FILE.
 */
static void
stamp_report(stamp_state *st, stamp_stream *streams, int nfifos, char **fifos,
			 const char *lat_file, const char *done_file)
{
	write_values(lat_file, st->lat, st->n);
	print_pcts(st->lat, st->n);
	printf(" streams=%d complete=%d ", nfifos, st->complete);
	stamp_order_report("", streams, nfifos, fifos, st->expect, 1);
	printf("\n");
	fflush(stdout);
	st->disorder = stamp_disorder(streams, nfifos);
	touch(done_file);
}

/*
 * Revision REV printed on stream S after its warm-up: counts it as expected
 * (once), duplicated or reordered.
 */
static void
stamp_revision(stamp_stream *s, long long rev, long long expect)
{
	long long	i = rev - s->base;

	if (i <= 0 || (i <= expect && s->seen[i]))
		s->duplicated++;
	else if (rev < s->high)
		s->reordered++;
	if (i > 0 && i <= expect && !s->seen[i])
	{
		s->seen[i] = 1;
		s->distinct++;
	}
	if (rev > s->high)
		s->high = rev;
}

/*
 * One line of a stream, stamped at T: the first (the warm-up) counts toward
 * READY, the others' latencies go into the state.
 */
static void
stamp_line(stamp_stream *s, const char *line, double t, stamp_state *st)
{
	const char *key = "\"processed_timestamp\": \"";
	const char *p = strstr(line, key);
	const char *r = strstr(line, "\"revision\": ");
	long long	rev;
	double		pts;

	if (!p)
		return;					/* a resync line or the like: not an event */
	if (!r)
		die("a line without its revision: %s", line);
	rev = atoll(r + strlen("\"revision\": "));
	if (s->lines++ == 0)
	{
		s->base = s->high = rev;
		return;
	}
	stamp_revision(s, rev, st->expect);
	pts = parse_ts(p + strlen(key));
	if (pts < 0)
		die("unreadable line: %s", line);
	append_value(&st->lat, &st->n, &st->cap, (t - pts) * 1000.0);
}

/*
 * Reads what stream S has and stamps its whole lines; creates READY_FILE
 * when the last of NFIFOS streams prints its warm-up.  Returns 0 (and
 * closes S) at its end.
 */
static int
stamp_read(stamp_stream *s, stamp_state *st, int nfifos, long long expect, const char *ready_file)
{
	ssize_t		got = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
	double		t = now_s(CLOCK_REALTIME);
	char	   *start,
			   *nl;

	if (got <= 0)
	{
		close(s->fd);
		s->fd = -1;
		return 0;
	}
	s->len += got;
	start = s->buf;
	while ((nl = memchr(start, '\n', s->buf + s->len - start)) != NULL)
	{
		long long	before = s->lines,
					had = s->distinct;

		*nl = '\0';
		stamp_line(s, start, t, st);
		if (before == 0 && s->lines == 1 && ++st->ready == nfifos)
			touch(ready_file);
		if (had < expect && s->distinct == expect)
			st->complete++;
		start = nl + 1;
	}
	s->len -= start - s->buf;
	memmove(s->buf, start, s->len);
	if (s->len == sizeof(s->buf))
		die("%s", "a line longer than 64 kB");
	return 1;
}

/*
 * eh_bench stamp -e LINES [-r READY_FILE] [-D DONE_FILE] [-L LATENCY_FILE] [-t DRAIN_S] FIFO...
 *     Reads the output of `eventhub watch` processes, one FIFO each, and
 *     stamps every line as it arrives (CLOCK_REALTIME): latency = arrival
 *     - the line's processed_timestamp.  Each stream's first line is the
 *     warm-up event (not counted): once every stream has printed it,
 *     READY_FILE is created.  Ends when every stream has LINES more lines
 *     (or DRAIN_S seconds without a line): prints the percentiles and
 *     creates DONE_FILE (-D), then reads on until every writer has closed
 *     its FIFO (a watcher whose output is gone stops at once, which
 *     the caller's CPU reading must come before).
 *
 *     Every stream must print the revisions after its warm-up's, each once
 *     and in order: the report counts, over the streams, the expected
 *     events not printed (missing=), the lines of a revision printed before
 *     (duplicated=) and the lines below a revision printed before
 *     (reordered=), and names the streams with any on stderr.  Lines that
 *     come after the report are counted too: a line "late: duplicated=N
 *     reordered=N" at the end when there were any.
 */
int
run_stamp(int nfifos, char **fifos, long long expect, double drain_s,
		  const char *ready_file, const char *done_file, const char *lat_file)
{
	stamp_stream *streams = calloc(nfifos, sizeof(stamp_stream));
	struct pollfd *pfd = calloc(nfifos, sizeof(struct pollfd));
	stamp_state st = {0};
	int			open_streams = nfifos,
				reported = 0;

	if (!streams || !pfd)
		die("%s", "out of memory");
	st.expect = expect;
	for (int i = 0; i < nfifos; i++)
		if (!(streams[i].seen = calloc(expect + 1, 1)))
			die("%s", "out of memory");
	/* Blocking opens: each writer (a watch process) is already waiting in its own. */
	for (int i = 0; i < nfifos; i++)
	{
		streams[i].fd = open(fifos[i], O_RDONLY);
		if (streams[i].fd < 0)
			die("cannot open %s", fifos[i]);
	}
	while (open_streams > 0)
	{
		int			r;

		for (int i = 0; i < nfifos; i++)
		{
			pfd[i].fd = streams[i].fd;
			pfd[i].events = POLLIN;
		}
		r = poll(pfd, nfifos, reported ? -1 : (int) (drain_s * 1000));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("%s", "poll failed");
		if (r == 0)
		{
			fprintf(stderr, "eh_bench: no line for %.0f s; %d of %d streams complete\n",
					drain_s, st.complete, nfifos);
			break;
		}
		for (int i = 0; i < nfifos; i++)
			if (pfd[i].revents && streams[i].fd >= 0 &&
				!stamp_read(&streams[i], &st, nfifos, expect, ready_file))
				open_streams--;
		if (st.complete == nfifos && !reported)
		{
			stamp_report(&st, streams, nfifos, fifos, lat_file, done_file);
			reported = 1;
		}
	}
	if (!reported)
		stamp_report(&st, streams, nfifos, fifos, lat_file, NULL);
	else if (stamp_disorder(streams, nfifos) > st.disorder)
	{
		stamp_order_report("late: ", streams, nfifos, fifos, expect, 0);
		printf("\n");
	}
	free(st.lat);
	for (int i = 0; i < nfifos; i++)
		free(streams[i].seen);
	free(streams);
	free(pfd);
	return st.complete == nfifos ? 0 : 1;
}

/*
 * eh_bench pctl [-f FROM_EPOCH_S] [-u UNTIL_EPOCH_S] PGBENCH_LOG...
 *     Percentiles of the latencies in pgbench -l logs, optionally only
 *     for transactions that completed within [FROM, UNTIL].  A log's
 *     last line without its newline (pgbench ended by a signal) is
 *     skipped.
 *
 * pgbench -l lines: client_id transaction_no time_us script_no epoch_s
 * epoch_us [schedule_lag_us].  With -R, time_us counts from the scheduled
 * start, so it includes the schedule lag.
 */
int
run_pctl(int nfiles, char **files, double from, double until)
{
	double	   *v = NULL;
	size_t		n = 0,
				cap = 0;

	for (int i = 0; i < nfiles; i++)
	{
		FILE	   *f = fopen(files[i], "r");
		char		line[256];

		if (!f)
			die("cannot open %s", files[i]);
		while (fgets(line, sizeof(line), f))
		{
			long		client,
						xact,
						script;
			double		lat_us;
			long long	es,
						eus;
			double		t;

			/* A last line cut short (pgbench ended by a signal): skipped. */
			if (strchr(line, '\n') == NULL)
				continue;
			if (sscanf(line, "%ld %ld %lf %ld %lld %lld", &client, &xact, &lat_us, &script, &es, &eus) != 6)
				continue;		/* "skipped" transactions and the like */
			t = es + eus / 1e6;
			if ((from > 0 && t < from) || (until > 0 && t > until))
				continue;
			append_value(&v, &n, &cap, lat_us / 1000.0);
		}
		fclose(f);
	}
	print_pcts(v, n);
	printf("\n");
	free(v);
	return n > 0 ? 0 : 1;
}
