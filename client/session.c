/*
 * session.c: the client's session, above the delivery and the registry:
 * the drive loop of eh_process(), the first query of a connection, finding
 * out whether notifications reach it, which query goes next, dispatching
 * the answers, the publish out, and what the caller waits for and how long.
 *
 * While a snapshot's transaction is open (snapshot_pages.c), its queries are the
 * only ones: a publish and a heartbeat wait for its COMMIT (READ ONLY would
 * refuse them), and the connection does not count as idle for the LISTEN
 * probe (a session in a transaction gets no notifications).
 *
 * Whether notifications reach the connection: on a hot standby LISTEN
 * fails, and behind a transaction-pooling proxy it succeeds on a server
 * connection that other clients then share, so the notifications go to
 * them.  After connecting, the client LISTENs on a channel of its own, has
 * a second, short-lived connection NOTIFY it, and LISTENs on eventhub only
 * if that notification arrives while it is idle, which a
 * transaction-pooling proxy never delivers.  Until then, and when it does
 * not, it polls at the short fallback interval.  On a reconnect it catches
 * up first and probes after: the events published while it was away do
 * not wait for the probe (up to PROBE_TIMEOUT_MS behind a proxy).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* How long the probe notification may take to arrive. */
#define PROBE_TIMEOUT_MS 1000

/*
 * While a connection the caller does not wait on is under way (the
 * probe's or the heartbeats' own), eh_next_timeout_ms() asks to be called
 * again this soon; eh_timeout_ms(), for callers that wait on eh_sockets(),
 * does not.
 */
#define SIDE_WORK_POLL_MS 5

/* -------------------------------------------------------------- LISTEN */

/* Polls only, for reason; logs the reason once, not at every connect. */
static void
stop_listening(eh_client *c, no_listen_reason reason, const char *detail)
{
	static const char *const what[] = {
		"", "", "the server is a standby, where LISTEN is not available",
		"notifications do not reach this connection (a transaction-pooling proxy?), so it does not LISTEN",
		"LISTEN is not available on this connection"
	};

	ehi_conn_close(&c->listen.probe_conn);
	c->listen.mode = LISTEN_OFF;
	c->listen.no_listen = reason;
	if (reason != NO_LISTEN_DISABLED && reason != c->listen.no_listen_logged)
		ehi_log(c, EH_LOG_WARNING, "%s%s%s; polling every %d ms instead", what[reason],
				detail ? ": " : "", detail ? detail : "", ehi_current_poll_interval(c));
	c->listen.no_listen_logged = reason;
	c->link.next_poll_at = 0;
}

/*
 * Decides how to learn of new events on a fresh or promoted connection:
 * not at all (LISTEN disabled, a standby), or by probing first: LISTEN on
 * a channel of its own (the answer comes in handle_listen).  After a
 * reconnect, the probe waits until the client has caught up (drive_idle).
 */
static void
choose_listening(eh_client *c, int in_recovery)
{
	char		sql[80];

	if (!c->cfg.listen_enabled || in_recovery)
	{
		c->listen.probe_after_catchup = 0;
		stop_listening(c, !c->cfg.listen_enabled ? NO_LISTEN_DISABLED : NO_LISTEN_STANDBY, NULL);
	}
	else if (c->listen.probe_after_catchup)
		c->link.next_poll_at = 0;	/* drive_idle() probes once caught up */
	else
	{
		snprintf(c->listen.probe_channel, sizeof(c->listen.probe_channel), "eventhub_probe_%016llx",
				 (unsigned long long) (ehi_random_unit(c) * 18446744073709551615.0));
		c->listen.probe_received = 0;
		snprintf(sql, sizeof(sql), "LISTEN %s", c->listen.probe_channel);
		ehi_send(c, OP_PROBE_LISTEN, NULL, sql, 0, NULL);
	}
}

/*
 * The first query of a connection: whether the server is a standby, and
 * whether this role may read the events notifications carry (then it
 * listens on channel eventhub_events, whose notifications may carry them,
 * instead of eventhub; both announce the same).
 */
