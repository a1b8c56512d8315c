/*
 * wait.c: waiting for events without LISTEN, where LISTEN cannot reach the
 * client (a hot standby, a transaction-pooling proxy, a LISTEN that failed):
 * CALL eventhub.wait_for_events() with the subscriptions' cursors, while
 * there is nothing else to do.
 *
 * The server answers as soon as one of the organizations moves past its
 * cursor (woken at commit on a primary, at replay on a standby), naming
 * the organizations that moved, and the client fetches theirs.  On a
 * standby its statements are prepared (no proxy is known to be between);
 * behind a transaction-pooling proxy they are not.  A wait lasts at most
 * the fallback poll interval, and never past the next timed work (a poll,
 * a discovery, a heartbeat): a publish or a subscription made meanwhile
 * goes out when it ends.  While waits work, the safety-net poll of the
 * heads runs at the regular poll interval (following every organization,
 * the poll finds new ones: it stays at the fallback interval).  A server that cannot wait
 * (eventhub older than the procedure, not preloaded, no EXECUTE on it) is
 * polled at the fallback interval, as before, until the next connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "strbuf.h"

/* No wait shorter than this: the poll is about due anyway. */
#define WAIT_MIN_MS 20

static const char WAIT_SQL[] =
	"CALL eventhub.wait_for_events($1::text[], $2::bigint[], $3::uuid[], $4::integer, NULL)";

/* A new connection: try waiting again. */
void
ehi_wait_reset(eh_client *c)
{
	c->wait.works = 0;
	c->wait.slow_poll = 0;
	c->wait.unusable = 0;
}

/*
 * The cursors to wait on, as array literals; 0 when there is none to wait
 * on (no subscription, or one with no cursor yet), -1 when out of memory.
 */
static int
cursor_arrays(eh_client *c, ehi_strbuf *orgs, ehi_strbuf *revs, ehi_strbuf *versions)
{
	int			n = 0;

	ehi_sb_puts(orgs, "{");
	ehi_sb_puts(revs, "{");
	ehi_sb_puts(versions, "{");
	for (eh_sub *s = ehi_sub_next(c, NULL); s; s = ehi_sub_next(c, s))
	{
		if (s->cursor < 0)
			return 0;
		ehi_sb_array_element(orgs, s->org);
		ehi_sb_printf(revs, "%s%lld", n ? "," : "", (long long) s->cursor);
		ehi_sb_printf(versions, "%s%s", n ? "," : "", s->version[0] && s->cursor > 0 ? s->version : "NULL");
		n++;
	}
	ehi_sb_puts(orgs, "}");
	ehi_sb_puts(revs, "}");
	ehi_sb_puts(versions, "}");
	if (orgs->oom || revs->oom || versions->oom)
		return -1;
	return n;
}

/*
 * Sends a wait when waiting is the client's way to learn of events and
 * nothing else is to do for at least WAIT_MIN_MS (until is when the next
 * timed work is due, monotonic ms).  Returns 1 when it went out, 0 when
 * not, -1 when the connection broke or memory ran out.
 */
int
ehi_send_wait(eh_client *c, int64_t until)
{
	ehi_strbuf	orgs = {0}, revs = {0}, versions = {0};
	char		timeout[16];
	const char *params[4];
	int64_t		ms = until - ehi_now_ms();
	int			n, rc = 0;

	if (c->listen.mode != LISTEN_OFF || c->listen.no_listen == NO_LISTEN_DISABLED ||
		c->wait.unusable || ehi_work_pending(c))
		return 0;
	if (ms > c->cfg.fallback_poll_interval_ms)
		ms = c->cfg.fallback_poll_interval_ms;
	if (ms > c->cfg.query_timeout_ms / 2)
		ms = c->cfg.query_timeout_ms / 2;
	if (ms < WAIT_MIN_MS)
		return 0;
	n = cursor_arrays(c, &orgs, &revs, &versions);
	if (n > 0)
	{
		snprintf(timeout, sizeof(timeout), "%lld", (long long) ms);
		params[0] = orgs.data;
		params[1] = revs.data;
		params[2] = versions.data;
		params[3] = timeout;
		rc = ehi_send_stmt(c, OP_WAIT, NULL, STMT_WAIT, WAIT_SQL, 4, params) < 0 ? -1 : 1;
		c->wait.timeout_ms = ms;
	}
	else if (n < 0)
	{
		ehi_set_error(c, "out of memory");
		c->pending_error = EH_ERR_MEMORY;
		rc = -1;
	}
	ehi_sb_free(&orgs);
	ehi_sb_free(&revs);
	ehi_sb_free(&versions);
	return rc;
}

