/*
 * client.c: libeventhub, following organizations over one libpq connection.
 *
 * The cursor of a subscription is the revision of the last event handed to
 * the application.  Everything else is a hint of where to look: a
 * notification, a poll of organization_states, a reconnect.  Events are
 * fetched with eventhub.events_since(organization, cursor), which returns
 * them gapless and in order or raises EH001/EH002; an event is delivered
 * only if its revision is cursor + 1, and the cursor then moves to it.  So
 * nothing is skipped and nothing is delivered twice, whatever the hints do.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "eventhub.h"
#include "internal.h"

#define DEFAULT_POLL_INTERVAL_MS 5000
#define DEFAULT_BATCH_SIZE 1000
#define DEFAULT_BACKOFF_INITIAL_MS 100
#define DEFAULT_BACKOFF_MAX_MS 30000
#define DEFAULT_HEARTBEAT_INTERVAL_MS 10000

/*
 * Fetch query: ISO 8601 UTC timestamps whatever the session's settings, the
 * delivery lag by the server's clock, and the version of the event at the
 * cursor, to notice a rewritten history before delivering past it.
 */
#define FETCH_SQL \
	"SELECT organization_id, revision, version_id::text," \
	" to_char(processed_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')," \
	" to_char(originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')," \
	" event_type, action, entity_id, correlation_id, event_data::text," \
	" (extract(epoch FROM clock_timestamp() - processed_timestamp) * 1000)::float8," \
	" (SELECT c.version_id::text FROM eventhub.events c" \
	"   WHERE c.organization_id = $1 AND c.revision = $2)" \
	" FROM eventhub.events_since($1, $2, $3)"

/*
 * State query: per subscription, the head revision and version, the
 * version of the event at the cursor (to notice rewritten history), and the
 * token its notifications carry (NULL without read privilege: the fetch
 * then reports the refusal).
 */
#define STATE_SQL \
	"SELECT s.revision, s.version_id::text, e.version_id::text," \
	" CASE WHEN eventhub.has_organization_privilege(c.org, 'read')" \
	"  THEN eventhub.notification_token(c.org) END" \
	" FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS c(org, cursor, n)" \
	" LEFT JOIN eventhub.organization_states s ON s.organization = c.org" \
	" LEFT JOIN eventhub.events e ON e.organization_id = c.org AND e.revision = c.cursor" \
	" ORDER BY c.n"

typedef struct eh_sub
{
	char	   *org;
	int64_t		cursor;			/* last delivered revision; -1: waiting for the head */
	char		version[EH_VERSION_ID_LEN + 1];	/* version_id at the cursor, "" unknown */
	char		token[EH_TOKEN_LEN + 1];	/* its notification token, "" unknown */
	int			needs_fetch;	/* a newer revision is known to exist */
	int64_t		acked;			/* eh_ack's revision; -1: report the cursor */
	char	   *config_hash;	/* eh_set_config_hash's, or NULL */
	struct eh_sub *next;
} eh_sub;

struct eh_client
{
	char	   *conninfo;
	PGconn	   *conn;
	int			ever_connected;
	int			listen_enabled;
	int			listening;
	int			listen_failure_logged;

	int			poll_interval_ms;
	int			batch_size;
	int			backoff_initial_ms;
	int			backoff_max_ms;
	int			backoff_ms;
	int64_t		next_poll_at;	/* monotonic ms; 0: now */
	int64_t		reconnect_at;	/* monotonic ms */

	eh_sub	   *subs;
	int			stop;			/* the event callback asked to stop */
	int			in_callback;	/* a callback runs: subscriptions are fixed */

	char	   *replica_id;		/* NULL: no heartbeats */
	char	   *replica_labels;
	char	   *replica_version;
	int			heartbeat_interval_ms;
	int64_t		next_heartbeat_at;	/* monotonic ms; 0: now */

	eh_event_cb event_cb;
	void	   *event_arg;
	eh_resync_cb resync_cb;
	void	   *resync_arg;
	eh_log_cb	log_cb;
	void	   *log_arg;

	eh_stats	stats;
	uint64_t	rng;
	char		errmsg[1024];
	char		sqlstate[6];
};

/* Monotonic clock in milliseconds. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* xorshift64*, per client: jitter needs no global state and no quality. */
static double
random_unit(eh_client *c)
{
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return (double) ((c->rng * 2685821657736338717ULL) >> 11) / (double) (1ULL << 53);
}

static void set_error(eh_client *c, const char *fmt,...) __attribute__((format(printf, 2, 3)));
static void log_msg(eh_client *c, eh_log_level level, const char *fmt,...) __attribute__((format(printf, 3, 4)));

