/*
 * notify_key.c
 *	  Notification tokens: the key cache, the HMAC of an organization id
 *	  under it, the payload of a notification, and the SQL functions
 *	  notification_token() and rotate_notification_key().
 *
 * Any role that can connect can LISTEN on any channel, so a notification
 * must tell nothing to a role that may not read the organization.  Its
 * payload names the organization by an opaque token,
 *	  {"notification_token": "<32 hex digits>", "version_id": "<uuid>"}
 * where the token is HMAC-SHA-256 of the organization id under a random
 * key kept in eventhub.notification_key (readable by no role but the
 * owner), cut to 128 bits.  A reader asks eventhub.notification_token()
 * for the tokens of the organizations it follows, which needs read
 * privilege on them; version_id is the organization's version after the
 * transaction, a new UUID that tells a reader whether it has already
 * applied that state.  Neither the id nor a revision travels.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "port.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"

#include <openssl/evp.h>

#include "common.h"
#include "guard.h"
#include "access.h"
#include "notify_key.h"

PG_FUNCTION_INFO_V1(notification_token);
PG_FUNCTION_INFO_V1(notification_data_key);
PG_FUNCTION_INFO_V1(rotate_notification_key);

/* Bytes of a new notification key. */
#define KEY_BYTES 32
/* The longest key read from the table; longer keys are hashed by HMAC anyway. */
#define MAX_KEY_BYTES 64

/* The notification key, cached until eventhub.notification_key changes. */
static uint8 key[MAX_KEY_BYTES];
static int	key_len = 0;
static bool key_valid = false;
static Oid	key_relid = InvalidOid;
static uint64 key_invalidations = 0;

/*
 * The last token computed, and the key it was computed under: a backend
 * that publishes to one organization computes its HMAC once per key.
 */
static char last_token_org[EVENTHUB_MAX_ID_BYTES + 1];
static int	last_token_orglen = -1;
static uint64 last_token_key = 0;
static uint8 last_token[EVENTHUB_TOKEN_BYTES];

/*
 * Called on a relcache invalidation (eventhub.c): a change to
 * notification_key (or a reset of the whole cache) makes the next token
 * load the key again.
 */
void
EventhubKeyInvalidate(Oid relid)
{
	if (relid == InvalidOid || relid == key_relid)
	{
		key_valid = false;
		key_invalidations++;
	}
}

/*
 * Loads the notification key unless the cached copy is valid.
 */
static void
EnsureKey(void)
{
	uint64		invalidations_before;
	Relation	rel;
	Snapshot	snapshot;
	TableScanDesc scan;
	HeapTuple	tuple;

	if (key_valid)
		return;

	key_len = 0;
	key_relid = EventhubRelid("notification_key");
	invalidations_before = key_invalidations;
	if (OidIsValid(key_relid))
	{
		rel = table_open(key_relid, AccessShareLock);
		snapshot = RegisterSnapshot(EventhubCacheSnapshot());
		scan = table_beginscan(rel, snapshot, 0, NULL);
		if ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			bool		isnull;
			Datum		d = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);

			if (!isnull)
			{
				bytea	   *b = DatumGetByteaPP(d);

				key_len = Min(VARSIZE_ANY_EXHDR(b), MAX_KEY_BYTES);
				memcpy(key, VARDATA_ANY(b), key_len);
			}
		}
		table_endscan(scan);
		UnregisterSnapshot(snapshot);
		table_close(rel, AccessShareLock);
	}
	if (key_len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("eventhub's notification key is missing"),
				 errhint("A superuser can make a new one with SELECT eventhub.rotate_notification_key().")));
	key_valid = (key_invalidations == invalidations_before);
}

/*
 * Writes the notification token of organization org (orglen bytes) to out:
 * the first EVENTHUB_TOKEN_BYTES bytes of HMAC-SHA-256 of the id under the key.
 */
/*
 * HMAC-SHA-256 under the notification key of prefix (prefixlen bytes)
 * followed by org (orglen bytes), into digest.
 */
