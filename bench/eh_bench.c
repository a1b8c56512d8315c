/*
 * eh_bench.c: subscriber-side measurements for bench/run.sh.
 *
 *   eh_bench sub -o ORG -n CLIENTS [-l 0|1] [-p POLL_MS] [-r READY_FILE]
 *                [-L LATENCY_FILE] [-t DRAIN_S]
 *       Starts CLIENTS threads, each with its own eh_client (own connection)
 *       following ORG from its head.  When every client has seen the head
 *       (and, with -l 1, listens) it creates READY_FILE, then reads the
 *       target head revision from stdin (one line); each client runs until
 *       its cursor reaches it (or DRAIN_S seconds after the target
 *       arrived).  Latency of an event = callback time (CLOCK_REALTIME) -
 *       processed_timestamp.  LATENCY_FILE gets every latency in ms, one a
 *       line.
 *
 *   eh_bench stamp -e LINES [-r READY_FILE] [-D DONE_FILE] [-L LATENCY_FILE] [-t DRAIN_S] FIFO...
 *       Reads the output of `eventhub watch` processes, one FIFO each, and
 *       stamps every line as it arrives (CLOCK_REALTIME): latency = arrival
 *       - the line's processed_timestamp.  Each stream's first line is the
 *       warm-up event (not counted): once every stream has printed it,
 *       READY_FILE is created.  Ends when every stream has LINES more lines
 *       (or DRAIN_S seconds without a line): prints the percentiles and
 *       creates DONE_FILE (-D), then reads on until every writer has closed
 *       its FIFO (a watcher whose output is gone stops at once, which
 *       the caller's CPU reading must come before).
 *
 *   eh_bench catchup -o ORG -e EXPECT
 *       One client following ORG from revision 0 until its cursor is EXPECT:
 *       events per second and peak RSS (getrusage ru_maxrss).
 *
 *   eh_bench listen -n CONNS [-l 0|1] [-r READY_FILE]
 *       CONNS plain libpq connections that LISTEN eventhub and consume
 *       notifications, nothing else, until stdin reaches end of file.
 *       With -l 0 they do not LISTEN: idle connections, for the cost of
 *       the connections apart from the cost of listening.
 *
 *   eh_bench pctl [-f FROM_EPOCH_S] [-u UNTIL_EPOCH_S] PGBENCH_LOG...
 *       Percentiles of the latencies in pgbench -l logs, optionally only
 *       for transactions that completed within [FROM, UNTIL].  A log's
 *       last line without its newline (pgbench ended by a signal) is
 *       skipped.
 *
 *   eh_bench select -o ORG -e EXPECT [-c FETCH] [-s]
 *       The baseline of a snapshot: the organization's rows of
 *       eventhub.events (the snapshot's columns) streamed to this client in
 *       one REPEATABLE READ, READ ONLY transaction, in single-row mode, or
 *       with -c through a cursor FETCH rows at a time; with -s in the
 *       snapshot's order (ORDER BY event_type, entity_id).
 *
 *   eh_bench snapshot-sql -o ORG -e EXPECT [-P PAGE]
 *       A snapshot through the SQL functions, as the library reads one:
 *       snapshot_head, then pages of PAGE entities of snapshot_entities
 *       keyed by the previous page's last (event_type, entity_id), in one
 *       REPEATABLE READ, READ ONLY transaction.
 *
 *   eh_bench snapshot -o ORG -e EXPECT [-P PAGE]
 *       The same through the library: eh_subscribe with EH_FROM_SNAPSHOT
 *       (batch size PAGE), counting the snapshot callback's entities until
 *       its END; seconds count from its BEGIN (after snapshot_head) to its
 *       END, not the client's start-up (connections, LISTEN, its probe).
 *
 *   select, snapshot-sql and snapshot print rows, seconds, rows_per_s, the client's
 *   peak RSS (maxrss_kb), the server backend's pid and its peak anonymous
 *   memory (backend_rss_anon_kb: RssAnon of /proc/PID/status, sampled
 *   every 10 ms from connection to the last row; backend_rss_anon_start_kb
 *   is the first sample).  Both read every column's text, as an
 *   application would.  EXPECT is the number of rows; another count fails.
 *
 * Each mode prints one line of key=value pairs on stdout (milliseconds,
 * seconds, kB).  Connections use libpq's environment (PGHOST, PGPORT...).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "eventhub.h"

static double
now_s(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
die(const char *fmt, const char *arg)
{
	fprintf(stderr, "eh_bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(1);
}

static void *
xrealloc(void *p, size_t n)
{
	void	   *q = realloc(p, n);

	if (!q)
		die("%s", "out of memory");
	return q;
}

/* "2026-01-02T03:04:05.123456Z" to seconds since the epoch; -1 if malformed. */
static double
parse_ts(const char *s)
{
	struct tm	tm;
	int			usec = 0;
	char		frac[8] = "";

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%6[0-9]", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, frac) < 6)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	if (frac[0])
	{
		size_t		len = strlen(frac);

		usec = atoi(frac);
		for (; len < 6; len++)
			usec *= 10;
	}
	return (double) timegm(&tm) + usec / 1e6;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double
pct(const double *v, size_t n, double p)
{
	size_t		rank;

	if (n == 0)
		return 0;
	rank = (size_t) (p / 100.0 * n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

static void
print_pcts(double *v, size_t n)
{
	qsort(v, n, sizeof(double), cmp_double);
	printf("count=%zu p50=%.3f p95=%.3f p99=%.3f max=%.3f", n, pct(v, n, 50), pct(v, n, 95),
		   pct(v, n, 99), n ? v[n - 1] : 0.0);
}

static void
touch(const char *path)
{
	FILE	   *f;

	if (!path)
		return;
	f = fopen(path, "w");
	if (!f)
		die("cannot create %s", path);
	fputs("ready\n", f);
	fclose(f);
}

/* ---------------------------------------------------------------- sub */

typedef struct sub_thread
{
	pthread_t	thread;
	eh_client  *client;
	double	   *lat;			/* ms */
	size_t		n,
				cap;
	int64_t		start_cursor;
	int			failed;
	uint64_t	polls_ready,
				polls_end;
	uint64_t	notes_ready,
				notes_end;
	uint64_t	fetches_ready,
				fetches_end;
	double		t_ready;		/* CLOCK_MONOTONIC */
	double		t_end;
} sub_thread;

static const char *sub_org;
static int	sub_listen = 1;
static int	sub_poll_ms = 5000;
static double sub_drain_s = 30;
static atomic_int sub_ready;
static atomic_llong sub_target;	/* 0 until known; -2 to abort */
static double sub_target_at;	/* CLOCK_MONOTONIC when the target came */
static pthread_mutex_t sub_lock = PTHREAD_MUTEX_INITIALIZER;

static int
sub_on_event(eh_client *client, const eh_event *ev, void *arg)
{
	sub_thread *t = arg;
	double		ts = parse_ts(ev->processed_timestamp);

	(void) client;
	if (t->n == t->cap)
	{
		t->cap = t->cap ? t->cap * 2 : 1024;
		t->lat = xrealloc(t->lat, t->cap * sizeof(double));
	}
	t->lat[t->n++] = ts < 0 ? -1 : (now_s(CLOCK_REALTIME) - ts) * 1000.0;
	return 0;
}

static void *
sub_main(void *arg)
{
	sub_thread *t = arg;
	eh_client  *c = t->client;
	double		deadline = now_s(CLOCK_MONOTONIC) + 60;
	long long	target;

	if (eh_connect(c) != EH_OK)
		fprintf(stderr, "eh_bench: connect: %s (retrying)\n", eh_error_message(c));
	/* Ready: at the head, and listening unless told not to. */
	while (eh_cursor(c, sub_org) < 0 || (sub_listen && !eh_is_listening(c)))
	{
		if (now_s(CLOCK_MONOTONIC) > deadline || atomic_load(&sub_target) == -2)
		{
			t->failed = 1;
			atomic_fetch_add(&sub_ready, 1);
			return NULL;
		}
		if (eh_wait(c, 50) < 0)
			fprintf(stderr, "eh_bench: %s\n", eh_error_message(c));
	}
	t->start_cursor = eh_cursor(c, sub_org);
	t->polls_ready = eh_stat(c, EH_STAT_POLLS);
	t->notes_ready = eh_stat(c, EH_STAT_NOTIFICATIONS);
	t->fetches_ready = eh_stat(c, EH_STAT_FETCHES);
	t->t_ready = now_s(CLOCK_MONOTONIC);
	atomic_fetch_add(&sub_ready, 1);

	for (;;)
	{
		target = atomic_load(&sub_target);
		if (target == -2)
			break;
		if (target > 0)
		{
			double		started;

			if (eh_cursor(c, sub_org) >= target)
				break;
			pthread_mutex_lock(&sub_lock);
			started = sub_target_at;
			pthread_mutex_unlock(&sub_lock);
			if (now_s(CLOCK_MONOTONIC) > started + sub_drain_s)
			{
				t->failed = 1;
				break;
			}
		}
		if (eh_wait(c, 50) < 0)
			fprintf(stderr, "eh_bench: %s\n", eh_error_message(c));
	}
	t->polls_end = eh_stat(c, EH_STAT_POLLS);
	t->notes_end = eh_stat(c, EH_STAT_NOTIFICATIONS);
	t->fetches_end = eh_stat(c, EH_STAT_FETCHES);
	t->t_end = now_s(CLOCK_MONOTONIC);
	return NULL;
}

static int
run_sub(int n, const char *ready_file, const char *lat_file)
{
	sub_thread *threads = calloc(n, sizeof(sub_thread));
	char		line[64];
	double		t_ready,
				t_end;
	size_t		total = 0;
	double	   *all;
	uint64_t	polls = 0,
				notes = 0,
				fetches = 0;
	double		poll_rate = 0;
	long long	target = -2;
	long long	expected = 0;
	int			failed = 0;

	if (!threads)
		die("%s", "out of memory");
	for (int i = 0; i < n; i++)
	{
		eh_client  *c = eh_client_new(NULL);

		if (!c)
			die("%s", "out of memory");
		threads[i].client = c;
		eh_set_event_callback(c, sub_on_event, &threads[i]);
		eh_set_listen(c, sub_listen);
		eh_set_poll_interval(c, sub_poll_ms);
		if (eh_subscribe(c, sub_org, EH_FROM_HEAD) != EH_OK)
			die("subscribe: %s", eh_error_message(c));
		if (pthread_create(&threads[i].thread, NULL, sub_main, &threads[i]) != 0)
			die("%s", "pthread_create failed");
	}
	while (atomic_load(&sub_ready) < n)
		usleep(10000);
	t_ready = now_s(CLOCK_MONOTONIC);
	touch(ready_file);

	if (fgets(line, sizeof(line), stdin))
		target = atoll(line);
	if (target <= 0)
		target = -2;
	pthread_mutex_lock(&sub_lock);
	sub_target_at = now_s(CLOCK_MONOTONIC);
	pthread_mutex_unlock(&sub_lock);
	atomic_store(&sub_target, target);

	for (int i = 0; i < n; i++)
		pthread_join(threads[i].thread, NULL);
	t_end = now_s(CLOCK_MONOTONIC);

	for (int i = 0; i < n; i++)
		total += threads[i].n;
	all = xrealloc(NULL, (total ? total : 1) * sizeof(double));
	total = 0;
	for (int i = 0; i < n; i++)
	{
		sub_thread *t = &threads[i];

		memcpy(all + total, t->lat, t->n * sizeof(double));
		total += t->n;
		polls += t->polls_end - t->polls_ready;
		if (t->t_end > t->t_ready)
			poll_rate += (t->polls_end - t->polls_ready) / (t->t_end - t->t_ready);
		notes += t->notes_end - t->notes_ready;
		fetches += t->fetches_end - t->fetches_ready;
		failed += t->failed;
		if (target > 0)
			expected += target - t->start_cursor;
		free(t->lat);
		eh_client_free(t->client);
	}
	if (lat_file)
	{
		FILE	   *f = fopen(lat_file, "w");

		if (!f)
			die("cannot create %s", lat_file);
		for (size_t i = 0; i < total; i++)
			fprintf(f, "%.3f\n", all[i]);
		fclose(f);
	}
	print_pcts(all, total);
	printf(" clients=%d expected=%lld failed=%d polls=%llu notifications=%llu fetches=%llu"
		   " window_s=%.3f polls_per_s=%.2f\n",
		   n, expected, failed, (unsigned long long) polls, (unsigned long long) notes,
		   (unsigned long long) fetches, t_end - t_ready, poll_rate);
	free(all);
	free(threads);
	return failed || (long long) total != expected || target < 0 ? 1 : 0;
}

/* ------------------------------------------------------------ catchup */

static int
count_event(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) ev;
	(*(long long *) arg)++;
	return 0;
}

static int
run_catchup(const char *org, long long expect)
{
	eh_client  *c = eh_client_new(NULL);
	long long	got = 0;
	double		t0,
				t1;
	struct rusage ru;

	if (!c)
		die("%s", "out of memory");
	eh_set_event_callback(c, count_event, &got);
	if (eh_subscribe(c, org, 0) != EH_OK)
		die("subscribe: %s", eh_error_message(c));
	t0 = now_s(CLOCK_MONOTONIC);
	if (eh_connect(c) != EH_OK)
		fprintf(stderr, "eh_bench: connect: %s (retrying)\n", eh_error_message(c));
	while (eh_cursor(c, org) < expect)
	{
		if (now_s(CLOCK_MONOTONIC) - t0 > 300)
			die("%s", "catch-up did not finish within 300 s");
		if (eh_wait(c, 100) < 0)
			die("%s", eh_error_message(c));
	}
	t1 = now_s(CLOCK_MONOTONIC);
	getrusage(RUSAGE_SELF, &ru);
	printf("events=%lld seconds=%.3f events_per_s=%.0f maxrss_kb=%ld\n",
		   got, t1 - t0, got / (t1 - t0), ru.ru_maxrss);
	eh_client_free(c);
	return got == expect ? 0 : 1;
}

/* ------------------------------------------------------------- listen */

static int
run_listen(int n, int listen, const char *ready_file)
{
	PGconn	  **conns = calloc(n, sizeof(PGconn *));
	struct pollfd *pfd = calloc(n + 1, sizeof(struct pollfd));
	unsigned long long notes = 0;

	if (!conns || !pfd)
		die("%s", "out of memory");
	for (int i = 0; i < n; i++)
	{
		PGresult   *res;

		conns[i] = PQconnectdb("");
		if (PQstatus(conns[i]) != CONNECTION_OK)
			die("connect: %s", PQerrorMessage(conns[i]));
		res = PQexec(conns[i], listen ? "LISTEN eventhub" : "SELECT 1");
		if (PQresultStatus(res) != (listen ? PGRES_COMMAND_OK : PGRES_TUPLES_OK))
			die("LISTEN: %s", PQerrorMessage(conns[i]));
		PQclear(res);
	}
	touch(ready_file);
	for (;;)
	{
		pfd[0].fd = STDIN_FILENO;
		pfd[0].events = POLLIN;
		for (int i = 0; i < n; i++)
		{
			pfd[i + 1].fd = PQsocket(conns[i]);
			pfd[i + 1].events = POLLIN;
		}
		if (poll(pfd, n + 1, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			die("%s", "poll failed");
		}
		if (pfd[0].revents)
		{
			char		buf[256];

			if (read(STDIN_FILENO, buf, sizeof(buf)) <= 0)
				break;
		}
		for (int i = 0; i < n; i++)
		{
			PGnotify   *note;

			if (!pfd[i + 1].revents)
				continue;
			if (!PQconsumeInput(conns[i]))
				die("connection lost: %s", PQerrorMessage(conns[i]));
			while ((note = PQnotifies(conns[i])) != NULL)
			{
				notes++;
				PQfreemem(note);
			}
		}
	}
	for (int i = 0; i < n; i++)
		PQfinish(conns[i]);
	printf("connections=%d notifications=%llu\n", n, notes);
	free(conns);
	free(pfd);
	return 0;
}

/* -------------------------------------------------------------- stamp */

typedef struct stamp_stream
{
	int			fd;
	char		buf[65536];
	size_t		len;
	long long	lines;
} stamp_stream;

/* The latencies to LAT_FILE and the percentiles to stdout; then DONE_FILE. */
static void
stamp_report(double *lat, size_t n, int nfifos, int complete, const char *lat_file,
			 const char *done_file)
{
	if (lat_file)
	{
		FILE	   *lf = fopen(lat_file, "w");

		if (!lf)
			die("cannot create %s", lat_file);
		for (size_t i = 0; i < n; i++)
			fprintf(lf, "%.3f\n", lat[i]);
		fclose(lf);
	}
	print_pcts(lat, n);
	printf(" streams=%d complete=%d\n", nfifos, complete);
	fflush(stdout);
	touch(done_file);
}

/*
 * One line of a stream, stamped at T: the first (the warm-up) counts toward
 * READY, the others' latencies go into LAT.
 */
static void
stamp_line(stamp_stream *s, const char *line, double t, double **lat, size_t *n, size_t *cap)
{
	const char *key = "\"processed_timestamp\": \"";
	const char *p = strstr(line, key);
	double		pts;

	if (!p)
		return;					/* a resync line or the like: not an event */
	if (s->lines++ == 0)
		return;
	pts = parse_ts(p + strlen(key));
	if (pts < 0)
		die("unreadable line: %s", line);
	if (*n == *cap)
	{
		*cap = *cap ? *cap * 2 : 4096;
		*lat = xrealloc(*lat, *cap * sizeof(double));
	}
	(*lat)[(*n)++] = (t - pts) * 1000.0;
}

static int
run_stamp(int nfifos, char **fifos, long long expect, const char *ready_file, const char *done_file,
		  const char *lat_file)
{
	stamp_stream *st = calloc(nfifos, sizeof(stamp_stream));
	struct pollfd *pfd = calloc(nfifos, sizeof(struct pollfd));
	double	   *lat = NULL;
	size_t		n = 0,
				cap = 0;
	int			ready = 0,
				complete = 0,
				open_streams = nfifos,
				reported = 0;

	if (!st || !pfd)
		die("%s", "out of memory");
	/* Blocking opens: each writer (a watch process) is already waiting in its own. */
	for (int i = 0; i < nfifos; i++)
	{
		st[i].fd = open(fifos[i], O_RDONLY);
		if (st[i].fd < 0)
			die("cannot open %s", fifos[i]);
	}
	while (open_streams > 0)
	{
		int			r;

		for (int i = 0; i < nfifos; i++)
		{
			pfd[i].fd = st[i].fd;
			pfd[i].events = POLLIN;
		}
		r = poll(pfd, nfifos, reported ? -1 : (int) (sub_drain_s * 1000));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("%s", "poll failed");
		if (r == 0)
		{
			fprintf(stderr, "eh_bench: no line for %.0f s; %d of %d streams complete\n",
					sub_drain_s, complete, nfifos);
			break;
		}
		for (int i = 0; i < nfifos; i++)
		{
			stamp_stream *s = &st[i];
			ssize_t		got;
			double		t;
			char	   *start,
					   *nl;

			if (!pfd[i].revents || s->fd < 0)
				continue;
			got = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
			t = now_s(CLOCK_REALTIME);
			if (got <= 0)
			{
				close(s->fd);
				s->fd = -1;
				open_streams--;
				continue;
			}
			s->len += got;
			start = s->buf;
			while ((nl = memchr(start, '\n', s->buf + s->len - start)) != NULL)
			{
				long long	before = s->lines;

				*nl = '\0';
				stamp_line(s, start, t, &lat, &n, &cap);
				if (before == 0 && s->lines == 1 && ++ready == nfifos)
					touch(ready_file);
				if (before == expect && s->lines == expect + 1)
					complete++;
				start = nl + 1;
			}
			s->len -= start - s->buf;
			memmove(s->buf, start, s->len);
			if (s->len == sizeof(s->buf))
				die("%s", "a line longer than 64 kB");
		}
		if (complete == nfifos && !reported)
		{
			stamp_report(lat, n, nfifos, complete, lat_file, done_file);
			reported = 1;
		}
	}
	if (!reported)
		stamp_report(lat, n, nfifos, complete, lat_file, NULL);
	free(lat);
	free(st);
	free(pfd);
	return complete == nfifos ? 0 : 1;
}

/* --------------------------------------------------------------- pctl */

/*
 * pgbench -l lines: client_id transaction_no time_us script_no epoch_s
 * epoch_us [schedule_lag_us].  With -R, time_us counts from the scheduled
 * start, so it includes the schedule lag.
 */
static int
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
			if (n == cap)
			{
				cap = cap ? cap * 2 : 4096;
				v = xrealloc(v, cap * sizeof(double));
			}
			v[n++] = lat_us / 1000.0;
		}
		fclose(f);
	}
	print_pcts(v, n);
	printf("\n");
	free(v);
	return n > 0 ? 0 : 1;
}