static void
set_error(eh_client *c, const char *fmt,...)
{
	va_list		ap;
	size_t		len;

	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	len = strlen(c->errmsg);
	while (len > 0 && c->errmsg[len - 1] == '\n')
		c->errmsg[--len] = '\0';
	c->sqlstate[0] = '\0';
}

static void
log_msg(eh_client *c, eh_log_level level, const char *fmt,...)
{
	char		buf[1024];
	va_list		ap;
	size_t		len;

	if (!c->log_cb)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
	c->log_cb(c, level, buf, c->log_arg);
}

/* Records a failed result's message and SQLSTATE. */
static void
set_result_error(eh_client *c, const PGresult *res, const char *what)
{
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (primary)
		set_error(c, "%s: %s", what, primary);
	else
		set_error(c, "%s: %s", what, c->conn ? PQerrorMessage(c->conn) : "no connection");
	if (state)
		snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", state);
}

static eh_sub *
find_sub(const eh_client *c, const char *org)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (strcmp(s->org, org) == 0)
			return s;
	return NULL;
}

static eh_sub *
find_sub_by_token(const eh_client *c, const char *token)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (strcmp(s->token, token) == 0)
			return s;
	return NULL;
}

static int
any_token_unknown(const eh_client *c)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (!s->token[0])
			return 1;
	return 0;
}

/*
 * Forgets a broken connection and schedules the next attempt, with
 * exponential backoff and jitter.
 */
static void
connection_lost(eh_client *c)
{
	int			wait;

	if (c->conn)
	{
		log_msg(c, EH_LOG_WARNING, "connection lost: %s", PQerrorMessage(c->conn));
		PQfinish(c->conn);
		c->conn = NULL;
	}
	c->listening = 0;
	wait = (int) (c->backoff_ms * (0.5 + random_unit(c)));
	c->reconnect_at = now_ms() + wait;
	log_msg(c, EH_LOG_INFO, "reconnecting in %d ms", wait);
	c->backoff_ms = c->backoff_ms * 2 > c->backoff_max_ms ? c->backoff_max_ms : c->backoff_ms * 2;
}

/*
 * Whether the connection survived a failed request; if not, forgets it and
 * schedules a reconnect.  An error of libpq's own (no SQLSTATE: the server
 * closed the connection, the network failed) or a FATAL one from the server
 * (terminated, shut down) ends the connection, even where libpq has not
 * marked it bad yet (a write that failed while unread input remained).
 */
static int
check_connection(eh_client *c, const PGresult *res)
{
	const char *severity = res ? PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;

	if (c->conn && PQstatus(c->conn) == CONNECTION_OK &&
		res && PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL &&
		!(severity && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0)))
		return 1;
	connection_lost(c);
	return 0;
}

static void drain_notifications(eh_client *c);

/*
 * Runs one query.  A notification that arrives while it runs is taken in by
 * libpq with the answer rather than left on the socket, so it is taken from
 * libpq's queue here: whoever waits on the socket next would not see it.
 */
static PGresult *
query(eh_client *c, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = nparams == 0 ? PQexec(c->conn, sql) :
		PQexecParams(c->conn, sql, nparams, NULL, params, NULL, NULL, 0);

	drain_notifications(c);
	return res;
}

static void
schedule_poll(eh_client *c)
{
	c->next_poll_at = now_ms() + (int64_t) (c->poll_interval_ms * (0.8 + 0.4 * random_unit(c)));
}

/* LISTEN on the fresh connection, or fall back to polling only. */
static void
start_listening(eh_client *c)
{
	PGresult   *res;

	c->listening = 0;
	if (!c->listen_enabled)
		return;
	res = query(c, "LISTEN eventhub", 0, NULL);
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
		c->listening = 1;
	else if (PQstatus(c->conn) == CONNECTION_OK && !c->listen_failure_logged)
	{
		log_msg(c, EH_LOG_WARNING, "LISTEN is not available on this connection (%s); polling every %d ms instead",
				PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) ?
				PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : PQerrorMessage(c->conn),
				c->poll_interval_ms);
		c->listen_failure_logged = 1;
	}
	PQclear(res);
}

