/*
 * test_callbacks.c: drives the client's delivery callbacks against a server
 * for regress/t/018_client_callbacks.pl: an event callback that stops, the
 * transaction callback and the snapshot callback.
 *
 *   test_callbacks CONNINFO stop ORG COUNT
 *	   Subscribes to ORG from 0 (poll interval 60 s) with a callback that
 *	   stops after every event, and calls eh_wait(client, 40000) until COUNT
 *	   events came.
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
#include <libpq-fe.h>

#include "test_common.h"

static const int STOP = 1;

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

int
main(int argc, char **argv)
{
	eh_client  *c;
	int			rc;

	if (argc < 5)
	{
		fprintf(stderr, "usage: test_callbacks CONNINFO stop|txn ORG COUNT [BATCH_BYTES]"
				" | CONNINFO snapshot ORG AFTER [BATCH_SIZE [KILL]]\n");
		return 2;
	}
	if (!(c = test_client_new(argv[1])))
		return 1;
	if (strcmp(argv[2], "stop") == 0)
		rc = run_stop(c, argv[3], atoi(argv[4]));
	else if (strcmp(argv[2], "txn") == 0)
		rc = run_txn(c, argv[3], atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 0);
	else
		rc = run_snapshot(c, argv[1], argv[3], atoll(argv[4]), argc > 5 ? atoi(argv[5]) : 0,
						  argc > 6 ? atoi(argv[6]) : 0);
	eh_client_free(c);
	return rc;
}
