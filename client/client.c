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
 *
 * Whether notifications reach this connection is found out, not assumed:
 * on a hot standby LISTEN fails, and behind a transaction-pooling proxy it
 * succeeds on a server connection that other clients then share, so the
 * notifications go to them.  After connecting, the client LISTENs on a
 * channel of its own, has a second, short-lived connection NOTIFY it, and
 * LISTENs on eventhub only if that notification arrives while it is idle,
 * which a transaction-pooling proxy never delivers.  Until then, and when
 * it does not, the client polls at the short fallback interval.
 */
#define _GNU_SOURCE
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
#define DEFAULT_FALLBACK_POLL_INTERVAL_MS 250
/* How long the probe notification may take to arrive. */
#define PROBE_TIMEOUT_MS 1000
/* How long a connection attempt may take. */
#define CONNECT_TIMEOUT_MS 10000

/*
 * Fetch query: ISO 8601 UTC timestamps whatever the session's settings, and
 * the delivery lag by the server's clock.  The version at the cursor goes
 * along, so that a rewritten history raises EH003 before anything past the
 * cursor is delivered.
 */
#define FETCH_SQL \
	"SELECT organization_id, revision, version_id::text," \
	" to_char(processed_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')," \
	" to_char(originated_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')," \
	" event_type, action, entity_id, correlation_id, event_data::text," \
	" (extract(epoch FROM clock_timestamp() - processed_timestamp) * 1000)::float8" \
	" FROM eventhub.events_since($1, $2, $3, NULLIF($4, '')::uuid)"

/*
 * State query: per subscription, the head revision and version, the
 * version of the event at the cursor (to notice rewritten history), and the
 * token its notifications carry (NULL without read privilege: the fetch
 * then reports the refusal); and whether the server is a standby.
 */
#define STATE_SQL \
	"SELECT s.revision, s.version_id::text, e.version_id::text," \
	" CASE WHEN eventhub.has_organization_privilege(c.org, 'read')" \
	"  THEN eventhub.notification_token(c.org) END," \
	" pg_is_in_recovery()" \
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
	ehi_versions seen;			/* recently delivered and notified versions */
	int64_t		acked;			/* eh_ack's revision; -1: report the cursor */
	char	   *config_hash;	/* eh_set_config_hash's, or NULL */
	struct eh_sub *next;
} eh_sub;

/* How the client learns of new events on its connection. */
typedef enum listen_mode
{
	LISTEN_OFF,					/* polling only; see no_listen */
	LISTEN_PROBING,				/* waiting for the probe notification */
	LISTEN_ON					/* LISTEN eventhub works */
} listen_mode;

/* Why the client polls only. */
typedef enum no_listen_reason
{
	NO_LISTEN_NONE = 0,
	NO_LISTEN_DISABLED,			/* eh_set_listen(client, 0) */
	NO_LISTEN_STANDBY,			/* the server is a hot standby */
	NO_LISTEN_POOLED,			/* notifications do not arrive (transaction pooling) */
	NO_LISTEN_FAILED			/* LISTEN or the probe failed */
} no_listen_reason;

struct eh_client
{
	char	   *conninfo;
	PGconn	   *conn;
	int			ever_connected;
	int			listen_enabled;
	listen_mode mode;
	no_listen_reason no_listen;
	no_listen_reason no_listen_logged;	/* the reason last logged */
	char		probe_channel[48];
	int			probe_received;
	int			in_query;		/* draining what a query took in */
	unsigned	prepared;		/* statements prepared on conn (1 << stmt) */
	int			prepare_off;	/* prepared statements failed on conn */
	int64_t		probe_deadline; /* monotonic ms */

	int			poll_interval_ms;
	int			fallback_poll_interval_ms;
	int			batch_size;
	int			backoff_initial_ms;
	int			backoff_max_ms;
	int			backoff_ms;
	int			error_backoff_ms;	/* after a failed query */
	int64_t		paused_until;	/* monotonic ms: no query before, after a failed one */
	int64_t		next_poll_at;	/* monotonic ms; 0: now */
	int64_t		reconnect_at;	/* monotonic ms */