int
eh_connect(eh_client *c)
{
	const char *keys[] = {"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
	"connect_timeout", "fallback_application_name", "dbname", NULL};
	const char *values[] = {"1", "30", "10", "3", "10", "eventhub", c ? c->conninfo : NULL, NULL};
	PGconn	   *conn;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->conn)
		return EH_OK;

	conn = PQconnectdbParams(keys, values, 1);
	if (!conn)
	{
		set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		set_error(c, "could not connect: %s", PQerrorMessage(conn));
		log_msg(c, EH_LOG_WARNING, "%s", c->errmsg);
		PQfinish(conn);
		connection_lost(c);
		return EH_ERR_CONNECTION;
	}
	c->conn = conn;
	if (c->ever_connected)
	{
		c->stats.reconnects++;
		log_msg(c, EH_LOG_INFO, "reconnected");
	}
	c->ever_connected = 1;
	c->backoff_ms = c->backoff_initial_ms;
	start_listening(c);
	if (!c->conn || PQstatus(c->conn) != CONNECTION_OK)
	{
		set_error(c, "connection lost while starting to listen");
		connection_lost(c);
		return EH_ERR_CONNECTION;
	}
	/* Catch up every subscription: a notification may have been missed. */
	c->next_poll_at = 0;
	c->next_heartbeat_at = 0;
	return EH_OK;
}

/*
 * Tells the application to reload an organization and moves its cursor to
 * the head.
 */
static void
resync(eh_client *c, eh_sub *s, eh_resync_reason reason, int64_t head, const char *head_version)
{
	static const char *const names[] = {"", "history removed", "cursor ahead of the server", "version mismatch"};

	log_msg(c, EH_LOG_WARNING, "organization \"%s\" needs a resync (%s) at revision %lld",
			s->org, names[reason], (long long) head);
	c->stats.resyncs++;
	s->cursor = head;
	snprintf(s->version, sizeof(s->version), "%s", head_version ? head_version : "");
	/* needs_fetch stays: a notification may have named a revision above head */
	s->acked = -1;				/* the reload covers the head */
	if (c->resync_cb)
	{
		c->in_callback = 1;
		c->resync_cb(c, s->org, reason, head, c->resync_arg);
		c->in_callback = 0;
	}
}

/* A growing string; oom is set, and appends stop, when memory runs out. */
typedef struct strbuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
	int			oom;
} strbuf;

static void
sb_append(strbuf *b, const char *str, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap)
	{
		size_t		ncap = (b->len + n + 1) * 2;
		char	   *d = realloc(b->data, ncap);

		if (!d)
		{
			b->oom = 1;
			return;
		}
		b->data = d;
		b->cap = ncap;
	}
	memcpy(b->data + b->len, str, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static void
sb_puts(strbuf *b, const char *str)
{
	sb_append(b, str, strlen(str));
}

/* Appends str as a JSON string. */
static void
sb_json_string(strbuf *b, const char *str)
{
	char	   *quoted = ehi_json_quote(str);

	if (!quoted)
	{
		b->oom = 1;
		return;
	}
	sb_puts(b, quoted);
	free(quoted);
}

/* Appends str to a PostgreSQL array literal in buf, quoted. */
static int
append_array_text(char **buf, size_t *len, size_t *cap, const char *str)
{
	size_t		need = *len + 2 * strlen(str) + 4;

	if (need > *cap)
	{
		size_t		ncap = need * 2;
		char	   *n = realloc(*buf, ncap);

		if (!n)
			return -1;
		*buf = n;
		*cap = ncap;
	}
	if (*len > 1)
		(*buf)[(*len)++] = ',';
	(*buf)[(*len)++] = '"';
	for (const char *p = str; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			(*buf)[(*len)++] = '\\';
		(*buf)[(*len)++] = *p;
	}
	(*buf)[(*len)++] = '"';
	(*buf)[*len] = '\0';
	return 0;
}

/*
 * Checks organization_states for every subscription: starts the ones
 * waiting for their head, marks the ones behind for fetching, and resyncs
 * the ones whose history changed under them.
 */
static int
check_state(eh_client *c)
{
	size_t		ncap = 64,
				nlen = 1,
				rcap,
				rlen = 1;
	char	   *names;
	char	   *revs;
	int			count = 0;
	const char *params[2];
	PGresult   *res;
	int			row = 0;

	schedule_poll(c);
	if (!c->conn)
		return EH_ERR_CONNECTION;
	if (!c->subs)
		return EH_OK;

	for (eh_sub *s = c->subs; s; s = s->next)
		count++;
	names = malloc(ncap);
	rcap = (size_t) count * 22 + 3;
	revs = malloc(rcap);
	if (!names || !revs)
	{
		free(names);
		free(revs);
		set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}
	names[0] = '{';
	names[1] = '\0';
	revs[0] = '{';
	for (eh_sub *s = c->subs; s; s = s->next)
	{
		if (append_array_text(&names, &nlen, &ncap, s->org) != 0)
		{
			free(names);
			free(revs);
			set_error(c, "out of memory");
			return EH_ERR_MEMORY;
		}
		rlen += (size_t) snprintf(revs + rlen, rcap - rlen, "%s%lld", rlen > 1 ? "," : "",
								  (long long) (s->cursor > 0 ? s->cursor : 0));
	}
	names[nlen++] = '}';
	names[nlen] = '\0';
	revs[rlen++] = '}';
	revs[rlen] = '\0';

	params[0] = names;
	params[1] = revs;
	res = query(c, STATE_SQL, 2, params);
	free(names);
	free(revs);
	c->stats.polls++;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		set_result_error(c, res, "checking organization_states failed");
		if (!check_connection(c, res))
		{
			PQclear(res);
			return EH_ERR_CONNECTION;
		}
		PQclear(res);
		log_msg(c, EH_LOG_ERROR, "%s", c->errmsg);
		return EH_ERR_SERVER;
	}

	for (eh_sub *s = c->subs; s && row < PQntuples(res); s = s->next, row++)
	{
		int			registered = !PQgetisnull(res, row, 0);
		int64_t		head = registered ? strtoll(PQgetvalue(res, row, 0), NULL, 10) : 0;
		const char *head_version = registered ? PQgetvalue(res, row, 1) : "";
		const char *cursor_version = PQgetisnull(res, row, 2) ? NULL : PQgetvalue(res, row, 2);

		if (!PQgetisnull(res, row, 3))
			snprintf(s->token, sizeof(s->token), "%s", PQgetvalue(res, row, 3));
		if (s->cursor < 0)
		{
			s->cursor = head;
			snprintf(s->version, sizeof(s->version), "%s", head_version);
			continue;
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
	}
	PQclear(res);
	return EH_OK;
}

/* Reads the head of one organization, for a resync the server asked for. */
static int
read_head(eh_client *c, const char *org, int64_t *head, char version[EH_VERSION_ID_LEN + 1])
{
	const char *params[1] = {org};
	PGresult   *res = query(c, "SELECT revision, version_id::text FROM eventhub.organization_states"
							" WHERE organization = $1", 1, params);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		int			alive;

		set_result_error(c, res, "reading the head revision failed");
		alive = check_connection(c, res);
		PQclear(res);
		return alive ? EH_ERR_SERVER : EH_ERR_CONNECTION;
	}
	*head = 0;
	version[0] = '\0';
	if (PQntuples(res) == 1)
	{
		*head = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		snprintf(version, EH_VERSION_ID_LEN + 1, "%s", PQgetvalue(res, 0, 1));
	}
	PQclear(res);
	return EH_OK;
}

