/*
 * strbuf.c: the library's one string builder: growing in memory it
 * allocates, or over a caller's buffer with snprintf's semantics
 * (eh_render_metrics), and the escapes of what it builds.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "strbuf.h"

/* Makes room for n more bytes and the NUL; false (oom set) when out of memory. */
static int
reserve(ehi_strbuf *b, size_t n)
{
	size_t		ncap;
	char	   *d;

	if (b->oom || b->fixed)
		return 0;
	if (b->len + n + 1 <= b->cap)
		return 1;
	ncap = b->cap ? b->cap : 64;
	while (ncap < b->len + n + 1)
		ncap *= 2;
	d = realloc(b->data, ncap);
	if (!d)
	{
		b->oom = 1;
		return 0;
	}
	b->data = d;
	b->cap = ncap;
	return 1;
}

void
ehi_sb_init_fixed(ehi_strbuf *b, char *buf, size_t len)
{
	memset(b, 0, sizeof(*b));
	b->fixed = 1;
	b->data = buf;
	b->cap = len;
	if (len > 0)
		buf[0] = '\0';
}

void
ehi_sb_append(ehi_strbuf *b, const char *str, size_t n)
{
	if (b->fixed)
	{
		/* What fits, and the NUL: at most cap bytes. */
		if (b->len + 1 < b->cap)
		{
			size_t		room = b->cap - 1 - b->len;
			size_t		k = n < room ? n : room;

			memcpy(b->data + b->len, str, k);
			b->data[b->len + k] = '\0';
		}
		b->len += n;
		return;
	}
	if (!reserve(b, n))
		return;
	memcpy(b->data + b->len, str, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void
ehi_sb_puts(ehi_strbuf *b, const char *str)
{
	ehi_sb_append(b, str, strlen(str));
}

void
ehi_sb_printf(ehi_strbuf *b, const char *fmt,...)
{
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (b->fixed)
	{
		if (b->len + 1 < b->cap)
		{
			va_start(ap, fmt);
			vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
			va_end(ap);
		}
		b->len += (size_t) n;
		return;
	}
	if (!reserve(b, (size_t) n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t) n;
}

void
ehi_sb_json_string(ehi_strbuf *b, const char *str)
{
	char	   *quoted = ehi_json_quote(str);

	if (!quoted)
	{
		b->oom = 1;
		return;
	}
	ehi_sb_puts(b, quoted);
	free(quoted);
}

void
ehi_sb_array_element(ehi_strbuf *b, const char *str)
{
	if (!reserve(b, 2 * strlen(str) + 3))
		return;
	if (b->len > 1)
		b->data[b->len++] = ',';
	b->data[b->len++] = '"';
	for (const char *p = str; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			b->data[b->len++] = '\\';
		b->data[b->len++] = *p;
	}
	b->data[b->len++] = '"';
	b->data[b->len] = '\0';
}

void
ehi_sb_prometheus(ehi_strbuf *b, const char *str, int help)
{
	const char *start = str;

	for (const char *p = str; *p; p++)
	{
		const char *escape = *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '"' && !help ? "\\\"" : NULL;

		if (escape)
		{
			ehi_sb_append(b, start, (size_t) (p - start));
			ehi_sb_puts(b, escape);
			start = p + 1;
		}
	}
	ehi_sb_puts(b, start);
}

void
ehi_sb_free(ehi_strbuf *b)
{
	if (!b->fixed)
		free(b->data);
	memset(b, 0, sizeof(*b));
}
