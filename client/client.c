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
#define DEFAULT_BACKOFF_MAX_MS 1000
#define DEFAULT_HEARTBEAT_INTERVAL_MS 10000
#define DEFAULT_FALLBACK_POLL_INTERVAL_MS 250
#define DEFAULT_QUERY_TIMEOUT_MS 30000
#define DEFAULT_CLOSE_TIMEOUT_MS 1000

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
	c->cfg.listen_enabled = 1;
	c->cfg.poll_interval_ms = DEFAULT_POLL_INTERVAL_MS;
	c->cfg.batch_size = DEFAULT_BATCH_SIZE;
	c->cfg.batch_bytes = DEFAULT_BATCH_BYTES;
	c->cfg.query_timeout_ms = DEFAULT_QUERY_TIMEOUT_MS;
	c->cfg.close_timeout_ms = DEFAULT_CLOSE_TIMEOUT_MS;
	c->cfg.backoff_initial_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->cfg.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	c->link.backoff_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->link.error_backoff_ms = DEFAULT_BACKOFF_INITIAL_MS;
	c->cfg.fallback_poll_interval_ms = DEFAULT_FALLBACK_POLL_INTERVAL_MS;
	c->replica.interval_ms = DEFAULT_HEARTBEAT_INTERVAL_MS;
	c->rng = ((uint64_t) ehi_now_ms() << 20) ^ (uint64_t) getpid() ^ (uint64_t) (uintptr_t) c;
	if (c->rng == 0)
		c->rng = 0x9E3779B97F4A7C15ULL;
	return c;
}

void
eh_client_free(eh_client *c)
{
	if (!c)
		return;
	if (c->replica.id && !c->replica.conninfo && ehi_snapshot_open(c))
	{
		/* The deregistration cannot write in the snapshot's READ ONLY transaction. */
		int64_t		start = ehi_now_ms();

		ehi_snapshot_rollback_now(c, start + c->cfg.close_timeout_ms);
		c->cfg.close_timeout_ms -= (int) (ehi_now_ms() - start);
		if (c->cfg.close_timeout_ms < 0)
			c->cfg.close_timeout_ms = 0;
	}
	ehi_deregister(c);
	ehi_conn_close(&c->link.conn);
	ehi_conn_close(&c->listen.probe_conn);
	ehi_free_replica(c);
	ehi_snapshot_free(c);
	ehi_free_subs(c);
	ehi_discovery_free(c);
	ehi_publish_clear(c);
	free(c->conninfo);
	free(c);
}

