/*
 * test_callbacks.c: drives the client through what regress/t/018_client_callbacks.pl
 * checks against a server: a callback that stops, a rotated notification
 * key under eh_subscribe_all(), and the non-blocking publish.
 *
 *   test_callbacks CONNINFO stop ORG COUNT
 *	   Subscribes to ORG from 0 (poll interval 60 s) with a callback that
 *	   stops after every event, and calls eh_wait(client, 40000) until COUNT
 *	   events came.
 *   test_callbacks CONNINFO rotate ORG COUNT
 *	   Follows every organization (poll interval 60 s); once ORG is followed
 *	   and the client listens, rotates the notification key on a second
 *	   connection, then COUNT times publishes to ORG (eh_publish) and waits
 *	   for the event.
 *   test_callbacks CONNINFO discover ORG
 *	   Follows every organization from the head.  Once an event of ORG has
 *	   come in its notification, polls every 10 ms and stops driving the
 *	   client while a discovery is out; once the answer is in the client's
 *	   socket, publishes to ORG on a second connection and waits until the
 *	   notification, which carries the event, is in the socket behind it;
 *	   then drives the client until the event is delivered.  Prints the
 *	   resyncs and whether the event came in its notification.
 *   test_callbacks CONNINFO publish ORG
 *	   Publishes with eh_publish_send() from a fresh client in a loop over
 *	   eh_sockets(), eh_timeout_ms(), poll() and eh_process(), then a refused
 *	   publish, and the calls a publish under way refuses.
 *
 *   test_callbacks CONNINFO txn ORG COUNT [BATCH_BYTES]
 *	   Subscribes to ORG from 0 with a transaction callback (and the batch
 *	   bytes given) until COUNT events came; prints each callback as
 *	   first-last:ends_transaction, and whether the events of each call
 *	   shared their transaction_first_revision.
 *   test_callbacks CONNINFO snapshot ORG AFTER [BATCH_SIZE [KILL]]
 *	   Subscribes to ORG with a snapshot callback, from a snapshot (AFTER
 *	   -2) or from revision AFTER (a resync then reads one), until a
 *	   snapshot ends; prints the phases (begin:REASON:HEAD, entities:N,
 *	   end:HEAD:N, abort), the entities as type/id@revision and the cursor.
 *	   KILL 1: at the first page, terminates the client's backend from a
 *	   second connection (the snapshot aborts and starts over).
 *
 * Each prints one line of key=value pairs and exits 0, or says what failed
 * on stderr and exits 1.
 */
#define _GNU_SOURCE
#include <sys/socket.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "test_common.h"
#include "internal.h"

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

/* The transaction callbacks of run_txn, as first-last:end,... */
typedef struct txn_log
{
	char		calls[4096];
	int			shared;			/* every call's events shared their first revision */
	int			delivered;
} txn_log;

static int
log_transaction(eh_client *client, const char *org, const eh_event *const *events, int n,
				int ends_transaction, void *arg)
{
	txn_log    *t = arg;
	size_t		len = strlen(t->calls);

	(void) client;
	(void) org;
	snprintf(t->calls + len, sizeof(t->calls) - len, "%s%lld-%lld:%d", len ? "," : "",
			 (long long) events[0]->revision, (long long) events[n - 1]->revision, ends_transaction);
	for (int i = 1; i < n; i++)
		if (events[i]->transaction_first_revision != events[0]->transaction_first_revision)
			t->shared = 0;
	t->delivered += n;
	return 0;
}

/* Transactions in one callback each, or in parts when over the batch bytes. */
static int
run_txn(eh_client *c, const char *org, int count, int batch_bytes)
{
	txn_log		t = {"", 1, 0};
	double		end = now_ms() + 60000;

	if (eh_set_transaction_callback(c, log_transaction, &t) != EH_OK || eh_subscribe(c, org, 0) != EH_OK ||
		(batch_bytes > 0 && eh_set_batch_bytes(c, batch_bytes) != EH_OK))
		return fail(c, "setup");
	while (t.delivered < count)
	{
		if (now_ms() >= end)
		{
			fprintf(stderr, "%d of %d events in 60 s: %s\n", t.delivered, count, t.calls);
			return 1;
		}
		if (eh_wait(c, 1000) < 0 && eh_error_retryable(c) == 0)
			return fail(c, "eh_wait");
	}
	printf("calls=%s shared=%d delivered=%d\n", t.calls, t.shared, t.delivered);
	return 0;
}

/* What run_snapshot's callback saw. */
typedef struct snap_log
{
	const char *conninfo;
	int			kill;			/* terminate the backend at the first page */
	char		phases[1024];
	char		entities[8192];
	int			ended;
	int			killed;
} snap_log;

