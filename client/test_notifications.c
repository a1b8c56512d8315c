/*
 * test_notifications.c: drives the client's notification path against a
 * server for regress/t/019_client_notifications.pl: a rotated notification
 * key under eh_subscribe_all(), and a discovery racing a notification.
 *
 *   test_notifications CONNINFO rotate ORG COUNT
 *	   Follows every organization (poll interval 60 s); once ORG is followed
 *	   and the client listens, rotates the notification key on a second
 *	   connection, then COUNT times publishes to ORG (eh_publish) and waits
 *	   for the event.
 *   test_notifications CONNINFO discover ORG
 *	   Follows every organization from the head.  Once an event of ORG has
 *	   come in its notification, polls every 10 ms and stops driving the
 *	   client while a discovery is out; once the answer is in the client's
 *	   socket, publishes to ORG on a second connection and waits until the
 *	   notification, which carries the event, is in the socket behind it;
 *	   then drives the client until the event is delivered.  Prints the
 *	   resyncs and whether the event came in its notification.
 *
 * Each prints one line of key=value pairs and exits 0, or says what failed
 * on stderr and exits 1.  The discovery race needs to see which query is
 * out on the client's connection: it reads internal.h's state.
 */
#define _GNU_SOURCE
#include <sys/socket.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "test_common.h"
#include "internal.h"

static const int GO_ON = 0;

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

/* Publishes one event to org on conn; its revision, or -1. */
static int64_t
publish_on(PGconn *conn, const char *org)
{
	const char *params[1] = {org};
	PGresult   *res = PQexecParams(conn, "SELECT eventhub.publish_event($1, 'API', 'UPDATE', 'race', NULL, '{}')",
								   1, NULL, params, NULL, NULL, 0);
	int64_t		revision = -1;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		revision = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	else
		fprintf(stderr, "publish_event: %s", PQerrorMessage(conn));
	PQclear(res);
	return revision;
}

/*
 * Waits, without reading them, until the bytes the server sent that the
 * client has not read yet are more than above and, with ready, end with a
 * ReadyForQuery ('Z', length 5, idle: the answer to the query out is all
 * there).  Returns how many there are, or -1 (saying what did not come)
 * at end.
 */
static ssize_t
await_unread(eh_client *c, ssize_t above, int ready, double end, const char *what)
{
	static char buf[1 << 20];

	for (;;)
	{
		ssize_t		n = recv(PQsocket(c->link.conn.pg), buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);

		if (n > above && (!ready || (n >= 6 && memcmp(buf + n - 6, "Z\0\0\0\5I", 6) == 0)))
			return n;
		if (now_ms() >= end)
		{
			fprintf(stderr, "%s did not come in 30 s\n", what);
			return -1;
		}
		(void) poll(NULL, 0, 1);
	}
}

/* A resync callback that counts the resyncs in *arg. */
static void
count_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	(void) client;
	(void) org;
	(void) reason;
	(void) head;
	(*(int *) arg)++;
}

/* Publishes to org until an event came in its notification: the client has its key. */
static int
await_sealed_delivery(eh_client *c, PGconn *admin, const char *org, double end)
{
	int64_t		revision;

	while (eh_stat(c, EH_STAT_SEALED_DELIVERIES) == 0)
	{
		if (now_ms() >= end)
		{
			fprintf(stderr, "no event came in its notification in 30 s\n");
			return 1;
		}
		if (!(eh_cursor(c, org) >= 0 && eh_is_listening(c)))
		{
			(void) eh_wait(c, 100);
			continue;
		}
		if ((revision = publish_on(admin, org)) < 0 || wait_for(c, org, revision) != 0)
			return 1;
	}
	return 0;
}

/* A discovery's answer and a notification that came in behind it, read together. */
static int
run_discover(eh_client *c, const char *conninfo, const char *org)
{
	double		end = now_ms() + 30000;
	int			resyncs = 0;
	unsigned long long sealed;
	ssize_t		answer;
	int64_t		revision;
	PGconn	   *admin = PQconnectdb(conninfo);

	if (PQstatus(admin) != CONNECTION_OK)
	{
		fprintf(stderr, "second connection: %s", PQerrorMessage(admin));
		return 1;
	}
	if (eh_set_event_callback(c, reply, (void *) &GO_ON) != EH_OK ||
		eh_set_resync_callback(c, count_resync, &resyncs) != EH_OK || eh_subscribe_all(c, EH_FROM_HEAD) != EH_OK)
		return fail(c, "setup");
	if (await_sealed_delivery(c, admin, org, end) != 0)
		return 1;

	/* A discovery out: the client is not driven until the race is set. */
	if (eh_set_poll_interval(c, 10) != EH_OK)
		return fail(c, "eh_set_poll_interval");
	while (!(c->link.op == OP_DISCOVER && c->link.conn.state == EHI_CONN_BUSY))
	{
		struct pollfd fd = {.fd = eh_socket(c), .events = POLLIN};

		if (now_ms() >= end)
		{
			fprintf(stderr, "no discovery went out in 30 s\n");
			return 1;
		}
		(void) poll(&fd, fd.fd >= 0 ? 1 : 0, 5);
		if (eh_process(c) < 0 && eh_error_retryable(c) == 0)
			return fail(c, "eh_process");
	}
	/* Its whole answer arrived: the discovery's snapshot predates what follows. */
	if ((answer = await_unread(c, 0, 1, end, "the discovery's answer")) < 0 ||
		(revision = publish_on(admin, org)) < 0 ||
		await_unread(c, answer, 0, end, "a notification behind the discovery's answer") < 0)
		return 1;
	sealed = eh_stat(c, EH_STAT_SEALED_DELIVERIES);
	if (eh_set_poll_interval(c, 60000) != EH_OK)
		return fail(c, "eh_set_poll_interval");
	if (wait_for(c, org, revision) != 0)
		return 1;
	printf("resyncs=%d in_notification=%llu cursor=%lld revision=%lld\n", resyncs,
		   eh_stat(c, EH_STAT_SEALED_DELIVERIES) - sealed, (long long) eh_cursor(c, org), (long long) revision);
	PQfinish(admin);
	return 0;
}

int
main(int argc, char **argv)
{
	eh_client  *c;
	int			rc;

	if (argc < 4 || (strcmp(argv[2], "discover") != 0 && argc < 5))
	{
		fprintf(stderr, "usage: test_notifications CONNINFO rotate ORG COUNT | CONNINFO discover ORG\n");
		return 2;
	}
	if (!(c = test_client_new(argv[1])))
		return 1;
	if (strcmp(argv[2], "rotate") == 0)
		rc = run_rotate(c, argv[1], argv[3], atoi(argv[4]));
	else
		rc = run_discover(c, argv[1], argv[3]);
	eh_client_free(c);
	return rc;
}