static const char HELLO_SQL[] =
	"SELECT pg_catalog.pg_is_in_recovery(), COALESCE("
	" pg_catalog.has_function_privilege("
	"  pg_catalog.to_regprocedure('eventhub.notification_data_key(text)'), 'EXECUTE')"
	" AND pg_catalog.has_function_privilege("
	"  pg_catalog.to_regprocedure('eventhub.notifier_pid()'), 'EXECUTE'), false)";

/* The first query answered: the connection works. */
static void
handle_hello(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_set_result_error(c, &c->link.conn, res, "could not use the connection");
		ehi_connection_lost(c, c->errmsg);
		return;
	}
	c->link.hello_done = 1;
	c->link.backoff_ms = c->cfg.backoff_initial_ms;
	c->link.error_backoff_ms = c->cfg.backoff_initial_ms;
	c->listen.probe_after_catchup = c->link.ever_connected;
	if (c->link.ever_connected)
	{
		c->counters[EH_STAT_RECONNECTS]++;
		ehi_log(c, EH_LOG_INFO, "reconnected");
	}
	c->link.ever_connected = 1;
	c->link.legacy_fetch = 0;	/* the extension may have been updated meanwhile */
	c->link.keys_unusable = 0;
	c->link.notifier_pid = 0;	/* this server's, when the keys query says */
	ehi_keys_again(c);
	c->link.events_channel = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	c->link.next_poll_at = 0;
	ehi_wait_reset(c);
	ehi_heartbeat_now(c);
	choose_listening(c, strcmp(PQgetvalue(res, 0, 0), "t") == 0);
}

/* The answers to OP_PROBE_LISTEN and OP_LISTEN. */
static void
handle_listen(eh_client *c, op_kind op, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		if (!ehi_result_failed(c, res, "connection lost"))
			stop_listening(c, NO_LISTEN_FAILED, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
		return;
	}
	if (op == OP_PROBE_LISTEN)
	{
		/* Now another connection NOTIFYs the probe channel (drive_probe). */
		if (ehi_conn_start(&c->listen.probe_conn, c->conninfo, c->cfg.query_timeout_ms, "eventhub probe") == EHI_STEP_FAILED)
		{
			stop_listening(c, NO_LISTEN_FAILED, c->listen.probe_conn.error);
			return;
		}
		c->listen.probe_sent = 0;
		c->listen.mode = LISTEN_PROBING;
		c->listen.probe_deadline = ehi_now_ms() + c->cfg.query_timeout_ms + PROBE_TIMEOUT_MS;
		/* No query until the probe is decided: one could take its answer in. */
		return;
	}
	if (c->listen.no_listen_logged != NO_LISTEN_NONE && c->listen.no_listen_logged != NO_LISTEN_DISABLED)
		ehi_log(c, EH_LOG_INFO, "notifications arrive again: listening");
	c->listen.mode = LISTEN_ON;
	c->listen.no_listen = c->listen.no_listen_logged = NO_LISTEN_NONE;
	/* Catch up: the LISTEN is new. */
	c->link.next_poll_at = 0;
}

/*
 * Drives the probe: the second connection connects, sends its NOTIFY and
 * goes; the answer must then arrive on the client's connection while it
 * is idle, within PROBE_TIMEOUT_MS.
 */
