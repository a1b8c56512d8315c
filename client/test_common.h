/*
 * test_common.h: what the client's test programs that drive a server
 * (test_callbacks.c, test_notifications.c, test_publish.c,
 * test_nonblock.c) share: a monotonic clock in milliseconds, the way they
 * report a failed call and the setup of their client.  Header only, so
 * that the programs link as before and no object joins the library's.
 */
#ifndef EVENTHUB_TEST_COMMON_H
#define EVENTHUB_TEST_COMMON_H

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eventhub.h"

/* Milliseconds on the monotonic clock. */
static inline double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/*
 * An event callback that returns *(const int *) arg: 1 stops after every
 * event (the rest of the batch comes at the next call), 0 goes on.
 */
static inline int
reply(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) ev;
	return *(const int *) arg;
}

/* Says on stderr that what failed and why (c's last error); returns 1. */
static inline int
fail(eh_client *c, const char *what)
{
	fprintf(stderr, "%s: %s\n", what, c ? eh_error_message(c) : "out of memory");
	return 1;
}

/*
 * A client for conninfo with the poll interval the tests that wait by
 * hand use (a minute); NULL after saying on stderr why there is none.
 */
static inline eh_client *
test_client_new(const char *conninfo)
{
	eh_client  *c = eh_client_new(conninfo);

	if (!c || eh_set_poll_interval(c, 60000) != EH_OK)
	{
		fail(c, "setup");
		eh_client_free(c);
		return NULL;
	}
	return c;
}

#endif