/*
 * The next element of a text[] in PostgreSQL's output format ({a,"b c"})
 * from *p into buf (size len); 0 at the end.  Elements are never NULL.
 */
int
ehi_next_array_element(const char **p, char *buf, size_t len)
{
	size_t		n = 0;
	int			quoted;

	if (**p == '{' || **p == ',')
		(*p)++;
	if (**p == '}' || **p == '\0')
		return 0;
	quoted = **p == '"';
	if (quoted)
		(*p)++;
	while (**p && (quoted ? **p != '"' : (**p != ',' && **p != '}')))
	{
		if (quoted && **p == '\\' && (*p)[1])
			(*p)++;
		if (n + 1 < len)
			buf[n++] = **p;
		(*p)++;
	}
	if (quoted && **p == '"')
		(*p)++;
	buf[n] = '\0';
	return 1;
}

/*
 * The organizations a wait says moved (a text[]): their subscriptions
 * fetch.  One the client does not follow (any more) is left alone.
 */
static void
mark_moved(eh_client *c, const char *moved)
{
	char		org[EH_MAX_ID_BYTES + 1];
	const char *p = moved;

	while (ehi_next_array_element(&p, org, sizeof(org)))
	{
		eh_sub	   *s = ehi_find_sub(c, org);

		if (s)
			s->needs_fetch = 1;
	}
}

/* Whether a refused wait means this server cannot wait for this client. */
static int
cannot_wait(const char *sqlstate)
{
	/*
	 * 42883: no such procedure (an older eventhub); 42501: no EXECUTE on
	 * it; 55000: not preloaded; 25001: in a transaction block (a proxy
	 * that keeps one open); 0A000: not callable as a procedure.
	 */
	return strcmp(sqlstate, "42883") == 0 || strcmp(sqlstate, "42501") == 0 ||
		strcmp(sqlstate, "55000") == 0 || strcmp(sqlstate, "25001") == 0 ||
		strcmp(sqlstate, "0A000") == 0;
}

/*
 * The answer to a wait: the organizations that moved (poll now), none (the
 * wait ended: the next one goes out), or a refusal (poll instead).
 */
void
ehi_handle_wait(eh_client *c, PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	if (PQresultStatus(res) == PGRES_TUPLES_OK)
	{
		if (!c->wait.works)
			ehi_log(c, EH_LOG_INFO, "waiting for events with eventhub.wait_for_events()");
		c->wait.works = 1;
		/* Following every organization, the poll finds new ones: it stays. */
		c->wait.slow_poll = !ehi_discovery_on(c);
		if (PQntuples(res) != 1 || PQnfields(res) != 1)
			return;
		if (strcmp(PQgetvalue(res, 0, 0), "{}") != 0)
			mark_moved(c, PQgetvalue(res, 0, 0));
		else if (ehi_now_ms() - c->link.op_sent_at < c->wait.timeout_ms - WAIT_MIN_MS)
			c->link.next_poll_at = 0;	/* empty, early: the standby was promoted */
		return;
	}
	if (ehi_result_failed(c, res, "waiting for events failed"))
		return;
	if (state && cannot_wait(state))
	{
		ehi_log(c, EH_LOG_INFO, "the server cannot wait for events (%s): polling every %d ms",
				PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY), c->cfg.fallback_poll_interval_ms);
		c->wait.unusable = 1;
		c->wait.works = c->wait.slow_poll = 0;
		c->link.next_poll_at = 0;
		return;
	}
	ehi_query_failed(c, res, "waiting for events failed");
}