static void
drive_probe(eh_client *c)
{
	const char *params[1];
	ehi_step	st;

	if (c->listen.mode != LISTEN_PROBING)
		return;
	if (c->listen.probe_received)
	{
		char		sql[120];

		ehi_conn_close(&c->listen.probe_conn);
		c->listen.mode = LISTEN_STARTING;
		snprintf(sql, sizeof(sql), "UNLISTEN %s; LISTEN %s", c->listen.probe_channel,
				 c->link.events_channel ? "eventhub_events" : "eventhub");
		ehi_send(c, OP_LISTEN, NULL, sql, 0, NULL);
		return;
	}
	if (ehi_now_ms() >= c->listen.probe_deadline)
	{
		stop_listening(c, NO_LISTEN_POOLED, NULL);
		return;
	}
	st = ehi_conn_step(&c->listen.probe_conn);
	if (st == EHI_STEP_FAILED)
	{
		stop_listening(c, NO_LISTEN_FAILED, c->listen.probe_conn.error);
		return;
	}
	if (st == EHI_STEP_CONNECTED && !c->listen.probe_sent)
	{
		params[0] = c->listen.probe_channel;
		if (ehi_conn_send(&c->listen.probe_conn, "SELECT pg_catalog.pg_notify($1, '')", NULL, 0, 1, params,
						  c->cfg.query_timeout_ms) != 0)
		{
			stop_listening(c, NO_LISTEN_FAILED, c->listen.probe_conn.error);
			return;
		}
		c->listen.probe_sent = 1;
	}
	else if (st == EHI_STEP_RESULT)
	{
		PGresult   *res = ehi_conn_take_result(&c->listen.probe_conn);

		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			stop_listening(c, NO_LISTEN_FAILED, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
			PQclear(res);
			return;
		}
		PQclear(res);
		ehi_conn_close(&c->listen.probe_conn);
		/* Sent: the answer has PROBE_TIMEOUT_MS to arrive. */
		c->listen.probe_deadline = ehi_now_ms() + PROBE_TIMEOUT_MS;
	}
}

/* ------------------------------------------------------------ publish */

static const char PUBLISH_SQL[] = "SELECT eventhub.publish_event($1, $2, $3, $4, $5, $6::jsonb)";

/* The publish is over: rc (and the error, when rc < 0) for eh_publish_result(). */
static void
publish_done(eh_client *c, int rc, int64_t revision)
{
	ehi_publish *p = &c->publish;

	p->state = PUBLISH_DONE;
	p->rc = rc;
	p->revision = revision;
	snprintf(p->errmsg, sizeof(p->errmsg), "%s", rc < 0 ? c->errmsg : "");
	snprintf(p->sqlstate, sizeof(p->sqlstate), "%s", rc < 0 ? c->sqlstate : "");
}

/* Frees the publish's arguments and forgets it. */
void
ehi_publish_clear(eh_client *c)
{
	for (int i = 0; i < EHI_PUBLISH_NPARAMS; i++)
	{
		free(c->publish.params[i]);
		c->publish.params[i] = NULL;
	}
	c->publish.state = PUBLISH_NONE;
}

/*
 * A queued publish that cannot go out: the connection failed since it was
 * queued (it is not retried on the next one: with a correlation id the
 * caller may), or it was not ready by the deadline.
 */
static void
check_publish(eh_client *c)
{
	ehi_publish *p = &c->publish;

	if (p->state == PUBLISH_SENT && c->link.op != OP_PUBLISH)
	{
		/* The connection was lost while it was out. */
		if (!c->errmsg[0])
			ehi_set_error(c, "publishing failed: connection lost");
		publish_done(c, EH_ERR_CONNECTION, -1);
		return;
	}
	if (p->state != PUBLISH_QUEUED)
		return;
	if (c->link.failures != p->failures)
	{
		if (!c->errmsg[0])
			ehi_set_error(c, "could not publish: not connected");
		publish_done(c, EH_ERR_CONNECTION, -1);
	}
	else if (ehi_now_ms() >= p->deadline)
	{
		ehi_set_error(c, "could not publish: not connected in time");
		publish_done(c, EH_ERR_CONNECTION, -1);
	}
}

static void
handle_publish(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
	{
		publish_done(c, EH_OK, strtoll(PQgetvalue(res, 0, 0), NULL, 10));
		return;
	}
	if (ehi_result_failed(c, res, "publishing failed"))
	{
		publish_done(c, EH_ERR_CONNECTION, -1);
		return;
	}
	ehi_set_result_error(c, &c->link.conn, res, "publishing failed");
	publish_done(c, EH_ERR_SERVER, -1);
}

