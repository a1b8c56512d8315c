/*
 * link.c: the client's own connection, above the transport: sending a
 * query for an operation (the answer goes to whatever the operation is
 * for), a result that broke the connection, losing it and reconnecting
 * with exponential backoff and jitter, the backoff after a refused query,
 * and when the next poll is due.
 *
 * A backoff doubles up to its cap (eh_set_reconnect_backoff; 1 s by
 * default), and the wait is drawn from between half the backoff and the
 * whole of it: the cap bounds every wait, so a client whose server is down
 * tries again at least once a cap (a refused TCP connection, which costs
 * the server nothing), and is back at most a cap after the server is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Whether the connection is up: connected, and it answered its first query. */
int
ehi_link_up(const eh_client *c)
{
	return c->link.conn.state != EHI_CONN_NONE && c->link.conn.state != EHI_CONN_CONNECTING && c->link.hello_done;
}

int
ehi_current_poll_interval(const eh_client *c)
{
	if (c->listen.mode == LISTEN_ON || c->listen.no_listen == NO_LISTEN_DISABLED || c->wait.slow_poll ||
		c->cfg.fallback_poll_interval_ms > c->cfg.poll_interval_ms)
		return c->cfg.poll_interval_ms;
	return c->cfg.fallback_poll_interval_ms;
}

void
ehi_schedule_poll(eh_client *c)
{
	c->link.next_poll_at = ehi_now_ms() +
		(int64_t) (ehi_current_poll_interval(c) * (0.8 + 0.4 * ehi_random_unit(c)));
}

/*
 * The most a wait may be after an attempt that a server answered with "not
 * now" (ehi_conn_not_now: starting up, or a standby while a failover
 * promotes another host): it will take the connection soon.
 */
#define PROMPT_RETRY_MS 250

/* A wait of between half of ms and ms: jitter, never beyond ms. */
static int
jittered(eh_client *c, int ms)
{
	return (int) (ms * (0.5 + 0.5 * ehi_random_unit(c)));
}

/* A backoff doubled, up to the configured maximum. */
static int
doubled_backoff(const eh_client *c, int ms)
{
	return ms * 2 > c->cfg.backoff_max_ms ? c->cfg.backoff_max_ms : ms * 2;
}

/*
 * After a query the server refused: try again after a backoff that grows
 * while it keeps refusing (a lock held for a while, the extension being
 * reinstalled), not at once and not only at the next regular poll.
 */
void
ehi_retry_later(eh_client *c)
{
	c->link.next_poll_at = c->link.paused_until =
		ehi_now_ms() + jittered(c, c->link.error_backoff_ms);
	c->link.error_backoff_ms = doubled_backoff(c, c->link.error_backoff_ms);
}

/*
 * Forgets a broken connection and schedules the next attempt, with
 * exponential backoff and jitter.  The backoff starts over only once a new
 * connection has answered a query: a proxy that accepts the login while the
 * server is down does not reset it (the cap still bounds the wait).  After
 * a "not now" (ehi_conn_not_now) the wait is at most PROMPT_RETRY_MS (or
 * the first backoff, if longer), while the backoff grows on as usual.
 */
void
ehi_connection_lost(eh_client *c, const char *why)
{
	int			base = c->link.backoff_ms;
	int			prompt = c->cfg.backoff_initial_ms > PROMPT_RETRY_MS ? c->cfg.backoff_initial_ms : PROMPT_RETRY_MS;
	int			wait;

	if (why)
		ehi_log(c, EH_LOG_WARNING, "%s", why);
	c->link.failures++;
	ehi_conn_close(&c->link.conn);
	ehi_conn_close(&c->listen.probe_conn);
	c->link.op = OP_NONE;
	c->link.op_sub = NULL;
	c->listen.mode = LISTEN_OFF;
	c->link.hello_done = 0;
	if (ehi_conn_not_now(&c->link.conn) && base > prompt)
		base = prompt;
	wait = jittered(c, base);
	c->link.reconnect_at = ehi_now_ms() + wait;
	ehi_log(c, EH_LOG_INFO, "reconnecting in %d ms", wait);
	c->link.backoff_ms = doubled_backoff(c, c->link.backoff_ms);
}

