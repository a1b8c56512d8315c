/*
 * fetch.c: fetching a subscription's events (transactions_since, or
 * events_since on a server without it), round robin, and the fetch's errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/*
 * Fetch query: ISO 8601 UTC timestamps whatever the session's settings, the
 * delivery lag by the server's clock, where transactions begin and end, and
 * the head, so that a batch whose last event is below it calls for the
 * next at once.  The server cuts the batch at $3 events or $5 bytes (their
 * stored size), at a transaction's end.  The version at the cursor goes
 * along, so that a rewritten history raises ZE003 before anything past the
 * cursor is delivered.
 */
static const char FETCH_SQL[] =
	"SELECT e.organization_id, e.revision, e.version_id::text,"
	" to_char(e.processed_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
	" to_char(e.originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
	" e.event_type, e.action, e.entity_id, e.correlation_id, e.event_data::text,"
	" (extract(epoch FROM clock_timestamp() - e.processed_timestamp) * 1000)::float8,"
	" e.transaction_first_revision, e.transaction_end, e.head_revision"
	" FROM eventhub.transactions_since($1, $2, $3, NULLIF($4, '')::uuid, $5) e";

/* The columns of both fetch queries: COL_ORG to COL_UPTO (internal.h). */

/*
 * The stored size of an event beyond its strings, in bytes: the same
 * figure as extension/eventhub.h's EVENTHUB_ROW_OVERHEAD_BYTES, which
 * transactions_since counts; the legacy fetch ($6) counts it likewise.
 */
#define ROW_OVERHEAD_BYTES "160"

/*
 * The fetch of 0.3.0, for a server without a transactions_since this role
 * may call (the extension not updated yet, a role granted events_since
 * only): events_since, each event its own transaction, no head; each
 * event's size as text with the sizes before it, so that a batch stops at
 * $5 bytes (always holding at least one event; OFFSET 0 keeps the data
 * converted to text once); $6 is ROW_OVERHEAD_BYTES.
 */
static const char LEGACY_FETCH_SQL[] =
	"SELECT organization_id, revision, version_id, pts, ots, event_type, action, entity_id,"
	" correlation_id, data, lag, revision, true, NULL::bigint, upto FROM ("
	" SELECT f.*, sum(f.size) OVER (ORDER BY f.revision) AS upto FROM ("
	"  SELECT t.*, octet_length(t.data) + octet_length(t.entity_id) + octet_length(t.correlation_id)"
	"   + octet_length(t.event_type) + $6::integer AS size FROM ("
	"   SELECT e.organization_id, e.revision, e.version_id::text AS version_id,"
	"    to_char(e.processed_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS pts,"
	"    to_char(e.originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS ots,"
	"    e.event_type, e.action, e.entity_id, e.correlation_id, e.event_data::text AS data,"
	"    (extract(epoch FROM clock_timestamp() - e.processed_timestamp) * 1000)::float8 AS lag"
	"   FROM eventhub.events_since($1, $2, $3, NULLIF($4, '')::uuid) e OFFSET 0) t) f) g"
	" WHERE upto - size < $5 ORDER BY revision";

/* Sends the fetch of subscription s (prepared, or the legacy one). */
static void
send_fetch(eh_client *c, eh_sub *s)
{
	char		cursor_text[24];
	char		batch_text[12];
	char		bytes_text[12];
	const char *params[6];

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
	params[5] = ROW_OVERHEAD_BYTES;
	/* 1: the statement is being prepared first; -1: the connection broke */
	if ((c->link.legacy_fetch ? ehi_send(c, OP_FETCH, s, LEGACY_FETCH_SQL, 6, params) :
		 ehi_send_stmt(c, OP_FETCH, s, STMT_FETCH, FETCH_SQL, 5, params)) == 0)
		c->counters[EH_STAT_FETCHES]++;
	else
		s->needs_fetch = 1;
}

/* The resync a fetch's SQLSTATE asks for, or 0 (ZE00n since 0.2.0; EH00n in 0.1.0). */
static int
resync_reason_of(const char *state)
{
	if (!state || (strncmp(state, "ZE", 2) != 0 && strncmp(state, "EH", 2) != 0))
		return 0;
	if (strcmp(state + 2, "001") == 0)
		return EH_RESYNC_HISTORY_REMOVED;
	if (strcmp(state + 2, "002") == 0)
		return EH_RESYNC_CURSOR_AHEAD;
	if (strcmp(state + 2, "003") == 0)
		return EH_RESYNC_VERSION_MISMATCH;
	return 0;
}

/*
 * The answer to a fetch: its rows delivered (returns as ehi_deliver_rows),
 * or the resync, the legacy fetch or the retry its failure calls for.
 */
int
ehi_handle_fetch(eh_client *c, eh_sub *s, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		int			reason = resync_reason_of(state);

		if (reason && !ehi_result_breaks_connection(&c->link.conn, res))
		{
			/* A snapshot, or read the head, then resync (OP_HEAD). */
			if (!ehi_resync_by_snapshot(c, s, (eh_resync_reason) reason))
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
	return ehi_deliver_rows(c, s, res, 0, c->link.op_sent_at);
}

/* Sends the next fetch, round robin.  Returns as ehi_next_catalog_query(). */
int
ehi_next_fetch(eh_client *c)
{
	eh_sub	   *s = ehi_next_to_fetch(c);

	if (!s)
		return 0;
	send_fetch(c, s);
	return c->link.conn.state == EHI_CONN_BUSY ? 1 : -1;
}