/* The earlier of at and next (0 in next: none). */
static int64_t
earlier(int64_t at, int64_t next)
{
	return next && next < at ? next : at;
}

/* When the idle connection has timed work next: a poll, a discovery, a heartbeat. */
static int64_t
idle_until(const eh_client *c)
{
	int64_t		at = earlier(c->link.next_poll_at, ehi_discovery_due_at(c));

	return ehi_heartbeat_route(c) == 1 ? earlier(at, ehi_heartbeat_next_at(c)) : at;
}

/* ------------------------------------------------------------ dispatch */

static void
handle_prepare(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
		c->link.prepared |= 1u << c->link.op_stmt;
	else if (!ehi_result_failed(c, res, "connection lost"))
		c->link.prepare_off = 1;
}

/* Hands an answer to what its query was for; frees it unless that kept it. */
static void
dispatch(eh_client *c, op_kind op, eh_sub *sub, PGresult *res)
{
	if (!res)
	{
		ehi_set_error(c, "no answer to a query");
		ehi_connection_lost(c, c->errmsg);
		return;
	}
	switch (op)
	{
		case OP_NONE:
			break;
		case OP_HELLO:
			handle_hello(c, res);
			break;
		case OP_PROBE_LISTEN:
		case OP_LISTEN:
			handle_listen(c, op, res);
			break;
		case OP_PREPARE:
			handle_prepare(c, res);
			break;
		case OP_STATE:
		case OP_DISCOVER:
		case OP_TOKENS:
		case OP_KEYS:
		case OP_FETCH:
		case OP_HEAD:
			if (ehi_handle_delivery(c, op, sub, res))
				return;
			break;
		case OP_HEARTBEAT:
			ehi_handle_heartbeat(c, &c->link.conn, res);
			break;
		case OP_PUBLISH:
			handle_publish(c, res);
			break;
		case OP_SNAP_BEGIN:
		case OP_SNAP_HEAD:
		case OP_SNAP_PAGE:
		case OP_SNAP_END:
			ehi_handle_snapshot(c, op, res);
			break;
		case OP_WAIT:
			ehi_handle_wait(c, res);
			break;
	}
	PQclear(res);
}

/*
 * Sends the next query the client needs, if any: the open snapshot's
 * alone; otherwise a publish first, then the poll, tokens and heads, a
 * heartbeat, a snapshot, fetches.  Returns 1 when one went out, 0 when
 * there is nothing to do now, -1 when the connection broke.
 */
static int
next_query(eh_client *c)
{
	int			rc;

	if (c->listen.mode == LISTEN_PROBING || c->link.conn.state != EHI_CONN_IDLE || !c->link.hello_done)
		return 0;
	ehi_snapshot_check_link(c);
	if (ehi_snapshot_open(c))
		return ehi_next_snapshot_query(c, NULL);
	if (c->publish.state == PUBLISH_QUEUED)
	{
		if (ehi_send(c, OP_PUBLISH, NULL, PUBLISH_SQL, EHI_PUBLISH_NPARAMS, (const char *const *) c->publish.params) != 0)
			return -1;
		c->publish.state = PUBLISH_SENT;
		return 1;
	}
	if (ehi_now_ms() < c->link.paused_until)
		return 0;
	if ((rc = ehi_next_catalog_query(c)) != 0)
		return rc;
	if (ehi_heartbeat_route(c) == 1 && ehi_heartbeat_due(c))
	{
		rc = ehi_send_heartbeat(c);
		if (rc != 0)
			return rc < 0 ? -1 : 0;
		return 1;
	}
	if ((rc = ehi_next_snapshot_query(c, ehi_sub_wanting_snapshot(c))) != 0)
		return rc;
	if ((rc = ehi_next_fetch(c)) != 0)
		return rc;
	return ehi_send_wait(c, idle_until(c));
}

