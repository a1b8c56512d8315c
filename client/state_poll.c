/*
 * state_poll.c: the poll of the subscriptions' heads and tokens
 * (organization_states), and what its answer says of each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A standby that was promoted: notifications may work now (session.c). */
void
ehi_check_promotion(eh_client *c, int in_recovery)
{
	if (c->listen.mode == LISTEN_OFF && c->listen.no_listen == NO_LISTEN_STANDBY && !in_recovery &&
		c->link.conn.state == EHI_CONN_IDLE)
	{
		ehi_log(c, EH_LOG_INFO, "the server is no longer a standby");
		c->listen.promoted = 1; /* the session probes LISTEN again */
	}
}

/*
 * State query: per subscription, the head revision and version, the
 * version of the event at the cursor (to notice rewritten history), and the
 * token its notifications carry (NULL without read privilege: the fetch
 * then reports the refusal); and whether the server is a standby.
 */
static const char STATE_SQL[] =
	"SELECT s.revision, s.version_id::text, e.version_id::text,"
	" CASE WHEN eventhub.has_organization_privilege(c.org, 'read')"
	"  THEN eventhub.notification_token(c.org) END,"
	" pg_is_in_recovery(), c.org, c.cursor"
	" FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS c(org, cursor, n)"
	" LEFT JOIN eventhub.organization_states s ON s.organization_id = c.org"
	" LEFT JOIN eventhub.events e ON e.organization_id = c.org AND e.revision = c.cursor"
	" ORDER BY c.n";

/*
 * Sends the state query, when there are subscriptions and the client does
 * not follow every organization (discovery.c polls then).  Returns as
 * ehi_next_catalog_query().
 */
int
ehi_send_state(eh_client *c)
{
	ehi_strbuf	names = {0};
	ehi_strbuf	revs = {0};
	const char *params[2];
	int			rc;

	if (!ehi_sub_next(c, NULL))
		return 0;
	ehi_sb_puts(&names, "{");
	ehi_sb_puts(&revs, "{");
	for (eh_sub *s = ehi_sub_next(c, NULL); s; s = ehi_sub_next(c, s))
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
	else if (rc == 1)
		c->link.next_poll_at = 0;	/* the statement is being prepared first */
	return rc < 0 ? -1 : 1;
}

/* The answer to the state query: each subscription compared with its head. */
void
ehi_handle_state(eh_client *c, PGresult *res)
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
			ehi_set_token(c, s, PQgetvalue(res, row, 3));
		else
			s->has_key = 0;		/* read access revoked: its events are fetched (and refused) */
		ehi_compare_head(c, s, registered ? strtoll(PQgetvalue(res, row, 0), NULL, 10) : 0,
					 registered ? PQgetvalue(res, row, 1) : "",
					 PQgetisnull(res, row, 2) ? NULL : PQgetvalue(res, row, 2));
	}
	ehi_check_promotion(c, PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 4), "t") == 0);
}