	eh_sub	   *subs;
	int			stop;			/* the event callback asked to stop */
	int			in_callback;	/* a callback runs: subscriptions are fixed */

	char	   *replica_id;		/* NULL: no heartbeats */
	char	   *replica_labels;
	char	   *replica_version;
	char	   *heartbeat_conninfo;	/* NULL: heartbeats on conn */
	PGconn	   *heartbeat_conn;
	int			heartbeat_failing;	/* the last heartbeat failed (and was logged) */
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
 * exponential backoff and jitter.  The backoff starts over only once a new
 * connection has answered a query: a proxy that accepts the login while the
 * server is down does not reset it.
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
	c->mode = LISTEN_OFF;
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

	c->in_query = 1;
	drain_notifications(c);
	c->in_query = 0;
	return res;
}

/* The statements run often enough to prepare. */
typedef enum prepared_stmt
{
	STMT_FETCH,
	STMT_STATE
} prepared_stmt;

static const char *const stmt_names[] = {"eventhub_fetch", "eventhub_state"};

/*
 * Runs one of the frequent statements, prepared once per connection when
 * the connection is known to keep its session between queries (LISTEN
 * works on it, so it is not behind a transaction-pooling proxy, which
 * would lose prepared statements); otherwise like query().  A statement
 * the server no longer knows (a pooler changed the session after all)
 * turns preparing off for the connection and runs unprepared.
 */
static PGresult *
query_stmt(eh_client *c, prepared_stmt stmt, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res;
	const char *state;

	if (c->mode != LISTEN_ON || c->prepare_off)
		return query(c, sql, nparams, params);
	if (!(c->prepared & (1u << stmt)))
	{
		res = PQprepare(c->conn, stmt_names[stmt], sql, nparams, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			PQclear(res);
			c->prepare_off = 1;
			return query(c, sql, nparams, params);
		}
		PQclear(res);
		c->prepared |= 1u << stmt;
	}
	res = PQexecPrepared(c->conn, stmt_names[stmt], nparams, params, NULL, NULL, 0);
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (state && strcmp(state, "26000") == 0)
	{
		PQclear(res);
		c->prepare_off = 1;
		return query(c, sql, nparams, params);
	}
	c->in_query = 1;
	drain_notifications(c);
	c->in_query = 0;
	return res;
}

/* The poll interval now: the short fallback one while notifications cannot arrive. */
static int
current_poll_interval(const eh_client *c)
{
	if (c->mode == LISTEN_ON || c->no_listen == NO_LISTEN_DISABLED ||
		c->fallback_poll_interval_ms > c->poll_interval_ms)
		return c->poll_interval_ms;
	return c->fallback_poll_interval_ms;
}

static void
schedule_poll(eh_client *c)
{
	c->next_poll_at = now_ms() + (int64_t) (current_poll_interval(c) * (0.8 + 0.4 * random_unit(c)));
}

/*
 * After a query the server refused: try again after a backoff that grows
 * while it keeps refusing (a lock held for a while, the extension being
 * reinstalled), not at once and not only at the next regular poll.
 */
static void
retry_later(eh_client *c)
{
	c->next_poll_at = c->paused_until =
		now_ms() + (int64_t) (c->error_backoff_ms * (0.5 + random_unit(c)));
	c->error_backoff_ms = c->error_backoff_ms * 2 > c->backoff_max_ms ?
		c->backoff_max_ms : c->error_backoff_ms * 2;
}

