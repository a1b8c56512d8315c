/*
 * delivery.c: what the client asks the server, and what it does with the
 * answers.
 *
 * The cursor of a subscription is the revision of the last event handed to
 * the application.  Everything else is a hint of where to look: a
 * notification, a poll of organization_states, a reconnect.  Events are
 * fetched with eventhub.transactions_since(organization, cursor, ...,
 * version), which returns them gapless and in order, in batches that end at
 * a transaction's end unless one transaction alone is over the limits, or
 * raises ZE001/ZE002/ZE003; an event is delivered only if its revision is
 * cursor + 1, and the cursor then moves to it (with a transaction callback,
 * to the last event of the transaction, or of its part).  So nothing is
 * skipped and nothing is delivered twice, whatever the hints do.
 *
 * A resync (ZE001/2/3, or a head that contradicts the cursor) calls the
 * resync callback at the head; with a snapshot callback it asks snapshot.c
 * for a snapshot instead, and so does EH_FROM_SNAPSHOT.
 *
 * One query is out at a time; session.c chooses it, asking here for the
 * next poll, tokens of organizations just discovered, the heads a resync
 * needs (ehi_next_catalog_query), and fetches, one subscription after
 * another, so that a busy organization does not starve the rest
 * (ehi_next_fetch).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A discovery that a notification asks for waits at least this long after the last. */
#define DISCOVER_MIN_INTERVAL_MS 100

/*
 * Fetch query: ISO 8601 UTC timestamps whatever the session's settings, the
 * delivery lag by the server's clock, where transactions begin and end, and
 * the head, so that a batch whose last event is below it calls for the
 * next at once.  The server cuts the batch at $3 events or $5 bytes (their
 * stored size), at a transaction's end.  The version at the cursor goes
 * along, so that a rewritten history raises ZE003 before anything past the
 * cursor is delivered.
 */
#define FETCH_SQL \
	"SELECT e.organization_id, e.revision, e.version_id::text," \
	" to_char(e.processed_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')," \
	" to_char(e.originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')," \
	" e.event_type, e.action, e.entity_id, e.correlation_id, e.event_data::text," \
	" (extract(epoch FROM clock_timestamp() - e.processed_timestamp) * 1000)::float8," \
	" e.transaction_first_revision, e.transaction_end, e.head_revision" \
	" FROM eventhub.transactions_since($1, $2, $3, NULLIF($4, '')::uuid, $5) e"

/* The columns of both fetch queries: COL_ORG to COL_UPTO (internal.h). */

/*
 * The fetch of 0.3.0, for a server without a transactions_since this role
 * may call (the extension not updated yet, a role granted events_since
 * only): events_since, each event its own transaction, no head; each
 * event's size as text with the sizes before it, so that a batch stops at
 * $5 bytes (always holding at least one event; OFFSET 0 keeps the data
 * converted to text once).
 */
#define LEGACY_FETCH_SQL \
	"SELECT organization_id, revision, version_id, pts, ots, event_type, action, entity_id," \
	" correlation_id, data, lag, revision, true, NULL::bigint, upto FROM (" \
	" SELECT f.*, sum(f.size) OVER (ORDER BY f.revision) AS upto FROM (" \
	"  SELECT t.*, octet_length(t.data) + octet_length(t.entity_id) + octet_length(t.correlation_id)" \
	"   + octet_length(t.event_type) + 160 AS size FROM (" \
	"   SELECT e.organization_id, e.revision, e.version_id::text AS version_id," \
	"    to_char(e.processed_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS pts," \
	"    to_char(e.originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS ots," \
	"    e.event_type, e.action, e.entity_id, e.correlation_id, e.event_data::text AS data," \
	"    (extract(epoch FROM clock_timestamp() - e.processed_timestamp) * 1000)::float8 AS lag" \
	"   FROM eventhub.events_since($1, $2, $3, NULLIF($4, '')::uuid) e OFFSET 0) t) f) g" \
	" WHERE upto - size < $5 ORDER BY revision"

/*
 * State query: per subscription, the head revision and version, the
 * version of the event at the cursor (to notice rewritten history), and the
 * token its notifications carry (NULL without read privilege: the fetch
 * then reports the refusal); and whether the server is a standby.
 */
#define STATE_SQL \
	"SELECT s.revision, s.version_id::text, e.version_id::text," \
	" CASE WHEN eventhub.has_organization_privilege(c.org, 'read')" \
	"  THEN eventhub.notification_token(c.org) END," \
	" pg_is_in_recovery(), c.org, c.cursor" \
	" FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS c(org, cursor, n)" \
	" LEFT JOIN eventhub.organization_states s ON s.organization_id = c.org" \
	" LEFT JOIN eventhub.events e ON e.organization_id = c.org AND e.revision = c.cursor" \
	" ORDER BY c.n"

/*
 * Discovery, for eh_subscribe_all(): every organization the role may read
 * (row-level security filters the rest), with its head; and whether the
 * server is a standby.  The tokens of the ones the client does not know yet
 * come with TOKENS_SQL.
 */
#define DISCOVER_SQL \
	"SELECT s.organization_id, s.revision, s.version_id::text, pg_is_in_recovery()" \
	" FROM eventhub.organization_states s"

#define TOKENS_SQL \
	"SELECT c.org, CASE WHEN eventhub.has_organization_privilege(c.org, 'read')" \
	" THEN eventhub.notification_token(c.org) END" \
	" FROM unnest($1::text[]) AS c(org)"

/*
 * Data keys of the subscriptions that have none (NULL without read
 * privilege), and the pid of the notifier, whose notifications alone are
 * believed to carry events.
 */
