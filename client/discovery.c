/*
 * discovery.c: eh_subscribe_all(): finding the organizations the role may
 * read, and reading the notification tokens of the ones just found.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A discovery that a notification asks for waits at least this long after the last. */
#define DISCOVER_MIN_INTERVAL_MS 100

/*
 * Discovery, for eh_subscribe_all(): every organization the role may read
 * (row-level security filters the rest), with its head; and whether the
 * server is a standby.  The tokens of the ones the client does not know yet
 * come with TOKENS_SQL.
 */
static const char DISCOVER_SQL[] =
	"SELECT s.organization_id, s.revision, s.version_id::text, pg_is_in_recovery()"
	" FROM eventhub.organization_states s";

static const char TOKENS_SQL[] =
	"SELECT c.org, CASE WHEN eventhub.has_organization_privilege(c.org, 'read')"
	" THEN eventhub.notification_token(c.org) END"
	" FROM unnest($1::text[]) AS c(org)";

/*
 * A subscription to org, found by a discovery: from its head (head,
 * head_version) if it existed when the client first looked and it follows
 * from EH_FROM_HEAD, by a snapshot with EH_FROM_SNAPSHOT, else from its
 * first event.  NULL when out of memory.
 */
static eh_sub *
follow_new(eh_client *c, const char *org, int64_t head, const char *head_version)
{
	int			from_head = !c->all.discovered && c->all.from == EH_FROM_HEAD;
	int			from_snapshot = !c->all.discovered && c->all.from == EH_FROM_SNAPSHOT;
	eh_sub	   *s = ehi_add_sub(c, org, from_head ? head : from_snapshot ? -1 : 0,
								from_head ? head_version : "", 1);

	if (!s)
		return NULL;
	s->wants_snapshot = from_snapshot;
	c->counters[EH_STAT_DISCOVERIES]++;
	ehi_log(c, EH_LOG_DEBUG, "following organization \"%s\" from revision %lld",
			org, (long long) s->cursor);
	return s;
}

/*
 * Keeps the organizations whose token is to be read next (an array
 * literal); -1 (error set) when out of memory.
 */
static int
keep_tokens_pending(eh_client *c, ehi_strbuf *missing)
{
	if (missing->oom)
	{
		ehi_sb_free(missing);
		ehi_set_error(c, "out of memory");
		c->pending_error = EH_ERR_MEMORY;
		return -1;
	}
	free(c->all.tokens_pending);
	c->all.tokens_pending = missing->len > 2 ? missing->data : NULL;
	if (!c->all.tokens_pending)
		ehi_sb_free(missing);
	return 0;
}

/*
 * The answer to a discovery: every organization the role may read.  Ones
 * the client does not follow yet start as follow_new() says; they still
 * need their token.  After a notification with a token the client did not
 * know, every token is read again: the notification key may have been
 * rotated (rotate_notification_key).
 */
void
ehi_handle_discover(eh_client *c, PGresult *res)
{
	ehi_strbuf	missing = {0};
	int			n;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "discovering organizations failed");
		return;
	}
	c->link.error_backoff_ms = c->cfg.backoff_initial_ms;
	n = PQntuples(res);
	ehi_sb_puts(&missing, "{");
	for (int row = 0; row < n; row++)
	{
		const char *org = PQgetvalue(res, row, 0);
		int64_t		head = strtoll(PQgetvalue(res, row, 1), NULL, 10);
		const char *head_version = PQgetvalue(res, row, 2);
		eh_sub	   *s = ehi_find_sub(c, org);

		if (!s && !(s = follow_new(c, org, head, head_version)))
		{
			ehi_sb_free(&missing);
			c->pending_error = EH_ERR_MEMORY;
			return;
		}
		if (!s->token[0] || c->all.refresh_tokens)
			ehi_sb_array_element(&missing, org);
		ehi_compare_head(c, s, head, head_version, NULL);
	}
	ehi_sb_puts(&missing, "}");
	/* An explicit subscription from the head of an organization that does not exist yet. */
	for (eh_sub *s = ehi_sub_next(c, NULL); s; s = ehi_sub_next(c, s))
		if (s->cursor < 0)
			ehi_compare_head(c, s, 0, "", NULL);
	c->all.discovered = 1;
	c->all.refresh_tokens = 0;
	ehi_stats_discovered(c, c->link.op_sent_at);
	if (keep_tokens_pending(c, &missing) != 0)
		return;
	ehi_check_promotion(c, n > 0 && strcmp(PQgetvalue(res, 0, 3), "t") == 0);
}
/* The answer to the tokens query: the tokens of organizations just discovered. */
void
ehi_handle_tokens(eh_client *c, PGresult *res)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		ehi_query_failed(c, res, "reading notification tokens failed");
		return;
	}
	for (int row = 0; row < PQntuples(res); row++)
	{
		eh_sub	   *s = ehi_find_sub(c, PQgetvalue(res, row, 0));

		if (!s || PQgetisnull(res, row, 1))
			continue;
		if (s->token[0] && strcmp(s->token, PQgetvalue(res, row, 1)) != 0)
		{
			/* A new key: the unknown tokens were the old key's, or are known now. */
			if (c->all.nunknown > 0)
				ehi_log(c, EH_LOG_INFO, "notification tokens changed (a new notification key)");
			c->all.nunknown = 0;
		}
		ehi_set_token(c, s, PQgetvalue(res, row, 1));
	}
}

