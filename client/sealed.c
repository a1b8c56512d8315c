/*
 * sealed.c: the events a notification carries.
 *
 * In worker mode the server's notifier puts the events a notification
 * announces into it when they are few and small: the payload's "events"
 * key, base64 of a 12-byte nonce, the AES-256-GCM ciphertext and its
 * 16-byte tag.  The key is the organization's data key
 * (eventhub.notification_data_key(), which needs read privilege); the
 * token's 16 bytes and the version's 16 are the additional data, so that
 * the events cannot be moved to another notification.  The plaintext (all
 * integers big-endian; timestamps in microseconds since the Unix epoch):
 *
 *	  u8 format (1), i64 sent_at, u8 has_previous, (if 1) 16 bytes: the
 *	  version_id of the event before the first, u16 count, then count events of
 *	  i64 revision, i64 transaction_first_revision, u8 transaction_end,
 *	  16 bytes version_id, i64 processed_timestamp, i64 originated_timestamp,
 *	  and event_type, action, entity_id, correlation_id, event_data each as
 *	  u32 length and that many bytes.
 *
 * The key keeps the events from a role that may not read them; who sent
 * the notification is the caller's to check (only the notifier's pid is
 * believed: notifications.c), as anyone may NOTIFY.  What it hands back
 * is the events as decoded (ehi_sealed); rows.c lays them out as a fetch's
 * rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "sealed.h"

#define NONCE_BYTES 12
#define TAG_BYTES 16
#define SEALED_FORMAT 1

static int
b64_value(char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+')
		return 62;
	if (ch == '/')
		return 63;
	return -1;
}

/* Decodes padded base64 into a malloc'd buffer; NULL when malformed. */
static unsigned char *
b64_decode(const char *in, size_t *outlen)
{
	size_t		len = strlen(in);
	unsigned char *out;
	size_t		n = 0;

	if (len == 0 || len % 4 != 0)
		return NULL;
	out = malloc(len / 4 * 3);
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 4)
	{
		int			v[4];
		int			pad = 0;

		for (int j = 0; j < 4; j++)
		{
			if (in[i + j] == '=' && i + 4 == len && j >= 2)
			{
				v[j] = 0;
				pad++;
			}
			else if (pad || (v[j] = b64_value(in[i + j])) < 0)
			{
				free(out);
				return NULL;
			}
		}
		out[n++] = (unsigned char) (v[0] << 2 | v[1] >> 4);
		if (pad < 2)
			out[n++] = (unsigned char) ((v[1] & 0xf) << 4 | v[2] >> 2);
		if (pad < 1)
			out[n++] = (unsigned char) ((v[2] & 0x3) << 6 | v[3]);
	}
	*outlen = n;
	return out;
}

int
ehi_hex_bytes(const char *hex, unsigned char *out, int n)
{
	for (int i = 0; i < n; i++)
	{
		unsigned	v = 0;

		for (int j = 0; j < 2; j++)
		{
			char		ch;

			while (*hex == '-')
				hex++;
			ch = *hex++;
			v <<= 4;
			if (ch >= '0' && ch <= '9')
				v |= (unsigned) (ch - '0');
			else if (ch >= 'a' && ch <= 'f')
				v |= (unsigned) (ch - 'a' + 10);
			else
				return -1;
		}
		out[i] = (unsigned char) v;
	}
	return 0;
}

/* Reading the plaintext: every read checks the bounds first. */
typedef struct reader
{
	const unsigned char *p;
	const unsigned char *end;
	int			bad;
} reader;

static uint64_t
get_uint(reader *r, int bytes)
{
	uint64_t	v = 0;

	if (r->bad || r->end - r->p < bytes)
	{
		r->bad = 1;
		return 0;
	}
	for (int i = 0; i < bytes; i++)
		v = v << 8 | *r->p++;
	return v;
}

static const unsigned char *
get_bytes(reader *r, size_t n)
{
	const unsigned char *at = r->p;

	if (r->bad || (size_t) (r->end - r->p) < n)
	{
		r->bad = 1;
		return NULL;
	}
	r->p += n;
	return at;
}