static void
KeyedDigest(const char *prefix, int prefixlen, const char *org, int orglen,
			uint8 digest[PG_SHA256_DIGEST_LENGTH])
{
	pg_hmac_ctx *ctx;

	EnsureKey();
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	if (pg_hmac_init(ctx, key, key_len) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) prefix, prefixlen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) org, orglen) < 0 ||
		pg_hmac_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) < 0)
	{
#if PG_VERSION_NUM >= 150000
		const char *reason = pstrdup(pg_hmac_error(ctx));
#else
		const char *reason = "HMAC failed";
#endif

		pg_hmac_free(ctx);
		elog(ERROR, "eventhub: could not compute a notification token: %s", reason);
	}
	pg_hmac_free(ctx);
}

void
EventhubTokenBytes(const char *org, int orglen, uint8 *out)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	EnsureKey();
	if (orglen == last_token_orglen && last_token_key == key_invalidations &&
		memcmp(org, last_token_org, orglen) == 0)
	{
		memcpy(out, last_token, EVENTHUB_TOKEN_BYTES);
		return;
	}
	KeyedDigest("", 0, org, orglen, digest);
	memcpy(out, digest, EVENTHUB_TOKEN_BYTES);
	if (orglen <= EVENTHUB_MAX_ID_BYTES)
	{
		memcpy(last_token_org, org, orglen);
		memcpy(last_token, digest, EVENTHUB_TOKEN_BYTES);
		last_token_orglen = orglen;
		last_token_key = key_invalidations;
	}
}

/*
 * Writes the data key of organization org (orglen bytes) to out
 * (EVENTHUB_DATA_KEY_BYTES): HMAC-SHA-256 under the notification key of
 * "eventhub data key", a zero byte, and the id.  The token's HMAC is of the
 * id alone, which holds no zero byte: the two never coincide.
 */
void
EventhubDataKey(const char *org, int orglen, uint8 *out)
{
	static const char prefix[] = "eventhub data key";

	KeyedDigest(prefix, sizeof(prefix), org, orglen, out);
}

/*
 * Seals len bytes of plain under key (EVENTHUB_DATA_KEY_BYTES) with
 * AES-256-GCM, binding aad (aadlen bytes) to them, and appends to out the
 * base64 of: a random 12-byte nonce, the ciphertext, the 16-byte tag.
 * False when OpenSSL or the random source fails (nothing is appended).
 */
bool
EventhubSeal(const uint8 *key, const uint8 *aad, int aadlen, const char *plain, int len,
			 StringInfo out)
{
	EVP_CIPHER_CTX *ctx;
	uint8	   *sealed;
	int			n,
				total,
				b64len;
	bool		ok;

	sealed = palloc(EVENTHUB_SEAL_NONCE_BYTES + len + EVENTHUB_SEAL_TAG_BYTES);
	if (!pg_strong_random(sealed, EVENTHUB_SEAL_NONCE_BYTES))
	{
		pfree(sealed);
		return false;
	}
	ctx = EVP_CIPHER_CTX_new();
	ok = ctx != NULL &&
		EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, EVENTHUB_SEAL_NONCE_BYTES, NULL) == 1 &&
		EVP_EncryptInit_ex(ctx, NULL, NULL, key, sealed) == 1 &&
		EVP_EncryptUpdate(ctx, NULL, &n, aad, aadlen) == 1 &&
		EVP_EncryptUpdate(ctx, sealed + EVENTHUB_SEAL_NONCE_BYTES, &n, (const uint8 *) plain, len) == 1;
	total = EVENTHUB_SEAL_NONCE_BYTES + n;
	ok = ok && EVP_EncryptFinal_ex(ctx, sealed + total, &n) == 1;
	total += ok ? n : 0;
	ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, EVENTHUB_SEAL_TAG_BYTES, sealed + total) == 1;
	total += EVENTHUB_SEAL_TAG_BYTES;
	EVP_CIPHER_CTX_free(ctx);
	if (ok)
	{
		b64len = pg_b64_enc_len(total);
		enlargeStringInfo(out, b64len + 1);
		n = pg_b64_encode((const char *) sealed, total, out->data + out->len, b64len);
		ok = n >= 0;
		if (ok)
		{
			out->len += n;
			out->data[out->len] = '\0';
		}
	}
	pfree(sealed);
	return ok;
}

/*
 * Writes the notification token of organization org (orglen bytes) to out,
 * EVENTHUB_TOKEN_HEX_LEN hex digits and a NUL.
 */