/*
 * Whether a token the client does not know is worth looking into: the
 * first time, yes (a new organization, or a new notification key), and it
 * is remembered; again, no (another role's organization), until the tokens
 * change or the memory is full.
 */
static int
unknown_token_is_new(eh_client *c, const char *token)
{
	for (int i = 0; i < c->all.nunknown; i++)
		if (strcmp(c->all.unknown[i], token) == 0)
			return 0;
	if (c->all.nunknown == EHI_UNKNOWN_TOKENS)
		c->all.nunknown = 0;
	snprintf(c->all.unknown[c->all.nunknown++], EH_TOKEN_LEN + 1, "%s", token);
	return 1;
}

/*
 * A notification with a token the client does not know, while it follows
 * every organization: a discovery (at most every DISCOVER_MIN_INTERVAL_MS)
 * and every token read again, once per unknown token.  Returns 0 when the
 * client does not follow every organization.
 */
int
ehi_discovery_unknown_token(eh_client *c, const char *token)
{
	int64_t		at = c->all.last_discover_at + DISCOVER_MIN_INTERVAL_MS;

	if (!c->all.on)
		return 0;
	if (unknown_token_is_new(c, token))
	{
		c->all.refresh_tokens = 1;
		if (!c->all.next_discover_at)
			c->all.next_discover_at = at > ehi_now_ms() ? at : 1;
	}
	return 1;
}

/* A discovery a notification asked for is due: the poll is, now. */
void
ehi_discovery_asked(eh_client *c, int64_t now)
{
	if (c->all.on && c->all.next_discover_at && now >= c->all.next_discover_at)
	{
		c->link.next_poll_at = 0;
		c->all.next_discover_at = 0;
	}
}

/*
 * Sends the discovery, the poll when following every organization.
 * Returns as ehi_next_catalog_query(), 0 when not following every one.
 */
int
ehi_send_discover(eh_client *c, int64_t now)
{
	int			rc;

	if (!c->all.on)
		return 0;
	c->all.next_discover_at = 0;
	c->all.last_discover_at = now;
	rc = ehi_send_stmt(c, OP_DISCOVER, NULL, STMT_DISCOVER, DISCOVER_SQL, 0, NULL);
	if (rc == 0)
		c->counters[EH_STAT_POLLS]++;
	else if (rc == 1)
		c->link.next_poll_at = 0;
	return rc < 0 ? -1 : 1;
}

/* Whether the client follows every organization (eh_subscribe_all). */
int
ehi_discovery_on(const eh_client *c)
{
	return c->all.on;
}

/* Whether tokens of discovered organizations are still to be read. */
int
ehi_tokens_pending(const eh_client *c)
{
	return c->all.tokens_pending != NULL;
}

/* Sends the tokens query when some are to be read.  Returns as ehi_next_catalog_query(). */
int
ehi_send_tokens(eh_client *c)
{
	const char *params[1] = {c->all.tokens_pending};
	int			rc;

	if (!c->all.tokens_pending)
		return 0;
	rc = ehi_send(c, OP_TOKENS, NULL, TOKENS_SQL, 1, params);
	free(c->all.tokens_pending);
	c->all.tokens_pending = NULL;
	return rc < 0 ? -1 : 1;
}

/*
 * eh_subscribe_all(): follows every organization from from (0,
 * EH_FROM_HEAD or EH_FROM_SNAPSHOT); -1 when it already does.
 */
int
ehi_discovery_start(eh_client *c, int64_t from)
{
	if (c->all.on)
		return -1;
	c->all.on = 1;
	c->all.from = from;
	c->all.discovered = 0;
	return 0;
}

/* Frees what the discovery keeps. */
void
ehi_discovery_free(eh_client *c)
{
	free(c->all.tokens_pending);
	c->all.tokens_pending = NULL;
}

/* When a discovery a notification asked for is due (monotonic ms; 0: none). */
int64_t
ehi_discovery_due_at(const eh_client *c)
{
	return c->all.next_discover_at;
}