/* Resyncs a subscription to its organization's current head. */
static int
resync_to_head(eh_client *c, eh_sub *s, eh_resync_reason reason)
{
	int64_t		head;
	char		version[EH_VERSION_ID_LEN + 1];
	int			rc = read_head(c, s->org, &head, version);

	if (rc != EH_OK)
		return rc;
	resync(c, s, reason, head, version);
	return EH_OK;
}

/*
 * Fetches and delivers one subscription's events until it is at the head
 * or the application asks to stop.  Returns the number delivered or a
 * negative error.
 */
static int
fetch(eh_client *c, eh_sub *s, int *delivered)
{
	char		cursor_text[24];
	char		batch_text[12];
	const char *params[3];

	snprintf(batch_text, sizeof(batch_text), "%d", c->batch_size);
	while (s->needs_fetch && !c->stop)
	{
		PGresult   *res;
		int			n;

		if (!c->conn)
			return EH_ERR_CONNECTION;
		/* Cleared before the query: a notification it drains sets it again. */
		s->needs_fetch = 0;

		snprintf(cursor_text, sizeof(cursor_text), "%lld", (long long) s->cursor);
		params[0] = s->org;
		params[1] = cursor_text;
		params[2] = batch_text;
		res = query(c, FETCH_SQL, 3, params);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			int			reason = 0;

			if (state && strcmp(state, "EH001") == 0)
				reason = EH_RESYNC_HISTORY_REMOVED;
			else if (state && strcmp(state, "EH002") == 0)
				reason = EH_RESYNC_CURSOR_AHEAD;
			int			alive;

			set_result_error(c, res, "fetching events failed");
			alive = check_connection(c, res);
			PQclear(res);
			if (reason)
				return resync_to_head(c, s, (eh_resync_reason) reason);
			if (!alive)
				return EH_ERR_CONNECTION;
			/* Not again at once: the next poll finds what is missing. */
			log_msg(c, EH_LOG_ERROR, "%s", c->errmsg);
			return EH_ERR_SERVER;
		}

		n = PQntuples(res);
		if (n > 0 && s->version[0] && !PQgetisnull(res, 0, 11) &&
			strcmp(PQgetvalue(res, 0, 11), s->version) != 0)
		{
			PQclear(res);
			return resync_to_head(c, s, EH_RESYNC_VERSION_MISMATCH);
		}
		for (int i = 0; i < n; i++)
		{
			eh_event	ev;
			int			stop = 0;

			ev.organization_id = PQgetvalue(res, i, 0);
			ev.revision = strtoll(PQgetvalue(res, i, 1), NULL, 10);
			ev.version_id = PQgetvalue(res, i, 2);
			ev.processed_timestamp = PQgetvalue(res, i, 3);
			ev.originated_timestamp = PQgetvalue(res, i, 4);
			ev.event_type = PQgetvalue(res, i, 5);
			ev.action = PQgetvalue(res, i, 6);
			ev.entity_id = PQgetvalue(res, i, 7);
			ev.correlation_id = PQgetvalue(res, i, 8);
			ev.event_data = PQgetvalue(res, i, 9);
			if (ev.revision != s->cursor + 1)
			{
				/* events_since guarantees this; never deliver out of order */
				set_error(c, "server returned revision %lld of \"%s\" after %lld",
						  (long long) ev.revision, s->org, (long long) s->cursor);
				log_msg(c, EH_LOG_ERROR, "%s", c->errmsg);
				PQclear(res);
				return EH_ERR_SERVER;
			}
			if (c->event_cb)
			{
				c->in_callback = 1;
				stop = c->event_cb(c, &ev, c->event_arg);
				c->in_callback = 0;
			}
			s->cursor = ev.revision;
			snprintf(s->version, sizeof(s->version), "%s", ev.version_id);
			c->stats.events_delivered++;
			c->stats.last_lag_ms = strtod(PQgetvalue(res, i, 10), NULL);
			(*delivered)++;
			if (stop)
			{
				c->stop = 1;
				break;
			}
		}
		PQclear(res);
		/* A full batch may have more behind it; a stop leaves rows undelivered. */
		if (n == c->batch_size || c->stop)
			s->needs_fetch = 1;
	}
	return EH_OK;
}