#define KEYS_SQL \
	"SELECT eventhub.notifier_pid(), c.org," \
	" CASE WHEN eventhub.has_organization_privilege(c.org, 'read')" \
	"  THEN eventhub.notification_data_key(c.org) END" \
	" FROM (VALUES (1)) AS one(x) LEFT JOIN unnest($1::text[]) AS c(org) ON true"

/* Data keys asked for in one query at most. */
#define KEYS_PER_QUERY 1000
/* After a failed keys query (other than for a missing function or privilege). */
#define KEYS_RETRY_MS 5000
/* A notification that claims to carry events from another process asks for
 * the notifier's pid again, at most this often. */
#define KEYS_MIN_INTERVAL_MS 1000

#define HEAD_SQL \
	"SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = $1"

/* -------------------------------------------------------- subscriptions */

eh_sub *
ehi_find_sub(const eh_client *c, const char *org)
{
	return ehi_map_get(&c->by_org, org);
}

/* A new subscription at the end of the list; NULL (error set) when out of memory. */
eh_sub *
ehi_add_sub(eh_client *c, const char *org, int64_t cursor, const char *version, int automatic)
{
	eh_sub	   *s = calloc(1, sizeof(eh_sub));
	eh_sub	  **tail;

	if (!s || !(s->org = strdup(org)) || ehi_map_put(&c->by_org, s->org, s) != 0)
	{
		if (s)
			free(s->org);
		free(s);
		ehi_set_error(c, "out of memory");
		return NULL;
	}
	s->cursor = cursor;
	snprintf(s->version, sizeof(s->version), "%s", version);
	if (version[0])
		ehi_versions_delivered(&s->seen, version);
	s->acked = -1;
	s->automatic = automatic;
	ehi_metrics_sub_started(c, s);
	/* Subscriptions keep their order: the state query relies on it. */
	for (tail = &c->subs; *tail; tail = &(*tail)->next)
		;
	*tail = s;
	return s;
}

/* The subscription's notifications carry token; a changed one replaces the old. */
static void
set_token(eh_client *c, eh_sub *s, const char *token)
{
	if (strcmp(s->token, token) == 0)
		return;
	if (s->token[0] && ehi_map_get(&c->by_token, s->token) == s)
		ehi_map_remove(&c->by_token, s->token);
	snprintf(s->token, sizeof(s->token), "%s", token);
	if (ehi_map_put(&c->by_token, s->token, s) != 0)
		s->token[0] = '\0';		/* out of memory: found by polls only */
	/* A new token (a rotated key) comes with a new data key. */
	s->has_key = 0;
	s->key_asked = 0;
	c->link.keys_due = 1;
}

static void
drop_held(eh_client *c)
{
	if (c->held.res)
		PQclear(c->held.res);
	c->held.res = NULL;
	c->held.sub = NULL;
}

/*
 * Called before a subscription goes away or restarts elsewhere: a query
 * out for it, or the rest of a stopped batch, answers the old cursor.
 */
void
ehi_forget_sub(eh_client *c, eh_sub *s)
{
	if (c->link.op_sub == s)
		c->link.op_sub = NULL;	/* its answer is dropped */
	if (c->fetch_next == s)
		c->fetch_next = s->next;
	if (c->held.sub == s)
		drop_held(c);
	ehi_snapshot_cancel(c, s);
}

/* Removes an explicit subscription. */
void
ehi_remove_sub(eh_client *c, eh_sub *s)
{
	ehi_forget_sub(c, s);
	for (eh_sub **p = &c->subs; *p; p = &(*p)->next)
	{
		if (*p == s)
		{
			*p = s->next;
			break;
		}
	}
	ehi_metrics_sub_ended(c, s);
	ehi_map_remove(&c->by_org, s->org);
	if (s->token[0] && ehi_map_get(&c->by_token, s->token) == s)
		ehi_map_remove(&c->by_token, s->token);
	free(s->org);
	free(s->config_hash);
	free(s);
}

/* Frees every subscription and what the delivery keeps. */
void
ehi_free_subs(eh_client *c)
{
	drop_held(c);
	while (c->subs)
		ehi_remove_sub(c, c->subs);
	ehi_map_free(&c->by_org);
	ehi_map_free(&c->by_token);
	free(c->all.tokens_pending);
	c->all.tokens_pending = NULL;
}

/* The subscription is at version ("" unknown). */
static void
set_version(eh_sub *s, const char *version)
{
	snprintf(s->version, sizeof(s->version), "%s", version);
	if (version[0])
		ehi_versions_delivered(&s->seen, version);
}

/*
 * With a snapshot callback, a resync is answered by a snapshot (unless the
 * last one was refused as incomplete): returns 1 when one is asked for.
 */
static int
resync_by_snapshot(eh_client *c, eh_sub *s, eh_resync_reason reason)
{
	if (!c->cb.snapshot || s->no_snapshot)
		return 0;
	ehi_log(c, EH_LOG_WARNING, "organization \"%s\" needs a resync (%s): reading a snapshot",
			s->org, eh_resync_reason_name(reason));
	s->wants_snapshot = 1;
	s->snapshot_reason = reason;
	s->resync_reason = 0;
	ehi_metrics_resync(s, reason);
	return 1;
}

/*
 * Tells the application to reload an organization and moves its cursor to
 * the head, read by the query being answered; or reads a snapshot instead.
 */
