/*
 * snapshot_pages.c: a snapshot's transaction and its pages, on the client's
 * connection: the state of an organization as each live entity's latest
 * event, consistent with a head (revision, version) from which the
 * subscription then goes on with its events.
 *
 * One snapshot at a time, as docs/protocol.md describes it:
 *	  BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY
 *	  SELECT ... FROM eventhub.snapshot_head(org)
 *	  SELECT ... FROM eventhub.snapshot_entities(org, head, <last type>, <last id>, ...)
 *		  ... a page at a time, keyed by the last entity of the one before,
 *		  until a page comes back empty
 *	  COMMIT
 * Every query of it sees one MVCC snapshot, so the pages are consistent
 * with each other and with the head.  Each page is one result of at most
 * the batch size (and about the batch bytes), handed to the snapshot
 * callback and freed: the client's memory does not grow with the number of
 * entities.  While the transaction is open nothing else goes on the
 * connection (session.c asks here first): a publish or a heartbeat would
 * be refused by READ ONLY, and notifications wait for the COMMIT anyway.
 *
 * What ends a snapshot early: SQLSTATE ZE005 (the head moved: not inside
 * one transaction, but the server says so) and a lost connection give the
 * callback ABORT and start the snapshot over; ZE004 (the organization's
 * state is incomplete, which no retry fixes) goes to the resync callback
 * when there is one (resync.c reads the head and calls it), and is
 * retried with backoff otherwise; any other refusal is retried with
 * backoff.  A subscription that goes away meanwhile gets no callback: its
 * transaction is rolled back.
 *
 * Below the delivery files, which ask for a snapshot (on EH_FROM_SNAPSHOT
 * and on a resync) by setting a subscription's wants_snapshot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char BEGIN_SQL[] = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";

static const char HEAD_SQL[] = "SELECT h.revision, h.version_id::text FROM eventhub.snapshot_head($1) h";

/* The keyset ($3, $4) is NULL for the first page; $7 NULL for an organization without events. */
static const char PAGE_SQL[] =
	"SELECT p.event_type, p.entity_id, p.revision, p.version_id::text, p.action, p.event_data::text,"
	" to_char(p.originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
	" FROM eventhub.snapshot_entities($1, $2, $3, $4, $5, $6, NULLIF($7, '')::uuid) p";

/* Whether a snapshot's transaction is open: nothing else may go on the connection. */
int
ehi_snapshot_open(const eh_client *c)
{
	return c->snap.open;
}

static void
clear_keyset(ehi_snapshot *snap)
{
	free(snap->after_type);
	free(snap->after_id);
	snap->after_type = NULL;
	snap->after_id = NULL;
}

/* Calls the snapshot callback for the snapshot under way. */
static void
callback(eh_client *c, eh_snapshot_phase phase, const eh_entity *const *entities, int n)
{
	ehi_snapshot *snap = &c->snap;

	if (!c->cb.snapshot || !snap->sub)
		return;
	c->in_callback = 1;
	c->cb.snapshot(c, snap->sub->org, phase, snap->sub->snapshot_reason, entities, n,
				   phase == EH_SNAPSHOT_BEGIN || phase == EH_SNAPSHOT_END ? snap->head : 0,
				   (phase == EH_SNAPSHOT_BEGIN || phase == EH_SNAPSHOT_END) && snap->head_version[0] ?
				   snap->head_version : NULL, c->cb.snapshot_arg);
	c->in_callback = 0;
}

/*
 * The snapshot under way ends without END: the application discards what
 * it gave (ABORT, once BEGIN went out), and its transaction is rolled back
 * if it is still open.  The subscription keeps wanting a snapshot.
 */
static void
abort_snapshot(eh_client *c, const char *why)
{
	ehi_snapshot *snap = &c->snap;

	if (snap->sub)
		ehi_log(c, EH_LOG_INFO, "snapshot of organization \"%s\" aborted (%s); it starts over",
				snap->sub->org, why);
	if (snap->begun)
		callback(c, EH_SNAPSHOT_ABORT, NULL, 0);
	snap->begun = 0;
	snap->next = SNAP_NEXT_ROLLBACK;
	clear_keyset(snap);
}

