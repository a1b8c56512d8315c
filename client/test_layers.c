/*
 * test_layers.c: drives the client through what regress/t/019_client_layers.pl
 * checks against a server: a callback that stops, a rotated notification
 * key under eh_subscribe_all(), and the non-blocking publish.
 *
 *   test_layers CONNINFO stop ORG COUNT
 *	   Subscribes to ORG from 0 (poll interval 60 s) with a callback that
 *	   stops after every event, and calls eh_wait(client, 40000) until COUNT
 *	   events came.
 *   test_layers CONNINFO rotate ORG COUNT
 *	   Follows every organization (poll interval 60 s); once ORG is followed
 *	   and the client listens, rotates the notification key on a second
 *	   connection, then COUNT times publishes to ORG (eh_publish) and waits
 *	   for the event.
 *   test_layers CONNINFO publish ORG
 *	   Publishes with eh_publish_send() from a fresh client in a loop over
 *	   eh_sockets(), eh_timeout_ms(), poll() and eh_process(), then a refused
 *	   publish, and the calls a publish under way refuses.
 *
 * Each prints one line of key=value pairs and exits 0, or says what failed
 * on stderr and exits 1.
 */
#define _GNU_SOURCE
#include <libpq-fe.h>

#include "test_common.h"

static const int STOP = 1;
static const int GO_ON = 0;

/* An event callback that returns *arg: STOP after every event, or GO_ON. */
static int
reply(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) ev;
	return *(const int *) arg;
}

/* A callback that stops: the rest of the batch comes at the next call, no refetch, no poll. */
static int
run_stop(eh_client *c, const char *org, int count)
{
	int			delivered = 0;
	int			calls = 0;
	int			most = 0;
	double		t0 = now_ms();

	if (eh_set_event_callback(c, reply, (void *) &STOP) != EH_OK || eh_subscribe(c, org, 0) != EH_OK)
		return fail(c, "setup");
	while (delivered < count)
	{
		int			n = eh_wait(c, 40000);

		if (n < 0)
			return fail(c, "eh_wait");
		if (n == 0)
		{
			fprintf(stderr, "eh_wait timed out with %d of %d events\n", delivered, count);
			return 1;
		}
		calls++;
		delivered += n;
		most = n > most ? n : most;
	}
	printf("delivered=%d calls=%d most_per_call=%d fetches=%llu polls=%llu elapsed_ms=%.0f\n",
		   delivered, calls, most, (unsigned long long) eh_stat(c, EH_STAT_FETCHES),
		   (unsigned long long) eh_stat(c, EH_STAT_POLLS), now_ms() - t0);
	return 0;
}

/* Waits until org is delivered up to revision, at most 20 s (a third of the poll interval). */
static int
wait_for(eh_client *c, const char *org, int64_t revision)
{
	double		end = now_ms() + 20000;

	while (eh_cursor(c, org) < revision)
	{
		if (now_ms() >= end)
		{
			fprintf(stderr, "revision %lld of %s not delivered in 20 s (at %lld)\n",
					(long long) revision, org, (long long) eh_cursor(c, org));
			return 1;
		}
		if (eh_wait(c, 1000) < 0 && eh_error_retryable(c) == 0)
			return fail(c, "eh_wait");
	}
	return 0;
}

/* A rotated key under eh_subscribe_all(): tokens read again once, not per notification. */
static int
run_rotate(eh_client *c, const char *conninfo, const char *org, int count)
{
	double		end = now_ms() + 30000;
	unsigned long long polls;
	unsigned long long notifications;
	PGconn	   *admin;
	PGresult   *res;

	if (eh_set_event_callback(c, reply, (void *) &GO_ON) != EH_OK || eh_subscribe_all(c, 0) != EH_OK)
		return fail(c, "setup");
	while (!(eh_cursor(c, org) >= 1 && eh_is_listening(c)))
	{
		if (now_ms() >= end)
		{
			fprintf(stderr, "not following %s while listening after 30 s\n", org);
			return 1;
		}
		(void) eh_wait(c, 500);
	}
	admin = PQconnectdb(conninfo);
	res = PQexec(admin, "SELECT eventhub.rotate_notification_key()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		fprintf(stderr, "rotate_notification_key: %s", PQerrorMessage(admin));
		return 1;
	}
	PQclear(res);
	PQfinish(admin);
	polls = eh_stat(c, EH_STAT_POLLS);
	notifications = eh_stat(c, EH_STAT_NOTIFICATIONS);
	for (int i = 0; i < count; i++)
	{
		int64_t		revision;

		if (eh_publish(c, org, "API", "UPDATE", "rotated", NULL, "{}", &revision) != EH_OK)
			return fail(c, "eh_publish");
		if (wait_for(c, org, revision) != 0)
			return 1;
	}
	printf("published=%d polls_after_rotation=%llu notifications=%llu\n", count,
		   eh_stat(c, EH_STAT_POLLS) - polls, eh_stat(c, EH_STAT_NOTIFICATIONS) - notifications);
	return 0;
}

