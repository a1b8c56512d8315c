/*
 * test_unit_delivery.c: unit tests of libeventhub's delivery of a fetch's
 * transactions, the steps of a snapshot and the client's metrics, from
 * query results made here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eventhub.h"
#include "internal.h"
#include "test_unit.h"

/* What the callbacks of the delivery and snapshot tests saw. */
typedef struct seen
{
	char		log[1024];
	int			stop_after;		/* the transaction callback stops after this many calls (0: never) */
	int			calls;
} seen;

static void
seen_add(seen *w, const char *fmt,...) __attribute__((format(printf, 2, 3)));

/* Appends a formatted entry to what was seen. */
static void
seen_add(seen *w, const char *fmt,...)
{
	size_t		len = strlen(w->log);
	va_list		ap;

	if (len)
		w->log[len++] = ' ';
	va_start(ap, fmt);
	vsnprintf(w->log + len, sizeof(w->log) - len, fmt, ap);
	va_end(ap);
}

/* The transaction callback: logs org:first-last/transaction start (+: not its end). */
static int
seen_transaction(eh_client *c, const char *org, const eh_event *const *events, int n, int ends, void *arg)
{
	seen	   *w = arg;

	(void) c;
	seen_add(w, "%s:%lld-%lld/%lld%s", org, (long long) events[0]->revision, (long long) events[n - 1]->revision,
			 (long long) events[0]->transaction_first_revision, ends ? "" : "+");
	return w->stop_after && ++w->calls >= w->stop_after;
}

/* The event callback: logs revision/transaction start (.: its end). */
static int
seen_event(eh_client *c, const eh_event *ev, void *arg)
{
	(void) c;
	seen_add(arg, "%lld/%lld%s", (long long) ev->revision, (long long) ev->transaction_first_revision,
			 ev->transaction_end ? "." : "");
	return 0;
}

/* The snapshot callback: logs org:phase:reason:head:version and each entity. */
static void
seen_snapshot(eh_client *c, const char *org, eh_snapshot_phase phase, int reason, const eh_entity *const *entities,
			  int n, int64_t head, const char *head_version, void *arg)
{
	seen	   *w = arg;

	(void) c;
	seen_add(w, "%s:%s:%d:%lld:%s", org, eh_snapshot_phase_name(phase), reason, (long long) head,
			 head_version ? head_version : "-");
	for (int i = 0; i < n; i++)
		seen_add(w, "%s/%s@%lld", entities[i]->event_type, entities[i]->entity_id, (long long) entities[i]->revision);
}

/*
 * A result as a fetch returns it: rows "revision first end" ("t"/"f"),
 * each event its own version, at head.
 */
static PGresult *
fetch_result(int64_t head, int nrows, const char *const *rows)
{
	static const char *const names[] = {
		"organization_id", "revision", "version_id", "pts", "ots", "event_type", "action", "entity_id",
		"correlation_id", "event_data", "lag", "transaction_first_revision", "transaction_end", "head_revision"
	};
	PGresAttDesc attrs[14];
	PGresult   *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	char		head_text[24];

	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i < 14; i++)
	{
		attrs[i].name = (char *) names[i];
		attrs[i].format = 0;
		attrs[i].typid = 25;
		attrs[i].typlen = -1;
		attrs[i].atttypmod = -1;
	}
	PQsetResultAttrs(res, 14, attrs);
	snprintf(head_text, sizeof(head_text), "%lld", (long long) head);
	for (int r = 0; r < nrows; r++)
	{
		char		rev[24],
					first[24],
					end[2],
					version[EH_VERSION_ID_LEN + 1];
		const char *values[14];

		sscanf(rows[r], "%23s %23s %1s", rev, first, end);
		snprintf(version, sizeof(version), "00000000-0000-4000-8000-%012lld", atoll(rev));
		values[0] = "acme";
		values[1] = rev;
		values[2] = version;
		values[3] = values[4] = "2026-01-01T00:00:00.000000Z";
		values[5] = "API";
		values[6] = "UPDATE";
		values[7] = "e";
		values[8] = version;
		values[9] = "{}";
		values[10] = "1.5";
		values[11] = first;
		values[12] = end;
		values[13] = head_text;
		for (int col = 0; col < 14; col++)
			PQsetvalue(res, r, col, (char *) values[col], (int) strlen(values[col]));
	}
	return res;
}