/*
 * A lost connection took the snapshot's transaction with it: ABORT, and
 * the subscription starts a new snapshot on the next connection.
 */
void
ehi_snapshot_check_link(eh_client *c)
{
	ehi_snapshot *snap = &c->snap;

	if (!snap->open || snap->failures == c->link.failures)
		return;
	abort_snapshot(c, "connection lost");
	snap->open = 0;
	snap->sub = NULL;
}

/*
 * The subscription goes away or starts over elsewhere: its snapshot ends
 * without a callback, its transaction is rolled back.
 */
void
ehi_snapshot_cancel(eh_client *c, eh_sub *s)
{
	if (c->snap.sub != s)
		return;
	c->snap.sub = NULL;
	c->snap.begun = 0;
	c->snap.next = SNAP_NEXT_ROLLBACK;
	clear_keyset(&c->snap);
}

/*
 * For eh_client_free(): rolls an open snapshot's transaction back, waiting
 * at most until deadline, so that the deregistration after it may write on
 * the connection.
 */
void
ehi_snapshot_rollback_now(eh_client *c, int64_t deadline)
{
	ehi_conn   *ac = &c->link.conn;
	int64_t		left = deadline - ehi_now_ms();

	if (!c->snap.open || ac->state == EHI_CONN_NONE || ac->state == EHI_CONN_CONNECTING || left <= 0)
		return;
	if (!ehi_conn_wait_idle(ac, deadline) ||
		ehi_conn_send(ac, "ROLLBACK", NULL, 0, 0, NULL, (int) left) != 0 ||
		!ehi_conn_wait_idle(ac, deadline))
		return;
	c->snap.open = 0;
}

/* Frees what the snapshot keeps, without callbacks (eh_client_free). */
void
ehi_snapshot_free(eh_client *c)
{
	c->snap.sub = NULL;
	c->snap.begun = 0;
	clear_keyset(&c->snap);
}

/* Sends a query of the snapshot; returns 1 when it went out, -1 when the connection broke. */
static int
send_query(eh_client *c, op_kind op, const char *sql, int nparams, const char *const *params)
{
	if (ehi_send(c, op, NULL, sql, nparams, params) != 0)
	{
		ehi_snapshot_check_link(c);
		return -1;
	}
	return 1;
}

static int
send_page(eh_client *c)
{
	ehi_snapshot *snap = &c->snap;
	char		head_text[24];
	char		batch_text[12];
	char		bytes_text[12];
	const char *params[7];

	snprintf(head_text, sizeof(head_text), "%lld", (long long) snap->head);
	snprintf(batch_text, sizeof(batch_text), "%d", c->cfg.batch_size);
	snprintf(bytes_text, sizeof(bytes_text), "%d", c->cfg.batch_bytes);
	params[0] = snap->sub->org;
	params[1] = head_text;
	params[2] = snap->after_type;
	params[3] = snap->after_id;
	params[4] = batch_text;
	params[5] = bytes_text;
	params[6] = snap->head_version;
	return send_query(c, OP_SNAP_PAGE, PAGE_SQL, 7, params);
}

/*
 * Sends the next query of the open snapshot, or starts the snapshot of s,
 * a subscription that wants one (NULL: none does).  Returns 1 when a query
 * went out, 0 when none is due, -1 when the connection broke.
 */
