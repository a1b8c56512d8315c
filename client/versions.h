/*
 * versions.h: the memory of delivered and notified versions (versions.c).
 */
#ifndef EVENTHUB_VERSIONS_H
#define EVENTHUB_VERSIONS_H

#include "json.h"

/*
 * What a subscription remembers of its organization's versions, so that a
 * notification naming a version it already delivered costs no query.  A
 * notification that arrives while a fetch runs may name a version that
 * fetch returns, or one committed after its snapshot: it is kept as
 * pending until a delivered event names it.
 */
#define EHI_RECENT_VERSIONS 8
#define EHI_PENDING_VERSIONS 4

typedef struct ehi_versions
{
	char		recent[EHI_RECENT_VERSIONS][EH_VERSION_ID_LEN + 1];
	int			next;			/* the slot the next delivered version takes */
	char		pending[EHI_PENDING_VERSIONS][EH_VERSION_ID_LEN + 1];
	int			npending;		/* -1: more than EHI_PENDING_VERSIONS */
} ehi_versions;

/* Forgets everything: after a resync or a new subscription. */
void		ehi_versions_reset(ehi_versions *v);

/* The subscription is now at version (delivered, or loaded as the head). */
void		ehi_versions_delivered(ehi_versions *v, const char *version);

/*
 * A notification named version.  Returns 0 when it was delivered recently
 * (nothing to fetch), 1 otherwise, and then keeps it as pending.
 */
int			ehi_versions_notified(ehi_versions *v, const char *version);

/* Whether a notified version has not been delivered yet. */
int			ehi_versions_pending(const ehi_versions *v);

/*
 * Forgets the pending versions: a fetch that starts now sees every version
 * notified before it.
 */
void		ehi_versions_clear_pending(ehi_versions *v);

#endif							/* EVENTHUB_VERSIONS_H */
