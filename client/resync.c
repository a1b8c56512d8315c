/*
 * resync.c: a subscription compared with its organization's head, and the
 * resync (the callback, or a snapshot) when its history is gone or changed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char HEAD_SQL[] =
	"SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = $1";

/*
 * With a snapshot callback, a resync is answered by a snapshot (unless the
 * last one was refused as incomplete): returns 1 when one is asked for.
 */
int
ehi_resync_by_snapshot(eh_client *c, eh_sub *s, eh_resync_reason reason)
{
	if (!c->cb.snapshot || s->no_snapshot)
		return 0;
	ehi_log(c, EH_LOG_WARNING, "organization \"%s\" needs a resync (%s): reading a snapshot",
			s->org, eh_resync_reason_name(reason));
	s->wants_snapshot = 1;
	s->snapshot_reason = reason;
	s->resync_reason = 0;
	ehi_stats_resync(s, reason);
	return 1;
}

/*
 * Tells the application to reload an organization and moves its cursor to
 * the head, read by the query being answered; or reads a snapshot instead.
 */
static void
resync(eh_client *c, eh_sub *s, eh_resync_reason reason, int64_t head, const char *head_version)
{
	if (ehi_resync_by_snapshot(c, s, reason))
		return;
	/*
	 * A snapshot refused as incomplete (ZE004) that answered a resync
	 * counted it already; an initial one (reason 0) did not.
	 */
	if (!s->no_snapshot || !s->snapshot_reason)
		ehi_stats_resync(s, reason);
	s->no_snapshot = 0;
	ehi_log(c, EH_LOG_WARNING, "organization \"%s\" needs a resync (%s) at revision %lld",
			s->org, eh_resync_reason_name(reason), (long long) head);
	c->counters[EH_STAT_RESYNCS]++;
	s->cursor = head;
	s->resync_reason = 0;
	ehi_versions_reset(&s->seen);
	ehi_set_version(s, head_version ? head_version : "");
	/* needs_fetch stays: a notification may have named a revision above head */
	s->acked = -1;				/* the reload covers the head */
	if (c->cb.resync)
	{
		c->in_callback = 1;
		c->cb.resync(c, s->org, reason, head, c->cb.resync_arg);
		c->in_callback = 0;
	}
	ehi_stats_at_head(c, s, c->link.op_sent_at);
}

/*
 * Compares a subscription with its organization's head: starts it if it
 * waits for the head, marks it for fetching if it is behind, resyncs it if
 * its history changed under it, or notes that it is at the head.
 * cursor_version: the version of the event at the cursor where the server
 * told it (NULL otherwise).
 */
void
ehi_compare_head(eh_client *c, eh_sub *s, int64_t head, const char *head_version, const char *cursor_version)
{
	if (s->wants_snapshot)
		return;					/* the snapshot brings its own head */
	if (s->cursor < 0)
	{
		s->cursor = head;
		ehi_set_version(s, head_version);
		ehi_stats_at_head(c, s, c->link.op_sent_at);
		return;
	}
	if (head < s->cursor)
		resync(c, s, EH_RESYNC_CURSOR_AHEAD, head, head_version);
	else if (s->version[0] && cursor_version && strcmp(cursor_version, s->version) != 0)
		resync(c, s, EH_RESYNC_VERSION_MISMATCH, head, head_version);
	else if (s->version[0] && head == s->cursor && s->cursor > 0 && !cursor_version &&
			 strcmp(head_version, s->version) != 0)
		resync(c, s, EH_RESYNC_VERSION_MISMATCH, head, head_version);
	else if (head > s->cursor)
		s->needs_fetch = 1;
	else
		ehi_stats_at_head(c, s, c->link.op_sent_at);
}

/* The answer to OP_HEAD: the head a resync moves the cursor to. */
void
ehi_handle_head(eh_client *c, eh_sub *s, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "reading the head revision failed");
		return;
	}
	if (PQntuples(res) == 1)
		resync(c, s, (eh_resync_reason) s->resync_reason, strtoll(PQgetvalue(res, 0, 0), NULL, 10),
			   PQgetvalue(res, 0, 1));
	else
		resync(c, s, (eh_resync_reason) s->resync_reason, 0, "");
}

/*
 * Sends the query for the head of the first subscription a resync waits
 * for.  Returns as ehi_next_catalog_query().
 */
int
ehi_send_head(eh_client *c)
{
	eh_sub	   *s = ehi_sub_to_resync(c);
	const char *params[1];

	if (!s)
		return 0;
	params[0] = s->org;
	return ehi_send(c, OP_HEAD, s, HEAD_SQL, 1, params) < 0 ? -1 : 1;
}