/*
 * Reports this replica's progress with eventhub.heartbeat().  A refusal is
 * logged, not fatal: delivery goes on.
 */
static int
send_heartbeat(eh_client *c)
{
	strbuf		progress = {NULL, 0, 0, 0};
	const char *params[4];
	PGresult   *res;
	int			first = 1;

	c->next_heartbeat_at = now_ms() + c->heartbeat_interval_ms;
	sb_puts(&progress, "{");
	for (eh_sub *s = c->subs; s; s = s->next)
	{
		int64_t		applied = s->acked >= 0 ? s->acked : s->cursor;
		char		num[32];

		if (s->cursor < 0)
			continue;
		if (!first)
			sb_puts(&progress, ", ");
		first = 0;
		sb_json_string(&progress, s->org);
		snprintf(num, sizeof(num), ": {\"revision\": %lld", (long long) applied);
		sb_puts(&progress, num);
		if (applied == s->cursor && s->version[0])
		{
			sb_puts(&progress, ", \"version_id\": ");
			sb_json_string(&progress, s->version);
		}
		if (s->config_hash)
		{
			sb_puts(&progress, ", \"config_hash\": ");
			sb_json_string(&progress, s->config_hash);
		}
		sb_puts(&progress, "}");
	}
	sb_puts(&progress, "}");
	if (progress.oom)
	{
		free(progress.data);
		set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}

	params[0] = c->replica_id;
	params[1] = progress.data;
	params[2] = c->replica_labels;
	params[3] = c->replica_version;
	res = query(c, "SELECT eventhub.heartbeat($1, $2::jsonb, $3::jsonb, $4)", 4, params);
	free(progress.data);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		int			alive;

		set_result_error(c, res, "heartbeat failed");
		alive = check_connection(c, res);
		PQclear(res);
		if (!alive)
			return EH_ERR_CONNECTION;
		log_msg(c, EH_LOG_WARNING, "%s", c->errmsg);
		return EH_OK;
	}
	PQclear(res);
	c->stats.heartbeats++;
	return EH_OK;
}

/*
 * Takes the notifications libpq has buffered; marks subscriptions behind.
 * A notification names an organization by its token and the version it
 * moved to: one the subscription is already at needs no fetch.  An unknown
 * token is another organization's, unless a subscription still waits for
 * its token, which the next poll brings.
 */
