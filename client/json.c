/*
 * json.c: the little JSON the client reads and writes.
 *
 * Reading: a small strict parser for the notification payload, one flat
 * JSON object: enough for the two keys the server sends, tolerant of scalar
 * keys it may add later, and safe on any input (it never reads past the
 * terminating NUL).  Writing: quoting strings.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

typedef struct cursor
{
	const char *p;
} cursor;

static void
skip_ws(cursor *c)
{
	while (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')
		c->p++;
}

static int
hex4(const char *p, unsigned *out)
{
	unsigned	v = 0;

	for (int i = 0; i < 4; i++)
	{
		char		ch = p[i];

		v <<= 4;
		if (ch >= '0' && ch <= '9')
			v |= (unsigned) (ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			v |= (unsigned) (ch - 'a' + 10);
		else if (ch >= 'A' && ch <= 'F')
			v |= (unsigned) (ch - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

static size_t
put_utf8(char *out, unsigned cp)
{
	if (cp < 0x80)
	{
		out[0] = (char) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		out[0] = (char) (0xC0 | (cp >> 6));
		out[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		out[0] = (char) (0xE0 | (cp >> 12));
		out[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char) (0xF0 | (cp >> 18));
	out[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/* The character a one-letter escape (\n, \", ...) stands for; -1 if none. */
static int
simple_escape(char e)
{
	switch (e)
	{
		case '"':
		case '\\':
		case '/':
			return e;
		case 'b':
			return '\b';
		case 'f':
			return '\f';
		case 'n':
			return '\n';
		case 'r':
			return '\r';
		case 't':
			return '\t';
		default:
			return -1;
	}
}

/*
 * A \uXXXX escape, c->p at its 'u' (a surrogate pair as one code point):
 * the code point into *cp, c->p left at its last hex digit.  -1 for a lone
 * surrogate or NUL (which C strings cannot hold).
 */
static int
unicode_escape(cursor *c, unsigned *cp)
{
	if (hex4(c->p + 1, cp) != 0)
		return -1;
	c->p += 4;
	if (*cp >= 0xD800 && *cp <= 0xDBFF)
	{
		unsigned	lo;

		if (c->p[1] != '\\' || c->p[2] != 'u' || hex4(c->p + 3, &lo) != 0 ||
			lo < 0xDC00 || lo > 0xDFFF)
			return -1;
		c->p += 6;
		*cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
	}
	else if ((*cp >= 0xDC00 && *cp <= 0xDFFF) || *cp == 0)
		return -1;
	return 0;
}

/*
 * One escape, c->p just past its backslash: appended to buf (when not
 * NULL) at *len, c->p moved past it.  -1 when malformed.
 */
static int
unescape(cursor *c, char *buf, size_t *len)
{
	int			ch = simple_escape(*c->p);

	if (ch >= 0)
	{
		if (buf)
			buf[(*len)++] = (char) ch;
	}
	else
	{
		unsigned	cp;

		if (*c->p != 'u' || unicode_escape(c, &cp) != 0)
			return -1;
		if (buf)
			*len += put_utf8(buf + *len, cp);
	}
	c->p++;
	return 0;
}

/*
 * Parses a JSON string at c->p.  With out != NULL, stores a malloc'd,
 * unescaped copy (a NUL escape, which C strings cannot hold, is refused).
 */
static int
parse_string(cursor *c, char **out)
{
	const char *start;
	char	   *buf = NULL;
	size_t		len = 0;

	if (*c->p != '"')
		return -1;
	start = ++c->p;
	/* Unescaping never makes a string longer. */
	if (out)
	{
		const char *q = start;

		while (*q && *q != '"')
			q += (*q == '\\' && q[1]) ? 2 : 1;
		buf = malloc((size_t) (q - start) + 1);
		if (!buf)
			return -1;
	}
	while (*c->p != '"')
	{
		unsigned char ch = (unsigned char) *c->p++;

		if (ch == '\0' || ch < 0x20 || (ch == '\\' && unescape(c, buf, &len) != 0))
		{
			free(buf);
			return -1;
		}
		if (ch != '\\' && buf)
			buf[len++] = (char) ch;
	}
	c->p++;
	if (buf)
	{
		buf[len] = '\0';
		*out = buf;
	}
	return 0;
}

