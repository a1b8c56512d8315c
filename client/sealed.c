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
 * believed: delivery.c), as anyone may NOTIFY.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "internal.h"

#define NONCE_BYTES 12
#define TAG_BYTES 16
#define SEALED_FORMAT 1
#define COLUMNS (COL_HEAD + 1)

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

/* Microseconds since the Unix epoch as the fetch query writes them. */
static void
format_timestamp(int64_t us, char out[64])
{
	time_t		secs = (time_t) (us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
	long		micros = (long) (us - (int64_t) secs * 1000000);
	struct tm	tm;

	gmtime_r(&secs, &tm);
	snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
			 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros);
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
 * The plaintext as rows, and the version before the first event into
 * previous ("" when the first is the organization's first); NULL if
 * malformed.
 */
static PGresult *
lay_out(const char *org, const unsigned char *plain, size_t len, char previous[EH_VERSION_ID_LEN + 1])
{
	static const char *const names[COLUMNS] = {
		"organization_id", "revision", "version_id", "processed_timestamp", "originated_timestamp",
		"event_type", "action", "entity_id", "correlation_id", "event_data", "lag_ms",
		"transaction_first_revision", "transaction_end", "head_revision"
	};
	PGresAttDesc attrs[COLUMNS];
	reader		r = {plain, plain + len, 0};
	PGresult   *res;
	int64_t		sent_at;
	int			count;
	int64_t		last = 0;

	if (get_uint(&r, 1) != SEALED_FORMAT)
		return NULL;
	sent_at = (int64_t) get_uint(&r, 8);
	previous[0] = '\0';
	if (get_uint(&r, 1) == 1)
	{
		const unsigned char *prev = get_bytes(&r, 16);

		if (prev)
			format_uuid(prev, previous);
	}
	count = (int) get_uint(&r, 2);
	if (r.bad || count < 1)
		return NULL;
	res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	if (!res)
		return NULL;
	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i < COLUMNS; i++)
	{
		attrs[i].name = (char *) names[i];
		attrs[i].typid = 25;	/* text: values are read as text */
		attrs[i].typlen = -1;
		attrs[i].atttypmod = -1;
	}
	if (!PQsetResultAttrs(res, COLUMNS, attrs))
		goto fail;
	for (int row = 0; row < count; row++)
	{
		char		num[32],
					ts[64],
					uuid[EH_VERSION_ID_LEN + 1];
		int64_t		revision = (int64_t) get_uint(&r, 8);
		int64_t		first = (int64_t) get_uint(&r, 8);
		int			ends = (int) get_uint(&r, 1);
		const unsigned char *version = get_bytes(&r, 16);
		int64_t		processed = (int64_t) get_uint(&r, 8);
		int64_t		originated = (int64_t) get_uint(&r, 8);

		if (r.bad || (row > 0 && revision != last + 1) || first > revision || ends > 1)
			goto fail;
		last = revision;
		if (!PQsetvalue(res, row, COL_ORG, (char *) org, (int) strlen(org)))
			goto fail;
		snprintf(num, sizeof(num), "%lld", (long long) revision);
		if (!PQsetvalue(res, row, COL_REVISION, num, (int) strlen(num)))
			goto fail;
		format_uuid(version, uuid);
		if (!PQsetvalue(res, row, COL_VERSION, uuid, EH_VERSION_ID_LEN))
			goto fail;
		format_timestamp(processed, ts);
		if (!PQsetvalue(res, row, COL_PTS, ts, (int) strlen(ts)))
			goto fail;
		format_timestamp(originated, ts);
		if (!PQsetvalue(res, row, COL_OTS, ts, (int) strlen(ts)))
			goto fail;
		for (int col = COL_TYPE; col <= COL_DATA; col++)
		{
			size_t		n = (size_t) get_uint(&r, 4);
			const unsigned char *v = get_bytes(&r, n);

			if (!v || n > 0x7fffffff || memchr(v, '\0', n) ||
				!PQsetvalue(res, row, col, (char *) v, (int) n))
				goto fail;
		}
		snprintf(num, sizeof(num), "%.3f", (double) (sent_at - processed) / 1000.0);
		if (!PQsetvalue(res, row, COL_LAG, num, (int) strlen(num)))
			goto fail;
		snprintf(num, sizeof(num), "%lld", (long long) first);
		if (!PQsetvalue(res, row, COL_FIRST, num, (int) strlen(num)) ||
			!PQsetvalue(res, row, COL_END, ends ? "t" : "f", 1))
			goto fail;
	}
	/* The head as of the notification: its last event, which ends a transaction. */
	if (r.p != r.end || PQgetvalue(res, count - 1, COL_END)[0] != 't')
		goto fail;
	for (int row = 0; row < count; row++)
		if (!PQsetvalue(res, row, COL_HEAD, PQgetvalue(res, count - 1, COL_REVISION),
						PQgetlength(res, count - 1, COL_REVISION)))
			goto fail;
	return res;

fail:
	PQclear(res);
	return NULL;
}

void
ehi_sealed_prepare(void)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

	if (ctx)
		(void) EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL);
	EVP_CIPHER_CTX_free(ctx);
}

PGresult *
ehi_sealed_open(const unsigned char key[EHI_DATA_KEY_BYTES], const char *org,
				const char *token, const char *version_id, const char *sealed,
				char previous[EH_VERSION_ID_LEN + 1])
{
	unsigned char aad[32];
	unsigned char *raw;
	unsigned char *plain = NULL;
	size_t		rawlen = 0;
	int			n = 0,
				plainlen = 0,
				ok;
	EVP_CIPHER_CTX *ctx;
	PGresult   *res = NULL;

	if (ehi_hex_bytes(token, aad, 16) != 0 || ehi_hex_bytes(version_id, aad + 16, 16) != 0)
		return NULL;
	raw = b64_decode(sealed, &rawlen);
	if (!raw)
		return NULL;
	if (rawlen <= NONCE_BYTES + TAG_BYTES || rawlen > 65536 ||
		!(plain = malloc(rawlen - NONCE_BYTES - TAG_BYTES)))
	{
		free(raw);
		return NULL;
	}
	ctx = EVP_CIPHER_CTX_new();
	ok = ctx != NULL &&
		EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_BYTES, NULL) == 1 &&
		EVP_DecryptInit_ex(ctx, NULL, NULL, key, raw) == 1 &&
		EVP_DecryptUpdate(ctx, NULL, &n, aad, sizeof(aad)) == 1 &&
		EVP_DecryptUpdate(ctx, plain, &n, raw + NONCE_BYTES, (int) (rawlen - NONCE_BYTES - TAG_BYTES)) == 1;
	plainlen = n;
	ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, raw + rawlen - TAG_BYTES) == 1 &&
		EVP_DecryptFinal_ex(ctx, plain + plainlen, &n) == 1;
	EVP_CIPHER_CTX_free(ctx);
	if (ok)
		res = lay_out(org, plain, (size_t) plainlen, previous);
	free(raw);
	free(plain);
	return res;
}
