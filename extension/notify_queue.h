/*
 * notify_queue.h
 *	  The queue in shared memory from committed publishers to the notifier
 *	  (notify_queue.c), and what it carries.
 */
#ifndef EVENTHUB_NOTIFY_QUEUE_H
#define EVENTHUB_NOTIFY_QUEUE_H

#include "utils/uuid.h"

#include "notify_key.h"

/*
 * The longest organization id an announcement carries, in bytes.  The
 * notifier reads the events of an announcement whose id it has, to seal
 * them into the notification; a longer id's notification carries none.
 */
#define EVENTHUB_ANNOUNCED_ORG_BYTES 64

/*
 * What a committed transaction hands the notifier for one organization:
 * its token, its version after the transaction, and the revisions of the
 * transaction's events there (first_revision..last_revision, all of them:
 * a savepoint rolled back took its revisions back).
 */
typedef struct EventhubAnnouncement
{
	uint8		token[EVENTHUB_TOKEN_BYTES];
	pg_uuid_t	version;
	int64		first_revision;
	int64		last_revision;
	uint32		orghash;		/* EventhubOrganizationHash() of the id */
	int32		orglen;			/* -1: the id is longer than org holds */
	char		org[EVENTHUB_ANNOUNCED_ORG_BYTES];
} EventhubAnnouncement;

extern void EventhubNotifyShmemInit(void);
extern bool EventhubNotifierServes(void);
extern int	EventhubNotifierPid(void);
extern bool EventhubQueuePush(const EventhubAnnouncement *a);
extern void EventhubWakeNotifier(void);
extern void EventhubQueueAttachNotifier(void);
extern uint64 EventhubQueueDropped(void);
extern bool EventhubQueuePop(EventhubAnnouncement *a, bool *ours);

#endif							/* EVENTHUB_NOTIFY_QUEUE_H */