/* ---------------------------------------------------- backend memory */

/*
 * A thread that samples RssAnon of a server backend every 10 ms.  RssAnon,
 * not VmHWM: a backend's VmHWM counts the shared_buffers pages it touched,
 * which grow with the rows read whatever the backend keeps.
 */
typedef struct mem_sampler
{
	pthread_t	thread;
	atomic_int	pid;			/* 0 until found by application name */
	const char *appname;
	atomic_int	stop;
	long		start_kb;		/* first sample; -1 until read */
	long		peak_kb;
	long		samples;
} mem_sampler;

static long
rss_anon_kb(int pid)
{
	char		path[64],
				line[256];
	FILE	   *f;
	long		kb = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/*
 * The pid of the backend of the session named appname that reads a
 * snapshot (its client may have other sessions); 0 until there is one.
 */
static int
find_backend(PGconn *conn, const char *appname)
{
	const char *params[1] = {appname};
	PGresult   *res = PQexecParams(conn, "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
									" AND query LIKE '%snapshot%' ORDER BY backend_start LIMIT 1",
									1, NULL, params, NULL, NULL, 0);
	int			pid = 0;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		pid = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return pid;
}

static void *
sampler_main(void *arg)
{
	mem_sampler *m = arg;
	PGconn	   *conn = NULL;

	if (m->appname)
	{
		conn = PQconnectdb("");
		if (PQstatus(conn) != CONNECTION_OK)
			die("connect: %s", PQerrorMessage(conn));
	}
	while (!atomic_load(&m->stop))
	{
		long		kb;

		if (atomic_load(&m->pid) == 0)
		{
			int			pid = find_backend(conn, m->appname);

			if (pid == 0)
			{
				usleep(2000);
				continue;
			}
			atomic_store(&m->pid, pid);
		}
		kb = rss_anon_kb(atomic_load(&m->pid));

		if (kb >= 0)
		{
			if (m->start_kb < 0)
				m->start_kb = kb;
			if (kb > m->peak_kb)
				m->peak_kb = kb;
			m->samples++;
		}
		usleep(10000);
	}
	PQfinish(conn);
	return NULL;
}

/* Samples the backend pid, or (pid 0) the one of the session named appname. */
static void
sampler_start(mem_sampler *m, int pid, const char *appname)
{
	memset(m, 0, sizeof(*m));
	m->pid = pid;
	m->appname = appname;
	m->start_kb = -1;
	m->peak_kb = -1;
	if (pthread_create(&m->thread, NULL, sampler_main, m) != 0)
		die("%s", "pthread_create failed");
}

/* Stops the sampler after one last sample. */
static void
sampler_stop(mem_sampler *m)
{
	long		kb = m->pid ? rss_anon_kb(m->pid) : -1;

	atomic_store(&m->stop, 1);
	pthread_join(m->thread, NULL);
	if (kb > m->peak_kb)
		m->peak_kb = kb;
}

/* The line select and snapshot-sql print (snapshot too, with its extras). */
static void
print_read(const char *what, long long rows, double secs, const mem_sampler *m)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	printf("mode=%s rows=%lld seconds=%.3f rows_per_s=%.0f maxrss_kb=%ld backend_pid=%d"
		   " backend_rss_anon_kb=%ld backend_rss_anon_start_kb=%ld samples=%ld",
		   what, rows, secs, rows / secs, ru.ru_maxrss, (int) m->pid, m->peak_kb, m->start_kb, m->samples);
}

