/*
 * client.c: libeventhub's public calls.  See eventhub.h for what each
 * promises and internal.h for how the library is laid out.
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

#include "internal.h"

#define DEFAULT_POLL_INTERVAL_MS 5000
#define DEFAULT_BATCH_SIZE 1000
#define DEFAULT_BATCH_BYTES (8 * 1024 * 1024)
#define DEFAULT_BACKOFF_INITIAL_MS 100
#define DEFAULT_BACKOFF_MAX_MS 30000
#define DEFAULT_HEARTBEAT_INTERVAL_MS 10000
#define DEFAULT_FALLBACK_POLL_INTERVAL_MS 250
#define DEFAULT_QUERY_TIMEOUT_MS 30000
#define DEFAULT_CLOSE_TIMEOUT_MS 1000
/*
 * While something the caller cannot wait on is under way (the probe's or
 * the heartbeats' own connection, a write the socket must take), ask to be
 * called again this soon.
 */
#define SIDE_WORK_POLL_MS 5

/* ------------------------------------------------------------- helpers */

/* Monotonic clock in milliseconds. */
int64_t
ehi_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* xorshift64*, per client: jitter needs no global state and no quality. */
double
ehi_random_unit(eh_client *c)
{
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return (double) ((c->rng * 2685821657736338717ULL) >> 11) / (double) (1ULL << 53);
}

void
ehi_set_error(eh_client *c, const char *fmt,...)
{
	va_list		ap;
	size_t		len;
	char		buf[sizeof(c->errmsg)];

	/* fmt's arguments may point into c->errmsg itself */
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(c->errmsg, buf, sizeof(buf));
	len = strlen(c->errmsg);
	while (len > 0 && c->errmsg[len - 1] == '\n')
		c->errmsg[--len] = '\0';
	c->sqlstate[0] = '\0';
}

void
ehi_log(eh_client *c, eh_log_level level, const char *fmt,...)
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
	{
		int			was_in_callback = c->in_callback;

		/* It may not call back into the client: the caller is mid-step. */
		c->in_callback = 1;
		c->log_cb(c, level, buf, c->log_arg);
		c->in_callback = was_in_callback;
	}
}

/* Records a failed result's message and SQLSTATE. */
void
ehi_set_result_error(eh_client *c, const ehi_conn *ac, const PGresult *res, const char *what)
{
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (primary)
		ehi_set_error(c, "%s: %s", what, primary);
	else
		ehi_set_error(c, "%s: %s", what, ac->pg ? PQerrorMessage(ac->pg) : "no connection");
	if (state)
		snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", state);
}

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
	/* Subscriptions keep their order: the state query relies on it. */
	for (tail = &c->subs; *tail; tail = &(*tail)->next)
		;
	*tail = s;
	return s;
}

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
}

static void
free_sub(eh_sub *s)
{
	free(s->org);
	free(s->config_hash);
	free(s);
}

/* ---------------------------------------------------------- life cycle */

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
	c->batch_bytes = DEFAULT_BATCH_BYTES;
	c->query_timeout_ms = DEFAULT_QUERY_TIMEOUT_MS;
	c->close_timeout_ms = DEFAULT_CLOSE_TIMEOUT_MS;
	c->backoff_initial_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	c->backoff_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->error_backoff_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->fallback_poll_interval_ms = DEFAULT_FALLBACK_POLL_INTERVAL_MS;
	c->heartbeat_interval_ms = DEFAULT_HEARTBEAT_INTERVAL_MS;
	c->rng = ((uint64_t) ehi_now_ms() << 20) ^ (uint64_t) getpid() ^ (uint64_t) (uintptr_t) c;
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
	ehi_deregister(c);
	ehi_conn_close(&c->conn);
	ehi_conn_close(&c->probe_conn);
	ehi_conn_close(&c->heartbeat_conn);
	s = c->subs;
	while (s)
	{
		eh_sub	   *next = s->next;

		free_sub(s);
		s = next;
	}
	ehi_map_free(&c->by_org);
	ehi_map_free(&c->by_token);
	free(c->tokens_pending);
	free(c->replica_id);
	free(c->replica_labels);
	free(c->replica_version);
	free(c->heartbeat_conninfo);
	free(c->conninfo);
	free(c);
}