/* Hands a made fetch result to the delivery, as session.c would. */
static void
deliver(eh_client *c, eh_sub *s, PGresult *res)
{
	if (ehi_handle_delivery(c, OP_FETCH, s, res) == 0)
		PQclear(res);
}

/* A fetch's transactions, grouped for the transaction callback; the event callback as before. */
void
test_delivery(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	seen		w = {"", 0, 0};
	eh_sub	   *s;
	const char *batch[] = {"1 1 f", "2 1 f", "3 1 t", "4 4 t", "5 5 f", "6 5 f"};
	const char *rest[] = {"7 5 t"};

	eh_set_transaction_callback(c, seen_transaction, &w);
	eh_subscribe(c, "acme", 0);
	s = ehi_find_sub(c, "acme");
	deliver(c, s, fetch_result(7, 6, batch));
	check(strcmp(w.log, "acme:1-3/1 acme:4-4/4 acme:5-6/5+") == 0,
		  "delivery: one call per transaction; the part of one cut by the batch says it does not end it");
	check(s->cursor == 6 && strcmp(s->version, "00000000-0000-4000-8000-000000000006") == 0 && s->needs_fetch,
		  "delivery: the cursor at the last event; below the head, the next fetch is due");
	w.log[0] = '\0';
	deliver(c, s, fetch_result(7, 1, rest));
	check(strcmp(w.log, "acme:7-7/5") == 0 && s->cursor == 7 && !s->needs_fetch,
		  "delivery: the rest of the transaction ends it; at the head, nothing more is due");
	check(eh_stat(c, EH_STAT_EVENTS_DELIVERED) == 7, "delivery: every event counts as delivered");

	/* A callback that stops: the rest is held, from the next transaction on. */
	w.log[0] = '\0';
	w.stop_after = 1;
	eh_unsubscribe(c, "acme");
	eh_subscribe(c, "acme", 0);
	s = ehi_find_sub(c, "acme");
	deliver(c, s, fetch_result(7, 6, batch));
	check(strcmp(w.log, "acme:1-3/1") == 0 && s->cursor == 3 && c->held.res && c->held.row == 3,
		  "delivery: a stopping callback leaves the next transactions held");
	c->stop = 0;
	w.stop_after = 0;
	ehi_deliver_held(c);
	check(strcmp(w.log, "acme:1-3/1 acme:4-4/4 acme:5-6/5+") == 0 && s->cursor == 6 && !c->held.res,
		  "delivery: the held ones come next");

	/* Without a transaction callback: an event at a time, with the two fields. */
	w.log[0] = '\0';
	eh_set_transaction_callback(c, NULL, NULL);
	eh_set_event_callback(c, seen_event, &w);
	eh_unsubscribe(c, "acme");
	eh_subscribe(c, "acme", 0);
	s = ehi_find_sub(c, "acme");
	deliver(c, s, fetch_result(7, 6, batch));
	check(strcmp(w.log, "1/1 2/1 3/1. 4/4. 5/5 6/5") == 0 && s->cursor == 6,
		  "delivery: the event callback gets each event, with where its transaction starts and ends");

	/* A gap is never delivered. */
	w.log[0] = '\0';
	deliver(c, s, fetch_result(7, 1, batch));
	check(w.log[0] == '\0' && s->cursor == 6 && strstr(eh_error_message(c), "revision 1"),
		  "delivery: an event that is not cursor + 1 is refused");
	eh_client_free(c);
}

/* A result of the snapshot's queries. */
static PGresult *
tuples(int ncols, int nrows, const char *const *values)
{
	PGresAttDesc attrs[8];
	PGresult   *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);

	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i < ncols; i++)
	{
		attrs[i].name = (char *) "c";
		attrs[i].typid = 25;
		attrs[i].typlen = -1;
		attrs[i].atttypmod = -1;
	}
	PQsetResultAttrs(res, ncols, attrs);
	for (int r = 0; r < nrows; r++)
		for (int col = 0; col < ncols; col++)
		{
			const char *v = values[r * ncols + col];

			PQsetvalue(res, r, col, (char *) v, v ? (int) strlen(v) : -1);
		}
	return res;
}

