/*
 * notifications.c: the notifications libpq buffered: which subscription each
 * concerns, and the events it carries delivered without a fetch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/*
 * Delivers the events a notification carries (sealed.c) to subscription s,
 * without a fetch, when it may: they come from the notifier this server
 * named (anyone may NOTIFY; PostgreSQL stamps the sender's pid, which
 * nobody can forge), they open under s's data key, the first follows the
 * cursor, and the event before it is the one at the cursor (its version;
 * a rewritten history is left to the fetch, which raises ZE003).  Only
 * while nothing else is under way: no query out (one could be a fetch of
 * the same events, or a poll that compares heads with the cursor), no
 * batch held, no snapshot.  Returns 1 when they were delivered, 0 when
 * the notification is a wake-up as any other.
 */
static int
deliver_sealed(eh_client *c, eh_sub *s, int pid, const char *token, const char *version,
			   const char *sealed)
{
	ehi_sealed	ev;
	PGresult   *res;
	int64_t		first,
				last;

	if (!ehi_keys_from_notifier(c, pid))
		return 0;
	if (!s->has_key || s->cursor < 0 || s->wants_snapshot || s->resync_reason || ehi_held_pending(c) ||
		c->stop || c->pending_error || c->link.conn.state != EHI_CONN_IDLE || ehi_snapshot_open(c))
		return 0;
	if (ehi_sealed_open(s->data_key, token, version, sealed, &ev) != 0)
	{
		ehi_log(c, EH_LOG_DEBUG, "the events a notification about \"%s\" carries do not open: fetching them", s->org);
		return 0;
	}
	first = ev.events[0].revision;
	last = ev.events[ev.count - 1].revision;

	/*
	 * Events at or below the cursor say nothing of the history after it (a
	 * failover may have rewritten it): the notification's version decides,
	 * as for any other, whether to fetch.
	 */
	if (first != s->cursor + 1 || last <= s->cursor ||
		(first > 1 && (!s->version[0] || strcmp(ev.previous, s->version) != 0)))
	{
		ehi_sealed_free(&ev);
		return 0;
	}
	res = ehi_sealed_rows(s->org, &ev);
	ehi_sealed_free(&ev);
	if (!res)
		return 0;				/* out of memory: fetched instead */
	c->counters[EH_STAT_SEALED_DELIVERIES]++;
	if (ehi_deliver_rows(c, s, res, 0, ehi_now_ms()) == 0)
		PQclear(res);
	return 1;
}

/*
 * One notification on channel eventhub or eventhub_events: which
 * subscription it concerns, and what it calls for (see below).
 */
static void
take_notification(eh_client *c, const PGnotify *n)
{
	char		token[EH_TOKEN_LEN + 1];
	char		version[EH_VERSION_ID_LEN + 1];
	char	   *sealed = NULL;
	eh_sub	   *s;

	c->counters[EH_STAT_NOTIFICATIONS]++;
	if (ehi_parse_payload(n->extra, token, version, &sealed) != 0)
	{
		ehi_log(c, EH_LOG_WARNING, "malformed eventhub notification payload: %s", n->extra);
		c->link.next_poll_at = 0;
		return;
	}
	s = ehi_sub_by_token(c, token);
	if (strspn(token, "0") == EH_TOKEN_LEN)
	{
		c->link.next_poll_at = 0;
		ehi_keys_notifier_restarted(c);
	}
	else if (s && s->cursor < 0 && !s->wants_snapshot)
		c->link.next_poll_at = 0;
	else if (s && sealed && deliver_sealed(c, s, n->be_pid, token, version, sealed))
		;						/* delivered */
	else if (s && ehi_versions_notified(&s->seen, version))
		s->needs_fetch = 1;
	else if (!s && !ehi_discovery_unknown_token(c, token) && ehi_subs_lack_token(c))
		c->link.next_poll_at = 0;
	free(sealed);
}

/*
 * Takes the notifications libpq has buffered; marks subscriptions behind.
 * A notification names an organization by its token and the version it
 * moved to: one the subscription is already at needs no fetch.  An unknown
 * token is another organization's, unless a subscription still waits for
 * its token, which the next poll brings, or the client follows every
 * organization: then it looks for new ones and reads every token again (a
 * rotated notification key changes them all), once per unknown token.  The
 * zero token says that announcements were lost (the server's queue was
 * full, or its notifier restarted): poll now.
 */
void
ehi_drain_notifications(eh_client *c)
{
	PGnotify   *n;

	while (c->link.conn.pg && (n = PQnotifies(c->link.conn.pg)) != NULL)
	{
		/*
		 * The probe's answer counts only if it came while the client was
		 * idle: a transaction-pooling proxy delivers what arrives during a
		 * query, never what arrives between them.
		 */
		if (c->listen.mode == LISTEN_PROBING && strcmp(n->relname, c->listen.probe_channel) == 0 &&
			c->link.conn.state == EHI_CONN_IDLE)
			c->listen.probe_received = 1;
		else if (strcmp(n->relname, "eventhub") == 0 || strcmp(n->relname, "eventhub_events") == 0)
			take_notification(c, n);
		PQfreemem(n);
	}
}