/* Polls only, for reason; logs the reason once, not at every connect. */
static void
stop_listening(eh_client *c, no_listen_reason reason, const char *detail)
{
	static const char *const what[] = {
		"", "", "the server is a standby, where LISTEN is not available",
		"notifications do not reach this connection (a transaction-pooling proxy?), so it does not LISTEN",
		"LISTEN is not available on this connection"
	};

	c->mode = LISTEN_OFF;
	c->no_listen = reason;
	if (reason != NO_LISTEN_DISABLED && reason != c->no_listen_logged)
		log_msg(c, EH_LOG_WARNING, "%s%s%s; polling every %d ms instead", what[reason],
				detail ? ": " : "", detail ? detail : "", current_poll_interval(c));
	c->no_listen_logged = reason;
	c->next_poll_at = 0;
}

/*
 * Opens a connection with the client's connection settings, waiting for it
 * for at most CONNECT_TIMEOUT_MS; NULL when out of memory or timed out
 * (*timed_out says which).  While it connects, errors the server sends are
 * reported verbosely, so that a refusal carries its SQLSTATE ("FATAL:
 * 28P01: ..."), which connect_sqlstate() reads.
 */
static PGconn *
open_connection(const char *conninfo, int *timed_out)
{
	const char *keys[] = {"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
	"fallback_application_name", "dbname", NULL};
	const char *values[] = {"1", "30", "10", "3", "eventhub", conninfo, NULL};
	PGconn	   *conn = PQconnectStartParams(keys, values, 1);
	int64_t		deadline = now_ms() + CONNECT_TIMEOUT_MS;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;

	*timed_out = 0;
	if (!conn || PQstatus(conn) == CONNECTION_BAD)
		return conn;
	PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);
	while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED)
	{
		struct pollfd pfd = {.fd = PQsocket(conn), .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT};
		int64_t		left = deadline - now_ms();

		if (left <= 0 || poll(&pfd, 1, (int) left) == 0)
		{
			PQfinish(conn);
			*timed_out = 1;
			return NULL;
		}
		st = PQconnectPoll(conn);
	}
	PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
	return conn;
}

/*
 * The SQLSTATE of a connection attempt the server refused ("" if it did
 * not answer): libpq keeps none, but the verbose message carries it.
 */
static void
connect_sqlstate(eh_client *c, const PGconn *conn)
{
	const char *msg = PQerrorMessage(conn);
	const char *p = strstr(msg, "FATAL:  ");

	c->sqlstate[0] = '\0';
	if (p && strlen(p + 8) > 6 && p[13] == ':')
		snprintf(c->sqlstate, sizeof(c->sqlstate), "%.5s", p + 8);
}

/*
 * Finds out whether notifications reach this connection: LISTENs on a
 * channel of its own and has another connection NOTIFY it.  The answer
 * comes in drain_notifications() or not at all (probe_deadline).  Nothing
 * listens on channel eventhub until it has come.
 */
static void
start_probe(eh_client *c)
{
	char		sql[80];
	PGresult   *res;
	PGconn	   *other;
	const char *params[1];
	int			timed_out;

	snprintf(c->probe_channel, sizeof(c->probe_channel), "eventhub_probe_%016llx",
			 (unsigned long long) (random_unit(c) * 18446744073709551615.0));
	c->probe_received = 0;
	snprintf(sql, sizeof(sql), "LISTEN %s", c->probe_channel);
	res = query(c, sql, 0, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

		if (check_connection(c, res))
			stop_listening(c, NO_LISTEN_FAILED, primary);
		PQclear(res);
		return;
	}
	PQclear(res);

	other = open_connection(c->conninfo, &timed_out);
	params[0] = c->probe_channel;
	res = other && PQstatus(other) == CONNECTION_OK ?
		PQexecParams(other, "SELECT pg_catalog.pg_notify($1, '')", 1, NULL, params, NULL, NULL, 0) : NULL;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		stop_listening(c, NO_LISTEN_FAILED,
					   res && PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) ?
					   PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) :
					   other ? PQerrorMessage(other) : "out of memory");
		PQclear(res);
		PQfinish(other);
		return;
	}
	PQclear(res);
	PQfinish(other);
	c->mode = LISTEN_PROBING;
	c->probe_deadline = now_ms() + PROBE_TIMEOUT_MS;
	/* No query until the probe is decided: one could pick up its answer. */
	c->next_poll_at = c->probe_deadline;
}

