/*
 * keys.c: the data keys that open the events notifications carry, and the
 * pid of the notifier that alone is believed to send them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/*
 * Data keys of the subscriptions that have none (NULL without read
 * privilege), and the pid of the notifier, whose notifications alone are
 * believed to carry events.
 */
static const char KEYS_SQL[] =
	"SELECT eventhub.notifier_pid(), c.org,"
	" CASE WHEN eventhub.has_organization_privilege(c.org, 'read')"
	"  THEN eventhub.notification_data_key(c.org) END"
	" FROM (VALUES (1)) AS one(x) LEFT JOIN unnest($1::text[]) AS c(org) ON true";

/* Data keys asked for in one query at most. */
#define KEYS_PER_QUERY 1000
/* After a failed keys query (other than for a missing function or privilege). */
#define KEYS_RETRY_MS 5000
/* A notification that claims to carry events from another process asks for
 * the notifier's pid again, at most this often. */
#define KEYS_MIN_INTERVAL_MS 1000

/*
 * The data keys not known yet are to be asked for again (a new connection,
 * a failed keys query): the role's privileges may have changed.
 */
void
ehi_keys_again(eh_client *c)
{
	for (eh_sub *s = ehi_sub_next(c, NULL); s; s = ehi_sub_next(c, s))
		if (!s->has_key)
			s->key_asked = 0;
	c->link.keys_due = 1;
}

/*
 * The answer to send_keys: the keys of the organizations asked for, and
 * the notifier's pid.  A server without a notification_data_key this role
 * may call (the extension not updated yet, the role not granted it) is
 * noted: its notifications are wake-ups only, as before.
 */
void
ehi_handle_keys(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (state && (strcmp(state, "42883") == 0 || strcmp(state, "42501") == 0) &&
			!ehi_result_breaks_connection(&c->link.conn, res))
		{
			ehi_log(c, EH_LOG_INFO, "eventhub.notification_data_key cannot be used (%s): "
					"notifications are wake-ups only, every event is fetched",
					PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
			c->link.keys_unusable = 1;
			return;
		}
		if (ehi_result_failed(c, res, "reading data keys failed"))
			return;
		/* Events come by fetching meanwhile: not the application's error. */
		ehi_log(c, EH_LOG_WARNING, "reading data keys failed (retrying in %d s): %s",
				KEYS_RETRY_MS / 1000, PQresultErrorMessage(res));
		ehi_keys_again(c);
		c->link.keys_retry_at = ehi_now_ms() + KEYS_RETRY_MS;
		return;
	}
	for (int row = 0; row < PQntuples(res); row++)
	{
		eh_sub	   *s = PQgetisnull(res, row, 1) ? NULL : ehi_find_sub(c, PQgetvalue(res, row, 1));
		const char *hex = PQgetvalue(res, row, 2);

		if (!s || PQgetisnull(res, row, 2) || strncmp(hex, "\\x", 2) != 0 ||
			strlen(hex) != 2 + 2 * EHI_DATA_KEY_BYTES)
			continue;
		s->has_key = ehi_hex_bytes(hex + 2, s->data_key, EHI_DATA_KEY_BYTES) == 0;
	}
	c->link.notifier_pid = PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ?
		atoi(PQgetvalue(res, 0, 0)) : 0;
	/* More than one query's worth of organizations: the rest next. */
	for (eh_sub *s = ehi_sub_next(c, NULL); s; s = ehi_sub_next(c, s))
		if (!s->has_key && !s->key_asked && s->token[0])
		{
			c->link.keys_due = 1;
			break;
		}
	if (c->link.notifier_pid && !c->link.cipher_ready)
	{
		ehi_sealed_prepare();
		c->link.cipher_ready = 1;
	}
}

/*
 * Asks for the data keys the subscriptions lack (up to KEYS_PER_QUERY of
 * them) and the notifier's pid, when due and when notifications may carry
 * events.  Returns as ehi_next_catalog_query().
 */
int
ehi_send_keys(eh_client *c, int64_t now)
{
	ehi_strbuf	orgs = {0};
	const char *params[1];
	int			n = 0,
				rc;

	if (!c->link.keys_due || c->link.keys_unusable || !c->link.events_channel ||
		c->listen.mode != LISTEN_ON || now < c->link.keys_retry_at)
		return 0;
	ehi_sb_puts(&orgs, "{");
	for (eh_sub *s = ehi_sub_next(c, NULL); s && n < KEYS_PER_QUERY; s = ehi_sub_next(c, s))
	{
		if (s->has_key || s->key_asked || !s->token[0])
			continue;
		n++;
		ehi_sb_array_element(&orgs, s->org);
		s->key_asked = 1;
	}
	ehi_sb_puts(&orgs, "}");
	if (orgs.oom)
	{
		ehi_sb_free(&orgs);
		c->pending_error = EH_ERR_MEMORY;
		return -1;
	}
	/* Until this answers; another due by then asks again. */
	c->link.keys_due = 0;
	c->link.keys_asked_at = ehi_now_ms();
	params[0] = orgs.data;
	rc = ehi_send(c, OP_KEYS, NULL, KEYS_SQL, 1, params);
	ehi_sb_free(&orgs);
	return rc < 0 ? -1 : 1;
}

/*
 * Whether a notification that carries events comes from the notifier the
 * server named (pid); if not, perhaps a new notifier: its pid is asked
 * for again, but not at every such notification.
 */
int
ehi_keys_from_notifier(eh_client *c, int pid)
{
	if (c->link.notifier_pid != 0 && pid == c->link.notifier_pid)
		return 1;
	if (c->link.notifier_pid != 0 && ehi_now_ms() - c->link.keys_asked_at >= KEYS_MIN_INTERVAL_MS)
		c->link.keys_due = 1;
	return 0;
}

/* The notifier may have restarted: its pid is read again before it is believed. */
void
ehi_keys_notifier_restarted(eh_client *c)
{
	c->link.notifier_pid = 0;
	c->link.keys_due = 1;
}
