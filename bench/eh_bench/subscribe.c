/*
 * subscribe.c: eh_bench's library subscribers and listeners (sub, catchup,
 * listen): delivery latency, catch-up and what listening costs.
 */
#include "eh_bench.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <libpq-fe.h>

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

/* The run's settings, for its threads. */
static const char *sub_org;
static int	sub_listen;
static double sub_drain_s;
static atomic_int sub_ready;
static atomic_llong sub_target;	/* 0 until known; -2 to abort */
static double sub_target_at;	/* CLOCK_MONOTONIC when the target came */
static pthread_mutex_t sub_lock = PTHREAD_MUTEX_INITIALIZER;

/* A subscriber's event callback: the event's latency, in ms. */
static int
sub_on_event(eh_client *client, const eh_event *ev, void *arg)
{
	sub_thread *t = arg;
	double		ts = parse_ts(ev->processed_timestamp);

	(void) client;
	append_value(&t->lat, &t->n, &t->cap, ts < 0 ? -1 : (now_s(CLOCK_REALTIME) - ts) * 1000.0);
	return 0;
}

/*
 * A subscriber's thread: connects, waits until it is at the head (and
 * listens), then runs until its cursor reaches the target.
 */
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

/*
 * The threads' results summed: every latency to LAT_FILE, the percentiles
 * and counts to stdout; frees the threads' clients.  TARGET is the head
 * they ran to (negative: none came).  Returns the exit status.
 */
static int
sub_report(sub_thread *threads, int n, long long target, double window_s, const char *lat_file)
{
	size_t		total = 0;
	double	   *all;
	uint64_t	polls = 0,
				notes = 0,
				fetches = 0;
	double		poll_rate = 0;
	long long	expected = 0;
	int			failed = 0;

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
	write_values(lat_file, all, total);
	print_pcts(all, total);
	printf(" clients=%d expected=%lld failed=%d polls=%llu notifications=%llu fetches=%llu"
		   " window_s=%.3f polls_per_s=%.2f\n",
		   n, expected, failed, (unsigned long long) polls, (unsigned long long) notes,
		   (unsigned long long) fetches, window_s, poll_rate);
	free(all);
	return failed || (long long) total != expected || target < 0 ? 1 : 0;
}

/*
 * eh_bench sub -o ORG -n CLIENTS [-l 0|1] [-p POLL_MS] [-r READY_FILE]
 *              [-L LATENCY_FILE] [-t DRAIN_S]
 *     Starts CLIENTS threads, each with its own eh_client (own connection)
 *     following ORG from its head.  When every client has seen the head
 *     (and, with -l 1, listens) it creates READY_FILE, then reads the
 *     target head revision from stdin (one line); each client runs until
 *     its cursor reaches it (or DRAIN_S seconds after the target
 *     arrived).  Latency of an event = callback time (CLOCK_REALTIME) -
 *     processed_timestamp.  LATENCY_FILE gets every latency in ms, one a
 *     line.
 */
int
run_sub(const char *org, int n, int listen, int poll_ms, double drain_s,
		const char *ready_file, const char *lat_file)
{
	sub_thread *threads = calloc(n, sizeof(sub_thread));
	char		line[64];
	double		t_ready;
	long long	target = -2;
	int			status;

	if (!threads)
		die("%s", "out of memory");
	sub_org = org;
	sub_listen = listen;
	sub_drain_s = drain_s;
	for (int i = 0; i < n; i++)
	{
		eh_client  *c = eh_client_new(NULL);

		if (!c)
			die("%s", "out of memory");
		threads[i].client = c;
		eh_set_event_callback(c, sub_on_event, &threads[i]);
		eh_set_listen(c, sub_listen);
		eh_set_poll_interval(c, poll_ms);
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
	status = sub_report(threads, n, target, now_s(CLOCK_MONOTONIC) - t_ready, lat_file);
	free(threads);
	return status;
}

/*
 * eh_bench catchup -o ORG -e EXPECT
 *     One client following ORG from revision 0 until its cursor is EXPECT:
 *     events per second and peak RSS (getrusage ru_maxrss).
 */
int
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

/* Reads what CONN has received; the number of notifications it brought. */
static unsigned long long
consume_notifications(PGconn *conn)
{
	PGnotify   *note;
	unsigned long long notes = 0;

	if (!PQconsumeInput(conn))
		die("connection lost: %s", PQerrorMessage(conn));
	while ((note = PQnotifies(conn)) != NULL)
	{
		notes++;
		PQfreemem(note);
	}
	return notes;
}

/*
 * eh_bench listen -n CONNS [-l 0|1] [-r READY_FILE]
 *     CONNS plain libpq connections that LISTEN eventhub and consume
 *     notifications, nothing else, until stdin reaches end of file.
 *     With -l 0 they do not LISTEN: idle connections, for the cost of
 *     the connections apart from the cost of listening.
 */
int
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
			if (pfd[i + 1].revents)
				notes += consume_notifications(conns[i]);
	}
	for (int i = 0; i < n; i++)
		PQfinish(conns[i]);
	printf("connections=%d notifications=%llu\n", n, notes);
	free(conns);
	free(pfd);
	return 0;
}
