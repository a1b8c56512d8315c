/*
 * conn.c: connections that never make the caller wait (the transport).
 *
 * Every connection of the library (the client's own, the probe's, the
 * heartbeat one) is an ehi_conn driven by ehi_conn_step(): connecting with
 * PQconnectStartParams()/PQconnectPoll(), queries with PQsend*() in
 * non-blocking mode, answers with PQconsumeInput()/PQisBusy(), each
 * attempt and each query with a deadline.  A deadline that passes closes
 * the connection: a server that stopped answering costs the query timeout
 * in latency and a reconnect, never a blocked caller.  It knows nothing of
 * the client: what the queries are for is link.c's and session.c's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/*
 * What libpq says of a host that answered but is not of the kind
 * target_session_attrs asks for (it then tries the next host).
 */
static const char *const not_the_kind[] = {
	"session is read-only", "session is not read-only",
	"server is in hot standby mode", "server is not in hot standby mode"
};

/* Sets ac->not_now for the failed attempt's message (ehi_conn_not_now). */
static void
connect_not_now(ehi_conn *ac)
{
	const char *msg = PQerrorMessage(ac->pg);

	ac->not_now = strstr(msg, "FATAL:  57P03:") != NULL;
	for (size_t i = 0; i < sizeof(not_the_kind) / sizeof(not_the_kind[0]) && !ac->not_now; i++)
		ac->not_now = strstr(msg, not_the_kind[i]) != NULL;
}

int
ehi_conn_not_now(const ehi_conn *ac)
{
	return ac->not_now;
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
	ac->not_now = 0;
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

/* poll()'s events for EH_WANT_READ and EH_WANT_WRITE flags. */
short
ehi_poll_events(int wants)
{
	return (short) (((wants & EH_WANT_READ) ? POLLIN : 0) | ((wants & EH_WANT_WRITE) ? POLLOUT : 0));
}

/* poll() on one socket for what wants asks, up to timeout_ms. */
static int
poll_one(int fd, int wants, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = ehi_poll_events(wants)};

	return poll(&pfd, 1, timeout_ms);
}

/* Whether the socket is ready for what wants asks, without waiting. */
static int
socket_ready(int fd, int wants)
{
	return fd >= 0 && poll_one(fd, wants, 0) > 0;
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

/* An attempt under way: what PQconnectPoll says, or its deadline passing. */
static ehi_step
step_connecting(ehi_conn *ac, int64_t now)
{
	while (socket_ready(PQsocket(ac->pg), ehi_conn_wants(ac)))
	{
		ac->polling = PQconnectPoll(ac->pg);
		if (ac->polling == PGRES_POLLING_FAILED)
		{
			connect_sqlstate(ac);
			connect_not_now(ac);
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
}

/*
 * Takes the results libpq has read without waiting, keeping the first
 * failure or else the last; returns 1 when the query finished.
 */
static int
take_results(ehi_conn *ac)
{
	while (!ac->flushing && !PQisBusy(ac->pg))
	{
		PGresult   *res = PQgetResult(ac->pg);

		if (res == NULL)
			return 1;
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
	return 0;
}

/* A connection up: sending what is left, reading, the query's answer or deadline. */
static ehi_step
step_open(ehi_conn *ac, int64_t now)
{
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
	if (take_results(ac))
	{
		ac->state = EHI_CONN_IDLE;
		return EHI_STEP_RESULT;
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

ehi_step
ehi_conn_step(ehi_conn *ac)
{
	int64_t		now = ehi_now_ms();

	switch (ac->state)
	{
		case EHI_CONN_NONE:
			return EHI_STEP_NOTHING;
		case EHI_CONN_CONNECTING:
			return step_connecting(ac, now);
		case EHI_CONN_IDLE:
		case EHI_CONN_BUSY:
			return step_open(ac, now);
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

/*
 * Waits until deadline (monotonic ms) at most for ac to be idle, dropping
 * the answer of a query still out, on the socket's readiness; 0 if it is
 * not idle by then or the connection failed.
 */
int
ehi_conn_wait_idle(ehi_conn *ac, int64_t deadline)
{
	for (;;)
	{
		ehi_step	st = ehi_conn_step(ac);
		int64_t		left;

		if (st == EHI_STEP_FAILED || ac->state == EHI_CONN_NONE)
			return 0;
		if (st == EHI_STEP_RESULT)
			PQclear(ehi_conn_take_result(ac));
		if (ac->state == EHI_CONN_IDLE)
			return 1;
		left = deadline - ehi_now_ms();
		if (left <= 0)
			return 0;
		if (poll_one(PQsocket(ac->pg), ehi_conn_wants(ac), (int) (left > 3600000 ? 3600000 : left)) < 0 &&
			errno != EINTR)
			return 0;
	}
}
