/*
 * conn.c: connections that never make the caller wait.
 *
 * Every connection of the library (the client's own, the probe's, the
 * heartbeat one) is an ehi_conn driven by ehi_conn_step(): connecting with
 * PQconnectStartParams()/PQconnectPoll(), queries with PQsend*() in
 * non-blocking mode, answers with PQconsumeInput()/PQisBusy(), each
 * attempt and each query with a deadline.  A deadline that passes closes
 * the connection: a server that stopped answering costs the query timeout
 * in latency and a reconnect, never a blocked caller.
 *
 * On top of that, the client's connection: reconnecting with backoff, the
 * first query (which proves the connection works), and finding out whether
 * notifications reach it.  On a hot standby LISTEN fails, and behind a
 * transaction-pooling proxy it succeeds on a server connection that other
 * clients then share, so the notifications go to them.  After connecting,
 * the client LISTENs on a channel of its own, has a second, short-lived
 * connection NOTIFY it, and LISTENs on eventhub only if that notification
 * arrives while it is idle, which a transaction-pooling proxy never
 * delivers.  Until then, and when it does not, it polls at the short
 * fallback interval.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* How long the probe notification may take to arrive. */
#define PROBE_TIMEOUT_MS 1000

/* ------------------------------------------------ one connection, async */

static void
conn_error(ehi_conn *ac, const char *what)
{
	const char *msg = ac->pg ? PQerrorMessage(ac->pg) : "out of memory";
	size_t		len;

	snprintf(ac->error, sizeof(ac->error), "%s%s%s", what, *what ? ": " : "", msg);
	len = strlen(ac->error);
	while (len > 0 && ac->error[len - 1] == '\n')
		ac->error[--len] = '\0';
}

/*
 * The SQLSTATE of a connection attempt the server refused ("" if it did
 * not answer): libpq keeps none, but the verbose message carries it
 * ("FATAL:  28P01: ...").
 */
static void
connect_sqlstate(ehi_conn *ac)
{
	const char *msg = PQerrorMessage(ac->pg);
	const char *p = strstr(msg, "FATAL:  ");

	ac->sqlstate[0] = '\0';
	if (p && strlen(p + 8) > 6 && p[13] == ':')
		snprintf(ac->sqlstate, sizeof(ac->sqlstate), "%.5s", p + 8);
}

void
ehi_conn_close(ehi_conn *ac)
{
	if (ac->result)
		PQclear(ac->result);
	ac->result = NULL;
	if (ac->pg)
		PQfinish(ac->pg);		/* non-blocking mode: it does not wait either */
	ac->pg = NULL;
	ac->state = EHI_CONN_NONE;
	ac->flushing = 0;
}

/* Fails the connection: error kept, connection closed. */
static ehi_step
conn_fail(ehi_conn *ac, const char *what)
{
	conn_error(ac, what);
	ehi_conn_close(ac);
	return EHI_STEP_FAILED;
}

/*
 * Starts connecting.  The application name is "eventhub" unless conninfo
 * sets one; with app_name, it is app_name whatever conninfo says (the probe
 * connection, which operators and tests tell apart from the client's own).
 */
ehi_step
ehi_conn_start(ehi_conn *ac, const char *conninfo, int timeout_ms, const char *app_name)
{
	const char *keys[] = {"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
	"fallback_application_name", "dbname", app_name ? "application_name" : NULL, NULL};
	const char *values[] = {"1", "30", "10", "3", "eventhub", conninfo, app_name, NULL};

	ehi_conn_close(ac);
	ac->error[0] = ac->sqlstate[0] = '\0';
	ac->pg = PQconnectStartParams(keys, values, 1);
	if (!ac->pg || PQstatus(ac->pg) == CONNECTION_BAD)
		return conn_fail(ac, "could not connect");
	/* While it connects, a refusal carries its SQLSTATE (connect_sqlstate). */
	PQsetErrorVerbosity(ac->pg, PQERRORS_VERBOSE);
	ac->state = EHI_CONN_CONNECTING;
	ac->polling = PGRES_POLLING_WRITING;
	ac->deadline = ehi_now_ms() + timeout_ms;
	return EHI_STEP_NOTHING;
}

/* Whether the socket is ready for what wants asks, without waiting. */
static int
socket_ready(int fd, int wants)
{
	struct pollfd pfd = {.fd = fd, .events = (short) (((wants & EH_WANT_READ) ? POLLIN : 0) |
													  ((wants & EH_WANT_WRITE) ? POLLOUT : 0))};

	return fd >= 0 && poll(&pfd, 1, 0) > 0;
}

