/*
 * test_ack.c: a replica that applies events after its callback returns, for
 * regress/t/005_replicas.pl.  It follows ORGANIZATION from revision 0 as
 * REPLICA_ID, heartbeating every 100 ms; once it has been handed COUNT
 * events it acknowledges only revision ACK (eh_ack) and reports the
 * configuration hash HASH (eh_set_config_hash), prints "acked", and runs
 * until SIGTERM.
 *
 *   test_ack CONNINFO REPLICA_ID ORGANIZATION COUNT ACK HASH
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eventhub.h"

static volatile sig_atomic_t stopping = 0;

static void
on_signal(int signo)
{
	(void) signo;
	stopping = 1;
}

static int
count_event(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) ev;
	(*(long *) arg)++;
	return 0;
}

int
main(int argc, char **argv)
{
	eh_client  *c;
	long		seen = 0;
	long		count;
	int			acked = 0;
	struct sigaction sa;

	if (argc != 7)
	{
		fprintf(stderr, "usage: %s CONNINFO REPLICA_ID ORGANIZATION COUNT ACK HASH\n", argv[0]);
		return 2;
	}
	count = atol(argv[4]);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);

	c = eh_client_new(argv[1]);
	if (!c || eh_set_event_callback(c, count_event, &seen) != EH_OK ||
		eh_set_replica(c, argv[2], NULL, NULL) != EH_OK ||
		eh_set_heartbeat_interval(c, 100) != EH_OK ||
		eh_subscribe(c, argv[3], 0) != EH_OK || eh_connect(c) != EH_OK)
	{
		fprintf(stderr, "setup failed: %s\n", c ? eh_error_message(c) : "out of memory");
		return 1;
	}
	while (!stopping)
	{
		if (eh_wait(c, 200) < 0)
		{
			fprintf(stderr, "%s\n", eh_error_message(c));
			return 1;
		}
		if (!acked && seen >= count)
		{
			if (eh_ack(c, argv[3], eh_cursor(c, argv[3]) + 1) != EH_ERR_ARGUMENT ||
				eh_ack(c, argv[3], atol(argv[5])) != EH_OK ||
				eh_set_config_hash(c, argv[3], argv[6]) != EH_OK)
			{
				fprintf(stderr, "ack failed: %s\n", eh_error_message(c));
				return 1;
			}
			printf("acked\n");
			fflush(stdout);
			acked = 1;
		}
	}
	eh_client_free(c);
	return 0;
}