/* ------------------------------------------------------------- settings */

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

/* Checks that value is at least min; sets the error naming what otherwise. */
static int
check_min(eh_client *c, const char *what, int value, int min, const char *unit)
{
	if (value >= min)
		return EH_OK;
	ehi_set_error(c, "%s must be at least %d%s, not %d", what, min, unit, value);
	return EH_ERR_ARGUMENT;
}

/* Refuses a setting that must come before the first connection. */
static int
before_connecting(eh_client *c, const char *what)
{
	if (c->conn.state == EHI_CONN_NONE && !c->ever_connected)
		return EH_OK;
	ehi_set_error(c, "%s must be called before connecting", what);
	return EH_ERR_ARGUMENT;
}

int
eh_set_poll_interval(eh_client *c, int interval_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_min(c, "poll interval", interval_ms, 10, " ms") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->poll_interval_ms = interval_ms;
	ehi_schedule_poll(c);
	return EH_OK;
}

int
eh_set_fallback_poll_interval(eh_client *c, int interval_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_min(c, "fallback poll interval", interval_ms, 10, " ms") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->fallback_poll_interval_ms = interval_ms;
	return EH_OK;
}

int
eh_set_listen(eh_client *c, int enabled)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (before_connecting(c, "eh_set_listen") != EH_OK)
		return EH_ERR_ARGUMENT;
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
		ehi_set_error(c, "batch size must be between 1 and 100000, not %d", max_events);
		return EH_ERR_ARGUMENT;
	}
	c->batch_size = max_events;
	return EH_OK;
}

int
eh_set_batch_bytes(eh_client *c, int max_bytes)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_min(c, "batch bytes", max_bytes, 1, "") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->batch_bytes = max_bytes;
	return EH_OK;
}

int
eh_set_query_timeout(eh_client *c, int timeout_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_min(c, "query timeout", timeout_ms, 100, " ms") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->query_timeout_ms = timeout_ms;
	return EH_OK;
}

int
eh_set_close_timeout(eh_client *c, int timeout_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_min(c, "close timeout", timeout_ms, 0, " ms") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->close_timeout_ms = timeout_ms;
	return EH_OK;
}

int
eh_set_reconnect_backoff(eh_client *c, int initial_ms, int max_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (initial_ms < 1 || max_ms < initial_ms || max_ms > 3600000)
	{
		ehi_set_error(c, "reconnect backoff needs 1 <= initial (%d) <= max (%d) <= 3600000", initial_ms, max_ms);
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
		ehi_set_error(c, "out of memory");
		return EH_ERR_MEMORY;
	}
	free(*field);
	*field = copy;
	return EH_OK;
}

/* Checks an organization or replica id as the server would. */
static int
check_id(eh_client *c, const char *what, const char *id)
{
	if (!id || !id[0])
	{
		ehi_set_error(c, "%s must not be empty", what);
		return EH_ERR_ARGUMENT;
	}
	if (strlen(id) > EH_MAX_ID_BYTES)
	{
		ehi_set_error(c, "%s is too long: %zu bytes, the limit is %d", what, strlen(id), EH_MAX_ID_BYTES);
		return EH_ERR_ARGUMENT;
	}
	return EH_OK;
}

int
eh_set_replica(eh_client *c, const char *replica_id, const char *labels_json, const char *version)
{
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_id(c, "replica id", replica_id) != EH_OK || before_connecting(c, "eh_set_replica") != EH_OK)
		return EH_ERR_ARGUMENT;
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
	if (before_connecting(c, "eh_set_heartbeat_conninfo") != EH_OK)
		return EH_ERR_ARGUMENT;
	return replace_string(c, &c->heartbeat_conninfo, conninfo);
}

int
eh_set_heartbeat_interval(eh_client *c, int interval_ms)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_min(c, "heartbeat interval", interval_ms, 100, " ms") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->heartbeat_interval_ms = interval_ms;
	return EH_OK;
}

