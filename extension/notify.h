/*
 * notify.h
 *	  What the files announcing published events share: notification tokens
 *	  and payloads (notify_key.c) and the queue to the notifier
 *	  (notify_queue.c).  notify.c (the publishing transaction) and notifier.c
 *	  (the notifier worker) sit on top of them.
 */
#ifndef EVENTHUB_NOTIFY_H
#define EVENTHUB_NOTIFY_H

#include "lib/stringinfo.h"
#include "utils/uuid.h"

/* A notification token in bytes: 128 bits of HMAC-SHA-256. */
#define EVENTHUB_TOKEN_BYTES (EVENTHUB_TOKEN_HEX_LEN / 2)

/* A data key in bytes: HMAC-SHA-256, whole (an AES-256 key). */
#define EVENTHUB_DATA_KEY_BYTES 32
/* AES-256-GCM's nonce and tag in a sealed notification. */
#define EVENTHUB_SEAL_NONCE_BYTES 12
#define EVENTHUB_SEAL_TAG_BYTES 16

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
	int32		orglen;			/* -1: the id is longer than org holds */
	char		org[EVENTHUB_ANNOUNCED_ORG_BYTES];
} EventhubAnnouncement;

/* notify_key.c */
extern void EventhubTokenBytes(const char *org, int orglen, uint8 *out);
extern void EventhubDataKey(const char *org, int orglen, uint8 *out);
extern bool EventhubSeal(const uint8 *key, const uint8 *aad, int aadlen,
						 const char *plain, int len, StringInfo out);
extern void EventhubFormatPayload(StringInfo buf, const uint8 *token, const pg_uuid_t *version,
								  const char *sealed);

/* notify_queue.c */
extern bool EventhubNotifierServes(void);
extern int	EventhubNotifierPid(void);
extern bool EventhubQueuePush(const EventhubAnnouncement *a);
extern void EventhubWakeNotifier(void);
extern void EventhubQueueAttachNotifier(void);
extern uint64 EventhubQueueDropped(void);
extern bool EventhubQueuePop(EventhubAnnouncement *a, bool *ours);

#endif							/* EVENTHUB_NOTIFY_H */