/*
 * Runs the loop an application would (every socket, the real timeout)
 * until the publish out has its result; counts the waits that ended by
 * the timeout rather than a socket.
 */
static int
publish_loop(eh_client *c, int64_t *revision, int *timed_out, int *rounds)
{
	int			rc;

	while ((rc = eh_publish_result(c, revision)) == EH_PUBLISH_PENDING)
	{
		int			fds[EH_MAX_SOCKETS];
		int			wants[EH_MAX_SOCKETS];
		struct pollfd pfd[EH_MAX_SOCKETS];
		int			n = eh_sockets(c, fds, wants, EH_MAX_SOCKETS);
		int			wait = eh_timeout_ms(c);

		for (int i = 0; i < n; i++)
		{
			pfd[i].fd = fds[i];
			pfd[i].events = (short) (((wants[i] & EH_WANT_READ) ? POLLIN : 0) |
									 ((wants[i] & EH_WANT_WRITE) ? POLLOUT : 0));
			pfd[i].revents = 0;
		}
		if (wait > 0 && poll(pfd, (nfds_t) n, wait) == 0)
			(*timed_out)++;
		(*rounds)++;
		if (eh_process(c) < 0 && eh_error_retryable(c) == 0)
			return fail(c, "eh_process");
	}
	return rc;
}

/* eh_publish_send() and eh_publish_result() from a client not yet connected. */
static int
run_publish(eh_client *c, const char *org)
{
	int64_t		revision = -1;
	int64_t		again = -1;
	int			timed_out = 0;
	int			rounds = 0;
	int			busy_refused;
	int			rc;

	if (eh_set_poll_interval(c, 60000) != EH_OK ||
		eh_publish_result(c, &revision) != EH_ERR_ARGUMENT)
		return fail(c, "a result with no publish is refused");
	if (eh_publish_send(c, org, "API", "CREATE", "async", "async-1", "{\"n\": 1}") != EH_OK)
		return fail(c, "eh_publish_send");
	busy_refused = eh_publish_send(c, org, "API", "CREATE", "async", NULL, "{}") == EH_ERR_ARGUMENT;
	if (eh_publish_result(c, &revision) != EH_PUBLISH_PENDING)
		return fail(c, "a publish sent is pending before eh_process");
	if ((rc = publish_loop(c, &revision, &timed_out, &rounds)) != EH_OK)
		return fail(c, "the publish");
	/* The same correlation id again: the same event. */
	if (eh_publish_send(c, org, "API", "CREATE", "async", "async-1", "{\"n\": 1}") != EH_OK ||
		publish_loop(c, &again, &timed_out, &rounds) != EH_OK)
		return fail(c, "the publish repeated");
	if (eh_publish_send(c, org, "API", "CREATE", "async", NULL, "not json") != EH_OK)
		return fail(c, "eh_publish_send of bad JSON");
	rc = publish_loop(c, NULL, &timed_out, &rounds);
	printf("revision=%lld repeated=%lld busy_refused=%d refused_rc=%d refused_sqlstate=%s timed_out_waits=%d rounds=%d\n",
		   (long long) revision, (long long) again, busy_refused, rc, eh_error_sqlstate(c), timed_out, rounds);
	return 0;
}

int
main(int argc, char **argv)
{
	eh_client  *c;
	int			rc;

	if (argc < 4 || (strcmp(argv[2], "publish") != 0 && argc < 5))
	{
		fprintf(stderr, "usage: test_layers CONNINFO stop|rotate ORG COUNT | CONNINFO publish ORG\n");
		return 2;
	}
	c = eh_client_new(argv[1]);
	if (!c || eh_set_poll_interval(c, 60000) != EH_OK)
		return fail(c, "setup");
	if (strcmp(argv[2], "stop") == 0)
		rc = run_stop(c, argv[3], atoi(argv[4]));
	else if (strcmp(argv[2], "rotate") == 0)
		rc = run_rotate(c, argv[1], argv[3], atoi(argv[4]));
	else
		rc = run_publish(c, argv[3]);
	eh_client_free(c);
	return rc;
}