/* A test's callback may block: it terminates its own backend from another connection. */
static void
terminate_snapshot_backend(const char *conninfo)
{
	PGconn	   *admin = PQconnectdb(conninfo);

	PQclear(PQexec(admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
				   " WHERE state = 'idle in transaction' AND pid <> pg_backend_pid()"
				   " AND query LIKE '%snapshot\\_%'"));
	PQfinish(admin);
}

static void
log_snapshot(eh_client *client, const char *org, eh_snapshot_phase phase, int reason,
			 const eh_entity *const *entities, int n, int64_t head, const char *head_version, void *arg)
{
	snap_log   *s = arg;
	size_t		len = strlen(s->phases);
	const char *comma = len ? "," : "";

	(void) org;
	switch (phase)
	{
		case EH_SNAPSHOT_BEGIN:
			snprintf(s->phases + len, sizeof(s->phases) - len, "%sbegin:%s:%lld%s", comma,
					 reason ? eh_resync_reason_name((eh_resync_reason) reason) : "initial", (long long) head,
					 head_version ? "" : ":noversion");
			s->entities[0] = '\0';
			break;
		case EH_SNAPSHOT_ENTITIES:
			snprintf(s->phases + len, sizeof(s->phases) - len, "%sentities:%d", comma, n);
			for (int i = 0; i < n; i++)
			{
				len = strlen(s->entities);
				snprintf(s->entities + len, sizeof(s->entities) - len, "%s%s/%s@%lld", len ? "," : "",
						 entities[i]->event_type, entities[i]->entity_id, (long long) entities[i]->revision);
			}
			if (s->kill && !s->killed)
			{
				s->killed = 1;
				terminate_snapshot_backend(s->conninfo);
			}
			break;
		case EH_SNAPSHOT_END:
			snprintf(s->phases + len, sizeof(s->phases) - len, "%send:%lld:%llu", comma, (long long) head,
					 (unsigned long long) eh_stat(client, EH_STAT_SNAPSHOT_ENTITIES));
			s->ended = 1;
			break;
		case EH_SNAPSHOT_ABORT:
			snprintf(s->phases + len, sizeof(s->phases) - len, "%sabort", comma);
			break;
	}
}

/* A snapshot, asked for or answering a resync, until it ends. */
static int
run_snapshot(eh_client *c, const char *conninfo, const char *org, int64_t after, int batch_size, int kill)
{
	snap_log	s = {conninfo, kill, "", "", 0, 0};
	double		end = now_ms() + 60000;

	if (eh_set_snapshot_callback(c, log_snapshot, &s) != EH_OK ||
		(batch_size > 0 && eh_set_batch_size(c, batch_size) != EH_OK) ||
		eh_subscribe(c, org, after) != EH_OK)
		return fail(c, "setup");
	while (!s.ended)
	{
		if (now_ms() >= end)
		{
			fprintf(stderr, "no snapshot ended in 60 s: %s\n", s.phases);
			return 1;
		}
		if (eh_wait(c, 200) < 0 && eh_error_retryable(c) == 0)
			return fail(c, "eh_wait");
	}
	printf("phases=%s entities=%s cursor=%lld snapshots=%llu reconnects=%llu\n", s.phases, s.entities,
		   (long long) eh_cursor(c, org), (unsigned long long) eh_stat(c, EH_STAT_SNAPSHOTS),
		   (unsigned long long) eh_stat(c, EH_STAT_RECONNECTS));
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

static void
count_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	(void) client;
	(void) org;
	(void) reason;
	(void) head;
	(*(int *) arg)++;
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
	/* Until an event of org came in its notification: the client has its key. */
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

	if (argc < 4 || (strcmp(argv[2], "publish") != 0 && strcmp(argv[2], "discover") != 0 && argc < 5))
	{
		fprintf(stderr, "usage: test_callbacks CONNINFO stop|rotate|txn ORG COUNT | CONNINFO publish|discover ORG"
				" | CONNINFO snapshot ORG AFTER [BATCH_SIZE [KILL]]\n");
		return 2;
	}
	c = eh_client_new(argv[1]);
	if (!c || eh_set_poll_interval(c, 60000) != EH_OK)
		return fail(c, "setup");
	if (strcmp(argv[2], "stop") == 0)
		rc = run_stop(c, argv[3], atoi(argv[4]));
	else if (strcmp(argv[2], "rotate") == 0)
		rc = run_rotate(c, argv[1], argv[3], atoi(argv[4]));
	else if (strcmp(argv[2], "txn") == 0)
		rc = run_txn(c, argv[3], atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 0);
	else if (strcmp(argv[2], "discover") == 0)
		rc = run_discover(c, argv[1], argv[3]);
	else if (strcmp(argv[2], "snapshot") == 0)
		rc = run_snapshot(c, argv[1], argv[3], atoll(argv[4]), argc > 5 ? atoi(argv[5]) : 0,
						  argc > 6 ? atoi(argv[6]) : 0);
	else
		rc = run_publish(c, argv[3]);
	eh_client_free(c);
	return rc;
}
