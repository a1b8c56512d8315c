/*
 * registry.c: the replica registry.  With a replica id, the client reports
 * its progress with eventhub.heartbeat() right after connecting and every
 * heartbeat interval, on its own connection or on a separate one (a
 * replica that reads from a standby sends them to the primary), and
 * deregisters when it is freed, waiting at most the close timeout.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define HEARTBEAT_SQL "SELECT eventhub.heartbeat($1, $2::jsonb, $3::jsonb, $4)"

/* The JSON object of eventhub.heartbeat()'s progress argument. */
static int
build_progress(eh_client *c, ehi_strbuf *progress)
{
	int			first = 1;

	ehi_sb_puts(progress, "{");
	for (eh_sub *s = c->subs; s; s = s->next)
	{
		int64_t		applied = s->acked >= 0 ? s->acked : s->cursor;

		if (s->cursor < 0)
			continue;
		if (!first)
			ehi_sb_puts(progress, ", ");
		first = 0;
		ehi_sb_json_string(progress, s->org);
		ehi_sb_printf(progress, ": {\"revision\": %lld", (long long) applied);
		if (applied == s->cursor && s->version[0])
		{
			ehi_sb_puts(progress, ", \"version_id\": ");
			ehi_sb_json_string(progress, s->version);
		}
		if (s->config_hash)
		{
			ehi_sb_puts(progress, ", \"config_hash\": ");
			ehi_sb_json_string(progress, s->config_hash);
		}
		ehi_sb_puts(progress, "}");
	}
	ehi_sb_puts(progress, "}");
	if (progress->oom)
	{
		ehi_sb_free(progress);
		ehi_set_error(c, "out of memory");
		c->pending_error = EH_ERR_MEMORY;
		return -1;
	}
	return 0;
}

int
ehi_heartbeat_due(const eh_client *c)
{
	return c->replica_id && c->hello_done && ehi_now_ms() >= c->next_heartbeat_at;
}

/*
 * Sends a heartbeat on the client's connection.  Returns 0 when it went
 * out, 1 when it could not be built (out of memory), -1 when the
 * connection broke.
 */
int
ehi_send_heartbeat(eh_client *c)
{
	ehi_strbuf	progress = {0};
	const char *params[4];
	int			rc;

	c->next_heartbeat_at = ehi_now_ms() + c->heartbeat_interval_ms;
	if (build_progress(c, &progress) != 0)
		return 1;
	params[0] = c->replica_id;
	params[1] = progress.data;
	params[2] = c->replica_labels;
	params[3] = c->replica_version;
	rc = ehi_send(c, OP_HEARTBEAT, NULL, HEARTBEAT_SQL, 4, params);
	ehi_sb_free(&progress);
	return rc;
}

/*
 * A heartbeat's answer.  A refusal is logged once (until one succeeds
 * again), not fatal: delivery goes on.
 */
void
ehi_handle_heartbeat(eh_client *c, const ehi_conn *ac, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_set_result_error(c, ac, res, "heartbeat failed");
		if (ac == &c->conn && ehi_result_breaks_connection(ac, res))
		{
			ehi_connection_lost(c, c->errmsg);
			return;
		}
		if (!c->heartbeat_failing)
			ehi_log(c, EH_LOG_WARNING, "%s (logged once until a heartbeat succeeds)", c->errmsg);
		c->heartbeat_failing = 1;
		return;
	}
	if (c->heartbeat_failing)
		ehi_log(c, EH_LOG_INFO, "heartbeats are recorded again");
	c->heartbeat_failing = 0;
	c->counters[EH_STAT_HEARTBEATS]++;
}

/* A failure of the separate heartbeat connection: logged once, retried at the next heartbeat. */
static void
heartbeat_conn_failed(eh_client *c)
{
	ehi_set_error(c, "heartbeat failed: %s", c->heartbeat_conn.error);
	if (!c->heartbeat_failing)
		ehi_log(c, EH_LOG_WARNING, "%s (logged once until a heartbeat succeeds)", c->errmsg);
	c->heartbeat_failing = 1;
}