int
ehi_conn_wants(const ehi_conn *ac)
{
	switch (ac->state)
	{
		case EHI_CONN_NONE:
			return 0;
		case EHI_CONN_CONNECTING:
			return ac->polling == PGRES_POLLING_READING ? EH_WANT_READ : EH_WANT_WRITE;
		default:
			return EH_WANT_READ | (ac->flushing ? EH_WANT_WRITE : 0);
	}
}

ehi_step
ehi_conn_step(ehi_conn *ac)
{
	int64_t		now = ehi_now_ms();

	switch (ac->state)
	{
		case EHI_CONN_NONE:
			return EHI_STEP_NOTHING;

		case EHI_CONN_CONNECTING:
			while (socket_ready(PQsocket(ac->pg), ehi_conn_wants(ac)))
			{
				ac->polling = PQconnectPoll(ac->pg);
				if (ac->polling == PGRES_POLLING_FAILED)
				{
					connect_sqlstate(ac);
					return conn_fail(ac, "could not connect");
				}
				if (ac->polling == PGRES_POLLING_OK)
				{
					PQsetErrorVerbosity(ac->pg, PQERRORS_DEFAULT);
					if (PQsetnonblocking(ac->pg, 1) != 0)
						return conn_fail(ac, "could not connect");
					ac->state = EHI_CONN_IDLE;
					return EHI_STEP_CONNECTED;
				}
			}
			if (now >= ac->deadline)
			{
				ehi_conn_close(ac);
				snprintf(ac->error, sizeof(ac->error), "could not connect: no answer in time");
				return EHI_STEP_FAILED;
			}
			return EHI_STEP_NOTHING;

		case EHI_CONN_IDLE:
		case EHI_CONN_BUSY:
			if (ac->flushing)
			{
				int			f = PQflush(ac->pg);

				if (f < 0)
					return conn_fail(ac, "connection lost");
				ac->flushing = f;
			}
			if (!PQconsumeInput(ac->pg))
				return conn_fail(ac, "connection lost");
			if (ac->state == EHI_CONN_IDLE)
			{
				/* Not a query's: a server that is going away says so unasked. */
				if (PQstatus(ac->pg) != CONNECTION_OK)
					return conn_fail(ac, "connection lost");
				return EHI_STEP_NOTHING;
			}
			while (!ac->flushing && !PQisBusy(ac->pg))
			{
				PGresult   *res = PQgetResult(ac->pg);

				if (res == NULL)
				{
					ac->state = EHI_CONN_IDLE;
					return EHI_STEP_RESULT;
				}
				/* Keep the first failure, or else the last result. */
				if (ac->result && PQresultStatus(ac->result) != PGRES_COMMAND_OK &&
					PQresultStatus(ac->result) != PGRES_TUPLES_OK)
					PQclear(res);
				else
				{
					if (ac->result)
						PQclear(ac->result);
					ac->result = res;
				}
			}
			if (PQstatus(ac->pg) != CONNECTION_OK)
				return conn_fail(ac, "connection lost");
			if (now >= ac->deadline)
			{
				ehi_conn_close(ac);
				snprintf(ac->error, sizeof(ac->error), "the server did not answer in time");
				return EHI_STEP_FAILED;
			}
			return EHI_STEP_NOTHING;
	}
	return EHI_STEP_NOTHING;
}

int
ehi_conn_send(ehi_conn *ac, const char *sql, const char *stmt_name, int prepare,
			  int nparams, const char *const *params, int timeout_ms)
{
	int			ok;
	int			f;

	if (ac->state != EHI_CONN_IDLE)
	{
		snprintf(ac->error, sizeof(ac->error), "the connection is not ready for a query");
		return -1;
	}
	if (ac->result)
		PQclear(ac->result);
	ac->result = NULL;
	if (prepare)
		ok = PQsendPrepare(ac->pg, stmt_name, sql, nparams, NULL);
	else if (stmt_name)
		ok = PQsendQueryPrepared(ac->pg, stmt_name, nparams, params, NULL, NULL, 0);
	else if (nparams == 0)
		ok = PQsendQuery(ac->pg, sql);
	else
		ok = PQsendQueryParams(ac->pg, sql, nparams, NULL, params, NULL, NULL, 0);
	if (!ok || (f = PQflush(ac->pg)) < 0)
	{
		conn_fail(ac, "connection lost");
		return -1;
	}
	ac->flushing = f;
	ac->state = EHI_CONN_BUSY;
	ac->deadline = ehi_now_ms() + timeout_ms;
	return 0;
}

