/*
 * notify.h
 *	  Announcing what a transaction published (notify.c), and the channels
 *	  the announcements go to (notify.c and the notifier, notifier.c).
 */
#ifndef EVENTHUB_NOTIFY_H
#define EVENTHUB_NOTIFY_H

#include "fmgr.h"
#include "utils/uuid.h"

/*
 * Channels that published events are announced on: both carry the same
 * notifications, and those of EVENTHUB_EVENTS_CHANNEL may also carry the
 * events they announce (an "events" member; the payload on
 * EVENTHUB_CHANNEL keeps its two members).
 */
#define EVENTHUB_CHANNEL "eventhub"
#define EVENTHUB_EVENTS_CHANNEL "eventhub_events"

extern void EventhubRecordPublished(Datum org, const pg_uuid_t *version, int64 revision);
extern int64 EventhubTransactionFirstRevision(Datum org);

#endif							/* EVENTHUB_NOTIFY_H */
