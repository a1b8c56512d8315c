/*
 * delivery.c: which of the delivery's queries goes out next, and which file
 * answers each (the files of the delivery are listed in internal.h).
 *
 * The cursor of a subscription is the revision of the last event handed to
 * the application.  Everything else is a hint of where to look: a
 * notification, a poll of organization_states, a reconnect.  Events are
 * fetched with eventhub.transactions_since(organization, cursor, ...,
 * version), which returns them gapless and in order, in batches that end at
 * a transaction's end unless one transaction alone is over the limits, or
 * raises ZE001/ZE002/ZE003; an event is delivered only if its revision is
 * cursor + 1, and the cursor then moves to it (with a transaction callback,
 * to the last event of the transaction, or of its part).  So nothing is
 * skipped and nothing is delivered twice, whatever the hints do.
 *
 * A resync (ZE001/2/3, or a head that contradicts the cursor) calls the
 * resync callback at the head; with a snapshot callback it asks snapshot_pages.c
 * for a snapshot instead, and so does EH_FROM_SNAPSHOT.
 *
 * One query is out at a time; session.c chooses it, asking here for the
 * next poll, tokens of organizations just discovered, the heads a resync
 * needs, data keys (ehi_next_catalog_query), and fetch.c for fetches, one
 * subscription after another, so that a busy organization does not starve
 * the rest (ehi_next_fetch).
 */
#include "internal.h"

/*
 * The answer to one of the delivery's queries (OP_STATE to OP_HEAD).
 * Returns 1 when it kept res (the rest of a stopped batch), 0 when the
 * caller frees it.
 */
int
ehi_handle_delivery(eh_client *c, op_kind op, eh_sub *sub, PGresult *res)
{
	switch (op)
	{
		case OP_STATE:
			ehi_handle_state(c, res);
			break;
		case OP_DISCOVER:
			ehi_handle_discover(c, res);
			break;
		case OP_TOKENS:
			ehi_handle_tokens(c, res);
			break;
		case OP_KEYS:
			ehi_handle_keys(c, res);
			break;
		case OP_FETCH:
			if (sub)
				return ehi_handle_fetch(c, sub, res);
			break;
		case OP_HEAD:
			if (sub)
				ehi_handle_head(c, sub, res);
			break;
		default:
			break;
	}
	return 0;
}

/*
 * Sends the poll when due (a discovery when following every organization),
 * tokens still to read, the head a resync needs, or data keys.  Returns 1
 * when a query went out, 0 when none is due, -1 when the connection broke.
 */
int
ehi_next_catalog_query(eh_client *c)
{
	int64_t		now = ehi_now_ms();
	int			rc;

	ehi_discovery_asked(c, now);
	if (now >= c->link.next_poll_at)
	{
		ehi_schedule_poll(c);
		if ((rc = ehi_send_discover(c, now)) != 0 || (rc = ehi_send_state(c)) != 0)
			return rc;
	}
	if ((rc = ehi_send_tokens(c)) != 0 || (rc = ehi_send_head(c)) != 0)
		return rc;
	return ehi_send_keys(c, now);
}

/* Whether the client has queries to send as soon as it can. */
int
ehi_work_pending(const eh_client *c)
{
	if (ehi_tokens_pending(c) || ehi_held_pending(c))
		return 1;
	if (c->stop)
		return 0;
	return ehi_snapshot_open(c) || ehi_subs_want_work(c);
}
