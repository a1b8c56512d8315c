/*
 * stats.c: the client's statistics and their exposition.  The counters of
 * eh_stat() are counted where they happen; this file keeps what needs a
 * rule, per subscription: readiness, freshness and resyncs by reason, and
 * writes everything in Prometheus' text exposition format
 * (eh_render_metrics).  (Not metrics.c: the extension has one.)
 *
 * Ready: the subscription applied a snapshot or reached the head once.  It
 * stays ready while the connection is down or it falls behind: a replica
 * that can serve keeps serving, and freshness shows how old what it serves
 * may be (docs/operations.md, Monitoring).
 *
 * Fresh: the cursor was confirmed equal to the database's head by an
 * answer: a poll or discovery whose head is the cursor, a fetch that
 * delivered everything up to the head it read (or found nothing above the
 * cursor), a resync (the cursor moves to the head it read), a snapshot's
 * END (at its head).  The time of a confirmation is when its query was
 * sent, never later: what the application serves is at least that recent.
 * Before the first confirmation freshness counts from the subscription.
 *
 * The organizations eh_subscribe_all() follows are one subscription, "*":
 * one series each, however many organizations there are.  It is ready once
 * a discovery answered and all of them were ready; its freshness is that
 * of the stalest of them (or of the last discovery, with none).
 */
#include <limits.h>
#include <string.h>

#include "internal.h"

/* A subscription starts (or an automatic one is taken over by eh_subscribe_at). */
void
ehi_stats_sub_started(eh_client *c, eh_sub *s)
{
	s->stats.ready = 0;
	s->stats.fresh_at = ehi_now_ms();
	memset(s->stats.resyncs, 0, sizeof(s->stats.resyncs));
	if (s->automatic)
		c->all_stats.unready++;
}

/* A subscription ends, or stops being automatic. */
void
ehi_stats_sub_ended(eh_client *c, eh_sub *s)
{
	if (s->automatic && !s->stats.ready)
		c->all_stats.unready--;
}

/* An answer to a query sent at asked_at shows the subscription's cursor at the head. */
void
ehi_stats_at_head(eh_client *c, eh_sub *s, int64_t asked_at)
{
	ehi_all_stats *all = &c->all_stats;

	if (!s->stats.ready || asked_at > s->stats.fresh_at)
		s->stats.fresh_at = asked_at;
	if (s->stats.ready)
		return;
	s->stats.ready = 1;
	if (s->automatic && --all->unready == 0 && all->discovered)
		all->ready = 1;
}

/* A discovery sent at asked_at answered: "*" knows every organization as of then. */
void
ehi_stats_discovered(eh_client *c, int64_t asked_at)
{
	ehi_all_stats *all = &c->all_stats;

	all->discovered = 1;
	if (asked_at > all->fresh_at)
		all->fresh_at = asked_at;
	if (all->unready == 0)
		all->ready = 1;
}

/* A resync of the subscription: its callback is called, or a snapshot read. */
void
ehi_stats_resync(eh_sub *s, eh_resync_reason reason)
{
	if ((int) reason > 0 && (int) reason < EHI_RESYNC_REASONS)
		s->stats.resyncs[reason]++;
}

/* eh_subscribe_all() was called: "*" counts its freshness from now. */
void
ehi_stats_follow_all(eh_client *c)
{
	c->all_stats.on = 1;
	c->all_stats.discovered = 0;
	c->all_stats.fresh_at = ehi_now_ms();
}

/* ------------------------------------------------------------ rendering */

/* What one subscription's series show. */
typedef struct sub_values
{
	const char *label;
	int			ready;
	double		freshness_s;
	int			has_applied;
	int64_t		applied;
	uint64_t	resyncs[EHI_RESYNC_REASONS];
} sub_values;

static void
explicit_values(const ehi_sub_view *sv, int64_t now, sub_values *v)
{
	v->label = sv->org;
	v->ready = sv->stats->ready;
	v->freshness_s = (double) (now - sv->stats->fresh_at) / 1000.0;
	v->has_applied = sv->has_applied;
	v->applied = sv->applied;
	memcpy(v->resyncs, sv->stats->resyncs, sizeof(v->resyncs));
}

/* "*": every automatic subscription taken together. */
static void
all_values(const eh_client *c, ehi_sub_walk walk, int64_t now, sub_values *v)
{
	int64_t		oldest = c->all_stats.fresh_at;
	int			any = 0;
	ehi_sub_view sv;

	memset(v, 0, sizeof(*v));
	v->label = "*";
	v->ready = c->all_stats.ready;
	v->has_applied = 1;
	for (const eh_sub *s = walk(c, NULL, &sv); s; s = walk(c, s, &sv))
	{
		if (!sv.automatic)
			continue;
		if (!any || sv.stats->fresh_at < oldest)
			oldest = sv.stats->fresh_at;
		any = 1;
		if (sv.has_applied)
			v->applied += sv.applied;
		for (int r = 1; r < EHI_RESYNC_REASONS; r++)
			v->resyncs[r] += sv.stats->resyncs[r];
	}
	v->freshness_s = (double) (now - oldest) / 1000.0;
}

