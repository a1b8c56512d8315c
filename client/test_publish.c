/*
 * test_publish.c: drives the client's non-blocking publish against a
 * server for regress/t/020_client_publish.pl.
 *
 *   test_publish CONNINFO ORG
 *	   Publishes with eh_publish_send() from a fresh client in a loop over
 *	   eh_sockets(), eh_timeout_ms(), poll() and eh_process(), then a refused
 *	   publish, and the calls a publish under way refuses.
 *
 * It prints one line of key=value pairs and exits 0, or says what failed
 * on stderr and exits 1.
 */
#include "test_common.h"

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

	if (argc < 3)
	{
		fprintf(stderr, "usage: test_publish CONNINFO ORG\n");
		return 2;
	}
	if (!(c = test_client_new(argv[1])))
		return 1;
	rc = run_publish(c, argv[2]);
	eh_client_free(c);
	return rc;
}