int
eh_ack(eh_client *c, const char *org, int64_t revision)
{
	eh_sub	   *s = c ? ehi_subscribed(c, org) : NULL;

	if (!s)
		return EH_ERR_ARGUMENT;
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

/*
 * Refuses a call made from inside a callback (error set); call names it
 * in the message.
 */
static int
refuse_in_callback(eh_client *c, const char *call)
{
	if (!c->in_callback)
		return EH_OK;
	ehi_set_error(c, "%s cannot be called from a callback", call);
	return EH_ERR_ARGUMENT;
}

/* Refuses EH_FROM_SNAPSHOT without a snapshot callback (error set). */
static int
check_snapshot_callback(eh_client *c, int64_t from)
{
	if (from != EH_FROM_SNAPSHOT || c->cb.snapshot)
		return EH_OK;
	ehi_set_error(c, "EH_FROM_SNAPSHOT needs a snapshot callback (eh_set_snapshot_callback)");
	return EH_ERR_ARGUMENT;
}

/*
 * eh_subscribe_at()'s arguments, checked (error set); version gets
 * after_version in canonical form ("" without one).
 */
static int
check_subscribe_args(eh_client *c, const char *org, int64_t after_revision,
					 const char *after_version, char version[EH_VERSION_ID_LEN + 1])
{
	if (refuse_in_callback(c, "eh_subscribe") != EH_OK)
		return EH_ERR_ARGUMENT;
	if (ehi_check_id(c, "organization id", org) != EH_OK)
		return EH_ERR_ARGUMENT;
	if (after_revision < EH_FROM_SNAPSHOT)
	{
		ehi_set_error(c, "after_revision must be >= 0, EH_FROM_HEAD or EH_FROM_SNAPSHOT, not %lld",
					  (long long) after_revision);
		return EH_ERR_ARGUMENT;
	}
	if (check_snapshot_callback(c, after_revision) != EH_OK)
		return EH_ERR_ARGUMENT;
	if (after_version && (after_revision < 0 || !canonical_uuid(after_version, version)))
	{
		ehi_set_error(c, after_revision < 0 ?
					  "a version goes with a revision, not with EH_FROM_HEAD or EH_FROM_SNAPSHOT" :
					  "after_version must be a UUID, not \"%s\"", after_version);
		return EH_ERR_ARGUMENT;
	}
	return EH_OK;
}

int
eh_subscribe_at(eh_client *c, const char *org, int64_t after_revision, const char *after_version)
{
	char		version[EH_VERSION_ID_LEN + 1] = "";
	int64_t		cursor = after_revision == EH_FROM_SNAPSHOT ? EH_FROM_HEAD : after_revision;
	eh_sub	   *s;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (check_subscribe_args(c, org, after_revision, after_version, version) != EH_OK)
		return EH_ERR_ARGUMENT;
	s = ehi_find_sub(c, org);
	if (s && !s->automatic)
	{
		ehi_set_error(c, "already subscribed to organization \"%s\"", org);
		return EH_ERR_ARGUMENT;
	}
	if (s)
		ehi_take_over_sub(c, s, cursor, version);	/* followed through eh_subscribe_all() */
	else if (!(s = ehi_add_sub(c, org, cursor, version, 0)))
		return EH_ERR_MEMORY;
	s->wants_snapshot = after_revision == EH_FROM_SNAPSHOT;
	c->link.next_poll_at = 0;
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
	if (refuse_in_callback(c, "eh_subscribe_all") != EH_OK)
		return EH_ERR_ARGUMENT;
	if (from != 0 && from != EH_FROM_HEAD && from != EH_FROM_SNAPSHOT)
	{
		ehi_set_error(c, "eh_subscribe_all starts from 0, EH_FROM_HEAD or EH_FROM_SNAPSHOT, not %lld",
					  (long long) from);
		return EH_ERR_ARGUMENT;
	}
	if (check_snapshot_callback(c, from) != EH_OK)
		return EH_ERR_ARGUMENT;
	if (ehi_discovery_start(c, from) != 0)
	{
		ehi_set_error(c, "already following every organization");
		return EH_ERR_ARGUMENT;
	}
	ehi_stats_follow_all(c);
	c->link.next_poll_at = 0;
	return EH_OK;
}

int
eh_unsubscribe(eh_client *c, const char *org)
{
	eh_sub	   *s;

	if (!c || !org)
		return EH_ERR_ARGUMENT;
	if (refuse_in_callback(c, "eh_unsubscribe") != EH_OK)
		return EH_ERR_ARGUMENT;
	s = ehi_find_sub(c, org);
	if (!s || s->automatic)
	{
		ehi_set_error(c, s ? "organization \"%s\" is followed by eh_subscribe_all()" :
					  "not subscribed to organization \"%s\"", org);
		return EH_ERR_ARGUMENT;
	}
	ehi_remove_sub(c, s);
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
	if (c->link.conn.state != EHI_CONN_NONE)
		return EH_OK;
	ehi_start_connecting(c);
	return c->link.conn.state == EHI_CONN_NONE ? EH_ERR_CONNECTION : EH_OK;
}

int
eh_socket(const eh_client *c)
{
	return (c && c->link.conn.pg) ? PQsocket(c->link.conn.pg) : -1;
}

int
eh_socket_wants(const eh_client *c)
{
	return c ? ehi_conn_wants(&c->link.conn) : 0;
}

int
eh_process(eh_client *c)
{
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (refuse_in_callback(c, "eh_process") != EH_OK)
		return EH_ERR_ARGUMENT;
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
	ehi_drive(c);
	rc = c->pending_error;
	c->pending_error = 0;
	if (c->delivered > 0 && rc != 0)
		c->deferred_error = rc;
	return c->delivered > 0 || rc == 0 ? c->delivered : rc;
}

int
eh_next_timeout_ms(const eh_client *c)
{
	return c ? ehi_timeout_ms(c, 0) : 0;
}

int
eh_timeout_ms(const eh_client *c)
{
	return c ? ehi_timeout_ms(c, 1) : 0;
}

int
eh_sockets(const eh_client *c, int *fds, int *wants, int max)
{
	if (!c || !fds || !wants || max <= 0)
		return 0;
	return ehi_sockets(c, fds, wants, max);
}

/*
 * One round of eh_wait() and of the blocking publish: processes, then
 * waits for the sockets or the next timeout, at most until deadline (-1:
 * none).  For the blocking publish (publishing), a publish that the
 * processing finished ends the round before the wait: nothing more comes
 * on the sockets for it, and the next timeout may be the next poll,
 * seconds away.  Returns what eh_process() returned, or EH_ERR_CONNECTION
 * when poll() fails; *interrupted tells whether a signal cut the wait short.
 */
static int
wait_once(eh_client *c, int64_t deadline, int publishing, int *interrupted)
{
	int			n = eh_process(c);
	int			wait;
	int			fds[EH_MAX_SOCKETS];
	int			wants[EH_MAX_SOCKETS];
	struct pollfd pfd[EH_MAX_SOCKETS];
	int			nfds;

	*interrupted = 0;
	if (n != 0 || (publishing && c->publish.state == PUBLISH_DONE))
		return n;
	wait = eh_timeout_ms(c);
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
	nfds = eh_sockets(c, fds, wants, EH_MAX_SOCKETS);
	for (int i = 0; i < nfds; i++)
	{
		pfd[i].fd = fds[i];
		pfd[i].events = ehi_poll_events(wants[i]);
		pfd[i].revents = 0;
	}
	if (poll(pfd, (nfds_t) nfds, wait) < 0)
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
		int			n = wait_once(c, deadline, 0, &interrupted);

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
eh_publish_send(eh_client *c, const char *org, const char *event_type, const char *action,
				const char *entity_id, const char *correlation_id, const char *event_data)
{
	const char *args[EHI_PUBLISH_NPARAMS] = {org, event_type, action, entity_id, correlation_id, event_data};

	if (!c)
		return EH_ERR_ARGUMENT;
	if (refuse_in_callback(c, "eh_publish") != EH_OK)
		return EH_ERR_ARGUMENT;
	if (c->publish.state != PUBLISH_NONE)
	{
		ehi_set_error(c, "a publish is already under way: take its result with eh_publish_result()");
		return EH_ERR_ARGUMENT;
	}
	if (!org || !event_type || !action || !entity_id || !event_data)
	{
		ehi_set_error(c, "eh_publish needs organization_id, event_type, action, entity_id and event_data");
		return EH_ERR_ARGUMENT;
	}
	if (ehi_check_id(c, "organization id", org) != EH_OK ||
		(correlation_id && ehi_check_id(c, "correlation id", correlation_id) != EH_OK))
		return EH_ERR_ARGUMENT;
	for (int i = 0; i < EHI_PUBLISH_NPARAMS; i++)
	{
		if (args[i] && !(c->publish.params[i] = strdup(args[i])))
		{
			ehi_publish_clear(c);
			ehi_set_error(c, "out of memory");
			return EH_ERR_MEMORY;
		}
	}
	c->publish.state = PUBLISH_QUEUED;
	c->publish.deadline = ehi_now_ms() + c->cfg.query_timeout_ms;
	c->publish.failures = c->link.failures;
	c->errmsg[0] = '\0';
	c->sqlstate[0] = '\0';
	/* Connect now rather than after a backoff. */
	if (c->link.conn.state == EHI_CONN_NONE)
		c->link.reconnect_at = 0;
	return EH_OK;
}

int
eh_publish_result(eh_client *c, int64_t *revision)
{
	int			rc;

	if (!c)
		return EH_ERR_ARGUMENT;
	if (c->publish.state == PUBLISH_NONE)
	{
		ehi_set_error(c, "no publish under way");
		return EH_ERR_ARGUMENT;
	}
	if (c->publish.state != PUBLISH_DONE)
		return EH_PUBLISH_PENDING;
	rc = c->publish.rc;
	if (rc == EH_OK && revision)
		*revision = c->publish.revision;
	if (rc < 0)
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "%s", c->publish.errmsg);
		snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", c->publish.sqlstate);
	}
	ehi_publish_clear(c);
	return rc;
}

