/*
 * cli_escape.c: the escaping of the database's strings in what the
 * eventhub tool prints, for a terminal (tables, stderr) and in JSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli_options.h"

/*
 * The well-formed UTF-8 sequences of two bytes or more, by their first
 * byte (Unicode's table 3-7): their length and the bytes the second may
 * be (the ones after it are 0x80 to 0xBF).  The narrow second bytes keep
 * out overlong forms (E0, F0), surrogates (ED) and code points above
 * U+10FFFF (F4).
 */
static const struct
{
	unsigned char first_lo,
				first_hi;
	int			len;
	unsigned char second_lo,
				second_hi;
}			utf8_forms[] = {
	{0xC2, 0xDF, 2, 0x80, 0xBF},
	{0xE0, 0xE0, 3, 0xA0, 0xBF},
	{0xE1, 0xEC, 3, 0x80, 0xBF},
	{0xED, 0xED, 3, 0x80, 0x9F},
	{0xEE, 0xEF, 3, 0x80, 0xBF},
	{0xF0, 0xF0, 4, 0x90, 0xBF},
	{0xF1, 0xF3, 4, 0x80, 0xBF},
	{0xF4, 0xF4, 4, 0x80, 0x8F},
};

/*
 * Decodes one UTF-8 character at s into *cp; returns its length in bytes,
 * or 0 when s does not start a well-formed one (see utf8_forms).
 */
static int
utf8_decode(const unsigned char *s, uint32_t *cp)
{
	if (s[0] < 0x80)
	{
		*cp = s[0];
		return 1;
	}
	for (size_t f = 0; f < sizeof(utf8_forms) / sizeof(utf8_forms[0]); f++)
	{
		int			len = utf8_forms[f].len;

		if (s[0] < utf8_forms[f].first_lo || s[0] > utf8_forms[f].first_hi)
			continue;
		if (s[1] < utf8_forms[f].second_lo || s[1] > utf8_forms[f].second_hi)
			return 0;
		*cp = s[0] & (0x7F >> len);
		for (int i = 1; i < len; i++)
		{
			if (i > 1 && (s[i] < 0x80 || s[i] > 0xBF))
				return 0;
			*cp = (*cp << 6) | (s[i] & 0x3F);
		}
		return len;
	}
	return 0;
}

/*
 * Whether a code point above ASCII must not reach a terminal raw: the C1
 * controls (U+009B is a CSI, like ESC [), the line and paragraph
 * separators, and the marks, embeddings, overrides and isolates that
 * reorder text.
 */
static int
unsafe_code_point(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
		(cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

/* One character of a string as a terminal gets it. */
typedef struct text_unit
{
	char		text[8];		/* what to write */
	int			len;			/* its length in bytes */
	int			width;			/* its width in columns */
	int			consumed;		/* bytes of the string it stands for */
} text_unit;

/* The next character of s as a terminal gets it, escaped or not. */
static void
next_unit(const unsigned char *s, text_unit *u)
{
	uint32_t	cp;
	int			n = utf8_decode(s, &cp);

	u->consumed = n ? n : 1;
	if (n == 0)
		u->len = snprintf(u->text, sizeof(u->text), "\\x%02x", s[0]);
	else if (cp == '\n')
		u->len = snprintf(u->text, sizeof(u->text), "\\n");
	else if (cp == '\r')
		u->len = snprintf(u->text, sizeof(u->text), "\\r");
	else if (cp == '\t')
		u->len = snprintf(u->text, sizeof(u->text), "\\t");
	else if (cp == '\\')
		u->len = snprintf(u->text, sizeof(u->text), "\\\\");
	else if (cp < 0x20 || cp == 0x7F)
		u->len = snprintf(u->text, sizeof(u->text), "\\x%02x", (unsigned) cp);
	else if (unsafe_code_point(cp))
		u->len = snprintf(u->text, sizeof(u->text), "\\u%04x", (unsigned) cp);
	else
	{
		memcpy(u->text, s, n);
		u->len = n;
		u->width = 1;
		return;
	}
	u->width = u->len;
}

/* Writes str for a terminal (cli_options.h says how). */
int
cli_put_escaped(FILE *out, const char *str, int max_width)
{
	const unsigned char *s = (const unsigned char *) str;
	text_unit	u;
	int			total = 0;
	int			width = 0;

	/* Does it fit?  Stop measuring once it does not. */
	if (max_width > 0)
		for (const unsigned char *p = s; *p && total <= max_width; p += u.consumed)
		{
			next_unit(p, &u);
			total += u.width;
		}
	for (const unsigned char *p = s; *p; p += u.consumed)
	{
		next_unit(p, &u);
		if (max_width > 0 && total > max_width && width + u.width > max_width - 1)
		{
			if (out)
				fputs("\u2026", out);	/* the ellipsis */
			return width + 1;
		}
		if (out)
			fwrite(u.text, 1, u.len, out);
		width += u.width;
	}
	return width;
}

/* Writes JSON text with what a terminal must not get raw escaped. */
void
cli_put_json(FILE *out, const char *json)
{
	const unsigned char *s = (const unsigned char *) json;
	const unsigned char *run = s;	/* what goes out as it is */

	while (*s)
	{
		uint32_t	cp;
		int			n = utf8_decode(s, &cp);

		if (n == 0)
			n = 1;				/* not UTF-8 (nor representable): as it is */
		else if (cp == 0x7F || unsafe_code_point(cp))
		{
			fwrite(run, 1, s - run, out);
			fprintf(out, "\\u%04x", (unsigned) cp);
			run = s + n;
		}
		s += n;
	}
	fwrite(run, 1, s - run, out);
}

/*
 * Writes str as a JSON string, as cli_put_json() writes the string's JSON
 * form: a double quote and a backslash escaped, the C0 controls as \u00XX,
 * and DEL, the C1 controls and the rest of what cli_put_json() escapes as
 * \uNNNN.  NULL is written as null.
 */
void
cli_put_json_string(FILE *out, const char *str)
{
	const unsigned char *s = (const unsigned char *) str;
	const unsigned char *run = s;	/* what goes out as it is */

	if (!str)
	{
		fputs("null", out);
		return;
	}
	fputc('"', out);
	while (*s)
	{
		uint32_t	cp;
		int			n = utf8_decode(s, &cp);

		if (n == 0)
			n = 1;				/* not UTF-8: as it is */
		else if (cp == '"' || cp == '\\' || cp < 0x20 || cp == 0x7F || unsafe_code_point(cp))
		{
			fwrite(run, 1, s - run, out);
			if (cp == '"' || cp == '\\')
				fprintf(out, "\\%c", (char) cp);
			else
				fprintf(out, "\\u%04x", (unsigned) cp);
			run = s + n;
		}
		s += n;
	}
	fwrite(run, 1, s - run, out);
	fputc('"', out);
}
