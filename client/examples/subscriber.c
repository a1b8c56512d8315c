/*
 * subscriber.c: follow organizations and print their events.
 *
 *   cc subscriber.c $(pkg-config --cflags --libs eventhub) -o subscriber
 *   ./subscriber "dbname=gateway" acme globex
 */
#include <stdio.h>

#include <eventhub.h>

/* Apply one event; here, print it.  Events come in revision order, once. */
static int
on_event(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) arg;
	printf("%s revision %lld: %s %s %s %s\n", ev->organization_id, (long long) ev->revision,
		   ev->action, ev->event_type, ev->entity_id, ev->event_data);
	fflush(stdout);
	return 0;					/* non-zero would stop delivering for now */
}

/* Missed events are gone: reload the organization from your own tables. */
static void
on_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	(void) client;
	(void) arg;
	printf("%s needs a full reload (reason %d); continuing after revision %lld\n",
		   org, (int) reason, (long long) head);
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	eh_client  *client;

	if (argc < 3)
	{
		fprintf(stderr, "usage: %s CONNINFO ORGANIZATION...\n", argv[0]);
		return 2;
	}
	client = eh_client_new(argv[1]);
	if (!client)
		return 1;
	eh_set_event_callback(client, on_event, NULL);
	eh_set_resync_callback(client, on_resync, NULL);
	for (int i = 2; i < argc; i++)
		eh_subscribe(client, argv[i], 0);	/* 0: from the first event (a resync if retention removed it); EH_FROM_HEAD: new only */

	if (eh_connect(client) != EH_OK)
	{
		fprintf(stderr, "%s\n", eh_error_message(client));
		eh_client_free(client);
		return 1;
	}
	for (;;)
	{
		/* Delivers events as they commit; reconnects and catches up by itself. */
		int			n = eh_wait(client, -1);

		if (n < 0)
		{
			fprintf(stderr, "%s\n", eh_error_message(client));
			break;
		}
	}
	eh_client_free(client);
	return 1;
}