/* ------------------------------------------------- select, snapshot-sql */

static PGconn *
connect_plain(void)
{
	PGconn	   *conn = PQconnectdb("");

	if (PQstatus(conn) != CONNECTION_OK)
		die("connect: %s", PQerrorMessage(conn));
	return conn;
}

static void
exec_ok(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die("%s", PQerrorMessage(conn));
	PQclear(res);
}

/* Reads every value of every row, as an application would: total bytes. */
static size_t
touch_rows(const PGresult *res)
{
	size_t		bytes = 0;
	int			nf = PQnfields(res);

	for (int r = 0; r < PQntuples(res); r++)
		for (int f = 0; f < nf; f++)
			bytes += strlen(PQgetvalue(res, r, f));
	return bytes;
}

/* What the snapshot callback read, for its output line. */
static size_t touched_bytes;

#define SNAPSHOT_COLUMNS "event_type, entity_id, revision, version_id, action, event_data, originated_timestamp"

static int
run_select(const char *org, long long expect, int fetch, int ordered)
{
	PGconn	   *conn = connect_plain();
	mem_sampler m;
	const char *params[1] = {org};
	const char *query = ordered ?
		"SELECT " SNAPSHOT_COLUMNS " FROM eventhub.events WHERE organization_id = $1 ORDER BY event_type, entity_id" :
		"SELECT " SNAPSHOT_COLUMNS " FROM eventhub.events WHERE organization_id = $1";
	char		what[32];
	PGresult   *res;
	long long	rows = 0;
	size_t		bytes = 0;
	double		t0,
				t1;

	snprintf(what, sizeof(what), "select%s%s", ordered ? "-ordered" : "", fetch > 0 ? "-cursor" : "");
	sampler_start(&m, PQbackendPID(conn), NULL);
	t0 = now_s(CLOCK_MONOTONIC);
	exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
	if (fetch > 0)
	{
		char		sql[256];

		snprintf(sql, sizeof(sql), "DECLARE snap_rows NO SCROLL CURSOR FOR %s", query);
		res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("%s", PQerrorMessage(conn));
		PQclear(res);
		snprintf(sql, sizeof(sql), "FETCH %d FROM snap_rows", fetch);
		for (;;)
		{
			int			n;

			res = PQexec(conn, sql);
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
				die("%s", PQerrorMessage(conn));
			n = PQntuples(res);
			bytes += touch_rows(res);
			rows += n;
			PQclear(res);
			if (n < fetch)
				break;
		}
	}
	else
	{
		if (!PQsendQueryParams(conn, query, 1, NULL, params, NULL, NULL, 0) || !PQsetSingleRowMode(conn))
			die("%s", PQerrorMessage(conn));
		while ((res = PQgetResult(conn)) != NULL)
		{
			ExecStatusType st = PQresultStatus(res);

			if (st == PGRES_SINGLE_TUPLE)
			{
				bytes += touch_rows(res);
				rows++;
			}
			else if (st != PGRES_TUPLES_OK)
				die("%s", PQerrorMessage(conn));
			PQclear(res);
		}
	}
	exec_ok(conn, "COMMIT");
	t1 = now_s(CLOCK_MONOTONIC);
	sampler_stop(&m);
	print_read(what, rows, t1 - t0, &m);
	printf(" bytes=%zu\n", bytes);
	PQfinish(conn);
	return rows == expect ? 0 : 1;
}