/* Parses a JSON number; stores it in *out when it is an integer that fits. */
static int
parse_number(cursor *c, int64_t *out, int *is_integer)
{
	const char *p = c->p;
	int64_t		v = 0;
	int			negative = 0;
	int			integer = 1;

	if (*p == '-')
	{
		negative = 1;
		p++;
	}
	if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
		return -1;
	while (*p >= '0' && *p <= '9')
	{
		int			d = *p - '0';

		if (v > (INT64_MAX - d) / 10)
			integer = 0;
		else
			v = v * 10 + d;
		p++;
	}
	if (*p == '.')
	{
		integer = 0;
		p++;
		if (*p < '0' || *p > '9')
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'e' || *p == 'E')
	{
		integer = 0;
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (*p < '0' || *p > '9')
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	c->p = p;
	*is_integer = integer;
	*out = negative ? -v : v;
	return 0;
}

/* Skips a scalar value of a key we do not know. */
static int
skip_value(cursor *c)
{
	int64_t		unused;
	int			integer;

	if (*c->p == '"')
		return parse_string(c, NULL);
	if (strncmp(c->p, "true", 4) == 0)
		c->p += 4;
	else if (strncmp(c->p, "false", 5) == 0)
		c->p += 5;
	else if (strncmp(c->p, "null", 4) == 0)
		c->p += 4;
	else
		return parse_number(c, &unused, &integer);
	return 0;
}

/* Whether str is exactly len lower-case hex digits, hyphens where a UUID has them. */
static int
is_lower_hex(const char *str, size_t len, int uuid)
{
	if (strlen(str) != len)
		return 0;
	for (size_t i = 0; i < len; i++)
	{
		if (uuid && (i == 8 || i == 13 || i == 18 || i == 23))
		{
			if (str[i] != '-')
				return 0;
		}
		else if (!((str[i] >= '0' && str[i] <= '9') || (str[i] >= 'a' && str[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* The keys of the payload that the client reads, as parsed so far (malloc'd). */
typedef struct payload
{
	char	   *token;
	char	   *version;
	char	   *events;
} payload;

/*
 * One "key": value member at c->p: a known key's string into p (each
 * known key at most once), any other value skipped.  -1 when malformed.
 */
static int
parse_member(cursor *c, payload *p)
{
	char	   *key = NULL;
	int			rc;

	skip_ws(c);
	if (parse_string(c, &key) != 0)
		return -1;
	skip_ws(c);
	if (*c->p++ != ':')
	{
		free(key);
		return -1;
	}
	skip_ws(c);
	if (strcmp(key, "notification_token") == 0 && !p->token)
		rc = parse_string(c, &p->token);
	else if (strcmp(key, "version_id") == 0 && !p->version)
		rc = parse_string(c, &p->version);
	else if (strcmp(key, "events") == 0 && !p->events && *c->p == '"')
		rc = parse_string(c, &p->events);
	else if (strcmp(key, "notification_token") == 0 || strcmp(key, "version_id") == 0 ||
			 strcmp(key, "events") == 0)
		rc = -1;				/* a key given twice */
	else
		rc = skip_value(c);
	free(key);
	return rc;
}

/* The members of the object at c->p ('{' read), through its '}'; -1 when malformed. */
static int
parse_members(cursor *c, payload *p)
{
	skip_ws(c);
	if (*c->p == '}')
	{
		c->p++;
		return 0;
	}
	for (;;)
	{
		if (parse_member(c, p) != 0)
			return -1;
		skip_ws(c);
		if (*c->p == '}')
		{
			c->p++;
			return 0;
		}
		if (*c->p++ != ',')
			return -1;
	}
}

int
ehi_parse_payload(const char *payload_text, char token[EH_TOKEN_LEN + 1],
				  char version_id[EH_VERSION_ID_LEN + 1], char **sealed)
{
	cursor		c;
	payload		p = {NULL, NULL, NULL};
	int			ok;

	if (!payload_text)
		return -1;
	c.p = payload_text;
	skip_ws(&c);
	ok = *c.p++ == '{' && parse_members(&c, &p) == 0;
	if (ok)
		skip_ws(&c);
	ok = ok && *c.p == '\0' && p.token && p.version &&
		is_lower_hex(p.token, EH_TOKEN_LEN, 0) && is_lower_hex(p.version, EH_VERSION_ID_LEN, 1);
	if (ok)
	{
		memcpy(token, p.token, EH_TOKEN_LEN + 1);
		memcpy(version_id, p.version, EH_VERSION_ID_LEN + 1);
	}
	if (ok && sealed)
		*sealed = p.events;
	else
		free(p.events);
	free(p.token);
	free(p.version);
	return ok ? 0 : -1;
}

char *
ehi_json_quote(const char *str)
{
	size_t		n = 3;
	char	   *out;
	char	   *o;

	for (const unsigned char *p = (const unsigned char *) str; *p; p++)
		n += (*p < 0x20) ? 6 : (*p == '"' || *p == '\\') ? 2 : 1;
	out = malloc(n);
	if (!out)
		return NULL;
	o = out;
	*o++ = '"';
	for (const unsigned char *p = (const unsigned char *) str; *p; p++)
	{
		if (*p == '"' || *p == '\\')
		{
			*o++ = '\\';
			*o++ = (char) *p;
		}
		else if (*p < 0x20)
			o += snprintf(o, 7, "\\u%04x", *p);
		else
			*o++ = (char) *p;
	}
	*o++ = '"';
	*o = '\0';
	return out;
}
