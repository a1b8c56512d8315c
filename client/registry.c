/*
 * registry.c: the replica registry.  With a replica id, the client reports
 * its progress with eventhub.heartbeat() right after connecting and every
 * heartbeat interval, on its own connection or on a separate one (a
 * replica that reads from a standby sends them to the primary), and
 * deregisters when it is freed, waiting at most the close timeout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char HEARTBEAT_SQL[] = "SELECT eventhub.heartbeat($1, $2::jsonb, $3::jsonb, $4)";

/* The JSON object of eventhub.heartbeat()'s progress argument. */
static int
build_progress(eh_client *c, ehi_strbuf *progress)
{
	int			first = 1;

	ehi_sb_puts(progress, "{");
	for (eh_sub *s = ehi_sub_next(c, NULL); s; s = ehi_sub_next(c, s))
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
	return c->replica.id && c->link.hello_done && ehi_now_ms() >= c->replica.next_at;
}

/*
 * Builds the next heartbeat's parameters (progress is the caller's to free)
 * and schedules the one after.  Returns 0, or -1 when out of memory.
 */
static int
heartbeat_params(eh_client *c, ehi_strbuf *progress, const char *params[4])
{
	c->replica.next_at = ehi_now_ms() + c->replica.interval_ms;
	if (build_progress(c, progress) != 0)
		return -1;
	params[0] = c->replica.id;
	params[1] = progress->data;
	params[2] = c->replica.labels;
	params[3] = c->replica.version;
	return 0;
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

	if (heartbeat_params(c, &progress, params) != 0)
		return 1;
	rc = ehi_send(c, OP_HEARTBEAT, NULL, HEARTBEAT_SQL, 4, params);
	ehi_sb_free(&progress);
	return rc;
}

/* A heartbeat failed (c->errmsg says why): logged once until one succeeds. */
static void
heartbeat_failing(eh_client *c)
{
	if (!c->replica.failing)
		ehi_log(c, EH_LOG_WARNING, "%s (logged once until a heartbeat succeeds)", c->errmsg);
	c->replica.failing = 1;
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
		if (ac == &c->link.conn && ehi_result_failed(c, res, "heartbeat failed"))
			return;
		ehi_set_result_error(c, ac, res, "heartbeat failed");
		heartbeat_failing(c);
		return;
	}
	if (c->replica.failing)
		ehi_log(c, EH_LOG_INFO, "heartbeats are recorded again");
	c->replica.failing = 0;
	c->counters[EH_STAT_HEARTBEATS]++;
}

/* A failure of the separate heartbeat connection: logged once, retried at the next heartbeat. */
static void
heartbeat_conn_failed(eh_client *c)
{
	ehi_set_error(c, "heartbeat failed: %s", c->replica.conn.error);
	heartbeat_failing(c);
}

/*
 * Drives the separate heartbeat connection (eh_set_heartbeat_conninfo):
 * connects when a heartbeat is due, sends it, takes the answer.
 */
void
ehi_drive_heartbeat_conn(eh_client *c)
{
	ehi_conn   *ac = &c->replica.conn;
	ehi_step	st;

	if (!c->replica.conninfo || !c->replica.id)
		return;
	if (ac->state == EHI_CONN_NONE)
	{
		if (!ehi_heartbeat_due(c))
			return;
		if (ehi_conn_start(ac, c->replica.conninfo, c->cfg.query_timeout_ms, NULL) == EHI_STEP_FAILED)
		{
			c->replica.next_at = ehi_now_ms() + c->replica.interval_ms;
			heartbeat_conn_failed(c);
			return;
		}
	}
	st = ehi_conn_step(ac);
	if (st == EHI_STEP_FAILED)
	{
		c->replica.next_at = ehi_now_ms() + c->replica.interval_ms;
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

		if (heartbeat_params(c, &progress, params) != 0)
			return;
		if (ehi_conn_send(ac, HEARTBEAT_SQL, NULL, 0, 4, params, c->cfg.query_timeout_ms) != 0)
			heartbeat_conn_failed(c);
		ehi_sb_free(&progress);
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
	ehi_conn   *ac = c->replica.conninfo ? &c->replica.conn : &c->link.conn;
	int64_t		deadline = ehi_now_ms() + c->cfg.close_timeout_ms;
	const char *params[1] = {c->replica.id};

	if (!c->replica.id || c->cfg.close_timeout_ms <= 0 || ac->state == EHI_CONN_NONE ||
		ac->state == EHI_CONN_CONNECTING || (ac == &c->link.conn && !c->link.hello_done))
		return;
	if (!ehi_conn_wait_idle(ac, deadline))
		return;
	if (ehi_conn_send(ac, "SELECT eventhub.deregister_replica($1)", NULL, 0, 1, params,
					  c->cfg.close_timeout_ms) != 0)
		return;
	(void) ehi_conn_wait_idle(ac, deadline);
}

/* Closes the heartbeat connection and frees the replica's settings. */
void
ehi_free_replica(eh_client *c)
{
	ehi_conn_close(&c->replica.conn);
	free(c->replica.id);
	free(c->replica.labels);
	free(c->replica.version);
	free(c->replica.conninfo);
}

/*
 * Where heartbeats go: 0 none (no replica id), 1 on the client's
 * connection, 2 on their own (eh_set_heartbeat_conninfo).
 */
int
ehi_heartbeat_route(const eh_client *c)
{
	if (!c->replica.id)
		return 0;
	return c->replica.conninfo ? 2 : 1;
}

/* When the next heartbeat is due (monotonic ms; 1 for now). */
int64_t
ehi_heartbeat_next_at(const eh_client *c)
{
	return c->replica.next_at ? c->replica.next_at : 1;
}

/* A heartbeat is due now (a new connection). */
void
ehi_heartbeat_now(eh_client *c)
{
	c->replica.next_at = 0;
}

/* The heartbeats' own connection (state NONE when they have none). */
const ehi_conn *
ehi_heartbeat_conn(const eh_client *c)
{
	return &c->replica.conn;
}