int
eh_set_config_hash(eh_client *c, const char *org, const char *config_hash)
{
	eh_sub	   *s = (c && org) ? ehi_find_sub(c, org) : NULL;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (!s)
	{
		ehi_set_error(c, "not subscribed to organization \"%s\"", org ? org : "(null)");
		return EH_ERR_ARGUMENT;
	}
	return replace_string(c, &s->config_hash, config_hash);
}

int
eh_ack(eh_client *c, const char *org, int64_t revision)
{
	eh_sub	   *s = (c && org) ? ehi_find_sub(c, org) : NULL;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (!s)
	{
		ehi_set_error(c, "not subscribed to organization \"%s\"", org ? org : "(null)");
		return EH_ERR_ARGUMENT;
	}
	if (revision < 0 || revision > s->cursor)
	{
		ehi_set_error(c, "cannot acknowledge revision %lld of \"%s\": delivered up to %lld",
					  (long long) revision, org, (long long) s->cursor);
		return EH_ERR_ARGUMENT;
	}
	s->acked = revision;
	return EH_OK;
}

/* -------------------------------------------------------- subscriptions */

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
	char		version[EH_VERSION_ID_LEN + 1] = "";
	eh_sub	   *s;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		ehi_set_error(c, "eh_subscribe cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	if (check_id(c, "organization id", org) != EH_OK)
		return EH_ERR_ARGUMENT;
	if (after_revision < EH_FROM_HEAD)
	{
		ehi_set_error(c, "after_revision must be >= 0 or EH_FROM_HEAD, not %lld", (long long) after_revision);
		return EH_ERR_ARGUMENT;
	}
	if (after_version && (after_revision == EH_FROM_HEAD || !canonical_uuid(after_version, version)))
	{
		ehi_set_error(c, after_revision == EH_FROM_HEAD ?
					  "a version goes with a revision, not with EH_FROM_HEAD" :
					  "after_version must be a UUID, not \"%s\"", after_version);
		return EH_ERR_ARGUMENT;
	}
	s = ehi_find_sub(c, org);
	if (s && !s->automatic)
	{
		ehi_set_error(c, "already subscribed to organization \"%s\"", org);
		return EH_ERR_ARGUMENT;
	}
	if (s)
	{
		/* Followed through eh_subscribe_all(): the stored cursor wins. */
		ehi_forget_sub(c, s);	/* a query out for it answers the old cursor */
		s->automatic = 0;
		s->cursor = after_revision;
		s->needs_fetch = 0;
		s->resync_reason = 0;
		ehi_versions_reset(&s->seen);
		snprintf(s->version, sizeof(s->version), "%s", version);
		if (version[0])
			ehi_versions_delivered(&s->seen, version);
	}
	else if (!ehi_add_sub(c, org, after_revision, version, 0))
		return EH_ERR_MEMORY;
	c->next_poll_at = 0;
	return EH_OK;
}

int
eh_subscribe(eh_client *c, const char *org, int64_t after_revision)
{
	return eh_subscribe_at(c, org, after_revision, NULL);
}

int
eh_subscribe_all(eh_client *c, int64_t from)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		ehi_set_error(c, "eh_subscribe_all cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	if (from != 0 && from != EH_FROM_HEAD)
	{
		ehi_set_error(c, "eh_subscribe_all starts from 0 or EH_FROM_HEAD, not %lld", (long long) from);
		return EH_ERR_ARGUMENT;
	}
	if (c->follow_all)
	{
		ehi_set_error(c, "already following every organization");
		return EH_ERR_ARGUMENT;
	}
	c->follow_all = 1;
	c->follow_all_from = from;
	c->discovered = 0;
	c->next_poll_at = 0;
	return EH_OK;
}

