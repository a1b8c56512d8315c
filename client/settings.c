/*
 * settings.c: the eh_set_* calls of eventhub.h: callbacks, intervals,
 * limits, the replica's identity and heartbeats, a subscription's config hash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int
eh_set_event_callback(eh_client *c, eh_event_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->cb.event = cb;
	c->cb.event_arg = arg;
	return EH_OK;
}

int
eh_set_resync_callback(eh_client *c, eh_resync_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->cb.resync = cb;
	c->cb.resync_arg = arg;
	return EH_OK;
}

int
eh_set_transaction_callback(eh_client *c, eh_transaction_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->cb.transaction = cb;
	c->cb.transaction_arg = arg;
	return EH_OK;
}

int
eh_set_snapshot_callback(eh_client *c, eh_snapshot_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->cb.snapshot = cb;
	c->cb.snapshot_arg = arg;
	return EH_OK;
}

int
eh_set_log_callback(eh_client *c, eh_log_cb cb, void *arg)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	c->cb.log = cb;
	c->cb.log_arg = arg;
	return EH_OK;
}

/*
 * Sets *field to value if it is at least min; otherwise sets the error
 * naming what.  The integer setters are this.
 */
static int
set_min(eh_client *c, int *field, const char *what, int value, int min, const char *unit)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (value < min)
	{
		ehi_set_error(c, "%s must be at least %d%s, not %d", what, min, unit, value);
		return EH_ERR_ARGUMENT;
	}
	*field = value;
	return EH_OK;
}

/* Refuses a setting that must come before the first connection. */
static int
before_connecting(eh_client *c, const char *what)
{
	if (c->link.conn.state == EHI_CONN_NONE && !c->link.ever_connected)
		return EH_OK;
	ehi_set_error(c, "%s must be called before connecting", what);
	return EH_ERR_ARGUMENT;
}

int
eh_set_poll_interval(eh_client *c, int interval_ms)
{
	int			rc = set_min(c, c ? &c->cfg.poll_interval_ms : NULL, "poll interval", interval_ms, 10, " ms");

	if (rc == EH_OK)
		ehi_schedule_poll(c);
	return rc;
}

int
eh_set_fallback_poll_interval(eh_client *c, int interval_ms)
{
	return set_min(c, c ? &c->cfg.fallback_poll_interval_ms : NULL, "fallback poll interval", interval_ms, 10, " ms");
}

int
eh_set_listen(eh_client *c, int enabled)
{
	if (!c)
		return EH_ERR_ARGUMENT;
	if (before_connecting(c, "eh_set_listen") != EH_OK)
		return EH_ERR_ARGUMENT;
	c->cfg.listen_enabled = enabled != 0;
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
	c->cfg.batch_size = max_events;
	return EH_OK;
}

int
eh_set_batch_bytes(eh_client *c, int max_bytes)
{
	return set_min(c, c ? &c->cfg.batch_bytes : NULL, "batch bytes", max_bytes, 1, "");
}

int
eh_set_query_timeout(eh_client *c, int timeout_ms)
{
	return set_min(c, c ? &c->cfg.query_timeout_ms : NULL, "query timeout", timeout_ms, 100, " ms");
}

int
eh_set_close_timeout(eh_client *c, int timeout_ms)
{
	return set_min(c, c ? &c->cfg.close_timeout_ms : NULL, "close timeout", timeout_ms, 0, " ms");
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
	c->cfg.backoff_initial_ms = initial_ms;
	c->cfg.backoff_max_ms = max_ms;
	c->link.backoff_ms = initial_ms;
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
int
ehi_check_id(eh_client *c, const char *what, const char *id)
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
	if (ehi_check_id(c, "replica id", replica_id) != EH_OK || before_connecting(c, "eh_set_replica") != EH_OK)
		return EH_ERR_ARGUMENT;
	if ((rc = replace_string(c, &c->replica.id, replica_id)) != EH_OK ||
		(rc = replace_string(c, &c->replica.labels, labels_json)) != EH_OK ||
		(rc = replace_string(c, &c->replica.version, version)) != EH_OK)
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
	return replace_string(c, &c->replica.conninfo, conninfo);
}

int
eh_set_heartbeat_interval(eh_client *c, int interval_ms)
{
	return set_min(c, c ? &c->replica.interval_ms : NULL, "heartbeat interval", interval_ms, 100, " ms");
}

int
eh_set_config_hash(eh_client *c, const char *org, const char *config_hash)
{
	eh_sub	   *s = c ? ehi_subscribed(c, org) : NULL;

	if (!s)
		return EH_ERR_ARGUMENT;
	return replace_string(c, &s->config_hash, config_hash);
}