PGresult *
ehi_conn_take_result(ehi_conn *ac)
{
	PGresult   *res = ac->result;

	ac->result = NULL;
	return res;
}

/*
 * Whether a failed result means the connection is gone rather than that the
 * server refused the query: an error of libpq's own (no SQLSTATE: the
 * server closed the connection, the network failed) or a FATAL one from the
 * server (terminated, shut down), even where libpq has not marked the
 * connection bad yet.
 */
int
ehi_result_breaks_connection(const ehi_conn *ac, const PGresult *res)
{
	const char *severity = res ? PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;

	return !(ac->pg && PQstatus(ac->pg) == CONNECTION_OK &&
			 res && PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL &&
			 !(severity && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0)));
}

/* ------------------------------------------------ the client's connection */

int
ehi_current_poll_interval(const eh_client *c)
{
	if (c->mode == LISTEN_ON || c->no_listen == NO_LISTEN_DISABLED ||
		c->fallback_poll_interval_ms > c->poll_interval_ms)
		return c->poll_interval_ms;
	return c->fallback_poll_interval_ms;
}

void
ehi_schedule_poll(eh_client *c)
{
	c->next_poll_at = ehi_now_ms() +
		(int64_t) (ehi_current_poll_interval(c) * (0.8 + 0.4 * ehi_random_unit(c)));
}

/*
 * After a query the server refused: try again after a backoff that grows
 * while it keeps refusing (a lock held for a while, the extension being
 * reinstalled), not at once and not only at the next regular poll.
 */
void
ehi_retry_later(eh_client *c)
{
	c->next_poll_at = c->paused_until =
		ehi_now_ms() + (int64_t) (c->error_backoff_ms * (0.5 + ehi_random_unit(c)));
	c->error_backoff_ms = c->error_backoff_ms * 2 > c->backoff_max_ms ?
		c->backoff_max_ms : c->error_backoff_ms * 2;
}

/*
 * Forgets a broken connection and schedules the next attempt, with
 * exponential backoff and jitter.  The backoff starts over only once a new
 * connection has answered a query: a proxy that accepts the login while the
 * server is down does not reset it.
 */
void
ehi_connection_lost(eh_client *c, const char *why)
{
	int			wait;

	if (why)
		ehi_log(c, EH_LOG_WARNING, "%s", why);
	c->failures++;
	ehi_conn_close(&c->conn);
	ehi_conn_close(&c->probe_conn);
	c->op = OP_NONE;
	c->op_sub = NULL;
	c->mode = LISTEN_OFF;
	c->hello_done = 0;
	wait = (int) (c->backoff_ms * (0.5 + ehi_random_unit(c)));
	c->reconnect_at = ehi_now_ms() + wait;
	ehi_log(c, EH_LOG_INFO, "reconnecting in %d ms", wait);
	c->backoff_ms = c->backoff_ms * 2 > c->backoff_max_ms ? c->backoff_max_ms : c->backoff_ms * 2;
}

void
ehi_start_connecting(eh_client *c)
{
	if (ehi_conn_start(&c->conn, c->conninfo, c->query_timeout_ms, NULL) == EHI_STEP_FAILED)
	{
		ehi_set_error(c, "%s", c->conn.error);
		ehi_connection_lost(c, c->errmsg);
		return;
	}
	c->mode = LISTEN_OFF;
	c->hello_done = 0;
	c->prepared = 0;
	c->prepare_off = 0;
}

/* Polls only, for reason; logs the reason once, not at every connect. */
void
ehi_stop_listening(eh_client *c, no_listen_reason reason, const char *detail)
{
	static const char *const what[] = {
		"", "", "the server is a standby, where LISTEN is not available",
		"notifications do not reach this connection (a transaction-pooling proxy?), so it does not LISTEN",
		"LISTEN is not available on this connection"
	};

	ehi_conn_close(&c->probe_conn);
	c->mode = LISTEN_OFF;
	c->no_listen = reason;
	if (reason != NO_LISTEN_DISABLED && reason != c->no_listen_logged)
		ehi_log(c, EH_LOG_WARNING, "%s%s%s; polling every %d ms instead", what[reason],
				detail ? ": " : "", detail ? detail : "", ehi_current_poll_interval(c));
	c->no_listen_logged = reason;
	c->next_poll_at = 0;
}