static void
resync(eh_client *c, eh_sub *s, eh_resync_reason reason, int64_t head, const char *head_version)
{
	if (resync_by_snapshot(c, s, reason))
		return;
	/*
	 * A snapshot refused as incomplete (ZE004) that answered a resync
	 * counted it already; an initial one (reason 0) did not.
	 */
	if (!s->no_snapshot || !s->snapshot_reason)
		ehi_metrics_resync(s, reason);
	s->no_snapshot = 0;
	ehi_log(c, EH_LOG_WARNING, "organization \"%s\" needs a resync (%s) at revision %lld",
			s->org, eh_resync_reason_name(reason), (long long) head);
	c->counters[EH_STAT_RESYNCS]++;
	s->cursor = head;
	s->resync_reason = 0;
	ehi_versions_reset(&s->seen);
	set_version(s, head_version ? head_version : "");
	/* needs_fetch stays: a notification may have named a revision above head */
	s->acked = -1;				/* the reload covers the head */
	if (c->cb.resync)
	{
		c->in_callback = 1;
		c->cb.resync(c, s->org, reason, head, c->cb.resync_arg);
		c->in_callback = 0;
	}
	ehi_metrics_at_head(c, s, c->link.op_sent_at);
}

/*
 * Compares a subscription with its organization's head: starts it if it
 * waits for the head, marks it for fetching if it is behind, resyncs it if
 * its history changed under it, or notes that it is at the head.
 * cursor_version: the version of the event at the cursor where the server
 * told it (NULL otherwise).
 */
static void
compare_head(eh_client *c, eh_sub *s, int64_t head, const char *head_version, const char *cursor_version)
{
	if (s->wants_snapshot)
		return;					/* the snapshot brings its own head */
	if (s->cursor < 0)
	{
		s->cursor = head;
		set_version(s, head_version);
		ehi_metrics_at_head(c, s, c->link.op_sent_at);
		return;
	}
	if (head < s->cursor)
		resync(c, s, EH_RESYNC_CURSOR_AHEAD, head, head_version);
	else if (s->version[0] && cursor_version && strcmp(cursor_version, s->version) != 0)
		resync(c, s, EH_RESYNC_VERSION_MISMATCH, head, head_version);
	else if (s->version[0] && head == s->cursor && s->cursor > 0 && !cursor_version &&
			 strcmp(head_version, s->version) != 0)
		resync(c, s, EH_RESYNC_VERSION_MISMATCH, head, head_version);
	else if (head > s->cursor)
		s->needs_fetch = 1;
	else
		ehi_metrics_at_head(c, s, c->link.op_sent_at);
}

/* A standby that was promoted: notifications may work now (session.c). */
static void
check_promotion(eh_client *c, int in_recovery)
{
	if (c->listen.mode == LISTEN_OFF && c->listen.no_listen == NO_LISTEN_STANDBY && !in_recovery &&
		c->link.conn.state == EHI_CONN_IDLE)
	{
		ehi_log(c, EH_LOG_INFO, "the server is no longer a standby");
		c->listen.promoted = 1; /* the session probes LISTEN again */
	}
}

/* ---------------------------------------------------------------- polls */

static int
send_state(eh_client *c)
{
	ehi_strbuf	names = {0};
	ehi_strbuf	revs = {0};
	const char *params[2];
	int			rc;

	ehi_sb_puts(&names, "{");
	ehi_sb_puts(&revs, "{");
	for (eh_sub *s = c->subs; s; s = s->next)
	{
		ehi_sb_array_element(&names, s->org);
		ehi_sb_printf(&revs, "%s%lld", revs.len > 1 ? "," : "", (long long) (s->cursor > 0 ? s->cursor : 0));
	}
	ehi_sb_puts(&names, "}");
	ehi_sb_puts(&revs, "}");
	if (names.oom || revs.oom)
	{
		ehi_sb_free(&names);
		ehi_sb_free(&revs);
		ehi_set_error(c, "out of memory");
		c->pending_error = EH_ERR_MEMORY;
		return -1;
	}
	params[0] = names.data;
	params[1] = revs.data;
	rc = ehi_send_stmt(c, OP_STATE, NULL, STMT_STATE, STATE_SQL, 2, params);
	ehi_sb_free(&names);
	ehi_sb_free(&revs);
	if (rc == 0)
		c->counters[EH_STAT_POLLS]++;
	return rc;
}

static void
handle_state(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "checking organization_states failed");
		return;
	}
	c->link.error_backoff_ms = c->cfg.backoff_initial_ms;

	/*
	 * Each row names its subscription and the cursor it was asked about:
	 * one unsubscribed, or taken over by eh_subscribe_at(), since the query
	 * went out is not another's, and is left to the next poll.
	 */
	for (int row = 0; row < PQntuples(res); row++)
	{
		eh_sub	   *s = ehi_find_sub(c, PQgetvalue(res, row, 5));
		int			registered = !PQgetisnull(res, row, 0);

		if (!s || (s->cursor > 0 ? s->cursor : 0) != strtoll(PQgetvalue(res, row, 6), NULL, 10))
			continue;
		if (!PQgetisnull(res, row, 3))
			set_token(c, s, PQgetvalue(res, row, 3));
		else
			s->has_key = 0;		/* read access revoked: its events are fetched (and refused) */
		compare_head(c, s, registered ? strtoll(PQgetvalue(res, row, 0), NULL, 10) : 0,
					 registered ? PQgetvalue(res, row, 1) : "",
					 PQgetisnull(res, row, 2) ? NULL : PQgetvalue(res, row, 2));
	}
	check_promotion(c, PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 4), "t") == 0);
}