int
eh_unsubscribe(eh_client *c, const char *org)
{
	eh_sub	   *s;

	if (!c || !org)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		ehi_set_error(c, "eh_unsubscribe cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	s = ehi_find_sub(c, org);
	if (!s || s->automatic)
	{
		ehi_set_error(c, s ? "organization \"%s\" is followed by eh_subscribe_all()" :
					  "not subscribed to organization \"%s\"", org);
		return EH_ERR_ARGUMENT;
	}
	ehi_forget_sub(c, s);
	for (eh_sub **p = &c->subs; *p; p = &(*p)->next)
	{
		if (*p == s)
		{
			*p = s->next;
			break;
		}
	}
	ehi_map_remove(&c->by_org, s->org);
	if (s->token[0] && ehi_map_get(&c->by_token, s->token) == s)
		ehi_map_remove(&c->by_token, s->token);
	free_sub(s);
	return EH_OK;
}

int64_t
eh_cursor(const eh_client *c, const char *org)
{
	const eh_sub *s = (c && org) ? ehi_find_sub(c, org) : NULL;

	return s ? s->cursor : -1;
}

const char *
eh_cursor_version(const eh_client *c, const char *org)
{
	const eh_sub *s = (c && org) ? ehi_find_sub(c, org) : NULL;

	return s && s->cursor >= 0 && s->version[0] ? s->version : NULL;
}

/* ------------------------------------------------------------ the loop */

int
eh_connect(eh_client *c)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->conn.state != EHI_CONN_NONE)
		return EH_OK;
	ehi_start_connecting(c);
	return c->conn.state == EHI_CONN_NONE ? EH_ERR_CONNECTION : EH_OK;
}

int
eh_socket(const eh_client *c)
{
	return (c && c->conn.pg) ? PQsocket(c->conn.pg) : -1;
}

int
eh_socket_wants(const eh_client *c)
{
	return c ? ehi_conn_wants(&c->conn) : 0;
}