/* Hands a made answer to the snapshot layer, as session.c would. */
static void
answer(eh_client *c, op_kind op, PGresult *res)
{
	ehi_handle_snapshot(c, op, res);
	PQclear(res);
}

/* The head and a page of two entities, as the snapshot's queries answer. */
static const char *const snap_head[] = {"42", "00000000-0000-4000-8000-000000000042"};
static const char *const snap_page[] = {
	"API", "B", "7", "00000000-0000-4000-8000-000000000007", "CREATE", "{}", "2026-01-01T00:00:00.000000Z",
	"API", "a", "9", "00000000-0000-4000-8000-000000000009", "UPDATE", "{\"v\": 1}", "2026-01-01T00:00:00.000000Z"
};

/* What ehi_next_snapshot_query() does before sending BEGIN: s's snapshot is open, next is due. */
static void
open_snapshot(eh_client *c, eh_sub *s, ehi_snap_next next)
{
	c->snap.sub = s;
	c->snap.open = 1;
	c->snap.next = next;
	c->snap.failures = c->link.failures;
}

/*
 * A whole snapshot: BEGIN with the head, pages, the keyset, COMMIT and
 * END; the cursor at the head.
 */
static void
test_snapshot_whole(eh_client *c, seen *w, eh_sub *s)
{
	open_snapshot(c, s, SNAP_NEXT_HEAD);
	answer(c, OP_SNAP_BEGIN, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	check(c->snap.next == SNAP_NEXT_HEAD && w->log[0] == '\0', "snapshot: BEGIN answered, the head is next");
	answer(c, OP_SNAP_HEAD, tuples(2, 1, snap_head));
	check(strcmp(w->log, "acme:begin:0:42:00000000-0000-4000-8000-000000000042") == 0 && c->snap.next == SNAP_NEXT_PAGE,
		  "snapshot: BEGIN goes to the callback with the head, reason 0 (initial)");
	w->log[0] = '\0';
	answer(c, OP_SNAP_PAGE, tuples(7, 2, snap_page));
	check(strcmp(w->log, "acme:entities:0:0:- API/B@7 API/a@9") == 0 && c->snap.next == SNAP_NEXT_PAGE &&
		  strcmp(c->snap.after_type, "API") == 0 && strcmp(c->snap.after_id, "a") == 0,
		  "snapshot: a page goes to the callback; the next starts after its last entity");
	check(ehi_snapshot_open(c) && s->cursor == -1, "snapshot: the transaction stays open between pages");
	w->log[0] = '\0';
	answer(c, OP_SNAP_PAGE, tuples(7, 0, snap_page));
	check(w->log[0] == '\0' && c->snap.next == SNAP_NEXT_COMMIT, "snapshot: an empty page: COMMIT is next");
	answer(c, OP_SNAP_END, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	check(strcmp(w->log, "acme:end:0:42:00000000-0000-4000-8000-000000000042") == 0 && !ehi_snapshot_open(c),
		  "snapshot: COMMIT answered: END with the head");
	check(s->cursor == 42 && strcmp(eh_cursor_version(c, "acme"), "00000000-0000-4000-8000-000000000042") == 0 &&
		  !s->wants_snapshot && s->needs_fetch, "snapshot: the cursor at the head, the events after it due");
	check(eh_stat(c, EH_STAT_SNAPSHOTS) == 1 && eh_stat(c, EH_STAT_SNAPSHOT_ENTITIES) == 2, "snapshot: counted");
}

/* A connection lost in the middle: ABORT, and it is wanted again. */
static void
test_snapshot_lost(eh_client *c, seen *w, eh_sub *s)
{
	w->log[0] = '\0';
	s->wants_snapshot = 1;
	s->snapshot_reason = EH_RESYNC_HISTORY_REMOVED;
	open_snapshot(c, s, SNAP_NEXT_HEAD);
	answer(c, OP_SNAP_HEAD, tuples(2, 1, snap_head));
	answer(c, OP_SNAP_PAGE, tuples(7, 2, snap_page));
	c->link.failures++;
	ehi_snapshot_check_link(c);
	check(strcmp(w->log, "acme:begin:1:42:00000000-0000-4000-8000-000000000042 acme:entities:1:0:- API/B@7 API/a@9"
				 " acme:abort:1:0:-") == 0, "snapshot: a lost connection gives ABORT after what was given");
	check(!ehi_snapshot_open(c) && s->wants_snapshot && s->cursor == 42,
		  "snapshot: the subscription still wants one, at its old cursor");
}

/* A subscription that goes during its snapshot: no callback, a ROLLBACK. */
static void
test_snapshot_unsubscribed(eh_client *c, seen *w, eh_sub *s)
{
	w->log[0] = '\0';
	open_snapshot(c, s, SNAP_NEXT_PAGE);
	c->snap.begun = 1;
	eh_unsubscribe(c, "acme");
	check(w->log[0] == '\0' && c->snap.sub == NULL && c->snap.next == SNAP_NEXT_ROLLBACK,
		  "snapshot: unsubscribed during it: rolled back, no callback");
	answer(c, OP_SNAP_END, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	check(!ehi_snapshot_open(c) && w->log[0] == '\0', "snapshot: the ROLLBACK closes it");
}

/*
 * The steps of a snapshot, from the answers; an ABORT when the connection
 * goes; a ROLLBACK when its subscription does.  (The queries themselves
 * go out in ehi_next_snapshot_query, which needs a connection: the TAP
 * suites run them.)
 */
void
test_snapshot_steps(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	seen		w = {"", 0, 0};
	eh_sub	   *s;

	eh_set_snapshot_callback(c, seen_snapshot, &w);
	check(eh_subscribe(c, "acme", EH_FROM_SNAPSHOT) == EH_OK && eh_cursor(c, "acme") == -1,
		  "snapshot: EH_FROM_SNAPSHOT with a callback; no cursor until it ends");
	check(eh_subscribe_at(c, "globex", EH_FROM_SNAPSHOT, "00000000-0000-4000-8000-000000000001") == EH_ERR_ARGUMENT,
		  "snapshot: no version with EH_FROM_SNAPSHOT");
	s = ehi_find_sub(c, "acme");
	check(s->wants_snapshot && ehi_sub_wanting_snapshot(c) && ehi_work_pending(c), "snapshot: it is due");
	test_snapshot_whole(c, &w, s);
	test_snapshot_lost(c, &w, s);
	test_snapshot_unsubscribed(c, &w, s);
	eh_client_free(c);
}

/*
 * The value of the sample named series (with its labels) in an
 * exposition, -1 if absent.
 */
static double
sample(const char *text, const char *series)
{
	size_t		n = strlen(series);

	for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		if (strncmp(line, series, n) == 0 && line[n] == ' ')
			return strtod(line + n + 1, NULL);
	return -1;
}

/* How many lines of text start with prefix. */
static int
lines_starting(const char *text, const char *prefix)
{
	int			count = 0;

	for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		count += strncmp(line, prefix, strlen(prefix)) == 0;
	return count;
}

/*
 * The text: snprintf's semantics, # HELP and # TYPE, the escaping of label
 * values, and the series of two subscriptions before any delivery.
 */
static void
test_metrics_text(eh_client *c, char *text, size_t size)
{
	char		small[16];
	int			n;
	int			m;

	check(eh_render_metrics(NULL, text, size) == -1, "metrics: -1 for a NULL client");
	eh_subscribe(c, "acme", 0);
	eh_subscribe(c, "we\"ird\\org\nname", EH_FROM_HEAD);
	n = eh_render_metrics(c, NULL, 0);
	m = eh_render_metrics(c, text, size);
	check(n > 0 && m == n && (int) strlen(text) == n, "metrics: the length it needs, without a buffer; all of it with one");
	memset(small, 'x', sizeof(small));
	check(eh_render_metrics(c, small, 10) == n && strlen(small) == 9 && strncmp(small, text, 9) == 0 &&
		  small[10] == 'x', "metrics: a buffer too small gets what fits and a NUL, and the length it needs");
	check(sample(text, "eventhub_client_connected") == 0, "metrics: not connected");
	check(lines_starting(text, "# TYPE eventhub_client_ready gauge") == 1 &&
		  lines_starting(text, "# HELP eventhub_client_ready ") == 1 &&
		  lines_starting(text, "# TYPE eventhub_client_resyncs_total counter") == 1 &&
		  lines_starting(text, "eventhub_client_ready{") == 2,
		  "metrics: # HELP and # TYPE once per family, a series per subscription");
	check(sample(text, "eventhub_client_ready{subscription=\"we\\\"ird\\\\org\\nname\"}") == 0,
		  "metrics: the label value escaped (quote, backslash, newline)");
	check(sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 0 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"we\\\"ird\\\\org\\nname\"}") == -1,
		  "metrics: the applied revision; none while a subscription waits for its head");
	check(sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"history_removed\"}") == 0 &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"version_mismatch\"}") == 0,
		  "metrics: every resync reason from the start");
}