static void
format_uuid(const unsigned char *b, char out[EH_VERSION_ID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	int			o = 0;

	for (int i = 0; i < 16; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[b[i] >> 4];
		out[o++] = hex[b[i] & 0xf];
	}
	out[o] = '\0';
}

/*
 * Reads one event into e; 0, or -1 when malformed (a string with a NUL
 * byte, a transaction that begins after the event, an end flag over 1).
 */
static int
read_event(reader *r, ehi_sealed_event *e)
{
	const unsigned char *version;

	e->revision = (int64_t) get_uint(r, 8);
	e->first_revision = (int64_t) get_uint(r, 8);
	e->ends = (int) get_uint(r, 1);
	version = get_bytes(r, 16);
	e->processed_us = (int64_t) get_uint(r, 8);
	e->originated_us = (int64_t) get_uint(r, 8);
	if (r->bad || e->first_revision > e->revision || e->ends > 1)
		return -1;
	format_uuid(version, e->version_id);
	for (int i = 0; i < EHI_SEALED_TEXTS; i++)
	{
		size_t		n = (size_t) get_uint(r, 4);
		const unsigned char *v = get_bytes(r, n);

		if (!v || n > 0x7fffffff || memchr(v, '\0', n))
			return -1;
		e->text[i] = (const char *) v;
		e->text_len[i] = (int) n;
	}
	return 0;
}

/*
 * Decodes the plaintext into out (its events point into plain); -1 when
 * malformed: revisions not consecutive, bytes left over, or a last event
 * (the head as of the notification) that does not end a transaction.
 */
static int
decode(const unsigned char *plain, size_t len, ehi_sealed *out)
{
	reader		r = {plain, plain + len, 0};

	if (get_uint(&r, 1) != SEALED_FORMAT)
		return -1;
	out->sent_at_us = (int64_t) get_uint(&r, 8);
	out->previous[0] = '\0';
	if (get_uint(&r, 1) == 1)
	{
		const unsigned char *prev = get_bytes(&r, 16);

		if (prev)
			format_uuid(prev, out->previous);
	}
	out->count = (int) get_uint(&r, 2);
	if (r.bad || out->count < 1 ||
		!(out->events = calloc((size_t) out->count, sizeof(ehi_sealed_event))))
		return -1;
	for (int i = 0; i < out->count; i++)
		if (read_event(&r, &out->events[i]) != 0 ||
			(i > 0 && out->events[i].revision != out->events[i - 1].revision + 1))
			return -1;
	if (r.p != r.end || !out->events[out->count - 1].ends)
		return -1;
	return 0;
}

void
ehi_sealed_prepare(void)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

	if (ctx)
		(void) EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL);
	EVP_CIPHER_CTX_free(ctx);
}

/*
 * Decrypts raw (nonce, ciphertext, tag) of rawlen bytes under key with aad
 * into plain; returns the plaintext's length, or -1 when it does not open.
 */
static int
decrypt(const unsigned char *key, const unsigned char aad[32], unsigned char *raw,
		size_t rawlen, unsigned char *plain)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int			n = 0,
				plainlen,
				ok;

	ok = ctx != NULL &&
		EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_BYTES, NULL) == 1 &&
		EVP_DecryptInit_ex(ctx, NULL, NULL, key, raw) == 1 &&
		EVP_DecryptUpdate(ctx, NULL, &n, aad, 32) == 1 &&
		EVP_DecryptUpdate(ctx, plain, &n, raw + NONCE_BYTES, (int) (rawlen - NONCE_BYTES - TAG_BYTES)) == 1;
	plainlen = n;
	ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, raw + rawlen - TAG_BYTES) == 1 &&
		EVP_DecryptFinal_ex(ctx, plain + plainlen, &n) == 1;
	EVP_CIPHER_CTX_free(ctx);
	return ok ? plainlen : -1;
}

int
ehi_sealed_open(const unsigned char key[EHI_DATA_KEY_BYTES], const char *token,
				const char *version_id, const char *sealed, ehi_sealed *out)
{
	unsigned char aad[32];
	unsigned char *raw;
	size_t		rawlen = 0;
	int			plainlen = -1;

	memset(out, 0, sizeof(*out));
	if (ehi_hex_bytes(token, aad, 16) != 0 || ehi_hex_bytes(version_id, aad + 16, 16) != 0)
		return -1;
	raw = b64_decode(sealed, &rawlen);
	if (!raw)
		return -1;
	if (rawlen > NONCE_BYTES + TAG_BYTES && rawlen <= 65536 &&
		(out->plain = malloc(rawlen - NONCE_BYTES - TAG_BYTES)) != NULL)
		plainlen = decrypt(key, aad, raw, rawlen, out->plain);
	free(raw);
	if (plainlen < 0 || decode(out->plain, (size_t) plainlen, out) != 0)
	{
		ehi_sealed_free(out);
		return -1;
	}
	return 0;
}

void
ehi_sealed_free(ehi_sealed *ev)
{
	free(ev->events);
	free(ev->plain);
	ev->events = NULL;
	ev->plain = NULL;
	ev->count = 0;
}
