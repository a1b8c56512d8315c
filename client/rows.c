/*
 * rows.c: hands the rows of a fetch (or a notification's events laid out
 * as such rows) to the callbacks, and holds the rest of a stopped batch.
 */
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Frees the rest of a stopped batch, if any. */
void
ehi_drop_held(eh_client *c)
{
	if (c->held.res)
		PQclear(c->held.res);
	c->held.res = NULL;
	c->held.sub = NULL;
}

/* Frees the rest of a stopped batch if it is subscription s's. */
void
ehi_drop_held_of(eh_client *c, const eh_sub *s)
{
	if (c->held.sub == s)
		ehi_drop_held(c);
}

/* Whether the rest of a stopped batch waits for the next eh_process(). */
int
ehi_held_pending(const eh_client *c)
{
	return c->held.res != NULL;
}

/* The event of a fetch's row; its strings point into res. */
static void
row_event(const PGresult *res, int row, eh_event *ev)
{
	ev->organization_id = PQgetvalue(res, row, COL_ORG);
	ev->revision = strtoll(PQgetvalue(res, row, COL_REVISION), NULL, 10);
	ev->version_id = PQgetvalue(res, row, COL_VERSION);
	ev->processed_timestamp = PQgetvalue(res, row, COL_PTS);
	ev->originated_timestamp = PQgetvalue(res, row, COL_OTS);
	ev->event_type = PQgetvalue(res, row, COL_TYPE);
	ev->action = PQgetvalue(res, row, COL_ACTION);
	ev->entity_id = PQgetvalue(res, row, COL_ENTITY);
	ev->correlation_id = PQgetvalue(res, row, COL_CORRELATION);
	ev->event_data = PQgetvalue(res, row, COL_DATA);
	ev->transaction_first_revision = PQgetisnull(res, row, COL_FIRST) ? ev->revision :
		strtoll(PQgetvalue(res, row, COL_FIRST), NULL, 10);
	ev->transaction_end = PQgetisnull(res, row, COL_END) || PQgetvalue(res, row, COL_END)[0] == 't';
}

/*
 * The rows from row on that go to one callback: the rest of the
 * transaction (up to the row that ends it, or to the end of the batch for
 * a transaction over the limits) with a transaction callback, one event
 * otherwise.  Returns the row after them.
 */
static int
group_end(const eh_client *c, const PGresult *res, int row)
{
	int			n = PQntuples(res);

	if (!c->cb.transaction)
		return row + 1;
	while (row < n)
	{
		int			ends = PQgetisnull(res, row, COL_END) || PQgetvalue(res, row, COL_END)[0] == 't';

		row++;
		if (ends)
			break;
	}
	return row;
}

/* A delivery that cannot go on: the error for eh_process(), and a fetch later. */
static void
delivery_failed(eh_client *c, eh_sub *s, int error)
{
	c->pending_error = error;
	s->needs_fetch = 1;
	ehi_retry_later(c);
}

/*
 * The events of count rows from row on into events, and list pointing at
 * them; -1 (error set) when one does not follow the cursor.
 */
static int
read_group(eh_client *c, eh_sub *s, const PGresult *res, int row, int count,
		   eh_event *events, const eh_event **list)
{
	for (int i = 0; i < count; i++)
	{
		row_event(res, row + i, &events[i]);
		list[i] = &events[i];
		if (events[i].revision != s->cursor + 1 + i)
		{
			/* the server guarantees this; never deliver out of order */
			ehi_set_error(c, "server returned revision %lld of \"%s\" after %lld",
						  (long long) events[i].revision, s->org, (long long) (s->cursor + i));
			ehi_log(c, EH_LOG_ERROR, "%s", c->errmsg);
			delivery_failed(c, s, EH_ERR_SERVER);
			return -1;
		}
	}
	return 0;
}

/*
 * Hands count events to the transaction or the event callback and moves
 * the cursor past them; returns whether the callback asked to stop.
 */
