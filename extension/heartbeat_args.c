/*
 * heartbeat_args.c
 *	  Checking what a heartbeat reports before anything is written: its
 *	  progress {"<organization>": {"revision": N, "version_id": "...",
 *	  "config_hash": "..."}}, with the caller's read privilege on every
 *	  organization in it, and its labels.
 */
#include "postgres.h"

#include <ctype.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/uuid.h"

#include "common.h"
#include "guard.h"
#include "access.h"
#include "heartbeat_args.h"


/*
 * Whether a JSON string is a UUID in a form uuid_in accepts: 32 hex digits,
 * a hyphen allowed after any group of four, optionally in braces.
 */
static bool
LooksLikeUuid(const char *s, int len)
{
	int			digits = 0;
	int			i = 0;

	if (len >= 2 && s[0] == '{' && s[len - 1] == '}')
	{
		i = 1;
		len--;
	}
	for (; i < len; i++)
	{
		if (isxdigit((unsigned char) s[i]))
			digits++;
		else if (s[i] != '-' || digits == 0 || digits % 4 != 0 || i + 1 == len || s[i + 1] == '-')
			return false;
	}
	return digits == 32;
}

/*
 * Converts a JSON number to an int64 if it is written as an integer (no
 * fraction: 5 or 5e0, not 5.0) and in range.
 */
static bool
NumericToInt64(Numeric n, int64 *out)
{
	Datum		d = NumericGetDatum(n);

	if (DatumGetInt32(DirectFunctionCall1(numeric_scale, d)) != 0 ||
		DatumGetBool(DirectFunctionCall2(numeric_gt, d,
										 NumericGetDatum(int64_to_numeric(PG_INT64_MAX)))) ||
		DatumGetBool(DirectFunctionCall2(numeric_lt, d,
										 NumericGetDatum(int64_to_numeric(PG_INT64_MIN)))))
		return false;
	*out = DatumGetInt64(DirectFunctionCall1(numeric_int8, d));
	return true;
}

/*
 * Converts a JSON string of decimal digits ("42") to an int64: drivers that
 * return bigint columns as strings (JavaScript's, for one) hand the
 * revision back that way.  Nothing else passes: no sign, space, fraction
 * or exponent, nothing out of range.
 */
static bool
DigitsToInt64(const char *s, int len, int64 *out)
{
	int64		value = 0;

	if (len == 0)
		return false;
	for (int i = 0; i < len; i++)
	{
		int			digit = s[i] - '0';

		if (s[i] < '0' || s[i] > '9' || value > (PG_INT64_MAX - digit) / 10)
			return false;
		value = value * 10 + digit;
	}
	*out = value;
	return true;
}

/* Renders a JSON value for an error message. */
static char *
JsonbValueText(JsonbValue *v)
{
	Jsonb	   *j = JsonbValueToJsonb(v);

	return JsonbToCString(NULL, &j->root, VARSIZE(j));
}

/*
 * The revision of organization org's progress: an integer, or a string of
 * decimal digits, not negative.
 */
static int64
ParseRevision(const char *org, JsonbValue *v)
{
	int64		revision;

	if (!(v->type == jbvNumeric && NumericToInt64(v->val.numeric, &revision)) &&
		!(v->type == jbvString && DigitsToInt64(v->val.string.val, v->val.string.len, &revision)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("revision of organization \"%s\" must be an integer", org),
				 errdetail("It is %s.", JsonbValueText(v)),
				 errhint("Pass a JSON number, or a string of decimal digits such as \"42\".")));
	if (revision < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("revision of organization \"%s\" must not be negative", org),
				 errdetail("It is %s.", JsonbValueText(v))));
	return revision;
}

/*
 * The version_id of organization org's progress: a uuid, or 0 for null.
 */
static Datum
ParseVersionId(const char *org, JsonbValue *v)
{
	if (v->type == jbvString && LooksLikeUuid(v->val.string.val, v->val.string.len))
		return DirectFunctionCall1(uuid_in,
								   CStringGetDatum(pnstrdup(v->val.string.val, v->val.string.len)));
	if (v->type != jbvNull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version_id of organization \"%s\" must be a UUID string", org),
				 errdetail("It is %s.", JsonbValueText(v))));
	return (Datum) 0;
}