/*
 * The answer to a discovery: every organization the role may read.  Ones
 * the client does not follow yet start at their head if they existed when
 * it first looked (and it follows from EH_FROM_HEAD), and from their first
 * event otherwise; they still need their token.  After a notification
 * with a token the client did not know, every token is read again: the
 * notification key may have been rotated (rotate_notification_key).
 */
static void
handle_discover(eh_client *c, PGresult *res)
{
	ehi_strbuf	missing = {0};
	int			n;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "discovering organizations failed");
		return;
	}
	c->link.error_backoff_ms = c->cfg.backoff_initial_ms;
	n = PQntuples(res);
	ehi_sb_puts(&missing, "{");
	for (int row = 0; row < n; row++)
	{
		const char *org = PQgetvalue(res, row, 0);
		int64_t		head = strtoll(PQgetvalue(res, row, 1), NULL, 10);
		const char *head_version = PQgetvalue(res, row, 2);
		eh_sub	   *s = ehi_find_sub(c, org);

		if (!s)
		{
			int			from_head = !c->all.discovered && c->all.from == EH_FROM_HEAD;
			int			from_snapshot = !c->all.discovered && c->all.from == EH_FROM_SNAPSHOT;

			s = ehi_add_sub(c, org, from_head ? head : from_snapshot ? -1 : 0,
							from_head ? head_version : "", 1);
			if (!s)
			{
				ehi_sb_free(&missing);
				c->pending_error = EH_ERR_MEMORY;
				return;
			}
			s->wants_snapshot = from_snapshot;
			c->counters[EH_STAT_DISCOVERIES]++;
			ehi_log(c, EH_LOG_DEBUG, "following organization \"%s\" from revision %lld",
					org, (long long) s->cursor);
		}
		if (!s->token[0] || c->all.refresh_tokens)
			ehi_sb_array_element(&missing, org);
		compare_head(c, s, head, head_version, NULL);
	}
	ehi_sb_puts(&missing, "}");
	/* An explicit subscription from the head of an organization that does not exist yet. */
	for (eh_sub *s = c->subs; s; s = s->next)
		if (s->cursor < 0)
			compare_head(c, s, 0, "", NULL);
	c->all.discovered = 1;
	c->all.refresh_tokens = 0;
	ehi_metrics_discovered(c, c->link.op_sent_at);
	if (missing.oom)
	{
		ehi_sb_free(&missing);
		ehi_set_error(c, "out of memory");
		c->pending_error = EH_ERR_MEMORY;
		return;
	}
	free(c->all.tokens_pending);
	c->all.tokens_pending = missing.len > 2 ? missing.data : NULL;
	if (!c->all.tokens_pending)
		ehi_sb_free(&missing);
	check_promotion(c, n > 0 && strcmp(PQgetvalue(res, 0, 3), "t") == 0);
}

static void
handle_tokens(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "reading notification tokens failed");
		return;
	}
	for (int row = 0; row < PQntuples(res); row++)
	{
		eh_sub	   *s = ehi_find_sub(c, PQgetvalue(res, row, 0));

		if (!s || PQgetisnull(res, row, 1))
			continue;
		if (s->token[0] && strcmp(s->token, PQgetvalue(res, row, 1)) != 0)
		{
			/* A new key: the unknown tokens were the old key's, or are known now. */
			if (c->all.nunknown > 0)
				ehi_log(c, EH_LOG_INFO, "notification tokens changed (a new notification key)");
			c->all.nunknown = 0;
		}
		set_token(c, s, PQgetvalue(res, row, 1));
	}
}

/*
 * Whether a token the client does not know is worth looking into: the
 * first time, yes (a new organization, or a new notification key), and it
 * is remembered; again, no (another role's organization), until the tokens
 * change or the memory is full.
 */
static int
unknown_token_is_new(eh_client *c, const char *token)
{
	for (int i = 0; i < c->all.nunknown; i++)
		if (strcmp(c->all.unknown[i], token) == 0)
			return 0;
	if (c->all.nunknown == EHI_UNKNOWN_TOKENS)
		c->all.nunknown = 0;
	snprintf(c->all.unknown[c->all.nunknown++], EH_TOKEN_LEN + 1, "%s", token);
	return 1;
}

/* -------------------------------------------------------------- fetches */

static void
send_fetch(eh_client *c, eh_sub *s)
{
	char		cursor_text[24];
	char		batch_text[12];
	char		bytes_text[12];
	const char *params[5];

	/*
	 * Cleared before the query, which sees every version notified so far:
	 * one it drains sets it again, unless the query returns it.
	 */
	s->needs_fetch = 0;
	ehi_versions_clear_pending(&s->seen);
	snprintf(cursor_text, sizeof(cursor_text), "%lld", (long long) s->cursor);
	snprintf(batch_text, sizeof(batch_text), "%d", c->cfg.batch_size);
	snprintf(bytes_text, sizeof(bytes_text), "%d", c->cfg.batch_bytes);
	params[0] = s->org;
	params[1] = cursor_text;
	params[2] = batch_text;
	params[3] = s->version;
	params[4] = bytes_text;
	switch (c->link.legacy_fetch ? ehi_send(c, OP_FETCH, s, LEGACY_FETCH_SQL, 5, params) :
			ehi_send_stmt(c, OP_FETCH, s, STMT_FETCH, FETCH_SQL, 5, params))
	{
		case 0:
			c->counters[EH_STAT_FETCHES]++;
			break;
		case 1:
			s->needs_fetch = 1; /* the statement is being prepared first */
			break;
		default:
			s->needs_fetch = 1;
			break;
	}
}

