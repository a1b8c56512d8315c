/*
 * test_nonblock.c: drives a client the way an application's event loop
 * would, and measures how long each of its calls keeps the caller, for
 * regress/t/015_nonblocking.pl.
 *
 *   test_nonblock CONNINFO SECONDS ORG [REPLICA_ID]
 *
 * Subscribes to ORG from its head (query and connect timeout 1000 ms,
 * close timeout 500 ms; with REPLICA_ID, heartbeats every 200 ms) and runs
 * the loop (eh_socket, eh_socket_wants, eh_next_timeout_ms, poll,
 * eh_process) for SECONDS, then frees the client.  It prints "ready" once
 * at the head, and "event REVISION" per event; a line "stop" on stdin ends
 * the loop early (the end of stdin does not).  At the end it prints one line of key=value pairs: the
 * longest eh_process() call, the time eh_client_free() took, events,
 * reconnects (ms and counts).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <unistd.h>

#include "test_common.h"

static int
on_event(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) arg;
	printf("event %lld\n", (long long) ev->revision);
	fflush(stdout);
	return 0;
}

/* The client under test: short timeouts, ORG from its head, a replica if named. */
static bool
set_up(eh_client *c, int argc, char **argv)
{
	return eh_set_event_callback(c, on_event, NULL) == EH_OK &&
		eh_set_query_timeout(c, 1000) == EH_OK && eh_set_close_timeout(c, 500) == EH_OK &&
		eh_set_reconnect_backoff(c, 50, 200) == EH_OK && eh_set_poll_interval(c, 200) == EH_OK &&
		eh_subscribe(c, argv[3], EH_FROM_HEAD) == EH_OK &&
		(argc != 5 || (eh_set_replica(c, argv[4], NULL, NULL) == EH_OK &&
					   eh_set_heartbeat_interval(c, 200) == EH_OK));
}

/* Frees the client and prints what the run measured and counted. */
static void
report(eh_client *c, double longest)
{
	unsigned long long events = eh_stat(c, EH_STAT_EVENTS_DELIVERED);
	unsigned long long reconnects = eh_stat(c, EH_STAT_RECONNECTS);
	double		t0 = now_ms();

	eh_client_free(c);
	printf("longest_process_ms=%.1f free_ms=%.1f events=%llu reconnects=%llu\n",
		   longest, now_ms() - t0, events, reconnects);
}

int
main(int argc, char **argv)
{
	eh_client  *c;
	double		end;
	double		longest = 0;
	double		t0;
	int			ready = 0;
	int			stop = 0;
	int			stdin_open = 1;

	if (argc != 4 && argc != 5)
	{
		fprintf(stderr, "usage: %s CONNINFO SECONDS ORG [REPLICA_ID]\n", argv[0]);
		return 2;
	}
	c = eh_client_new(argv[1]);
	if (!c || !set_up(c, argc, argv))
		return fail(c, "setup failed");
	end = now_ms() + atof(argv[2]) * 1000;
	while (!stop && now_ms() < end)
	{
		struct pollfd fds[2];
		int			wants = eh_socket_wants(c);
		int			wait = eh_next_timeout_ms(c);
		double		took;
		int			n;

		fds[0].fd = stdin_open ? STDIN_FILENO : -1;
		fds[0].events = POLLIN;
		fds[1].fd = eh_socket(c);
		fds[1].events = (short) (((wants & EH_WANT_READ) ? POLLIN : 0) | ((wants & EH_WANT_WRITE) ? POLLOUT : 0));
		fds[0].revents = fds[1].revents = 0;
		if (wait > 100)
			wait = 100;
		(void) poll(fds, fds[1].fd >= 0 && wants ? 2 : 1, wait);
		if (fds[0].revents & (POLLIN | POLLHUP))
		{
			char		line[64];

			if (!fgets(line, sizeof(line), stdin))
				stdin_open = 0; /* no more commands: run for SECONDS */
			else if (strncmp(line, "stop", 4) == 0)
				stop = 1;
		}
		t0 = now_ms();
		n = eh_process(c);
		took = now_ms() - t0;
		if (took > longest)
			longest = took;
		if (n < 0 && n != EH_ERR_SERVER)
			fprintf(stderr, "eh_process: %s\n", eh_error_message(c));
		if (!ready && eh_cursor(c, argv[3]) >= 0 && eh_is_listening(c))
		{
			ready = 1;
			printf("ready\n");
			fflush(stdout);
		}
	}
	report(c, longest);
	return 0;
}
