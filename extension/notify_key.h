/*
 * notify_key.h
 *	  Notification tokens, data keys, sealed events and the payload of a
 *	  notification (notify_key.c).
 */
#ifndef EVENTHUB_NOTIFY_KEY_H
#define EVENTHUB_NOTIFY_KEY_H

#include "lib/stringinfo.h"
#include "utils/uuid.h"

/* Length of a notification token in hex digits (128 bits of HMAC-SHA-256). */
#define EVENTHUB_TOKEN_HEX_LEN 32

/* A notification token in bytes: 128 bits of HMAC-SHA-256. */
#define EVENTHUB_TOKEN_BYTES (EVENTHUB_TOKEN_HEX_LEN / 2)

/* A data key in bytes: HMAC-SHA-256, whole (an AES-256 key). */
#define EVENTHUB_DATA_KEY_BYTES 32
/* AES-256-GCM's nonce and tag in a sealed notification. */
#define EVENTHUB_SEAL_NONCE_BYTES 12
#define EVENTHUB_SEAL_TAG_BYTES 16

extern void EventhubKeyInvalidate(Oid relid);
extern void EventhubTokenBytes(const char *org, int orglen, uint8 *out);
extern void EventhubDataKey(const char *org, int orglen, uint8 *out);
extern bool EventhubSeal(const uint8 *key, const uint8 *aad, int aadlen,
						 const char *plain, int len, StringInfo out);
extern void EventhubFormatPayload(StringInfo buf, const uint8 *token, const pg_uuid_t *version,
								  const char *sealed);

#endif							/* EVENTHUB_NOTIFY_KEY_H */