/* # HELP and # TYPE of a family. */
static void
family(ehi_strbuf *b, const char *name, const char *type, const char *help)
{
	ehi_sb_printf(b, "# HELP %s ", name);
	ehi_sb_prometheus(b, help, 1);
	ehi_sb_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* The families with a series per subscription. */
typedef enum sub_family
{
	FAMILY_READY,
	FAMILY_FRESHNESS,
	FAMILY_APPLIED,
	FAMILY_RESYNCS,
	SUB_FAMILIES
} sub_family;

static const struct
{
	const char *name;
	const char *type;
	const char *help;
}			sub_families[SUB_FAMILIES] = {
	{"eventhub_client_ready", "gauge",
	"1 once the subscription applied a snapshot or reached the database's head; it stays 1."},
	{"eventhub_client_freshness_seconds", "gauge",
		"Seconds since the subscription's cursor was last confirmed equal to the database's head "
	"(since subscribing, before the first time)."},
	{"eventhub_client_applied_revision", "gauge",
		"The revision the subscription applied (eh_ack's, else the last event delivered); "
	"for \"*\" the sum over the organizations it follows."},
	{"eventhub_client_resyncs_total", "counter",
	"Resyncs of the subscription (the resync callback, or a snapshot instead), by reason."},
};

/* name{subscription="label"[,reason="reason"]} and a space. */
static void
sub_series(ehi_strbuf *b, const char *name, const sub_values *v, const char *reason)
{
	ehi_sb_printf(b, "%s{subscription=\"", name);
	ehi_sb_prometheus(b, v->label, 0);
	if (reason)
		ehi_sb_printf(b, "\",reason=\"%s", reason);
	ehi_sb_puts(b, "\"} ");
}

/* A subscription's samples of a family. */
static void
sub_samples(ehi_strbuf *b, sub_family f, const sub_values *v)
{
	const char *name = sub_families[f].name;

	switch (f)
	{
		case FAMILY_READY:
			sub_series(b, name, v, NULL);
			ehi_sb_printf(b, "%d\n", v->ready);
			break;
		case FAMILY_FRESHNESS:
			sub_series(b, name, v, NULL);
			ehi_sb_printf(b, "%.3f\n", v->freshness_s);
			break;
		case FAMILY_APPLIED:
			if (!v->has_applied)
				break;			/* it waits for the head */
			sub_series(b, name, v, NULL);
			ehi_sb_printf(b, "%lld\n", (long long) v->applied);
			break;
		case FAMILY_RESYNCS:
			for (int r = 1; r < EHI_RESYNC_REASONS; r++)
			{
				sub_series(b, name, v, eh_resync_reason_name((eh_resync_reason) r));
				ehi_sb_printf(b, "%llu\n", (unsigned long long) v->resyncs[r]);
			}
			break;
		case SUB_FAMILIES:
			break;
	}
}

static void
counter(ehi_strbuf *b, const char *name, const char *help, uint64_t value)
{
	family(b, name, "counter", help);
	ehi_sb_printf(b, "%s %llu\n", name, (unsigned long long) value);
}

/*
 * The subscriptions' families: the explicit subscriptions in subscription
 * order, then "*".
 */
static void
sub_families_out(ehi_strbuf *b, const eh_client *c, ehi_sub_walk walk, int64_t now)
{
	sub_values	all;
	sub_values	one;
	ehi_sub_view sv;

	if (c->all_stats.on)
		all_values(c, walk, now, &all);
	for (int f = 0; f < SUB_FAMILIES; f++)
	{
		family(b, sub_families[f].name, sub_families[f].type, sub_families[f].help);
		for (const eh_sub *s = walk(c, NULL, &sv); s; s = walk(c, s, &sv))
		{
			if (sv.automatic)
				continue;
			explicit_values(&sv, now, &one);
			sub_samples(b, (sub_family) f, &one);
		}
		if (c->all_stats.on)
			sub_samples(b, (sub_family) f, &all);
	}
}

/*
 * eh_render_metrics(): the exposition into buf, the subscriptions walked
 * with walk.  Returns its length (as snprintf), or -1.
 */
int
ehi_stats_render(const eh_client *c, ehi_sub_walk walk, char *buf, size_t len)
{
	ehi_strbuf	b;

	ehi_sb_init_fixed(&b, buf, len);
	family(&b, "eventhub_client_connected", "gauge",
		   "Whether the client's connection is up and answered its first query (1) or not (0).");
	ehi_sb_printf(&b, "eventhub_client_connected %d\n", ehi_link_up(c));
	sub_families_out(&b, c, walk, ehi_now_ms());
	family(&b, "eventhub_client_wakeups_total", "counter",
		   "Times the client looked for new events, by source: eventhub notifications received, "
		   "polls of the organizations' heads.");
	ehi_sb_printf(&b, "eventhub_client_wakeups_total{source=\"notification\"} %llu\n",
				  (unsigned long long) c->counters[EH_STAT_NOTIFICATIONS]);
	ehi_sb_printf(&b, "eventhub_client_wakeups_total{source=\"poll\"} %llu\n",
				  (unsigned long long) c->counters[EH_STAT_POLLS]);
	counter(&b, "eventhub_client_fetches_total", "Event fetches run.", c->counters[EH_STAT_FETCHES]);
	counter(&b, "eventhub_client_reconnects_total", "Connections re-established after a loss.",
			c->counters[EH_STAT_RECONNECTS]);
	counter(&b, "eventhub_client_events_delivered_total", "Events handed to the application's callbacks.",
			c->counters[EH_STAT_EVENTS_DELIVERED]);
	return b.len > INT_MAX ? -1 : (int) b.len;
}