/* What drive_connection() does after a step of it. */
typedef enum drive_next
{
	DRIVE_STOP,					/* nothing more now */
	DRIVE_AGAIN,				/* another round */
	DRIVE_ON					/* the connection is idle: on to the next query */
} drive_next;

/* Starts connecting when it is time; DRIVE_STOP when there is no connection. */
static drive_next
connect_when_due(eh_client *c)
{
	if (c->link.conn.state != EHI_CONN_NONE)
		return DRIVE_ON;
	if (ehi_now_ms() < c->link.reconnect_at)
		return DRIVE_STOP;
	ehi_start_connecting(c);
	return c->link.conn.state == EHI_CONN_NONE ? DRIVE_STOP : DRIVE_ON;
}

/* What the connection's step found: a failure, a new connection, an answer. */
static drive_next
after_step(eh_client *c, ehi_step st)
{
	switch (st)
	{
		case EHI_STEP_FAILED:
			ehi_set_error(c, "%s", c->link.conn.error);
			snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", c->link.conn.sqlstate);
			ehi_connection_lost(c, c->errmsg);
			/* A refusal that retrying cannot fix is the caller's to see. */
			if (!ehi_sqlstate_retryable(c->sqlstate))
				c->pending_error = EH_ERR_CONNECTION;
			return DRIVE_STOP;
		case EHI_STEP_CONNECTED:
			/* A first query: the connection works only if it answers. */
			return ehi_send(c, OP_HELLO, NULL, HELLO_SQL, 0, NULL) != 0 ? DRIVE_STOP : DRIVE_AGAIN;
		case EHI_STEP_RESULT:
			{
				op_kind		op = c->link.op;
				eh_sub	   *sub = c->link.op_sub;

				c->link.op = OP_NONE;
				c->link.op_sub = NULL;
				dispatch(c, op, sub, ehi_conn_take_result(&c->link.conn));
				if (c->link.conn.pg)
					ehi_drain_notifications(c);
				return DRIVE_AGAIN;
			}
		case EHI_STEP_NOTHING:
			break;
	}
	if (c->link.conn.state == EHI_CONN_CONNECTING || c->link.conn.state == EHI_CONN_BUSY)
		return DRIVE_STOP;
	return DRIVE_ON;
}

/* The connection is idle: a promotion, the LISTEN probe, or the next query. */
static drive_next
drive_idle(eh_client *c)
{
	int			rc;

	if (c->listen.promoted && !ehi_snapshot_open(c))
	{
		c->listen.promoted = 0;
		if (c->listen.mode == LISTEN_OFF)
			choose_listening(c, 0);
		return DRIVE_AGAIN;
	}
	drive_probe(c);
	if (c->link.conn.state != EHI_CONN_IDLE || c->listen.mode == LISTEN_PROBING)
		return c->link.conn.state == EHI_CONN_BUSY ? DRIVE_AGAIN : DRIVE_STOP;
	rc = next_query(c);
	if (rc == 0 && c->listen.probe_after_catchup && c->listen.mode == LISTEN_OFF && !ehi_snapshot_open(c))
	{
		/* Caught up after a reconnect: now the probe. */
		c->listen.probe_after_catchup = 0;
		choose_listening(c, 0);
		return DRIVE_AGAIN;
	}
	return rc <= 0 ? DRIVE_STOP : DRIVE_AGAIN;
}

/*
 * Advances the client's connection: the attempt, the query out, its answer
 * and the notifications that came with it; then sends the next query.
 */
static void
drive_connection(eh_client *c)
{
	for (int round = 0; round < 1000 && !c->stop && !c->pending_error; round++)
	{
		ehi_step	st;
		drive_next	next;

		if (connect_when_due(c) == DRIVE_STOP)
			return;
		st = ehi_conn_step(&c->link.conn);

		/*
		 * Notifications that came in with an answer are taken after it: one
		 * may carry an event committed after the answer's snapshot, and the
		 * answer must not be compared with the cursor that event moved (a
		 * discovery's heads would then say the cursor is ahead).
		 */
		if (c->link.conn.pg && st != EHI_STEP_RESULT)
			ehi_drain_notifications(c);
		next = after_step(c, st);
		if (next == DRIVE_ON)
			next = drive_idle(c);
		if (next == DRIVE_STOP)
			return;
	}
}

