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

/* notify_key.c */
extern void EventhubTokenBytes(const char *org, int orglen, uint8 *out);
extern void EventhubFormatPayload(StringInfo buf, const uint8 *token, const pg_uuid_t *version);

/* notify_queue.c */
extern bool EventhubNotifierServes(void);
extern bool EventhubQueuePush(const uint8 *token, const pg_uuid_t *version);
extern void EventhubWakeNotifier(void);
extern void EventhubQueueAttachNotifier(void);
extern uint64 EventhubQueueDropped(void);
extern bool EventhubQueuePop(uint8 *token, pg_uuid_t *version, bool *ours);

#endif							/* EVENTHUB_NOTIFY_H */