static int
run_snapshot_sql(const char *org, long long expect, int page)
{
	PGconn	   *conn = connect_plain();
	mem_sampler m;
	const char *params[5];
	char		head[32],
				limit[16],
			   *after_type = NULL,
			   *after_id = NULL;
	PGresult   *res;
	long long	rows = 0,
				pages = 0;
	size_t		bytes = 0;
	double		t0,
				t1;

	snprintf(limit, sizeof(limit), "%d", page);
	sampler_start(&m, PQbackendPID(conn), NULL);
	t0 = now_s(CLOCK_MONOTONIC);
	exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
	params[0] = org;
	res = PQexecParams(conn, "SELECT revision FROM eventhub.snapshot_head($1)", 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die("snapshot_head: %s", PQerrorMessage(conn));
	snprintf(head, sizeof(head), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	for (;;)
	{
		int			n;

		params[1] = head;
		params[2] = after_type;
		params[3] = after_id;
		params[4] = limit;
		res = PQexecParams(conn, "SELECT " SNAPSHOT_COLUMNS " FROM eventhub.snapshot_entities($1, $2, $3, $4, $5)",
						   5, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die("snapshot_entities: %s", PQerrorMessage(conn));
		n = PQntuples(res);
		bytes += touch_rows(res);
		rows += n;
		pages++;
		if (n > 0)
		{
			free(after_type);
			free(after_id);
			after_type = strdup(PQgetvalue(res, n - 1, 0));
			after_id = strdup(PQgetvalue(res, n - 1, 1));
		}
		PQclear(res);
		if (n < page)
			break;
	}
	exec_ok(conn, "COMMIT");
	t1 = now_s(CLOCK_MONOTONIC);
	sampler_stop(&m);
	print_read("snapshot-sql", rows, t1 - t0, &m);
	printf(" bytes=%zu pages=%lld head=%s\n", bytes, pages, head);
	free(after_type);
	free(after_id);
	PQfinish(conn);
	return rows == expect ? 0 : 1;
}

/* ----------------------------------------------------------- snapshot */

typedef struct snap_state
{
	long long	entities;
	long long	pages;
	int			aborts;
	int			done;
	int64_t		head;
	double		t_begin;		/* CLOCK_MONOTONIC at BEGIN */
	double		t_end;			/* and at END */
} snap_state;

static void
snap_on_step(eh_client *client, const char *org, eh_snapshot_phase phase, int reason,
			 const eh_entity *const *entities, int n_entities, int64_t head_revision,
			 const char *head_version, void *arg)
{
	snap_state *st = arg;

	(void) client;
	(void) org;
	(void) reason;
	(void) head_version;
	switch (phase)
	{
		case EH_SNAPSHOT_BEGIN:
			st->entities = 0;
			st->pages = 0;
			st->t_begin = now_s(CLOCK_MONOTONIC);
			break;
		case EH_SNAPSHOT_ENTITIES:
			/* Read every value, as select does. */
			for (int i = 0; i < n_entities; i++)
				touched_bytes += strlen(entities[i]->event_type) + strlen(entities[i]->entity_id) +
					strlen(entities[i]->version_id) + strlen(entities[i]->action) +
					strlen(entities[i]->event_data) + strlen(entities[i]->originated_timestamp);
			st->entities += n_entities;
			st->pages++;
			break;
		case EH_SNAPSHOT_END:
			st->head = head_revision;
			st->t_end = now_s(CLOCK_MONOTONIC);
			st->done = 1;
			break;
		case EH_SNAPSHOT_ABORT:
			st->aborts++;
			break;
	}
}

static int
run_snapshot(const char *org, long long expect, int page)
{
	eh_client  *c = eh_client_new("application_name=eh_bench_snapshot");
	snap_state	st;
	long long	events = 0;
	mem_sampler m;
	double		t0,
				t1;

	if (!c)
		die("%s", "out of memory");
	memset(&st, 0, sizeof(st));
	eh_set_event_callback(c, count_event, &events);
	eh_set_snapshot_callback(c, snap_on_step, &st);
	if (eh_set_batch_size(c, page) != EH_OK)
		die("batch size: %s", eh_error_message(c));
	if (eh_subscribe(c, org, EH_FROM_SNAPSHOT) != EH_OK)
		die("subscribe: %s", eh_error_message(c));
	sampler_start(&m, 0, "eh_bench_snapshot");
	t0 = now_s(CLOCK_MONOTONIC);
	if (eh_connect(c) != EH_OK)
		fprintf(stderr, "eh_bench: connect: %s (retrying)\n", eh_error_message(c));
	while (!st.done)
	{
		if (now_s(CLOCK_MONOTONIC) - t0 > 300)
			die("%s", "the snapshot did not end within 300 s");
		if (eh_wait(c, 100) < 0)
			die("%s", eh_error_message(c));
	}
	t1 = now_s(CLOCK_MONOTONIC);
	sampler_stop(&m);
	/*
	 * From BEGIN to END, as select counts from its BEGIN to its COMMIT: not
	 * the client's start-up, nor eh_wait() going on after END.
	 */
	print_read("snapshot", st.entities, st.t_end - st.t_begin, &m);
	printf(" seconds_from_connect=%.3f bytes=%zu pages=%lld head=%lld aborts=%d\n", t1 - t0, touched_bytes,
		   st.pages, (long long) st.head, st.aborts);
	eh_client_free(c);
	return st.entities == expect ? 0 : 1;
}

/* --------------------------------------------------------------- main */

static void
usage(void)
{
	fprintf(stderr,
			"usage: eh_bench sub -o ORG -n CLIENTS [-l 0|1] [-p POLL_MS] [-r READY] [-L LATFILE] [-t DRAIN_S]\n"
			"       eh_bench stamp -e LINES [-r READY] [-D DONE] [-L LATFILE] [-t DRAIN_S] FIFO...\n"
			"       eh_bench catchup -o ORG -e EXPECT\n"
			"       eh_bench listen -n CONNS [-l 0|1] [-r READY]\n"
			"       eh_bench pctl [-f FROM_EPOCH] [-u UNTIL_EPOCH] PGBENCH_LOG...\n"
			"       eh_bench select -o ORG -e EXPECT [-c FETCH] [-s]\n"
			"       eh_bench snapshot-sql -o ORG -e EXPECT [-P PAGE]\n"
			"       eh_bench snapshot -o ORG -e EXPECT [-P PAGE]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	const char *mode;
	const char *org = NULL,
			   *ready = NULL,
			   *done = NULL,
			   *latfile = NULL;
	int			n = 1,
				fetch = 0,
				page = 1000,
				ordered = 0,
				opt;
	long long	expect = 0;
	double		from = 0,
				until = 0;

	if (argc < 2)
		usage();
	mode = argv[1];
	optind = 2;
	while ((opt = getopt(argc, argv, "o:n:l:p:r:D:L:t:e:f:u:c:P:s")) != -1)
	{
		switch (opt)
		{
			case 'o':
				org = optarg;
				break;
			case 'n':
				n = atoi(optarg);
				break;
			case 'l':
				sub_listen = atoi(optarg);
				break;
			case 'p':
				sub_poll_ms = atoi(optarg);
				break;
			case 'r':
				ready = optarg;
				break;
			case 'D':
				done = optarg;
				break;
			case 'L':
				latfile = optarg;
				break;
			case 't':
				sub_drain_s = atof(optarg);
				break;
			case 'e':
				expect = atoll(optarg);
				break;
			case 'f':
				from = atof(optarg);
				break;
			case 'u':
				until = atof(optarg);
				break;
			case 'c':
				fetch = atoi(optarg);
				break;
			case 'P':
				page = atoi(optarg);
				break;
			case 's':
				ordered = 1;
				break;
			default:
				usage();
		}
	}
	if (n < 1 || fetch < 0 || page < 1)
		usage();
	if (strcmp(mode, "sub") == 0 && org)
	{
		sub_org = org;
		return run_sub(n, ready, latfile);
	}
	if (strcmp(mode, "stamp") == 0 && expect > 0 && optind < argc)
		return run_stamp(argc - optind, argv + optind, expect, ready, done, latfile);
	if (strcmp(mode, "catchup") == 0 && org && expect > 0)
		return run_catchup(org, expect);
	if (strcmp(mode, "listen") == 0)
		return run_listen(n, sub_listen, ready);
	if (strcmp(mode, "select") == 0 && org && expect > 0)
		return run_select(org, expect, fetch, ordered);
	if (strcmp(mode, "snapshot-sql") == 0 && org && expect > 0)
		return run_snapshot_sql(org, expect, page);
	if (strcmp(mode, "snapshot") == 0 && org && expect > 0)
		return run_snapshot(org, expect, page);
	if (strcmp(mode, "pctl") == 0 && optind < argc)
		return run_pctl(argc - optind, argv + optind, from, until);
	usage();
	return 2;
}