/*
 * Readiness, freshness and the applied revision as fetches (made results)
 * reach the head, an eh_ack, and a poll that finds the head below the
 * cursor (a resync).
 */
static void
test_metrics_readiness(eh_client *c, char *text, size_t size)
{
	const char *below[] = {"1 1 t", "2 2 t"};
	const char *rest[] = {"3 3 t"};
	const char *ahead[] = {"1", "00000000-0000-4000-8000-000000000001", NULL, NULL, "f", "acme", "3"};
	eh_sub	   *s;
	PGresult   *res;

	/* A fetch below the head: not ready, not fresh; the rest at the head: both. */
	s = ehi_find_sub(c, "acme");
	s->stats.fresh_at -= 5000;
	c->link.op_sent_at = ehi_now_ms() - 2000;
	deliver(c, s, fetch_result(3, 2, below));
	eh_render_metrics(c, text, size);
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 0 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 5.0 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 2,
		  "metrics: a fetch below the head: applied, but neither ready nor fresh (since subscribing)");
	deliver(c, s, fetch_result(3, 1, rest));
	eh_render_metrics(c, text, size);
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 2.0 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") < 4.0 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 3,
		  "metrics: at the head: ready, fresh as of when the fetch was sent");
	eh_ack(c, "acme", 2);
	eh_render_metrics(c, text, size);
	check(sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 2,
		  "metrics: the applied revision is eh_ack's once it is used");

	/* A poll finds the head below the cursor: a resync, counted by reason; still ready. */
	c->link.op_sent_at = ehi_now_ms();
	res = tuples(7, 1, ahead);
	ehi_handle_delivery(c, OP_STATE, NULL, res);
	PQclear(res);
	eh_render_metrics(c, text, size);
	check(s->cursor == 1 &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"cursor_ahead\"}") == 1 &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"history_removed\"}") == 0 &&
		  sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") < 1.0,
		  "metrics: a resync counted by its reason; at the head it read, fresh");
}