/*
 * Drives the separate heartbeat connection (eh_set_heartbeat_conninfo):
 * connects when a heartbeat is due, sends it, takes the answer.
 */
void
ehi_drive_heartbeat_conn(eh_client *c)
{
	ehi_conn   *ac = &c->heartbeat_conn;
	ehi_step	st;

	if (!c->heartbeat_conninfo || !c->replica_id)
		return;
	if (ac->state == EHI_CONN_NONE)
	{
		if (!ehi_heartbeat_due(c))
			return;
		if (ehi_conn_start(ac, c->heartbeat_conninfo, c->query_timeout_ms, NULL) == EHI_STEP_FAILED)
		{
			c->next_heartbeat_at = ehi_now_ms() + c->heartbeat_interval_ms;
			heartbeat_conn_failed(c);
			return;
		}
	}
	st = ehi_conn_step(ac);
	if (st == EHI_STEP_FAILED)
	{
		c->next_heartbeat_at = ehi_now_ms() + c->heartbeat_interval_ms;
		heartbeat_conn_failed(c);
		return;
	}
	if (st == EHI_STEP_RESULT)
	{
		PGresult   *res = ehi_conn_take_result(ac);

		ehi_handle_heartbeat(c, ac, res);
		PQclear(res);
	}
	if (ac->state == EHI_CONN_IDLE && ehi_heartbeat_due(c))
	{
		ehi_strbuf	progress = {0};
		const char *params[4];

		c->next_heartbeat_at = ehi_now_ms() + c->heartbeat_interval_ms;
		if (build_progress(c, &progress) != 0)
			return;
		params[0] = c->replica_id;
		params[1] = progress.data;
		params[2] = c->replica_labels;
		params[3] = c->replica_version;
		if (ehi_conn_send(ac, HEARTBEAT_SQL, NULL, 0, 4, params, c->query_timeout_ms) != 0)
			heartbeat_conn_failed(c);
		ehi_sb_free(&progress);
	}
}

/*
 * Waits up to deadline for ac to be idle (dropping the answer of a query
 * still out); false if it is not by then.
 */
static int
wait_idle(ehi_conn *ac, int64_t deadline)
{
	for (;;)
	{
		ehi_step	st = ehi_conn_step(ac);
		int64_t		left;
		struct pollfd pfd;

		if (st == EHI_STEP_FAILED || ac->state == EHI_CONN_NONE)
			return 0;
		if (st == EHI_STEP_RESULT)
			PQclear(ehi_conn_take_result(ac));
		if (ac->state == EHI_CONN_IDLE)
			return 1;
		left = deadline - ehi_now_ms();
		if (left <= 0)
			return 0;
		pfd.fd = PQsocket(ac->pg);
		pfd.events = (short) (((ehi_conn_wants(ac) & EH_WANT_READ) ? POLLIN : 0) |
							  ((ehi_conn_wants(ac) & EH_WANT_WRITE) ? POLLOUT : 0));
		pfd.revents = 0;
		(void) poll(&pfd, 1, (int) (left > 50 ? 50 : left));
	}
}

/*
 * An orderly close: deregisters the replica, so that it stops holding
 * retention at once, waiting at most the close timeout in all.  Where no
 * connection is up, or the server does not answer in time, the replica
 * expires after eventhub.replica_ttl instead.
 */
void
ehi_deregister(eh_client *c)
{
	ehi_conn   *ac = c->heartbeat_conninfo ? &c->heartbeat_conn : &c->conn;
	int64_t		deadline = ehi_now_ms() + c->close_timeout_ms;
	const char *params[1] = {c->replica_id};

	if (!c->replica_id || c->close_timeout_ms <= 0 || ac->state == EHI_CONN_NONE ||
		ac->state == EHI_CONN_CONNECTING || (ac == &c->conn && !c->hello_done))
		return;
	if (!wait_idle(ac, deadline))
		return;
	if (ehi_conn_send(ac, "SELECT eventhub.deregister_replica($1)", NULL, 0, 1, params,
					  c->close_timeout_ms) != 0)
		return;
	(void) wait_idle(ac, deadline);
}
