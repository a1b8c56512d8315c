/*
 * eventloop.c: drive several eventhub clients from your own poll() loop.
 *
 * Each client is one connection; here two of them follow the same
 * organizations, as two components of one process might.  The loop waits
 * on every client's socket and on the earliest of their timers, then lets
 * each client process what is ready.  It exits after COUNT events per client.
 *
 *   cc eventloop.c $(pkg-config --cflags --libs eventhub) -o eventloop
 *   ./eventloop "dbname=gateway" 10 acme globex
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include <eventhub.h>

#define NCLIENTS 2

typedef struct follower
{
	int			id;
	long		seen;
} follower;

static int
on_event(eh_client *client, const eh_event *ev, void *arg)
{
	follower   *f = arg;

	(void) client;
	f->seen++;
	printf("client %d: %s revision %lld %s %s\n", f->id, ev->organization_id,
		   (long long) ev->revision, ev->action, ev->entity_id);
	fflush(stdout);
	return 0;
}

int
main(int argc, char **argv)
{
	eh_client  *clients[NCLIENTS];
	follower	state[NCLIENTS];
	long		count;
	int			status = 0;

	if (argc < 4)
	{
		fprintf(stderr, "usage: %s CONNINFO COUNT ORGANIZATION...\n", argv[0]);
		return 2;
	}
	count = atol(argv[2]);
	for (int i = 0; i < NCLIENTS; i++)
	{
		state[i].id = i + 1;
		state[i].seen = 0;
		clients[i] = eh_client_new(argv[1]);
		if (!clients[i])
			return 1;
		eh_set_event_callback(clients[i], on_event, &state[i]);
		for (int o = 3; o < argc; o++)
			eh_subscribe(clients[i], argv[o], 0);
		if (eh_connect(clients[i]) != EH_OK)
			fprintf(stderr, "client %d: %s (retrying)\n", i + 1, eh_error_message(clients[i]));
	}

	for (;;)
	{
		struct pollfd fds[NCLIENTS];
		int			nfds = 0;
		int			timeout = -1;
		int			done = 1;

		for (int i = 0; i < NCLIENTS; i++)
		{
			int			t = eh_next_timeout_ms(clients[i]);
			int			fd = eh_socket(clients[i]);	/* changes after a reconnect */
			int			wants = eh_socket_wants(clients[i]);	/* read, write or both */

			if (state[i].seen < count)
				done = 0;
			if (fd >= 0 && wants)
			{
				fds[nfds].fd = fd;
				fds[nfds].events = (short) (((wants & EH_WANT_READ) ? POLLIN : 0) |
											((wants & EH_WANT_WRITE) ? POLLOUT : 0));
				fds[nfds].revents = 0;
				nfds++;
			}
			if (timeout < 0 || t < timeout)
				timeout = t;
		}
		if (done)
			break;
		if (poll(fds, (nfds_t) nfds, timeout) < 0)
		{
			perror("poll");
			status = 1;
			break;
		}
		/* Ready or not: each client knows whether it has work. */
		for (int i = 0; i < NCLIENTS; i++)
			if (eh_process(clients[i]) < 0)
			{
				fprintf(stderr, "client %d: %s\n", i + 1, eh_error_message(clients[i]));
				status = 1;
			}
		if (status)
			break;
	}
	for (int i = 0; i < NCLIENTS; i++)
		eh_client_free(clients[i]);
	return status;
}