/*
 * The config_hash of organization org's progress: text of at most
 * EVENTHUB_MAX_CONFIG_HASH_BYTES, or 0 for null.
 */
static Datum
ParseConfigHash(const char *org, JsonbValue *v)
{
	if (v->type == jbvString && v->val.string.len > EVENTHUB_MAX_CONFIG_HASH_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("config_hash of organization \"%s\" is too long", org),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   v->val.string.len, EVENTHUB_MAX_CONFIG_HASH_BYTES),
				 errhint("Report a hash of the configuration, not the configuration.")));
	if (v->type == jbvString)
		return PointerGetDatum(cstring_to_text_with_len(v->val.string.val, v->val.string.len));
	if (v->type != jbvNull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("config_hash of organization \"%s\" must be a string", org)));
	return (Datum) 0;
}

/*
 * Checks one organization's progress object and fills *e from it.
 */
static void
ParseProgressEntry(const char *org, JsonbValue *value, ProgressEntry *e)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		have_revision = false;

	if (value->type != jbvBinary || !JsonContainerIsObject(value->val.binary.data))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress of organization \"%s\" must be a JSON object", org),
				 errhint("Pass {\"revision\": <applied revision>, \"version_id\": \"<uuid>\", \"config_hash\": \"<hash>\"}.")));

	e->org = pstrdup(org);
	e->version = (Datum) 0;
	e->config_hash = (Datum) 0;
	it = JsonbIteratorInit(value->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (strcmp(key, "revision") == 0)
		{
			e->revision = ParseRevision(org, &v);
			have_revision = true;
		}
		else if (strcmp(key, "version_id") == 0)
			e->version = ParseVersionId(org, &v);
		else if (strcmp(key, "config_hash") == 0)
			e->config_hash = ParseConfigHash(org, &v);
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in progress of organization \"%s\"", key, org),
					 errhint("The keys are revision, version_id and config_hash.")));
	}
	if (!have_revision)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress of organization \"%s\" has no revision", org)));
}

/*
 * Checks a heartbeat's progress argument, and the caller's read privilege
 * on every organization in it.  Returns the entries; *count gets how many.
 */
ProgressEntry *
EventhubParseProgress(Jsonb *progress, int *count)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	ProgressEntry *entries;
	int			n = 0;
	Oid			caller = EventhubCallingRole();

	if (!JB_ROOT_IS_OBJECT(progress))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("progress must be a JSON object"),
				 errhint("Pass {\"<organization>\": {\"revision\": <applied revision>, \"version_id\": \"<uuid>\", \"config_hash\": \"<hash>\"}, ...}.")));

	entries = palloc0(sizeof(ProgressEntry) * Max(JB_ROOT_COUNT(progress), 1));
	it = JsonbIteratorInit(&progress->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *org;
		int			len;

		if (tok != WJB_KEY)
			continue;
		CHECK_FOR_INTERRUPTS();
		len = v.val.string.len;
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("organization id in progress must not be empty")));
		if (len > EVENTHUB_MAX_ID_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("organization id in progress is too long"),
					 errdetail("It is %d bytes long; the limit is %d bytes.", len, EVENTHUB_MAX_ID_BYTES)));
		org = pnstrdup(v.val.string.val, len);
		if (!EventhubHasOrgPrivilege(caller, org, len, EVENTHUB_PRIV_READ))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to read organization \"%s\"", org),
					 errhint("A replica reports progress only for organizations its role may read.")));
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		ParseProgressEntry(org, &v, &entries[n++]);
	}
	*count = n;
	return entries;
}

/*
 * Checks a heartbeat's labels: a JSON object of at most EVENTHUB_MAX_LABELS_BYTES
 * as text.
 */
void
EventhubCheckLabels(Jsonb *labels)
{
	int			len;

	if (!JB_ROOT_IS_OBJECT(labels))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("labels must be a JSON object")));
	len = strlen(JsonbToCString(NULL, &labels->root, VARSIZE(labels)));
	if (len > EVENTHUB_MAX_LABELS_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("labels are too long"),
				 errdetail("They are %d bytes long as JSON text; the limit is %d bytes.",
						   len, EVENTHUB_MAX_LABELS_BYTES)));
}