int
ehi_next_snapshot_query(eh_client *c, eh_sub *s)
{
	ehi_snapshot *snap = &c->snap;

	ehi_snapshot_check_link(c);
	if (snap->open)
	{
		if (!snap->sub)
			snap->next = SNAP_NEXT_ROLLBACK;
		switch (snap->next)
		{
			case SNAP_NEXT_HEAD:
				{
					const char *params[1] = {snap->sub->org};

					return send_query(c, OP_SNAP_HEAD, HEAD_SQL, 1, params);
				}
			case SNAP_NEXT_PAGE:
				return send_page(c);
			case SNAP_NEXT_COMMIT:
				return send_query(c, OP_SNAP_END, "COMMIT", 0, NULL);
			case SNAP_NEXT_ROLLBACK:
				return send_query(c, OP_SNAP_END, "ROLLBACK", 0, NULL);
		}
		return 0;
	}
	if (s)
	{
		clear_keyset(snap);
		memset(snap, 0, sizeof(*snap));
		snap->sub = s;
		snap->open = 1;
		snap->next = SNAP_NEXT_HEAD;
		snap->failures = c->link.failures;
		ehi_log(c, EH_LOG_DEBUG, "reading a snapshot of organization \"%s\"", s->org);
		return send_query(c, OP_SNAP_BEGIN, BEGIN_SQL, 0, NULL);
	}
	return 0;
}

/*
 * A query of the snapshot failed.  ZE005: abort and start over at once;
 * ZE004: the state is incomplete (see the top of the file); anything else:
 * abort, and retry after a backoff.
 */
static void
snapshot_failed(eh_client *c, PGresult *res)
{
	ehi_snapshot *snap = &c->snap;
	eh_sub	   *s = snap->sub;
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	if (ehi_result_failed(c, res, "reading a snapshot failed"))
	{
		ehi_snapshot_check_link(c);
		return;
	}
	if (state && strcmp(state, "ZE005") == 0)
	{
		abort_snapshot(c, "the head moved");
		return;
	}
	ehi_set_result_error(c, &c->link.conn, res, "reading a snapshot failed");
	ehi_log(c, EH_LOG_ERROR, "%s", c->errmsg);
	abort_snapshot(c, state ? state : "refused");
	if (s && state && strcmp(state, "ZE004") == 0 && c->cb.resync)
	{
		/* resync.c reads the head and calls the resync callback */
		s->wants_snapshot = 0;
		s->no_snapshot = 1;
		s->resync_reason = s->snapshot_reason ? s->snapshot_reason : EH_RESYNC_HISTORY_REMOVED;
		return;
	}
	ehi_retry_later(c);
	c->pending_error = EH_ERR_SERVER;
}

/* The head the snapshot is read at: BEGIN goes to the callback. */
static void
handle_head(eh_client *c, PGresult *res)
{
	ehi_snapshot *snap = &c->snap;

	if (PQntuples(res) != 1)
	{
		ehi_set_error(c, "reading a snapshot failed: snapshot_head returned %d rows", PQntuples(res));
		ehi_log(c, EH_LOG_ERROR, "%s", c->errmsg);
		abort_snapshot(c, "no head");
		ehi_retry_later(c);
		c->pending_error = EH_ERR_SERVER;
		return;
	}
	snap->head = PQgetisnull(res, 0, 0) ? 0 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	snap->head_asked_at = c->link.op_sent_at;	/* the transaction's snapshot is as of then */
	snprintf(snap->head_version, sizeof(snap->head_version), "%s",
			 PQgetisnull(res, 0, 1) ? "" : PQgetvalue(res, 0, 1));
	snap->next = SNAP_NEXT_PAGE;
	snap->begun = 1;
	callback(c, EH_SNAPSHOT_BEGIN, NULL, 0);
}

/*
 * A page: its entities go to the callback, its last one is where the next
 * page starts.  An empty page ends the snapshot: a page short of the batch
 * size may still have been cut by the batch bytes, as the server measures
 * them, so only an empty one proves that nothing is left.
 */