/*
 * eh_process()'s work: the rest of a stopped batch first, then the
 * client's connection, the heartbeat connection and the publish.
 */
void
ehi_drive(eh_client *c)
{
	if (!ehi_deliver_held(c) && !c->pending_error)
		drive_connection(c);
	ehi_snapshot_check_link(c);
	ehi_drive_heartbeat_conn(c);
	check_publish(c);
}

/* ------------------------------------------------------ what to wait for */

/* at, lowered to "soon" where a caller that waits on one socket must look again. */
static int64_t
side_work(int64_t at, int64_t now, int all_sockets)
{
	return all_sockets || at < now + SIDE_WORK_POLL_MS ? at : now + SIDE_WORK_POLL_MS;
}

/*
 * Milliseconds until eh_process() has timed work to do.  all_sockets: the
 * caller waits on every socket of ehi_sockets(), not only the client's
 * connection, so the probe and heartbeat connections need no wake-ups.
 */
int
ehi_timeout_ms(const eh_client *c, int all_sockets)
{
	int64_t		now = ehi_now_ms();
	int64_t		at;

	if (ehi_held_pending(c))
		return 0;
	switch (c->link.conn.state)
	{
		case EHI_CONN_NONE:
			at = c->link.reconnect_at;
			break;
		case EHI_CONN_CONNECTING:
		case EHI_CONN_BUSY:
			at = c->link.conn.deadline;
			break;
		default:
			if (c->listen.mode == LISTEN_PROBING)
			{
				at = c->listen.probe_deadline;
				if (c->listen.probe_conn.state != EHI_CONN_NONE)
					at = side_work(at, now, all_sockets);
				break;
			}
			if (ehi_snapshot_open(c) && c->link.hello_done)
				return 0;
			if (c->publish.state == PUBLISH_QUEUED && c->link.hello_done)
				return 0;
			if (c->listen.promoted)
				return 0;
			if (c->link.paused_until > now)
			{
				at = c->link.paused_until;
				break;
			}
			if (ehi_work_pending(c) || c->listen.mode == LISTEN_STARTING)
				return 0;
			at = idle_until(c);
			break;
	}
	if (c->publish.state == PUBLISH_QUEUED)
		at = earlier(at, c->publish.deadline);
	if (ehi_heartbeat_route(c) == 2)
	{
		const ehi_conn *hb = ehi_heartbeat_conn(c);

		if (hb->state == EHI_CONN_CONNECTING || hb->state == EHI_CONN_BUSY)
			at = earlier(side_work(at, now, all_sockets), hb->deadline);
		else if (c->link.hello_done)	/* it waits for the main one */
			at = earlier(at, ehi_heartbeat_next_at(c));
	}
	if (at <= now)
		return 0;
	return at - now > 3600000 ? 3600000 : (int) (at - now);
}

/* Adds ac's socket to the arrays when it has one. */
static int
add_socket(const ehi_conn *ac, int *fds, int *wants, int n, int max)
{
	int			w = ehi_conn_wants(ac);

	if (n >= max || !ac->pg || !w || PQsocket(ac->pg) < 0)
		return n;
	fds[n] = PQsocket(ac->pg);
	wants[n] = w;
	return n + 1;
}

/* The sockets of the client's connections, the client's own first. */
int
ehi_sockets(const eh_client *c, int *fds, int *wants, int max)
{
	int			n = 0;

	n = add_socket(&c->link.conn, fds, wants, n, max);
	n = add_socket(&c->listen.probe_conn, fds, wants, n, max);
	n = add_socket(ehi_heartbeat_conn(c), fds, wants, n, max);
	return n;
}