int
eh_process(eh_client *c)
{
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		ehi_set_error(c, "eh_process cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	if (c->deferred_error)
	{
		/* An error of a call that returned the events it delivered. */
		rc = c->deferred_error;
		c->deferred_error = 0;
		return rc;
	}
	c->stop = 0;
	c->delivered = 0;
	c->pending_error = 0;
	ehi_drive_connection(c);
	ehi_drive_heartbeat_conn(c);
	rc = c->pending_error;
	c->pending_error = 0;
	if (c->delivered > 0 && rc != 0)
		c->deferred_error = rc;
	return c->delivered > 0 || rc == 0 ? c->delivered : rc;
}

int
eh_next_timeout_ms(const eh_client *c)
{
	int64_t		now,
				at;

	if (!c)
		return 0;
	now = ehi_now_ms();
	switch (c->conn.state)
	{
		case EHI_CONN_NONE:
			at = c->reconnect_at;
			break;
		case EHI_CONN_CONNECTING:
		case EHI_CONN_BUSY:
			at = c->conn.deadline;
			if (c->conn.flushing || c->conn.state == EHI_CONN_CONNECTING)
				at = at < now + SIDE_WORK_POLL_MS ? at : now + SIDE_WORK_POLL_MS;
			break;
		default:
			if (c->mode == LISTEN_PROBING)
			{
				at = c->probe_deadline;
				if (c->probe_conn.state != EHI_CONN_NONE && at > now + SIDE_WORK_POLL_MS)
					at = now + SIDE_WORK_POLL_MS;
				break;
			}
			if (c->paused_until > now)
			{
				at = c->paused_until;
				break;
			}
			if (ehi_work_pending(c) || c->mode == LISTEN_STARTING)
				return 0;
			at = c->next_poll_at;
			if (c->next_discover_at && c->next_discover_at < at)
				at = c->next_discover_at;
			if (c->replica_id && !c->heartbeat_conninfo && c->next_heartbeat_at < at)
				at = c->next_heartbeat_at;
			break;
	}
	if (c->heartbeat_conninfo && c->replica_id)
	{
		if (c->heartbeat_conn.state == EHI_CONN_CONNECTING || c->heartbeat_conn.state == EHI_CONN_BUSY)
			at = at < now + SIDE_WORK_POLL_MS ? at : now + SIDE_WORK_POLL_MS;
		else if (c->hello_done && c->next_heartbeat_at < at)	/* it waits for the main one */
			at = c->next_heartbeat_at;
	}
	if (at <= now)
		return 0;
	return at - now > 3600000 ? 3600000 : (int) (at - now);
}

/*
 * One round of eh_wait(): processes, then waits for the socket or the next
 * timeout, at most until deadline (-1: none).  Returns what eh_process()
 * returned, or EH_ERR_CONNECTION when poll() fails; *interrupted tells
 * whether a signal cut the wait short.
 */
static int
wait_once(eh_client *c, int64_t deadline, int *interrupted)
{
	int			n = eh_process(c);
	int			wait;
	int			wants;
	struct pollfd pfd;

	*interrupted = 0;
	if (n != 0)
		return n;
	wait = eh_next_timeout_ms(c);
	if (deadline >= 0)
	{
		int64_t		left = deadline - ehi_now_ms();

		if (left <= 0)
			return 0;
		if (wait > left)
			wait = (int) left;
	}
	if (wait == 0)
		return 0;
	wants = eh_socket_wants(c);
	pfd.fd = eh_socket(c);
	pfd.events = (short) (((wants & EH_WANT_READ) ? POLLIN : 0) | ((wants & EH_WANT_WRITE) ? POLLOUT : 0));
	pfd.revents = 0;
	if (poll(&pfd, pfd.fd >= 0 && wants ? 1 : 0, wait) < 0)
	{
		if (errno == EINTR)
		{
			*interrupted = 1;
			return 0;
		}
		ehi_set_error(c, "poll failed: %s", strerror(errno));
		return EH_ERR_CONNECTION;
	}
	return 0;
}

int
eh_wait(eh_client *c, int timeout_ms)
{
	int64_t		deadline;

	if (!c)
		return EH_ERR_ARGUMENT;
	deadline = timeout_ms < 0 ? -1 : ehi_now_ms() + timeout_ms;
	for (;;)
	{
		int			interrupted;
		int			n = wait_once(c, deadline, &interrupted);

		if (n != 0)
			return n;
		/* A signal: return, so that the caller can look at its flags. */
		if (interrupted)
			return 0;
		if (deadline >= 0 && ehi_now_ms() >= deadline)
			return 0;
	}
}

int
eh_publish(eh_client *c, const char *org, const char *event_type, const char *action,
		   const char *entity_id, const char *correlation_id, const char *event_data,
		   int64_t *revision)
{
	const char *params[6];
	int64_t		deadline;
	uint64_t	failures;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->in_callback)
	{
		ehi_set_error(c, "eh_publish cannot be called from a callback");
		return EH_ERR_ARGUMENT;
	}
	if (!org || !event_type || !action || !entity_id || !event_data || !revision)
	{
		ehi_set_error(c, "eh_publish needs organization_id, event_type, action, entity_id, event_data and revision");
		return EH_ERR_ARGUMENT;
	}

	/*
	 * Connected, and nothing else out: run the loop until then, giving up
	 * at the first failed attempt or lost connection.
	 */
	deadline = ehi_now_ms() + c->query_timeout_ms;
	failures = c->failures;
	if (c->conn.state == EHI_CONN_NONE)
		c->reconnect_at = 0;
	c->hold_queries = 1;
	while (!(c->conn.state == EHI_CONN_IDLE && c->hello_done && c->mode != LISTEN_PROBING &&
			 c->mode != LISTEN_STARTING))
	{
		/* One round at a time: the connection may be ready with nothing to deliver. */
		int			interrupted;
		int			rc = wait_once(c, deadline, &interrupted);

		if (rc < 0 && rc != EH_ERR_SERVER)
		{
			c->hold_queries = 0;
			return rc;
		}
		if (c->failures != failures)
		{
			c->hold_queries = 0;
			return EH_ERR_CONNECTION;
		}
		if (ehi_now_ms() >= deadline)
		{
			c->hold_queries = 0;
			if (c->conn.state != EHI_CONN_IDLE || !c->hello_done)
			{
				if (!c->errmsg[0] || c->conn.state != EHI_CONN_NONE)
					ehi_set_error(c, "could not publish: not connected in time");
				return EH_ERR_CONNECTION;
			}
			break;
		}
	}
	c->hold_queries = 0;
	params[0] = org;
	params[1] = event_type;
	params[2] = action;
	params[3] = entity_id;
	params[4] = correlation_id;
	params[5] = event_data;
	c->publish_revision = -1;
	if (ehi_send(c, OP_PUBLISH, NULL, "SELECT eventhub.publish_event($1, $2, $3, $4, $5, $6::jsonb)",
				 6, params) != 0)
		return EH_ERR_CONNECTION;
	c->errmsg[0] = '\0';
	c->sqlstate[0] = '\0';
	while (c->conn.state == EHI_CONN_BUSY && c->op == OP_PUBLISH)
	{
		ehi_step	st = ehi_conn_step(&c->conn);
		struct pollfd pfd;
		int			wants;

		if (st == EHI_STEP_FAILED)
		{
			ehi_set_error(c, "publishing failed: %s", c->conn.error);
			ehi_connection_lost(c, c->errmsg);
			return EH_ERR_CONNECTION;
		}
		if (st == EHI_STEP_RESULT)
		{
			PGresult   *res = ehi_conn_take_result(&c->conn);

			c->op = OP_NONE;
			ehi_handle_result(c, OP_PUBLISH, NULL, res);
			PQclear(res);
			break;
		}
		wants = ehi_conn_wants(&c->conn);
		pfd.fd = PQsocket(c->conn.pg);
		pfd.events = (short) (((wants & EH_WANT_READ) ? POLLIN : 0) | ((wants & EH_WANT_WRITE) ? POLLOUT : 0));
		pfd.revents = 0;
		(void) poll(&pfd, 1, 50);
	}
	ehi_drain_notifications(c);
	if (c->publish_revision < 0)
		return c->conn.state == EHI_CONN_NONE ? EH_ERR_CONNECTION : EH_ERR_SERVER;
	*revision = c->publish_revision;
	return EH_OK;
}