/* The event of a fetch's row; its strings point into res. */
static void
row_event(const PGresult *res, int row, eh_event *ev)
{
	ev->organization_id = PQgetvalue(res, row, COL_ORG);
	ev->revision = strtoll(PQgetvalue(res, row, COL_REVISION), NULL, 10);
	ev->version_id = PQgetvalue(res, row, COL_VERSION);
	ev->processed_timestamp = PQgetvalue(res, row, COL_PTS);
	ev->originated_timestamp = PQgetvalue(res, row, COL_OTS);
	ev->event_type = PQgetvalue(res, row, COL_TYPE);
	ev->action = PQgetvalue(res, row, COL_ACTION);
	ev->entity_id = PQgetvalue(res, row, COL_ENTITY);
	ev->correlation_id = PQgetvalue(res, row, COL_CORRELATION);
	ev->event_data = PQgetvalue(res, row, COL_DATA);
	ev->transaction_first_revision = PQgetisnull(res, row, COL_FIRST) ? ev->revision :
		strtoll(PQgetvalue(res, row, COL_FIRST), NULL, 10);
	ev->transaction_end = PQgetisnull(res, row, COL_END) || PQgetvalue(res, row, COL_END)[0] == 't';
}

/*
 * The rows from row on that go to one callback: the rest of the
 * transaction (up to the row that ends it, or to the end of the batch for
 * a transaction over the limits) with a transaction callback, one event
 * otherwise.  Returns the row after them.
 */
static int
group_end(const eh_client *c, const PGresult *res, int row)
{
	int			n = PQntuples(res);

	if (!c->cb.transaction)
		return row + 1;
	while (row < n)
	{
		int			ends = PQgetisnull(res, row, COL_END) || PQgetvalue(res, row, COL_END)[0] == 't';

		row++;
		if (ends)
			break;
	}
	return row;
}

/*
 * Hands a fetch's rows from row on to the callbacks: a transaction at a
 * time to the transaction callback, else an event at a time to the event
 * callback.  A callback that stops leaves the rest held (the result is
 * kept: returns 1) for the next eh_process(), which delivers it before
 * anything else, with no query and no wait.  Returns 0 when the result may
 * be freed.  asked_at: when the fetch was sent.
 */
static int
deliver_rows(eh_client *c, eh_sub *s, PGresult *res, int row, int64_t asked_at)
{
	int			n = PQntuples(res);
	int			truncated;

	while (row < n && !c->stop)
	{
		int			end = group_end(c, res, row);
		int			count = end - row;
		eh_event	one;
		eh_event   *events = count == 1 ? &one : malloc(sizeof(eh_event) * count);
		const eh_event **list = malloc(sizeof(eh_event *) * count);
		int			stop = 0;

		if (!events || !list)
		{
			if (events != &one)
				free(events);
			free(list);
			ehi_set_error(c, "out of memory");
			c->pending_error = EH_ERR_MEMORY;
			s->needs_fetch = 1;
			ehi_retry_later(c);
			return 0;
		}
		for (int i = 0; i < count; i++)
		{
			row_event(res, row + i, &events[i]);
			list[i] = &events[i];
			if (events[i].revision != s->cursor + 1 + i)
			{
				/* the server guarantees this; never deliver out of order */
				ehi_set_error(c, "server returned revision %lld of \"%s\" after %lld",
							  (long long) events[i].revision, s->org, (long long) (s->cursor + i));
				ehi_log(c, EH_LOG_ERROR, "%s", c->errmsg);
				c->pending_error = EH_ERR_SERVER;
				s->needs_fetch = 1;
				ehi_retry_later(c);
				if (events != &one)
					free(events);
				free(list);
				return 0;
			}
		}
		c->in_callback = 1;
		if (c->cb.transaction)
			stop = c->cb.transaction(c, s->org, list, count, events[count - 1].transaction_end,
									 c->cb.transaction_arg);
		else if (c->cb.event)
			stop = c->cb.event(c, &events[0], c->cb.event_arg);
		c->in_callback = 0;
		for (int i = 0; i < count - 1; i++)
			ehi_versions_delivered(&s->seen, events[i].version_id);
		s->cursor = events[count - 1].revision;
		set_version(s, events[count - 1].version_id);
		c->counters[EH_STAT_EVENTS_DELIVERED] += (uint64_t) count;
		c->last_lag_ms = strtod(PQgetvalue(res, end - 1, COL_LAG), NULL);
		c->delivered += count;
		if (stop)
			c->stop = 1;
		if (events != &one)
			free(events);
		free(list);
		row = end;
	}
	if (row < n)
	{
		c->held.res = res;
		c->held.sub = s;
		c->held.row = row;
		c->held.asked_at = asked_at;
		return 1;
	}

	/*
	 * A batch whose last event is below the head it was read at has more
	 * behind it (events_since's, without a head: a full batch, by count or
	 * by size).  Otherwise the query reached the head it saw: a
	 * notification drained meanwhile calls for another only if it named a
	 * version the query did not return.
	 */
	if (n == 0)
		truncated = 0;
	else if (!PQgetisnull(res, n - 1, COL_HEAD))
		truncated = strtoll(PQgetvalue(res, n - 1, COL_REVISION), NULL, 10) <
			strtoll(PQgetvalue(res, n - 1, COL_HEAD), NULL, 10);
	else
		truncated = n == c->cfg.batch_size ||
			(PQnfields(res) > COL_UPTO && strtoll(PQgetvalue(res, n - 1, COL_UPTO), NULL, 10) >= c->cfg.batch_bytes);
	if (truncated)
		s->needs_fetch = 1;
	else
	{
		/* Everything up to the head the query saw was delivered. */
		ehi_metrics_at_head(c, s, asked_at);
		if (s->needs_fetch && !ehi_versions_pending(&s->seen))
			s->needs_fetch = 0;
	}
	return 0;
}