/* The counters, as series. */
static void
test_metrics_counters(eh_client *c, char *text, size_t size)
{
	c->counters[EH_STAT_NOTIFICATIONS] = 5;
	c->counters[EH_STAT_POLLS] = 7;
	c->counters[EH_STAT_FETCHES] = 11;
	c->counters[EH_STAT_RECONNECTS] = 2;
	eh_render_metrics(c, text, size);
	check(sample(text, "eventhub_client_wakeups_total{source=\"notification\"}") == 5 &&
		  sample(text, "eventhub_client_wakeups_total{source=\"poll\"}") == 7 &&
		  sample(text, "eventhub_client_fetches_total") == 11 &&
		  sample(text, "eventhub_client_reconnects_total") == 2 &&
		  sample(text, "eventhub_client_events_delivered_total") == 3,
		  "metrics: wakeups by source, fetches, reconnects, events delivered");
}

/* Every organization: one subscription "*", ready once discovered at the head. */
static void
test_metrics_all(eh_client *c, char *text, size_t size)
{
	const char *orgs[] = {"x", "4", "00000000-0000-4000-8000-000000000004", "f",
	"y", "6", "00000000-0000-4000-8000-000000000006", "f"};
	eh_sub	   *q;
	PGresult   *res;

	eh_subscribe_all(c, EH_FROM_HEAD);
	eh_render_metrics(c, text, size);
	check(sample(text, "eventhub_client_ready{subscription=\"*\"}") == 0, "metrics: \"*\" not ready before a discovery");
	c->link.op_sent_at = ehi_now_ms();
	res = tuples(4, 2, orgs);
	ehi_handle_delivery(c, OP_DISCOVER, NULL, res);
	PQclear(res);
	if ((q = ehi_find_sub(c, "x")) != NULL)
		q->stats.fresh_at -= 9000;
	eh_render_metrics(c, text, size);
	check(q && q->automatic && sample(text, "eventhub_client_ready{subscription=\"*\"}") == 1 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"*\"}") == 10 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"*\"}") >= 9.0 &&
		  lines_starting(text, "eventhub_client_ready{subscription=\"x\"}") == 0 &&
		  lines_starting(text, "eventhub_client_ready{") == 3,
		  "metrics: the organizations followed are one series \"*\": ready, the sum of revisions, the stalest");
}