/* ------------------------------------------------------------- readers */

uint64_t
eh_stat(const eh_client *c, eh_stat_id id)
{
	if (!c || (int) id < 0 || id >= EH_STAT_COUNT)
		return 0;
	return c->counters[id];
}

double
eh_last_lag_ms(const eh_client *c)
{
	return c ? c->last_lag_ms : 0;
}

const char *
eh_stat_name(eh_stat_id id)
{
	static const char *const names[EH_STAT_COUNT] = {
		"events_delivered", "notifications", "polls", "reconnects", "resyncs", "heartbeats",
		"fetches", "discoveries"
	};

	return (int) id >= 0 && id < EH_STAT_COUNT ? names[id] : "unknown";
}

const char *
eh_resync_reason_name(eh_resync_reason reason)
{
	switch (reason)
	{
		case EH_RESYNC_HISTORY_REMOVED:
			return "history_removed";
		case EH_RESYNC_CURSOR_AHEAD:
			return "cursor_ahead";
		case EH_RESYNC_VERSION_MISMATCH:
			return "version_mismatch";
	}
	return "unknown";
}

const char *
eh_log_level_name(eh_log_level level)
{
	switch (level)
	{
		case EH_LOG_DEBUG:
			return "debug";
		case EH_LOG_INFO:
			return "info";
		case EH_LOG_WARNING:
			return "warning";
		case EH_LOG_ERROR:
			return "error";
	}
	return "unknown";
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
eh_error_retryable(const eh_client *c)
{
	const char *state = c ? c->sqlstate : "";

	/*
	 * What a retry cannot fix: authorization (class 28), a database that does
	 * not exist (3D000), a missing privilege (42501), a bad argument (class
	 * 22) or an unsupported feature (0A).  Everything else (lock and
	 * statement timeouts, serialization failures, the extension or a table
	 * missing while it is reinstalled, a server shutting down) may pass.
	 */
	if (!state[0])
		return 1;
	return !(strncmp(state, "28", 2) == 0 || strcmp(state, "42501") == 0 ||
			 strcmp(state, "3D000") == 0 ||
			 strncmp(state, "22", 2) == 0 || strncmp(state, "0A", 2) == 0);
}

int
eh_is_connected(const eh_client *c)
{
	return c && c->conn.state != EHI_CONN_NONE && c->conn.state != EHI_CONN_CONNECTING && c->hello_done;
}

int
eh_is_listening(const eh_client *c)
{
	return c && c->mode == LISTEN_ON && eh_is_connected(c);
}

const char *
eh_version(void)
{
	return EVENTHUB_VERSION;
}