/*
 * Delivers the rest of a batch a callback stopped, first thing in
 * eh_process(); returns 1 when a callback stopped again.
 */
int
ehi_deliver_held(eh_client *c)
{
	PGresult   *res = c->held.res;
	eh_sub	   *s = c->held.sub;

	if (!res)
		return 0;
	c->held.res = NULL;
	c->held.sub = NULL;
	if (deliver_rows(c, s, res, c->held.row, c->held.asked_at) == 0)
		PQclear(res);
	return c->held.res != NULL;
}

static int
handle_fetch(eh_client *c, eh_sub *s, PGresult *res)
{

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		int			reason = 0;

		/* ZE00n since 0.2.0; EH00n, their names in 0.1.0, are recognized too. */
		if (state && (strncmp(state, "ZE", 2) == 0 || strncmp(state, "EH", 2) == 0))
		{
			if (strcmp(state + 2, "001") == 0)
				reason = EH_RESYNC_HISTORY_REMOVED;
			else if (strcmp(state + 2, "002") == 0)
				reason = EH_RESYNC_CURSOR_AHEAD;
			else if (strcmp(state + 2, "003") == 0)
				reason = EH_RESYNC_VERSION_MISMATCH;
		}
		if (reason && !ehi_result_breaks_connection(&c->link.conn, res))
		{
			/* A snapshot, or read the head, then resync (OP_HEAD). */
			if (!resync_by_snapshot(c, s, (eh_resync_reason) reason))
				s->resync_reason = reason;
			return 0;
		}
		s->needs_fetch = 1;
		if (!c->link.legacy_fetch && state &&
			(strcmp(state, "42883") == 0 || strcmp(state, "42501") == 0) &&
			strstr(PQresultErrorMessage(res), "transactions_since"))
		{
			/* Until the extension is updated, or the role granted it. */
			ehi_log(c, EH_LOG_INFO, "eventhub.transactions_since cannot be used (%s): "
					"fetching with events_since, one event per transaction",
					PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
			c->link.legacy_fetch = 1;
			return 0;
		}
		ehi_query_failed(c, res, "fetching events failed");
		return 0;
	}
	c->link.error_backoff_ms = c->cfg.backoff_initial_ms;
	return deliver_rows(c, s, res, 0, c->link.op_sent_at);
}

static void
handle_head(eh_client *c, eh_sub *s, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "reading the head revision failed");
		return;
	}
	if (PQntuples(res) == 1)
		resync(c, s, (eh_resync_reason) s->resync_reason, strtoll(PQgetvalue(res, 0, 0), NULL, 10),
			   PQgetvalue(res, 0, 1));
	else
		resync(c, s, (eh_resync_reason) s->resync_reason, 0, "");
}

/*
 * The data keys not known yet are to be asked for again (a new connection,
 * a failed keys query): the role's privileges may have changed.
 */
void
ehi_keys_again(eh_client *c)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (!s->has_key)
			s->key_asked = 0;
	c->link.keys_due = 1;
}

/*
 * The answer to send_keys: the keys of the organizations asked for, and
 * the notifier's pid.  A server without a notification_data_key this role
 * may call (the extension not updated yet, the role not granted it) is
 * noted: its notifications are wake-ups only, as before.
 */
static void
handle_keys(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (state && (strcmp(state, "42883") == 0 || strcmp(state, "42501") == 0) &&
			!ehi_result_breaks_connection(&c->link.conn, res))
		{
			ehi_log(c, EH_LOG_INFO, "eventhub.notification_data_key cannot be used (%s): "
					"notifications are wake-ups only, every event is fetched",
					PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
			c->link.keys_unusable = 1;
			return;
		}
		if (ehi_result_failed(c, res, "reading data keys failed"))
			return;
		/* Events come by fetching meanwhile: not the application's error. */
		ehi_log(c, EH_LOG_WARNING, "reading data keys failed (retrying in %d s): %s",
				KEYS_RETRY_MS / 1000, PQresultErrorMessage(res));
		ehi_keys_again(c);
		c->link.keys_retry_at = ehi_now_ms() + KEYS_RETRY_MS;
		return;
	}
	for (int row = 0; row < PQntuples(res); row++)
	{
		eh_sub	   *s = PQgetisnull(res, row, 1) ? NULL : ehi_find_sub(c, PQgetvalue(res, row, 1));
		const char *hex = PQgetvalue(res, row, 2);

		if (!s || PQgetisnull(res, row, 2) || strncmp(hex, "\\x", 2) != 0 ||
			strlen(hex) != 2 + 2 * EHI_DATA_KEY_BYTES)
			continue;
		s->has_key = ehi_hex_bytes(hex + 2, s->data_key, EHI_DATA_KEY_BYTES) == 0;
	}
	c->link.notifier_pid = PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ?
		atoi(PQgetvalue(res, 0, 0)) : 0;
	/* More than one query's worth of organizations: the rest next. */
	for (eh_sub *s = c->subs; s; s = s->next)
		if (!s->has_key && !s->key_asked && s->token[0])
		{
			c->link.keys_due = 1;
			break;
		}
	if (c->link.notifier_pid && !c->link.cipher_ready)
	{
		ehi_sealed_prepare();
		c->link.cipher_ready = 1;
	}
}

/* --------------------------------------------------------- dispatching */

