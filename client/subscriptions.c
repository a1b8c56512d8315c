/*
 * subscriptions.c: the list of subscriptions, found by organization and by
 * notification token; adding, forgetting and removing one; its token and version.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The subscription to org, or NULL. */
eh_sub *
ehi_find_sub(const eh_client *c, const char *org)
{
	return ehi_map_get(&c->by_org, org);
}

/* A new subscription at the end of the list; NULL (error set) when out of memory. */
eh_sub *
ehi_add_sub(eh_client *c, const char *org, int64_t cursor, const char *version, int automatic)
{
	eh_sub	   *s = calloc(1, sizeof(eh_sub));
	eh_sub	  **tail;

	if (!s || !(s->org = strdup(org)) || ehi_map_put(&c->by_org, s->org, s) != 0)
	{
		if (s)
			free(s->org);
		free(s);
		ehi_set_error(c, "out of memory");
		return NULL;
	}
	s->cursor = cursor;
	snprintf(s->version, sizeof(s->version), "%s", version);
	if (version[0])
		ehi_versions_delivered(&s->seen, version);
	s->acked = -1;
	s->automatic = automatic;
	ehi_stats_sub_started(c, s);
	/* Subscriptions keep their order: the state query relies on it. */
	for (tail = &c->subs; *tail; tail = &(*tail)->next)
		;
	*tail = s;
	return s;
}

/* The subscription to org (NULL allowed), or NULL with the error set. */
eh_sub *
ehi_subscribed(eh_client *c, const char *org)
{
	eh_sub	   *s = org ? ehi_find_sub(c, org) : NULL;

	if (!s)
		ehi_set_error(c, "not subscribed to organization \"%s\"", org ? org : "(null)");
	return s;
}

/* The subscription of a notification's token, or NULL. */
eh_sub *
ehi_sub_by_token(const eh_client *c, const char *token)
{
	return ehi_map_get(&c->by_token, token);
}

/* The subscription's notifications carry token; a changed one replaces the old. */
void
ehi_set_token(eh_client *c, eh_sub *s, const char *token)
{
	if (strcmp(s->token, token) == 0)
		return;
	if (s->token[0] && ehi_map_get(&c->by_token, s->token) == s)
		ehi_map_remove(&c->by_token, s->token);
	snprintf(s->token, sizeof(s->token), "%s", token);
	if (ehi_map_put(&c->by_token, s->token, s) != 0)
		s->token[0] = '\0';		/* out of memory: found by polls only */
	/* A new token (a rotated key) comes with a new data key. */
	s->has_key = 0;
	s->key_asked = 0;
	c->link.keys_due = 1;
}

/*
 * Called before a subscription goes away or restarts elsewhere: a query
 * out for it, or the rest of a stopped batch, answers the old cursor.
 */
void
ehi_forget_sub(eh_client *c, eh_sub *s)
{
	if (c->link.op_sub == s)
		c->link.op_sub = NULL;	/* its answer is dropped */
	if (c->fetch_next == s)
		c->fetch_next = s->next;
	ehi_drop_held_of(c, s);
	ehi_snapshot_cancel(c, s);
}

/*
 * eh_subscribe_at() of an organization followed through eh_subscribe_all():
 * the subscription becomes explicit and restarts at cursor and version
 * (the stored cursor wins over the automatic one).
 */
void
ehi_take_over_sub(eh_client *c, eh_sub *s, int64_t cursor, const char *version)
{
	ehi_forget_sub(c, s);		/* a query out for it answers the old cursor */
	ehi_stats_sub_ended(c, s);
	s->automatic = 0;
	ehi_stats_sub_started(c, s);
	s->cursor = cursor;
	s->needs_fetch = 0;
	s->resync_reason = 0;
	s->wants_snapshot = 0;
	s->snapshot_reason = 0;
	s->no_snapshot = 0;
	ehi_versions_reset(&s->seen);
	ehi_set_version(s, version);
}

/* Removes an explicit subscription. */
void
ehi_remove_sub(eh_client *c, eh_sub *s)
{
	ehi_forget_sub(c, s);
	for (eh_sub **p = &c->subs; *p; p = &(*p)->next)
	{
		if (*p == s)
		{
			*p = s->next;
			break;
		}
	}
	ehi_stats_sub_ended(c, s);
	ehi_map_remove(&c->by_org, s->org);
	if (s->token[0] && ehi_map_get(&c->by_token, s->token) == s)
		ehi_map_remove(&c->by_token, s->token);
	free(s->org);
	free(s->config_hash);
	free(s);
}

/* Frees every subscription and what the delivery keeps. */
void
ehi_free_subs(eh_client *c)
{
	ehi_drop_held(c);
	while (c->subs)
		ehi_remove_sub(c, c->subs);
	ehi_map_free(&c->by_org);
	ehi_map_free(&c->by_token);
}

/* The subscription is at version ("" unknown). */
void
ehi_set_version(eh_sub *s, const char *version)
{
	snprintf(s->version, sizeof(s->version), "%s", version);
	if (version[0])
		ehi_versions_delivered(&s->seen, version);
}

/* The next subscription to fetch, round robin; NULL if none needs it. */
eh_sub *
ehi_next_to_fetch(eh_client *c)
{
	eh_sub	   *start = c->fetch_next ? c->fetch_next : c->subs;
	eh_sub	   *s = start;

	if (!s)
		return NULL;
	do
	{
		if (s->needs_fetch && !s->resync_reason && !s->wants_snapshot)
		{
			c->fetch_next = s->next;
			return s;
		}
		s = s->next ? s->next : c->subs;
	} while (s != start);
	return NULL;
}

/* Whether a subscription needs a fetch, a head or a snapshot. */
int
ehi_subs_want_work(const eh_client *c)
{
	for (const eh_sub *s = c->subs; s; s = s->next)
		if (s->needs_fetch || s->resync_reason || s->wants_snapshot)
			return 1;
	return 0;
}

/* Whether a subscription still waits for its token (the next poll brings it). */
int
ehi_subs_lack_token(const eh_client *c)
{
	for (const eh_sub *s = c->subs; s; s = s->next)
		if (!s->token[0])
			return 1;
	return 0;
}

/* The subscription after after, in subscription order (the first for NULL). */
eh_sub *
ehi_sub_next(const eh_client *c, const eh_sub *after)
{
	return after ? after->next : c->subs;
}

/* The first subscription that waits for a snapshot, or NULL. */
eh_sub *
ehi_sub_wanting_snapshot(const eh_client *c)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (s->wants_snapshot)
			return s;
	return NULL;
}

/* The first subscription whose resync waits for its head, or NULL. */
eh_sub *
ehi_sub_to_resync(const eh_client *c)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (s->resync_reason)
			return s;
	return NULL;
}

/* Walks the subscriptions for the metrics (an ehi_sub_walk). */
const eh_sub *
ehi_sub_walk_next(const eh_client *c, const eh_sub *after, ehi_sub_view *view)
{
	const eh_sub *s = after ? after->next : c->subs;

	if (!s)
		return NULL;
	view->org = s->org;
	view->automatic = s->automatic;
	view->has_applied = s->cursor >= 0;
	view->applied = s->acked >= 0 ? s->acked : s->cursor;
	view->stats = &s->stats;
	return s;
}