static void
drain_notifications(eh_client *c)
{
	PGnotify   *n;

	while (c->conn && (n = PQnotifies(c->conn)) != NULL)
	{
		char		token[EH_TOKEN_LEN + 1];
		char		version[EH_VERSION_ID_LEN + 1];

		if (strcmp(n->relname, "eventhub") == 0)
		{
			c->stats.notifications++;
			if (ehi_parse_payload(n->extra, token, version) == 0)
			{
				eh_sub	   *s = find_sub_by_token(c, token);

				if (s && s->cursor < 0)
					c->next_poll_at = 0;
				else if (s && strcmp(version, s->version) != 0)
					s->needs_fetch = 1;
				else if (!s && any_token_unknown(c))
					c->next_poll_at = 0;
			}
			else
			{
				log_msg(c, EH_LOG_WARNING, "malformed eventhub notification payload: %s", n->extra);
				c->next_poll_at = 0;
			}
		}
		PQfreemem(n);
	}
}

static int
any_fetch_pending(const eh_client *c)
{
	for (eh_sub *s = c->subs; s; s = s->next)
		if (s->needs_fetch)
			return 1;
	return 0;
}

int
eh_process(eh_client *c)
{
	int			delivered = 0;
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	c->stop = 0;

	if (!c->conn)
	{
		if (now_ms() < c->reconnect_at)
			return 0;
		rc = eh_connect(c);
		if (rc == EH_ERR_MEMORY)
			return rc;
		if (rc != EH_OK)
			return 0;
	}

	if (!PQconsumeInput(c->conn))
	{
		connection_lost(c);
		return 0;
	}

	/* Go round while anything is pending; query() drains after each query. */
	for (int round = 0; round < 100 && c->conn && !c->stop; round++)
	{
		drain_notifications(c);
		if (now_ms() >= c->next_poll_at)
		{
			rc = check_state(c);
			if (rc == EH_ERR_MEMORY || rc == EH_ERR_SERVER)
				return delivered ? delivered : rc;
		}
		if (c->conn && c->replica_id && now_ms() >= c->next_heartbeat_at &&
			send_heartbeat(c) == EH_ERR_MEMORY)
			return EH_ERR_MEMORY;
		if (!any_fetch_pending(c))
			break;
		for (eh_sub *s = c->subs; s && c->conn && !c->stop; s = s->next)
		{
			if (!s->needs_fetch)
				continue;
			rc = fetch(c, s, &delivered);
			if (rc == EH_ERR_SERVER)
				return delivered ? delivered : rc;
			if (rc == EH_ERR_CONNECTION)
				break;
		}
	}
	return delivered;
}

int
eh_next_timeout_ms(const eh_client *c)
{
	int64_t		now,
				at;

	if (!c)
		return 0;
	if (c->conn && any_fetch_pending(c))
		return 0;
	now = now_ms();
	at = c->conn ? c->next_poll_at : c->reconnect_at;
	if (c->conn && c->replica_id && c->next_heartbeat_at < at)
		at = c->next_heartbeat_at;
	if (at <= now)
		return 0;
	return at - now > 3600000 ? 3600000 : (int) (at - now);
}

int
eh_wait(eh_client *c, int timeout_ms)
{
	int64_t		deadline;

	if (!c)
		return EH_ERR_ARGUMENT;
	deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	for (;;)
	{
		int			n = eh_process(c);
		int			wait;
		struct pollfd pfd;

		if (n != 0)
			return n;
		wait = eh_next_timeout_ms(c);
		if (deadline >= 0)
		{
			int64_t		left = deadline - now_ms();

			if (left <= 0)
				return 0;
			if (wait > left)
				wait = (int) left;
		}
		if (wait == 0)
			continue;
		pfd.fd = eh_socket(c);
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, pfd.fd >= 0 ? 1 : 0, wait) < 0)
		{
			/* A signal: return, so that the caller can look at its flags. */
			if (errno == EINTR)
				return 0;
			set_error(c, "poll failed: %s", strerror(errno));
			return EH_ERR_CONNECTION;
		}
	}
}

eh_client *
eh_client_new(const char *conninfo)
{
	eh_client  *c = calloc(1, sizeof(eh_client));

	if (!c)
		return NULL;
	c->conninfo = strdup(conninfo ? conninfo : "");
	if (!c->conninfo)
	{
		free(c);
		return NULL;
	}
	c->listen_enabled = 1;
	c->poll_interval_ms = DEFAULT_POLL_INTERVAL_MS;
	c->batch_size = DEFAULT_BATCH_SIZE;
	c->backoff_initial_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	c->backoff_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->heartbeat_interval_ms = DEFAULT_HEARTBEAT_INTERVAL_MS;
	c->rng = ((uint64_t) now_ms() << 20) ^ (uint64_t) getpid() ^ (uint64_t) (uintptr_t) c;
	if (c->rng == 0)
		c->rng = 0x9E3779B97F4A7C15ULL;
	return c;
}