/*
 * The answer to one of the delivery's queries (OP_STATE to OP_HEAD).
 * Returns 1 when it kept res (the rest of a stopped batch), 0 when the
 * caller frees it.
 */
int
ehi_handle_delivery(eh_client *c, op_kind op, eh_sub *sub, PGresult *res)
{
	switch (op)
	{
		case OP_STATE:
			handle_state(c, res);
			break;
		case OP_DISCOVER:
			handle_discover(c, res);
			break;
		case OP_TOKENS:
			handle_tokens(c, res);
			break;
		case OP_KEYS:
			handle_keys(c, res);
			break;
		case OP_FETCH:
			if (sub)
				return handle_fetch(c, sub, res);
			break;
		case OP_HEAD:
			if (sub)
				handle_head(c, sub, res);
			break;
		default:
			break;
	}
	return 0;
}

/* The next subscription to fetch, round robin; NULL if none needs it. */
static eh_sub *
next_to_fetch(eh_client *c)
{
	eh_sub	   *start = c->fetch_next ? c->fetch_next : c->subs;
	eh_sub	   *s = start;

	if (!s)
		return NULL;
	do
	{
		if (s->needs_fetch && !s->resync_reason && !s->wants_snapshot)
		{
			c->fetch_next = s->next;
			return s;
		}
		s = s->next ? s->next : c->subs;
	} while (s != start);
	return NULL;
}

/*
 * Asks for the data keys the subscriptions lack (up to KEYS_PER_QUERY of
 * them) and the notifier's pid.  Returns as ehi_next_catalog_query().
 */
static int
send_keys(eh_client *c)
{
	ehi_strbuf	orgs = {0};
	const char *params[1];
	int			n = 0,
				rc;

	ehi_sb_puts(&orgs, "{");
	for (eh_sub *s = c->subs; s && n < KEYS_PER_QUERY; s = s->next)
	{
		if (s->has_key || s->key_asked || !s->token[0])
			continue;
		n++;
		ehi_sb_array_element(&orgs, s->org);
		s->key_asked = 1;
	}
	ehi_sb_puts(&orgs, "}");
	if (orgs.oom)
	{
		ehi_sb_free(&orgs);
		c->pending_error = EH_ERR_MEMORY;
		return -1;
	}
	/* Until this answers; another due by then asks again. */
	c->link.keys_due = 0;
	c->link.keys_asked_at = ehi_now_ms();
	params[0] = orgs.data;
	rc = ehi_send(c, OP_KEYS, NULL, KEYS_SQL, 1, params);
	ehi_sb_free(&orgs);
	return rc < 0 ? -1 : 1;
}

/*
 * Sends the poll when due (a discovery when following every organization),
 * tokens still to read, or the head a resync needs.  Returns 1 when a
 * query went out, 0 when none is due, -1 when the connection broke.
 */
int
ehi_next_catalog_query(eh_client *c)
{
	int64_t		now = ehi_now_ms();
	int			rc;

	if (c->all.on && c->all.next_discover_at && now >= c->all.next_discover_at)
	{
		/* A notification named an organization the client does not know. */
		c->link.next_poll_at = 0;
		c->all.next_discover_at = 0;
	}
	if (now >= c->link.next_poll_at)
	{
		ehi_schedule_poll(c);
		if (c->all.on)
		{
			c->all.next_discover_at = 0;
			c->all.last_discover_at = now;
			rc = ehi_send_stmt(c, OP_DISCOVER, NULL, STMT_DISCOVER, DISCOVER_SQL, 0, NULL);
			if (rc == 0)
				c->counters[EH_STAT_POLLS]++;
			else if (rc == 1)
				c->link.next_poll_at = 0;
			return rc < 0 ? -1 : 1;
		}
		if (c->subs)
		{
			rc = send_state(c);
			if (rc == 1)
				c->link.next_poll_at = 0;
			return rc < 0 ? -1 : 1;
		}
	}
	if (c->all.tokens_pending)
	{
		const char *params[1] = {c->all.tokens_pending};

		rc = ehi_send(c, OP_TOKENS, NULL, TOKENS_SQL, 1, params);
		free(c->all.tokens_pending);
		c->all.tokens_pending = NULL;
		return rc < 0 ? -1 : 1;
	}
	for (eh_sub *s = c->subs; s; s = s->next)
	{
		if (s->resync_reason)
		{
			const char *params[1] = {s->org};

			return ehi_send(c, OP_HEAD, s, HEAD_SQL, 1, params) < 0 ? -1 : 1;
		}
	}
	if (c->link.keys_due && !c->link.keys_unusable && c->link.events_channel &&
		c->listen.mode == LISTEN_ON && now >= c->link.keys_retry_at)
		return send_keys(c);
	return 0;
}

/* Sends the next fetch, round robin.  Returns as ehi_next_catalog_query(). */
int
ehi_next_fetch(eh_client *c)
{
	eh_sub	   *s = next_to_fetch(c);

	if (!s)
		return 0;
	send_fetch(c, s);
	return c->link.conn.state == EHI_CONN_BUSY ? 1 : -1;
}

/* Whether the client has queries to send as soon as it can. */
int
ehi_work_pending(const eh_client *c)
{
	if (c->all.tokens_pending)
		return 1;
	if (c->held.res)
		return 1;
	if (c->stop)
		return 0;
	if (ehi_snapshot_open(c))
		return 1;
	for (const eh_sub *s = c->subs; s; s = s->next)
		if (s->needs_fetch || s->resync_reason || s->wants_snapshot)
			return 1;
	return 0;
}