/* The probe notification arrived while idle: LISTEN eventhub for real. */
static void
probe_answered(eh_client *c)
{
	char		sql[120];
	PGresult   *res;

	snprintf(sql, sizeof(sql), "UNLISTEN %s; LISTEN eventhub", c->probe_channel);
	res = query(c, sql, 0, NULL);
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
	{
		if (c->no_listen_logged != NO_LISTEN_NONE && c->no_listen_logged != NO_LISTEN_DISABLED)
			log_msg(c, EH_LOG_INFO, "notifications arrive again: listening");
		c->mode = LISTEN_ON;
		c->no_listen = c->no_listen_logged = NO_LISTEN_NONE;
		/* Catch up: the LISTEN is new. */
		c->next_poll_at = 0;
	}
	else if (check_connection(c, res))
		stop_listening(c, NO_LISTEN_FAILED, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
	PQclear(res);
}

/*
 * Decides how to learn of new events on a fresh or promoted connection:
 * not at all (LISTEN disabled, a standby), or by probing first.
 */
static void
choose_listening(eh_client *c, int in_recovery)
{
	if (!c->listen_enabled)
		stop_listening(c, NO_LISTEN_DISABLED, NULL);
	else if (in_recovery)
		stop_listening(c, NO_LISTEN_STANDBY, NULL);
	else
		start_probe(c);
}

int
eh_connect(eh_client *c)
{
	PGconn	   *conn;
	PGresult   *res;
	int			in_recovery;
	int			timed_out;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->conn)
		return EH_OK;

	conn = open_connection(c->conninfo, &timed_out);
	if (!conn && timed_out)
	{
		set_error(c, "could not connect: no answer within %d s", CONNECT_TIMEOUT_MS / 1000);
		log_msg(c, EH_LOG_WARNING, "%s", c->errmsg);
		connection_lost(c);
		return EH_ERR_CONNECTION;
	}
	if (!conn)
	{
		set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		set_error(c, "could not connect: %s", PQerrorMessage(conn));
		connect_sqlstate(c, conn);
		log_msg(c, EH_LOG_WARNING, "%s", c->errmsg);
		PQfinish(conn);
		connection_lost(c);
		return EH_ERR_CONNECTION;
	}
	c->conn = conn;
	c->mode = LISTEN_OFF;
	c->prepared = 0;
	c->prepare_off = 0;

	/* A first query: the connection works only if it answers. */
	res = query(c, "SELECT pg_catalog.pg_is_in_recovery()", 0, NULL);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		set_result_error(c, res, "could not use the connection");
		log_msg(c, EH_LOG_WARNING, "%s", c->errmsg);
		if (check_connection(c, res))
			connection_lost(c);
		PQclear(res);
		return EH_ERR_CONNECTION;
	}
	in_recovery = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	c->backoff_ms = c->backoff_initial_ms;
	c->error_backoff_ms = c->backoff_initial_ms;
	if (c->ever_connected)
	{
		c->stats.reconnects++;
		log_msg(c, EH_LOG_INFO, "reconnected");
	}
	c->ever_connected = 1;

	c->next_poll_at = 0;
	c->next_heartbeat_at = 0;
	choose_listening(c, in_recovery);
	if (!c->conn)
	{
		set_error(c, "connection lost while starting to listen");
		return EH_ERR_CONNECTION;
	}
	return EH_OK;
}