void
eh_client_free(eh_client *c)
{
	eh_sub	   *s;

	if (!c)
		return;
	if (c->conn)
	{
		/* An orderly close: the replica stops holding retention now. */
		if (c->replica_id && PQstatus(c->conn) == CONNECTION_OK)
		{
			const char *params[1] = {c->replica_id};

			PQclear(PQexecParams(c->conn, "SELECT eventhub.deregister_replica($1)",
								 1, NULL, params, NULL, NULL, 0));
		}
		PQfinish(c->conn);
	}
	s = c->subs;
	while (s)
	{
		eh_sub	   *next = s->next;

		free(s->org);
		free(s->config_hash);
		free(s);
		s = next;
	}
	free(c->replica_id);
	free(c->replica_labels);
	free(c->replica_version);
	free(c->conninfo);
	free(c);
}

int
eh_set_event_callback(eh_client *c, eh_event_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->event_cb = cb;
	c->event_arg = arg;
	return EH_OK;
}

int
eh_set_resync_callback(eh_client *c, eh_resync_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->resync_cb = cb;
	c->resync_arg = arg;
	return EH_OK;
}

int
eh_set_log_callback(eh_client *c, eh_log_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->log_cb = cb;
	c->log_arg = arg;
	return EH_OK;
}

int
eh_set_poll_interval(eh_client *c, int interval_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (interval_ms < 10)
	{
		set_error(c, "poll interval must be at least 10 ms, not %d", interval_ms);
		return EH_ERR_ARGUMENT;
	}
	c->poll_interval_ms = interval_ms;
	schedule_poll(c);
	return EH_OK;
}

int
eh_set_listen(eh_client *c, int enabled)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->conn)
	{
		set_error(c, "eh_set_listen must be called before connecting");
		return EH_ERR_ARGUMENT;
	}
	c->listen_enabled = enabled != 0;
	return EH_OK;
}

int
eh_set_batch_size(eh_client *c, int max_events)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (max_events < 1 || max_events > 100000)
	{
		set_error(c, "batch size must be between 1 and 100000, not %d", max_events);
		return EH_ERR_ARGUMENT;
	}
	c->batch_size = max_events;
	return EH_OK;
}

int
eh_set_reconnect_backoff(eh_client *c, int initial_ms, int max_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (initial_ms < 1 || max_ms < initial_ms)
	{
		set_error(c, "reconnect backoff needs 1 <= initial (%d) <= max (%d)", initial_ms, max_ms);
		return EH_ERR_ARGUMENT;
	}
	c->backoff_initial_ms = initial_ms;
	c->backoff_max_ms = max_ms;
	c->backoff_ms = initial_ms;
	return EH_OK;
}

/* Replaces *field with a copy of value (NULL allowed). */
static int
replace_string(eh_client *c, char **field, const char *value)
{
	char	   *copy = NULL;

	if (value && !(copy = strdup(value)))
	{
		set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}
	free(*field);
	*field = copy;
	return EH_OK;
}

int
eh_set_replica(eh_client *c, const char *replica_id, const char *labels_json, const char *version)
{
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (!replica_id || !replica_id[0])
	{
		set_error(c, "replica id must not be empty");
		return EH_ERR_ARGUMENT;
	}
	if (c->conn)
	{
		set_error(c, "eh_set_replica must be called before connecting");
		return EH_ERR_ARGUMENT;
	}
	if ((rc = replace_string(c, &c->replica_id, replica_id)) != EH_OK ||
		(rc = replace_string(c, &c->replica_labels, labels_json)) != EH_OK ||
		(rc = replace_string(c, &c->replica_version, version)) != EH_OK)
		return rc;
	return EH_OK;
}

int
eh_set_heartbeat_interval(eh_client *c, int interval_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (interval_ms < 100)
	{
		set_error(c, "heartbeat interval must be at least 100 ms, not %d", interval_ms);
		return EH_ERR_ARGUMENT;
	}
	c->heartbeat_interval_ms = interval_ms;
	return EH_OK;
}

int
eh_set_config_hash(eh_client *c, const char *org, const char *config_hash)
{
	eh_sub	   *s = (c && org) ? find_sub(c, org) : NULL;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (!s)
	{
		set_error(c, "not subscribed to organization \"%s\"", org ? org : "(null)");
		return EH_ERR_ARGUMENT;
	}
	return replace_string(c, &s->config_hash, config_hash);
}