static int
hand_over(eh_client *c, eh_sub *s, const eh_event *events, const eh_event **list, int count)
{
	int			stop = 0;

	c->in_callback = 1;
	if (c->cb.transaction)
		stop = c->cb.transaction(c, s->org, list, count, events[count - 1].transaction_end,
								 c->cb.transaction_arg);
	else if (c->cb.event)
		stop = c->cb.event(c, &events[0], c->cb.event_arg);
	c->in_callback = 0;
	for (int i = 0; i < count - 1; i++)
		ehi_versions_delivered(&s->seen, events[i].version_id);
	s->cursor = events[count - 1].revision;
	snprintf(s->version, sizeof(s->version), "%s", events[count - 1].version_id);
	if (s->version[0])
		ehi_versions_delivered(&s->seen, s->version);
	c->counters[EH_STAT_EVENTS_DELIVERED] += (uint64_t) count;
	c->delivered += count;
	return stop;
}

/* Delivers rows row to end - 1 to one callback; -1 when it cannot (error set). */
static int
deliver_group(eh_client *c, eh_sub *s, const PGresult *res, int row, int end)
{
	int			count = end - row;
	eh_event	one;
	eh_event   *events = count == 1 ? &one : malloc(sizeof(eh_event) * count);
	const eh_event **list = malloc(sizeof(eh_event *) * count);
	int			rc = -1;

	if (!events || !list)
	{
		ehi_set_error(c, "out of memory");
		delivery_failed(c, s, EH_ERR_MEMORY);
	}
	else if (read_group(c, s, res, row, count, events, list) == 0)
	{
		if (hand_over(c, s, events, list, count))
			c->stop = 1;
		c->last_lag_ms = strtod(PQgetvalue(res, end - 1, COL_LAG), NULL);
		rc = 0;
	}
	if (events != &one)
		free(events);
	free(list);
	return rc;
}

/*
 * Whether a delivered batch has more behind it: its last event is below
 * the head it was read at, or (events_since's, without a head) it is full,
 * by count or by size.
 */
static int
batch_truncated(const eh_client *c, const PGresult *res)
{
	int			n = PQntuples(res);

	if (n == 0)
		return 0;
	if (!PQgetisnull(res, n - 1, COL_HEAD))
		return strtoll(PQgetvalue(res, n - 1, COL_REVISION), NULL, 10) <
			strtoll(PQgetvalue(res, n - 1, COL_HEAD), NULL, 10);
	return n == c->cfg.batch_size ||
		(PQnfields(res) > COL_UPTO && strtoll(PQgetvalue(res, n - 1, COL_UPTO), NULL, 10) >= c->cfg.batch_bytes);
}

/*
 * Hands a fetch's rows from row on to the callbacks: a transaction at a
 * time to the transaction callback, else an event at a time to the event
 * callback.  A callback that stops leaves the rest held (the result is
 * kept: returns 1) for the next eh_process(), which delivers it before
 * anything else, with no query and no wait.  Returns 0 when the result may
 * be freed.  asked_at: when the fetch was sent.
 */
int
ehi_deliver_rows(eh_client *c, eh_sub *s, PGresult *res, int row, int64_t asked_at)
{
	int			n = PQntuples(res);

	while (row < n && !c->stop)
	{
		int			end = group_end(c, res, row);

		if (deliver_group(c, s, res, row, end) != 0)
			return 0;
		row = end;
	}
	if (row < n)
	{
		c->held.res = res;
		c->held.sub = s;
		c->held.row = row;
		c->held.asked_at = asked_at;
		return 1;
	}

	/*
	 * A batch that reached the head it saw: a notification drained
	 * meanwhile calls for another fetch only if it named a version the
	 * query did not return.
	 */
	if (batch_truncated(c, res))
		s->needs_fetch = 1;
	else
	{
		/* Everything up to the head the query saw was delivered. */
		ehi_stats_at_head(c, s, asked_at);
		if (s->needs_fetch && !ehi_versions_pending(&s->seen))
			s->needs_fetch = 0;
	}
	return 0;
}

/*
 * Delivers the rest of a batch a callback stopped, first thing in
 * eh_process(); returns 1 when a callback stopped again.
 */