void
ehi_start_connecting(eh_client *c)
{
	if (ehi_conn_start(&c->link.conn, c->conninfo, c->cfg.query_timeout_ms, NULL) == EHI_STEP_FAILED)
	{
		ehi_set_error(c, "%s", c->link.conn.error);
		ehi_connection_lost(c, c->errmsg);
		return;
	}
	c->listen.mode = LISTEN_OFF;
	c->link.hello_done = 0;
	c->link.prepared = 0;
	c->link.prepare_off = 0;
}

/*
 * Sends a query for op on the client's connection.  Returns 0, or -1 when
 * the connection broke (a reconnect is scheduled).
 */
static int
send_as(eh_client *c, op_kind op, eh_sub *sub, const char *sql, const char *stmt_name, int prepare,
		int nparams, const char *const *params)
{
	if (ehi_conn_send(&c->link.conn, sql, stmt_name, prepare, nparams, params, c->cfg.query_timeout_ms) != 0)
	{
		ehi_set_error(c, "%s", c->link.conn.error);
		ehi_connection_lost(c, c->errmsg);
		return -1;
	}
	c->link.op = op;
	c->link.op_sub = sub;
	c->link.op_sent_at = ehi_now_ms();
	return 0;
}

int
ehi_send(eh_client *c, op_kind op, eh_sub *sub, const char *sql, int nparams, const char *const *params)
{
	return send_as(c, op, sub, sql, NULL, 0, nparams, params);
}

/*
 * Sends one of the frequent statements, prepared once per connection when
 * the connection keeps its session between queries (LISTEN works on it, so
 * it is not behind a transaction-pooling proxy, which would lose prepared
 * statements); otherwise like ehi_send().  When it still needs preparing,
 * sends the preparation instead and returns 1: call again once it is done.
 */
int
ehi_send_stmt(eh_client *c, op_kind op, eh_sub *sub, ehi_stmt stmt, const char *sql,
			  int nparams, const char *const *params)
{
	static const char *const names[STMT_COUNT] = {"eventhub_fetch", "eventhub_state", "eventhub_discover", "eventhub_wait"};

	if ((c->listen.mode != LISTEN_ON && c->listen.no_listen != NO_LISTEN_STANDBY) || c->link.prepare_off)
		return ehi_send(c, op, sub, sql, nparams, params);
	if (!(c->link.prepared & (1u << stmt)))
	{
		if (send_as(c, OP_PREPARE, NULL, sql, names[stmt], 1, nparams, NULL) != 0)
			return -1;
		c->link.op_stmt = stmt;
		return 1;
	}
	return send_as(c, op, sub, sql, names[stmt], 0, nparams, params);
}

/*
 * Whether a failed result broke the connection (ehi_result_breaks_connection):
 * then records why as "what: ..." and schedules the reconnect.
 */
int
ehi_result_failed(eh_client *c, const PGresult *res, const char *what)
{
	if (!ehi_result_breaks_connection(&c->link.conn, res))
		return 0;
	ehi_set_result_error(c, &c->link.conn, res, what);
	ehi_connection_lost(c, c->errmsg);
	return 1;
}

/*
 * A query the server refused (or the connection broke): records why, and
 * either reconnects or pauses before the next query.
 */
void
ehi_query_failed(eh_client *c, PGresult *res, const char *what)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	if (ehi_result_failed(c, res, what))
		return;
	if (state && strcmp(state, "26000") == 0 && !c->link.prepare_off)
	{
		/* A prepared statement is gone: a transaction-pooling proxy. */
		ehi_log(c, EH_LOG_WARNING, "prepared statements do not last on this connection"
				" (a transaction-pooling proxy?): no longer preparing them");
		c->link.prepare_off = 1;
		c->link.prepared = 0;
		c->link.next_poll_at = 0;
		return;
	}
	ehi_set_result_error(c, &c->link.conn, res, what);
	ehi_log(c, EH_LOG_ERROR, "%s", c->errmsg);
	ehi_retry_later(c);
	c->pending_error = EH_ERR_SERVER;
}