/* The subscription is at version ("" unknown). */
static void
set_version(eh_sub *s, const char *version)
{
	snprintf(s->version, sizeof(s->version), "%s", version);
	if (version[0])
		ehi_versions_delivered(&s->seen, version);
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
	ehi_versions_reset(&s->seen);
	set_version(s, head_version ? head_version : "");
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
	int			in_recovery;

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
	res = query_stmt(c, STMT_STATE, STATE_SQL, 2, params);
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
		retry_later(c);
		return EH_ERR_SERVER;
	}
	c->error_backoff_ms = c->backoff_initial_ms;

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
			set_version(s, head_version);
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
	in_recovery = PQntuples(res) > 0 && strcmp(PQgetvalue(res, 0, 4), "t") == 0;
	PQclear(res);

	/* A standby that was promoted: notifications may work now. */
	if (c->mode == LISTEN_OFF && c->no_listen == NO_LISTEN_STANDBY && !in_recovery && c->conn)
	{
		log_msg(c, EH_LOG_INFO, "the server is no longer a standby");
		choose_listening(c, 0);
	}
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
	const char *params[4];

	snprintf(batch_text, sizeof(batch_text), "%d", c->batch_size);
	while (s->needs_fetch && !c->stop)
	{
		PGresult   *res;
		int			n;

		if (!c->conn)
			return EH_ERR_CONNECTION;
		/*
		 * Cleared before the query, which sees every version notified so
		 * far: one it drains sets it again, unless the query returns it.
		 */
		s->needs_fetch = 0;
		ehi_versions_clear_pending(&s->seen);

		snprintf(cursor_text, sizeof(cursor_text), "%lld", (long long) s->cursor);
		params[0] = s->org;
		params[1] = cursor_text;
		params[2] = batch_text;
		params[3] = s->version;
		c->stats.fetches++;
		res = query_stmt(c, STMT_FETCH, FETCH_SQL, 4, params);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			int			reason = 0;
			int			alive;

			if (state && strcmp(state, "EH001") == 0)
				reason = EH_RESYNC_HISTORY_REMOVED;
			else if (state && strcmp(state, "EH002") == 0)
				reason = EH_RESYNC_CURSOR_AHEAD;
			else if (state && strcmp(state, "EH003") == 0)
				reason = EH_RESYNC_VERSION_MISMATCH;
			set_result_error(c, res, "fetching events failed");
			alive = check_connection(c, res);
			PQclear(res);
			if (reason)
				return resync_to_head(c, s, (eh_resync_reason) reason);
			if (!alive)
				return EH_ERR_CONNECTION;
			/* Not again at once: the next poll, after a backoff, finds what is missing. */
			log_msg(c, EH_LOG_ERROR, "%s", c->errmsg);
			retry_later(c);
			return EH_ERR_SERVER;
		}

		n = PQntuples(res);
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
			set_version(s, ev.version_id);
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
		/*
		 * A full batch may have more behind it; a stop leaves rows
		 * undelivered.  Otherwise the query reached the head it saw: a
		 * notification drained meanwhile calls for another only if it named
		 * a version the query did not return.
		 */
		if (n == c->batch_size || c->stop)
			s->needs_fetch = 1;
		else if (s->needs_fetch && !ehi_versions_pending(&s->seen))
			s->needs_fetch = 0;
	}
	return EH_OK;
}

#define HEARTBEAT_SQL "SELECT eventhub.heartbeat($1, $2::jsonb, $3::jsonb, $4)"

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
	int			timed_out = 0;

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
	if (!c->heartbeat_conninfo)
		res = query(c, HEARTBEAT_SQL, 4, params);
	else
	{
		/* A separate connection, to the primary when reading from a standby. */
		if (c->heartbeat_conn && PQstatus(c->heartbeat_conn) != CONNECTION_OK)
		{
			PQfinish(c->heartbeat_conn);
			c->heartbeat_conn = NULL;
		}
		if (!c->heartbeat_conn)
			c->heartbeat_conn = open_connection(c->heartbeat_conninfo, &timed_out);
		res = c->heartbeat_conn && PQstatus(c->heartbeat_conn) == CONNECTION_OK ?
			PQexecParams(c->heartbeat_conn, HEARTBEAT_SQL, 4, NULL, params, NULL, NULL, 0) : NULL;
	}
	free(progress.data);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (res || !c->heartbeat_conninfo)
			set_result_error(c, res, "heartbeat failed");
		else
			set_error(c, "heartbeat failed: could not connect: %s",
					  c->heartbeat_conn ? PQerrorMessage(c->heartbeat_conn) :
					  timed_out ? "no answer" : "out of memory");
		if (!c->heartbeat_conninfo && !check_connection(c, res))
		{
			PQclear(res);
			return EH_ERR_CONNECTION;
		}
		PQclear(res);
		/* Once, not at every interval: delivery goes on regardless. */
		if (!c->heartbeat_failing)
			log_msg(c, EH_LOG_WARNING, "%s (logged once until a heartbeat succeeds)", c->errmsg);
		c->heartbeat_failing = 1;
		return EH_OK;
	}
	PQclear(res);
	if (c->heartbeat_failing)
		log_msg(c, EH_LOG_INFO, "heartbeats are recorded again");
	c->heartbeat_failing = 0;
	c->stats.heartbeats++;
	return EH_OK;
}