/*
 * Delivers the events a notification carries (sealed.c) to subscription s,
 * without a fetch, when it may: they come from the notifier this server
 * named (anyone may NOTIFY; PostgreSQL stamps the sender's pid, which
 * nobody can forge), they open under s's data key, the first follows the
 * cursor, and the event before it is the one at the cursor (its version;
 * a rewritten history is left to the fetch, which raises ZE003).  Only
 * while nothing else is under way: no query out (one could be a fetch of
 * the same events, or a poll that compares heads with the cursor), no
 * batch held, no snapshot.  Returns 1 when they were delivered, 0 when
 * the notification is a wake-up as any other.
 */
static int
deliver_sealed(eh_client *c, eh_sub *s, int pid, const char *token, const char *version,
			   const char *sealed)
{
	char		previous[EH_VERSION_ID_LEN + 1];
	PGresult   *res;
	int64_t		first,
				last;

	if (c->link.notifier_pid == 0 || pid != c->link.notifier_pid)
	{
		/* Perhaps a new notifier: ask again, but not at every such notification. */
		if (c->link.notifier_pid != 0 && ehi_now_ms() - c->link.keys_asked_at >= KEYS_MIN_INTERVAL_MS)
			c->link.keys_due = 1;
		return 0;
	}
	if (!s->has_key || s->cursor < 0 || s->wants_snapshot || s->resync_reason || c->held.res ||
		c->stop || c->pending_error || c->link.conn.state != EHI_CONN_IDLE || ehi_snapshot_open(c))
		return 0;
	res = ehi_sealed_open(s->data_key, s->org, token, version, sealed, previous);
	if (!res)
	{
		ehi_log(c, EH_LOG_DEBUG, "the events a notification about \"%s\" carries do not open: fetching them", s->org);
		return 0;
	}
	first = strtoll(PQgetvalue(res, 0, COL_REVISION), NULL, 10);
	last = strtoll(PQgetvalue(res, PQntuples(res) - 1, COL_REVISION), NULL, 10);

	/*
	 * Events at or below the cursor say nothing of the history after it (a
	 * failover may have rewritten it): the notification's version decides,
	 * as for any other, whether to fetch.
	 */
	if (first != s->cursor + 1 || last <= s->cursor ||
		(first > 1 && (!s->version[0] || strcmp(previous, s->version) != 0)))
	{
		PQclear(res);
		return 0;
	}
	c->counters[EH_STAT_SEALED_DELIVERIES]++;
	if (deliver_rows(c, s, res, 0, ehi_now_ms()) == 0)
		PQclear(res);
	return 1;
}

/* ------------------------------------------------------- notifications */

/*
 * Takes the notifications libpq has buffered; marks subscriptions behind.
 * A notification names an organization by its token and the version it
 * moved to: one the subscription is already at needs no fetch.  An unknown
 * token is another organization's, unless a subscription still waits for
 * its token, which the next poll brings, or the client follows every
 * organization: then it looks for new ones and reads every token again (a
 * rotated notification key changes them all), once per unknown token.  The
 * zero token says that
 * announcements were lost (the server's queue was full, or its notifier
 * restarted): poll now.
 */
void
ehi_drain_notifications(eh_client *c)
{
	PGnotify   *n;

	while (c->link.conn.pg && (n = PQnotifies(c->link.conn.pg)) != NULL)
	{
		char		token[EH_TOKEN_LEN + 1];
		char		version[EH_VERSION_ID_LEN + 1];

		/*
		 * The probe's answer counts only if it came while the client was
		 * idle: a transaction-pooling proxy delivers what arrives during a
		 * query, never what arrives between them.
		 */
		if (c->listen.mode == LISTEN_PROBING && strcmp(n->relname, c->listen.probe_channel) == 0 &&
			c->link.conn.state == EHI_CONN_IDLE)
			c->listen.probe_received = 1;
		else if (strcmp(n->relname, "eventhub") == 0 || strcmp(n->relname, "eventhub_events") == 0)
		{
			char	   *sealed = NULL;

			c->counters[EH_STAT_NOTIFICATIONS]++;
			if (ehi_parse_payload(n->extra, token, version, &sealed) == 0)
			{
				eh_sub	   *s = ehi_map_get(&c->by_token, token);

				if (strspn(token, "0") == EH_TOKEN_LEN)
				{
					c->link.next_poll_at = 0;
					/* The notifier may have restarted: its pid again before believing it. */
					c->link.notifier_pid = 0;
					c->link.keys_due = 1;
				}
				else if (s && s->cursor < 0 && !s->wants_snapshot)
					c->link.next_poll_at = 0;
				else if (s && sealed && deliver_sealed(c, s, n->be_pid, token, version, sealed))
					;			/* delivered */
				else if (s && ehi_versions_notified(&s->seen, version))
					s->needs_fetch = 1;
				else if (!s && c->all.on)
				{
					int64_t		at = c->all.last_discover_at + DISCOVER_MIN_INTERVAL_MS;

					if (unknown_token_is_new(c, token))
					{
						c->all.refresh_tokens = 1;
						if (!c->all.next_discover_at)
							c->all.next_discover_at = at > ehi_now_ms() ? at : 1;
					}
				}
				else if (!s)
				{
					for (eh_sub *t = c->subs; t; t = t->next)
						if (!t->token[0])
						{
							c->link.next_poll_at = 0;
							break;
						}
				}
			}
			else
			{
				ehi_log(c, EH_LOG_WARNING, "malformed eventhub notification payload: %s", n->extra);
				c->link.next_poll_at = 0;
			}
			free(sealed);
		}
		PQfreemem(n);
	}
}