static void
NotificationToken(const char *org, int orglen, char *out)
{
	uint8		bytes[EVENTHUB_TOKEN_BYTES];

	EventhubTokenBytes(org, orglen, bytes);
	hex_encode((const char *) bytes, EVENTHUB_TOKEN_BYTES, out);
	out[EVENTHUB_TOKEN_HEX_LEN] = '\0';
}

/*
 * Writes the payload of one notification into buf, with the sealed events
 * (base64, from EventhubSeal) when sealed is not NULL.
 */
void
EventhubFormatPayload(StringInfo buf, const uint8 *token, const pg_uuid_t *version,
					  const char *sealed)
{
	char		hex[EVENTHUB_TOKEN_HEX_LEN + 1];

	hex_encode((const char *) token, EVENTHUB_TOKEN_BYTES, hex);
	hex[EVENTHUB_TOKEN_HEX_LEN] = '\0';
	resetStringInfo(buf);
	appendStringInfo(buf, "{\"notification_token\": \"%s\", \"version_id\": \"%s\"",
					 hex, DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(version))));
	if (sealed)
		appendStringInfo(buf, ", \"events\": \"%s\"", sealed);
	appendStringInfoChar(buf, '}');
}

/*
 * notification_token(organization_id text) -> text
 *
 * The token that notifications about an organization carry.  Needs read
 * privilege on the organization.  Tokens change only when the notification
 * key is rotated.
 */
Datum
notification_token(PG_FUNCTION_ARGS)
{
	Datum		org = EventhubRequiredTextArg(fcinfo, 0, "organization_id", EVENTHUB_MAX_ID_BYTES);
	text	   *t = DatumGetTextPP(org);
	char		token[EVENTHUB_TOKEN_HEX_LEN + 1];

	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_READ);
	NotificationToken(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), token);
	PG_RETURN_TEXT_P(cstring_to_text(token));
}

/*
 * notification_data_key(organization_id text) -> bytea
 *
 * The key that the events a notification about the organization carries
 * are sealed under (AES-256-GCM; see protocol.md).  Needs read privilege
 * on the organization.  Changes when the notification key is rotated.
 */
Datum
notification_data_key(PG_FUNCTION_ARGS)
{
	Datum		org = EventhubRequiredTextArg(fcinfo, 0, "organization_id", EVENTHUB_MAX_ID_BYTES);
	text	   *t = DatumGetTextPP(org);
	bytea	   *result = palloc(VARHDRSZ + EVENTHUB_DATA_KEY_BYTES);

	EventhubCheckOrgPrivilege(org, EVENTHUB_PRIV_READ);
	SET_VARSIZE(result, VARHDRSZ + EVENTHUB_DATA_KEY_BYTES);
	EventhubDataKey(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), (uint8 *) VARDATA(result));
	PG_RETURN_BYTEA_P(result);
}

/*
 * rotate_notification_key() -> void
 *
 * Replaces the notification key with a new random one, so that every token
 * changes: a role whose read privilege was revoked can no longer tell its
 * former organizations' notifications apart.  Clients fetch the new tokens
 * when they reconnect or poll.
 */
Datum
rotate_notification_key(PG_FUNCTION_ARGS)
{
	static EventhubPlan delete_plan;
	static EventhubPlan insert_plan;
	bytea	   *newkey = palloc(VARHDRSZ + KEY_BYTES);
	Datum		value;

	SET_VARSIZE(newkey, VARHDRSZ + KEY_BYTES);
	if (!pg_strong_random(VARDATA(newkey), KEY_BYTES))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random notification key")));
	value = PointerGetDatum(newkey);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "eventhub: SPI_connect failed");
	if (EventhubExecuteAsOwner(&delete_plan, &EventhubSqlNotifyKeyDeleteKey, NULL, NULL, 0) != SPI_OK_DELETE ||
		EventhubExecuteAsOwner(&insert_plan, &EventhubSqlNotifyKeyInsertKey, &value, NULL, 0) != SPI_OK_INSERT)
		elog(ERROR, "eventhub: replacing the notification key failed");
	SPI_finish();
	PG_RETURN_VOID();
}