/*
 * Decides how to learn of new events on a fresh or promoted connection:
 * not at all (LISTEN disabled, a standby), or by probing first: LISTEN on
 * a channel of its own (the answer comes in ehi_handle_listen).
 */
void
ehi_choose_listening(eh_client *c, int in_recovery)
{
	char		sql[80];

	if (!c->listen_enabled)
		ehi_stop_listening(c, NO_LISTEN_DISABLED, NULL);
	else if (in_recovery)
		ehi_stop_listening(c, NO_LISTEN_STANDBY, NULL);
	else
	{
		snprintf(c->probe_channel, sizeof(c->probe_channel), "eventhub_probe_%016llx",
				 (unsigned long long) (ehi_random_unit(c) * 18446744073709551615.0));
		c->probe_received = 0;
		snprintf(sql, sizeof(sql), "LISTEN %s", c->probe_channel);
		ehi_send(c, OP_PROBE_LISTEN, NULL, sql, 0, NULL);
	}
}

/* The first query answered: the connection works. */
void
ehi_handle_hello(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_set_result_error(c, &c->conn, res, "could not use the connection");
		ehi_connection_lost(c, c->errmsg);
		return;
	}
	c->hello_done = 1;
	c->backoff_ms = c->backoff_initial_ms;
	c->error_backoff_ms = c->backoff_initial_ms;
	if (c->ever_connected)
	{
		c->counters[EH_STAT_RECONNECTS]++;
		ehi_log(c, EH_LOG_INFO, "reconnected");
	}
	c->ever_connected = 1;
	c->next_poll_at = 0;
	c->next_heartbeat_at = 0;
	ehi_choose_listening(c, strcmp(PQgetvalue(res, 0, 0), "t") == 0);
}

/* The answers to OP_PROBE_LISTEN and OP_LISTEN. */
void
ehi_handle_listen(eh_client *c, op_kind op, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		if (ehi_result_breaks_connection(&c->conn, res))
		{
			ehi_set_result_error(c, &c->conn, res, "connection lost");
			ehi_connection_lost(c, c->errmsg);
		}
		else
			ehi_stop_listening(c, NO_LISTEN_FAILED, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		return;
	}
	if (op == OP_PROBE_LISTEN)
	{
		/* Now another connection NOTIFYs the probe channel (ehi_drive_probe). */
		if (ehi_conn_start(&c->probe_conn, c->conninfo, c->query_timeout_ms, "eventhub probe") == EHI_STEP_FAILED)
		{
			ehi_stop_listening(c, NO_LISTEN_FAILED, c->probe_conn.error);
			return;
		}
		c->probe_sent = 0;
		c->mode = LISTEN_PROBING;
		c->probe_deadline = ehi_now_ms() + c->query_timeout_ms + PROBE_TIMEOUT_MS;
		/* No query until the probe is decided: one could take its answer in. */
		return;
	}
	if (c->no_listen_logged != NO_LISTEN_NONE && c->no_listen_logged != NO_LISTEN_DISABLED)
		ehi_log(c, EH_LOG_INFO, "notifications arrive again: listening");
	c->mode = LISTEN_ON;
	c->no_listen = c->no_listen_logged = NO_LISTEN_NONE;
	/* Catch up: the LISTEN is new. */
	c->next_poll_at = 0;
}

/*
 * Drives the probe: the second connection connects, sends its NOTIFY and
 * goes; the answer must then arrive on the client's connection while it
 * is idle, within PROBE_TIMEOUT_MS.
 */