int
eh_ack(eh_client *c, const char *org, int64_t revision)
{
	eh_sub	   *s = (c && org) ? find_sub(c, org) : NULL;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (!s)
	{
		set_error(c, "not subscribed to organization \"%s\"", org ? org : "(null)");
		return EH_ERR_ARGUMENT;
	}
	if (revision < 0 || revision > s->cursor)
	{
		set_error(c, "cannot acknowledge revision %lld of \"%s\": delivered up to %lld",
				  (long long) revision, org, (long long) s->cursor);
		return EH_ERR_ARGUMENT;
	}
	s->acked = revision;
	return EH_OK;
}

int
eh_subscribe(eh_client *c, const char *org, int64_t after_revision)
{
	eh_sub	   *s;
	eh_sub	  **tail;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		set_error(c, "eh_subscribe cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	if (!org || !org[0])
	{
		set_error(c, "organization id must not be empty");
		return EH_ERR_ARGUMENT;
	}
	if (after_revision < EH_FROM_HEAD)
	{
		set_error(c, "after_revision must be >= 0 or EH_FROM_HEAD, not %lld", (long long) after_revision);
		return EH_ERR_ARGUMENT;
	}
	if (find_sub(c, org))
	{
		set_error(c, "already subscribed to organization \"%s\"", org);
		return EH_ERR_ARGUMENT;
	}
	s = calloc(1, sizeof(eh_sub));
	if (!s || !(s->org = strdup(org)))
	{
		free(s);
		set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}
	s->cursor = after_revision;
	s->acked = -1;
	/* Subscriptions keep their order: the state query relies on it. */
	for (tail = &c->subs; *tail; tail = &(*tail)->next)
		;
	*tail = s;
	c->next_poll_at = 0;
	return EH_OK;
}

int
eh_unsubscribe(eh_client *c, const char *org)
{
	if (!c || !org)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		set_error(c, "eh_unsubscribe cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	for (eh_sub **p = &c->subs; *p; p = &(*p)->next)
	{
		if (strcmp((*p)->org, org) == 0)
		{
			eh_sub	   *s = *p;

			*p = s->next;
			free(s->org);
			free(s->config_hash);
			free(s);
			return EH_OK;
		}
	}
	set_error(c, "not subscribed to organization \"%s\"", org);
	return EH_ERR_ARGUMENT;
}

int64_t
eh_cursor(const eh_client *c, const char *org)
{
	const eh_sub *s = (c && org) ? find_sub(c, org) : NULL;

	return s ? s->cursor : -1;
}

int
eh_socket(const eh_client *c)
{
	return (c && c->conn) ? PQsocket(c->conn) : -1;
}

int
eh_publish(eh_client *c, const char *org, const char *event_type, const char *action,
		   const char *entity_id, const char *correlation_id, const char *event_data,
		   int64_t *revision)
{
	const char *params[6];
	PGresult   *res;
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (!org || !event_type || !action || !entity_id || !event_data || !revision)
	{
		set_error(c, "eh_publish needs organization_id, event_type, action, entity_id, event_data and revision");
		return EH_ERR_ARGUMENT;
	}
	if (!c->conn && (rc = eh_connect(c)) != EH_OK)
		return rc;
	params[0] = org;
	params[1] = event_type;
	params[2] = action;
	params[3] = entity_id;
	params[4] = correlation_id;
	params[5] = event_data;
	res = query(c, "SELECT eventhub.publish_event($1, $2, $3, $4, $5, $6::jsonb)", 6, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		int			alive;

		set_result_error(c, res, "publishing failed");
		alive = PQresultStatus(res) == PGRES_TUPLES_OK || check_connection(c, res);
		PQclear(res);
		if (!alive)
			return EH_ERR_CONNECTION;
		return EH_ERR_SERVER;
	}
	*revision = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return EH_OK;
}

void
eh_get_stats(const eh_client *c, eh_stats *stats)
{
	if (!stats)
		return;
	if (!c)
	{
		memset(stats, 0, sizeof(*stats));
		return;
	}
	*stats = c->stats;
}

const char *
eh_error_message(const eh_client *c)
{
	return c ? c->errmsg : "no client";
}

const char *
eh_error_sqlstate(const eh_client *c)
{
	return c ? c->sqlstate : "";
}

int
eh_is_connected(const eh_client *c)
{
	return c && c->conn && PQstatus(c->conn) == CONNECTION_OK;
}

int
eh_is_listening(const eh_client *c)
{
	return c && c->conn && c->listening;
}

const char *
eh_version(void)
{
	return EVENTHUB_VERSION;
}