/*
 * Takes the notifications libpq has buffered; marks subscriptions behind.
 * A notification names an organization by its token and the version it
 * moved to: one the subscription is already at needs no fetch.  An unknown
 * token is another organization's, unless a subscription still waits for
 * its token, which the next poll brings.  The zero token says that
 * announcements were lost (the server's queue was full): poll now.
 */
static void
drain_notifications(eh_client *c)
{
	PGnotify   *n;

	while (c->conn && (n = PQnotifies(c->conn)) != NULL)
	{
		char		token[EH_TOKEN_LEN + 1];
		char		version[EH_VERSION_ID_LEN + 1];

		/*
		 * The probe's answer counts only if it came while the client was
		 * idle: a transaction-pooling proxy delivers what arrives during a
		 * query, never what arrives between them.
		 */
		if (c->mode == LISTEN_PROBING && strcmp(n->relname, c->probe_channel) == 0 && !c->in_query)
			c->probe_received = 1;
		else if (strcmp(n->relname, "eventhub") == 0)
		{
			c->stats.notifications++;
			if (ehi_parse_payload(n->extra, token, version) == 0)
			{
				eh_sub	   *s = find_sub_by_token(c, token);

				/* The zero token: announcements were lost; look at everything. */
				if (strspn(token, "0") == EH_TOKEN_LEN)
					c->next_poll_at = 0;
				else if (s && s->cursor < 0)
					c->next_poll_at = 0;
				else if (s && ehi_versions_notified(&s->seen, version))
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
		if (c->mode == LISTEN_PROBING)
		{
			if (c->probe_received)
				probe_answered(c);
			else if (now_ms() >= c->probe_deadline)
				stop_listening(c, NO_LISTEN_POOLED, NULL);
			/* No query while the probe is out: one could take its answer in. */
			if (c->mode == LISTEN_PROBING || !c->conn)
				break;
		}
		if (now_ms() < c->paused_until)
			break;
		if (now_ms() >= c->next_poll_at)
		{
			rc = check_state(c);
			if (rc == EH_ERR_MEMORY || rc == EH_ERR_SERVER)
				return delivered ? delivered : rc;
			if (c->mode == LISTEN_PROBING)
				continue;
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
	now = now_ms();
	if (!c->conn)
		at = c->reconnect_at;
	else if (c->mode == LISTEN_PROBING)
		at = c->probe_deadline;
	else if (c->paused_until > now)
		at = c->paused_until;
	else
	{
		if (any_fetch_pending(c))
			return 0;
		at = c->next_poll_at;
		if (c->replica_id && c->next_heartbeat_at < at)
			at = c->next_heartbeat_at;
	}
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
	c->error_backoff_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->fallback_poll_interval_ms = DEFAULT_FALLBACK_POLL_INTERVAL_MS;
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

	PGconn	   *registry;

	if (!c)
		return;
	/* An orderly close: the replica stops holding retention now. */
	registry = c->heartbeat_conninfo ? c->heartbeat_conn : c->conn;
	if (registry && c->replica_id && PQstatus(registry) == CONNECTION_OK)
	{
		const char *params[1] = {c->replica_id};

		PQclear(PQexecParams(registry, "SELECT eventhub.deregister_replica($1)",
							 1, NULL, params, NULL, NULL, 0));
	}
	PQfinish(c->conn);
	PQfinish(c->heartbeat_conn);
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
	free(c->heartbeat_conninfo);
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
eh_set_fallback_poll_interval(eh_client *c, int interval_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (interval_ms < 10)
	{
		set_error(c, "fallback poll interval must be at least 10 ms, not %d", interval_ms);
		return EH_ERR_ARGUMENT;
	}
	c->fallback_poll_interval_ms = interval_ms;
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
eh_set_heartbeat_conninfo(eh_client *c, const char *conninfo)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->conn)
	{
		set_error(c, "eh_set_heartbeat_conninfo must be called before connecting");
		return EH_ERR_ARGUMENT;
	}
	return replace_string(c, &c->heartbeat_conninfo, conninfo);
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

/*
 * Whether str is a UUID in its canonical text form (either case); writes it
 * in lower case, as the server prints it, to out.
 */
static int
canonical_uuid(const char *str, char out[EH_VERSION_ID_LEN + 1])
{
	if (strlen(str) != EH_VERSION_ID_LEN)
		return 0;
	for (int i = 0; i < EH_VERSION_ID_LEN; i++)
	{
		char		ch = str[i];

		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (ch != '-')
				return 0;
		}
		else if (ch >= 'A' && ch <= 'F')
			ch = (char) (ch - 'A' + 'a');
		else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return 0;
		out[i] = ch;
	}
	out[EH_VERSION_ID_LEN] = '\0';
	return 1;
}

int
eh_subscribe_at(eh_client *c, const char *org, int64_t after_revision, const char *after_version)
{
	eh_sub	   *s;
	eh_sub	  **tail;
	char		version[EH_VERSION_ID_LEN + 1] = "";

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
	if (after_version && (after_revision == EH_FROM_HEAD || !canonical_uuid(after_version, version)))
	{
		set_error(c, after_revision == EH_FROM_HEAD ?
				  "a version goes with a revision, not with EH_FROM_HEAD" :
				  "after_version must be a UUID, not \"%s\"", after_version);
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
	set_version(s, version);
	s->acked = -1;
	/* Subscriptions keep their order: the state query relies on it. */
	for (tail = &c->subs; *tail; tail = &(*tail)->next)
		;
	*tail = s;
	c->next_poll_at = 0;
	return EH_OK;
}

int
eh_subscribe(eh_client *c, const char *org, int64_t after_revision)
{
	return eh_subscribe_at(c, org, after_revision, NULL);
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

const char *
eh_cursor_version(const eh_client *c, const char *org)
{
	const eh_sub *s = (c && org) ? find_sub(c, org) : NULL;

	return s && s->cursor >= 0 && s->version[0] ? s->version : NULL;
}

int
eh_error_retryable(const eh_client *c)
{
	const char *state = c ? c->sqlstate : "";

	/*
	 * What a retry cannot fix: authorization (class 28), a database that does
	 * not exist (3D000), a missing privilege (42501), a bad argument (class
	 * 22) or an unsupported feature (0A).
	 * Everything else (lock and statement timeouts, serialization failures,
	 * the extension or a table missing while it is reinstalled, a server
	 * shutting down) may pass.
	 */
	if (!state[0])
		return 1;
	return !(strncmp(state, "28", 2) == 0 || strcmp(state, "42501") == 0 ||
			 strcmp(state, "3D000") == 0 ||
			 strncmp(state, "22", 2) == 0 || strncmp(state, "0A", 2) == 0);
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
	return c && c->conn && c->mode == LISTEN_ON;
}

const char *
eh_version(void)
{
	return EVENTHUB_VERSION;
}