int
eh_publish(eh_client *c, const char *org, const char *event_type, const char *action,
		   const char *entity_id, const char *correlation_id, const char *event_data,
		   int64_t *revision)
{
	int			rc;

	if (c && !revision)
	{
		ehi_set_error(c, "eh_publish needs a place for the revision");
		return EH_ERR_ARGUMENT;
	}
	if ((rc = eh_publish_send(c, org, event_type, action, entity_id, correlation_id, event_data)) != EH_OK)
		return rc;
	/* Events delivered meanwhile go to the callback; refused polls pass. */
	while ((rc = eh_publish_result(c, revision)) == EH_PUBLISH_PENDING)
	{
		int			interrupted;
		int			n = wait_once(c, -1, 1, &interrupted);

		if (n < 0 && n != EH_ERR_SERVER && n != EH_ERR_CONNECTION)
		{
			/* Out of memory or poll() failing: give the publish up. */
			ehi_publish_clear(c);
			return n;
		}
	}
	return rc;
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
	return ehi_sqlstate_retryable(c ? c->sqlstate : "");
}

int
eh_is_connected(const eh_client *c)
{
	return c && ehi_link_up(c);
}

int
eh_is_listening(const eh_client *c)
{
	return c && c->listen.mode == LISTEN_ON && eh_is_connected(c);
}

int
eh_render_metrics(const eh_client *c, char *buf, size_t len)
{
	if (!c || (!buf && len > 0))
		return -1;
	return ehi_stats_render(c, ehi_sub_walk_next, buf, len);
}
