/*
 * sealed.h: the events a notification carries, opened and decoded (sealed.c).
 */
#ifndef EVENTHUB_SEALED_H
#define EVENTHUB_SEALED_H

#include <stdint.h>

#include "json.h"

#define EHI_DATA_KEY_BYTES 32

/* 2*n lower-case hex digits (dashes skipped) into n bytes; -1 if malformed. */
int			ehi_hex_bytes(const char *hex, unsigned char *out, int n);

/* event_type, action, entity_id, correlation_id, event_data */
#define EHI_SEALED_TEXTS 5

/* One event a notification carries, as decoded. */
typedef struct ehi_sealed_event
{
	int64_t		revision;
	int64_t		first_revision; /* of its transaction */
	int			ends;			/* it ends its transaction */
	char		version_id[EH_VERSION_ID_LEN + 1];
	int64_t		processed_us;	/* microseconds since the Unix epoch */
	int64_t		originated_us;
	const char *text[EHI_SEALED_TEXTS]; /* into the plaintext: not NUL-terminated */
	int			text_len[EHI_SEALED_TEXTS];
} ehi_sealed_event;

/* The events of one notification: consecutive, the last ending a transaction. */
typedef struct ehi_sealed
{
	int64_t		sent_at_us;		/* when the notifier sent them */
	char		previous[EH_VERSION_ID_LEN + 1];	/* the version before the first;
													 * "" when the first is the
													 * organization's first */
	int			count;			/* at least 1 */
	ehi_sealed_event *events;
	unsigned char *plain;		/* the plaintext the texts point into */
} ehi_sealed;

/*
 * Readies OpenSSL's cipher ahead of the first notification: its first use
 * in a process takes milliseconds (loading the provider), which would
 * otherwise fall on the first event's delivery.
 */
void		ehi_sealed_prepare(void);

/*
 * Opens the "events" of a notification (base64 of nonce, AES-256-GCM
 * ciphertext and tag) under key, bound to the notification's token and
 * version, into *out (freed with ehi_sealed_free).  -1 (nothing to free)
 * when they do not open (another key, altered, forged) or are malformed.
 */
int			ehi_sealed_open(const unsigned char key[EHI_DATA_KEY_BYTES], const char *token,
							const char *version_id, const char *sealed, ehi_sealed *out);
void		ehi_sealed_free(ehi_sealed *ev);

#endif							/* EVENTHUB_SEALED_H */