static void
handle_page(eh_client *c, PGresult *res)
{
	ehi_snapshot *snap = &c->snap;
	int			n = PQntuples(res);
	eh_entity  *entities;
	const eh_entity **list;

	if (n == 0)
	{
		snap->next = SNAP_NEXT_COMMIT;
		return;
	}
	entities = malloc(sizeof(eh_entity) * n);
	list = malloc(sizeof(eh_entity *) * n);
	clear_keyset(snap);
	if (!entities || !list ||
		!(snap->after_type = strdup(PQgetvalue(res, n - 1, 0))) ||
		!(snap->after_id = strdup(PQgetvalue(res, n - 1, 1))))
	{
		free(entities);
		free(list);
		ehi_set_error(c, "out of memory");
		abort_snapshot(c, "out of memory");
		ehi_retry_later(c);
		c->pending_error = EH_ERR_MEMORY;
		return;
	}
	for (int i = 0; i < n; i++)
	{
		eh_entity  *e = &entities[i];

		e->organization_id = snap->sub->org;
		e->event_type = PQgetvalue(res, i, 0);
		e->entity_id = PQgetvalue(res, i, 1);
		e->revision = strtoll(PQgetvalue(res, i, 2), NULL, 10);
		e->version_id = PQgetvalue(res, i, 3);
		e->action = PQgetvalue(res, i, 4);
		e->event_data = PQgetvalue(res, i, 5);
		e->originated_timestamp = PQgetvalue(res, i, 6);
		list[i] = e;
	}
	callback(c, EH_SNAPSHOT_ENTITIES, list, n);
	snap->entities += n;
	c->counters[EH_STAT_SNAPSHOT_ENTITIES] += (uint64_t) n;
	free(entities);
	free(list);
}

/*
 * COMMIT answered: the snapshot is complete.  The subscription is at its
 * head, and fetches what came after it.
 */
static void
finish(eh_client *c)
{
	ehi_snapshot *snap = &c->snap;
	eh_sub	   *s = snap->sub;

	ehi_log(c, EH_LOG_DEBUG, "snapshot of organization \"%s\" read: %lld entities at revision %lld",
			s->org, (long long) snap->entities, (long long) snap->head);
	s->cursor = snap->head;
	ehi_versions_reset(&s->seen);
	snprintf(s->version, sizeof(s->version), "%s", snap->head_version);
	if (snap->head_version[0])
		ehi_versions_delivered(&s->seen, snap->head_version);
	s->wants_snapshot = 0;
	s->needs_fetch = 1;			/* what was committed since */
	s->resync_reason = 0;
	s->acked = -1;				/* the snapshot covers the head */
	ehi_stats_at_head(c, s, snap->head_asked_at);
	c->counters[EH_STAT_SNAPSHOTS]++;
	c->link.error_backoff_ms = c->cfg.backoff_initial_ms;
	callback(c, EH_SNAPSHOT_END, NULL, 0);
	s->snapshot_reason = 0;
	snap->begun = 0;
	snap->sub = NULL;
}

/* The answer to one of the snapshot's queries (OP_SNAP_BEGIN to OP_SNAP_END). */
void
ehi_handle_snapshot(eh_client *c, op_kind op, PGresult *res)
{
	ehi_snapshot *snap = &c->snap;
	ExecStatusType status = PQresultStatus(res);

	if (!snap->open)
		return;
	if (op == OP_SNAP_END)
	{
		int			committed = snap->next == SNAP_NEXT_COMMIT;

		if (status != PGRES_COMMAND_OK)
		{
			if (ehi_result_failed(c, res, "ending a snapshot failed"))
			{
				ehi_snapshot_check_link(c);
				return;
			}
			/* Not in a transaction any more, whatever the error: start over. */
			ehi_set_result_error(c, &c->link.conn, res, "ending a snapshot failed");
			ehi_log(c, EH_LOG_ERROR, "%s", c->errmsg);
			abort_snapshot(c, "COMMIT failed");
			committed = 0;
		}
		snap->open = 0;
		if (committed && snap->sub)
			finish(c);
		snap->sub = NULL;
		clear_keyset(snap);
		return;
	}
	if (status != (op == OP_SNAP_BEGIN ? PGRES_COMMAND_OK : PGRES_TUPLES_OK))
	{
		snapshot_failed(c, res);
		return;
	}
	if (!snap->sub || snap->next == SNAP_NEXT_ROLLBACK)
	{
		snap->next = SNAP_NEXT_ROLLBACK;
		return;
	}
	if (op == OP_SNAP_HEAD)
		handle_head(c, res);
	else if (op == OP_SNAP_PAGE)
		handle_page(c, res);
}