/*
 * eh_render_metrics: snprintf's semantics, the escaping, and the values it
 * shows as the delivery (made results) confirms cursors at the head,
 * resyncs, and follows every organization.
 */
void
test_metrics(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	char		text[8192];

	test_metrics_text(c, text, sizeof(text));
	test_metrics_readiness(c, text, sizeof(text));
	test_metrics_counters(c, text, sizeof(text));
	test_metrics_all(c, text, sizeof(text));
	eh_client_free(c);
}

/* Readiness from a snapshot, as of its head; a resync answered by one counts once. */
void
test_metrics_snapshot(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	seen		w = {"", 0, 0};
	char		text[8192];
	eh_sub	   *s;
	PGresult   *res;
	const char *head[] = {"42", "00000000-0000-4000-8000-000000000042"};
	const char *ahead[] = {"7", "00000000-0000-4000-8000-000000000007", NULL, NULL, "f", "acme", "42"};

	eh_set_snapshot_callback(c, seen_snapshot, &w);
	eh_subscribe(c, "acme", EH_FROM_SNAPSHOT);
	s = ehi_find_sub(c, "acme");
	open_snapshot(c, s, SNAP_NEXT_HEAD);
	c->link.op_sent_at = ehi_now_ms() - 3000;	/* snapshot_head() went out 3 s ago */
	answer(c, OP_SNAP_HEAD, tuples(2, 1, head));
	c->link.op_sent_at = ehi_now_ms();
	answer(c, OP_SNAP_PAGE, tuples(7, 0, head));
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 0,
		  "metrics: not ready while the snapshot is read");
	answer(c, OP_SNAP_END, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 42 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 3.0,
		  "metrics: a snapshot applied: ready at its head, fresh as of its head's query");

	/* The head went below the cursor: a snapshot answers the resync; counted once, still ready. */
	res = tuples(7, 1, ahead);
	ehi_handle_delivery(c, OP_STATE, NULL, res);
	PQclear(res);
	eh_render_metrics(c, text, sizeof(text));
	check(s->wants_snapshot &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"cursor_ahead\"}") == 1 &&
		  sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 3.0,
		  "metrics: a resync answered by a snapshot counts, and confirms nothing until the snapshot ends");
	eh_client_free(c);
}

/* A wait's answer, moved: the organizations of a text[] in PostgreSQL's output form. */
void
test_wait_answer(void)
{
	const char *literal = "{acme,\"two words\",\"a\\\"quote\",\"back\\\\slash\",\"{braces,commas}\",x}";
	const char *p = literal;
	char		buf[64];
	char		got[256] = "";

	while (ehi_next_array_element(&p, buf, sizeof(buf)))
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "[%s]", buf);
	check(strcmp(got, "[acme][two words][a\"quote][back\\slash][{braces,commas}][x]") == 0,
		  "wait: a text[] answer is split into its elements, quoting undone");
	p = "{}";
	check(!ehi_next_array_element(&p, buf, sizeof(buf)), "wait: {} names no organization");
	p = "{abcdefghij}";
	check(ehi_next_array_element(&p, buf, 5) && strcmp(buf, "abcd") == 0 &&
		  !ehi_next_array_element(&p, buf, 5),
		  "wait: an element longer than the buffer is cut, and the next one is found after it");
}