int
ehi_deliver_held(eh_client *c)
{
	PGresult   *res = c->held.res;
	eh_sub	   *s = c->held.sub;

	if (!res)
		return 0;
	c->held.res = NULL;
	c->held.sub = NULL;
	if (ehi_deliver_rows(c, s, res, c->held.row, c->held.asked_at) == 0)
		PQclear(res);
	return c->held.res != NULL;
}

/* Microseconds since the Unix epoch as the fetch query writes them. */
static void
format_timestamp(int64_t us, char out[64])
{
	time_t		secs = (time_t) (us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
	long		micros = (long) (us - (int64_t) secs * 1000000);
	struct tm	tm;

	gmtime_r(&secs, &tm);
	snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
			 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
}

/* Sets a row's value from a NUL-terminated string; 0 when out of memory. */
static int
set_text(PGresult *res, int row, int col, const char *value)
{
	return PQsetvalue(res, row, col, (char *) value, (int) strlen(value));
}

/* Lays out one sealed event as row row of a fetch of org, up to COL_HEAD; 0 when out of memory. */
static int
set_sealed_row(PGresult *res, int row, const char *org, const ehi_sealed *ev, const char *head)
{
	const ehi_sealed_event *e = &ev->events[row];
	char		num[32],
				pts[64],
				ots[64];
	int			ok;

	format_timestamp(e->processed_us, pts);
	format_timestamp(e->originated_us, ots);
	snprintf(num, sizeof(num), "%lld", (long long) e->revision);
	ok = set_text(res, row, COL_ORG, org) && set_text(res, row, COL_REVISION, num) &&
		set_text(res, row, COL_VERSION, e->version_id) &&
		set_text(res, row, COL_PTS, pts) && set_text(res, row, COL_OTS, ots);
	for (int i = 0; ok && i < EHI_SEALED_TEXTS; i++)
		ok = PQsetvalue(res, row, COL_TYPE + i, (char *) e->text[i], e->text_len[i]);
	snprintf(num, sizeof(num), "%.3f", (double) (ev->sent_at_us - e->processed_us) / 1000.0);
	ok = ok && set_text(res, row, COL_LAG, num);
	snprintf(num, sizeof(num), "%lld", (long long) e->first_revision);
	return ok && set_text(res, row, COL_FIRST, num) &&
		set_text(res, row, COL_END, e->ends ? "t" : "f") && set_text(res, row, COL_HEAD, head);
}

/* The columns of a notification's events laid out as a fetch's rows. */
#define SEALED_COLUMNS (COL_HEAD + 1)

/*
 * The events a notification carried (sealed.c) as the rows of a fetch of
 * organization org (COL_ORG to COL_HEAD), the head being the last event's
 * revision: a PGresult the caller clears, or NULL when out of memory.
 */
PGresult *
ehi_sealed_rows(const char *org, const ehi_sealed *ev)
{
	static const char *const names[SEALED_COLUMNS] = {
		"organization_id", "revision", "version_id", "processed_timestamp", "originated_timestamp",
		"event_type", "action", "entity_id", "correlation_id", "event_data", "lag_ms",
		"transaction_first_revision", "transaction_end", "head_revision"
	};
	PGresAttDesc attrs[SEALED_COLUMNS];
	PGresult   *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	char		head[32];

	if (!res)
		return NULL;
	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i < SEALED_COLUMNS; i++)
	{
		attrs[i].name = (char *) names[i];
		attrs[i].typid = 25;	/* text: values are read as text */
		attrs[i].typlen = -1;
		attrs[i].atttypmod = -1;
	}
	snprintf(head, sizeof(head), "%lld", (long long) ev->events[ev->count - 1].revision);
	if (!PQsetResultAttrs(res, SEALED_COLUMNS, attrs))
	{
		PQclear(res);
		return NULL;
	}
	for (int row = 0; row < ev->count; row++)
		if (!set_sealed_row(res, row, org, ev, head))
		{
			PQclear(res);
			return NULL;
		}
	return res;
}