void
ehi_drive_probe(eh_client *c)
{
	const char *params[1];
	ehi_step	st;

	if (c->mode != LISTEN_PROBING)
		return;
	if (c->probe_received)
	{
		char		sql[120];

		ehi_conn_close(&c->probe_conn);
		c->mode = LISTEN_STARTING;
		snprintf(sql, sizeof(sql), "UNLISTEN %s; LISTEN eventhub", c->probe_channel);
		ehi_send(c, OP_LISTEN, NULL, sql, 0, NULL);
		return;
	}
	if (ehi_now_ms() >= c->probe_deadline)
	{
		ehi_stop_listening(c, NO_LISTEN_POOLED, NULL);
		return;
	}
	st = ehi_conn_step(&c->probe_conn);
	if (st == EHI_STEP_FAILED)
	{
		ehi_stop_listening(c, NO_LISTEN_FAILED, c->probe_conn.error);
		return;
	}
	if (st == EHI_STEP_CONNECTED && !c->probe_sent)
	{
		params[0] = c->probe_channel;
		if (ehi_conn_send(&c->probe_conn, "SELECT pg_catalog.pg_notify($1, '')", NULL, 0, 1, params,
						  c->query_timeout_ms) != 0)
		{
			ehi_stop_listening(c, NO_LISTEN_FAILED, c->probe_conn.error);
			return;
		}
		c->probe_sent = 1;
	}
	else if (st == EHI_STEP_RESULT)
	{
		PGresult   *res = ehi_conn_take_result(&c->probe_conn);

		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			ehi_stop_listening(c, NO_LISTEN_FAILED, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
			PQclear(res);
			return;
		}
		PQclear(res);
		ehi_conn_close(&c->probe_conn);
		/* Sent: the answer has PROBE_TIMEOUT_MS to arrive. */
		c->probe_deadline = ehi_now_ms() + PROBE_TIMEOUT_MS;
	}
}

/*
 * Sends a query for op on the client's connection.  Returns 0, or -1 when
 * the connection broke (a reconnect is scheduled).
 */
static int
send_as(eh_client *c, op_kind op, eh_sub *sub, const char *sql, const char *stmt_name, int prepare,
		int nparams, const char *const *params)
{
	if (ehi_conn_send(&c->conn, sql, stmt_name, prepare, nparams, params, c->query_timeout_ms) != 0)
	{
		ehi_set_error(c, "%s", c->conn.error);
		ehi_connection_lost(c, c->errmsg);
		return -1;
	}
	c->op = op;
	c->op_sub = sub;
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
	static const char *const names[STMT_COUNT] = {"eventhub_fetch", "eventhub_state", "eventhub_discover"};

	if (c->mode != LISTEN_ON || c->prepare_off)
		return ehi_send(c, op, sub, sql, nparams, params);
	if (!(c->prepared & (1u << stmt)))
	{
		if (send_as(c, OP_PREPARE, NULL, sql, names[stmt], 1, nparams, NULL) != 0)
			return -1;
		c->op_stmt = stmt;
		return 1;
	}
	return send_as(c, op, sub, sql, names[stmt], 0, nparams, params);
}

/*
 * Advances the client's connection: the attempt, the query out, its answer
 * and the notifications that came with it; then sends the next query.
 */
void
ehi_drive_connection(eh_client *c)
{
	for (int round = 0; round < 1000 && !c->stop && !c->pending_error; round++)
	{
		ehi_step	st;

		if (c->conn.state == EHI_CONN_NONE)
		{
			if (ehi_now_ms() < c->reconnect_at)
				return;
			ehi_start_connecting(c);
			if (c->conn.state == EHI_CONN_NONE)
				return;
		}
		st = ehi_conn_step(&c->conn);
		if (c->conn.pg)
			ehi_drain_notifications(c);
		switch (st)
		{
			case EHI_STEP_FAILED:
				ehi_set_error(c, "%s", c->conn.error);
				snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", c->conn.sqlstate);
				ehi_connection_lost(c, c->errmsg);
				/* A refusal that retrying cannot fix is the caller's to see. */
				if (!eh_error_retryable(c))
					c->pending_error = EH_ERR_CONNECTION;
				return;
			case EHI_STEP_CONNECTED:
				/* A first query: the connection works only if it answers. */
				if (ehi_send(c, OP_HELLO, NULL, "SELECT pg_catalog.pg_is_in_recovery()", 0, NULL) != 0)
					return;
				continue;
			case EHI_STEP_RESULT:
				{
					op_kind		op = c->op;
					eh_sub	   *sub = c->op_sub;
					PGresult   *res = ehi_conn_take_result(&c->conn);

					c->op = OP_NONE;
					c->op_sub = NULL;
					ehi_handle_result(c, op, sub, res);
					PQclear(res);
					continue;
				}
			case EHI_STEP_NOTHING:
				break;
		}
		if (c->conn.state == EHI_CONN_CONNECTING || c->conn.state == EHI_CONN_BUSY)
			return;
		/* Idle. */
		ehi_drive_probe(c);
		if (c->conn.state != EHI_CONN_IDLE || c->mode == LISTEN_PROBING)
		{
			if (c->conn.state == EHI_CONN_BUSY)
				continue;
			return;
		}
		if (ehi_next_query(c) <= 0)
			return;
	}
}
