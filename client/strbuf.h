/*
 * strbuf.h: a growing string (strbuf.c).
 */
#ifndef EVENTHUB_STRBUF_H
#define EVENTHUB_STRBUF_H

#include <stddef.h>

/* A growing string; oom is set, and appends stop, when memory runs out. */
typedef struct ehi_strbuf
{
	char	   *data;			/* NUL-terminated once anything was appended */
	size_t		len;
	size_t		cap;
	int			oom;
	int			fixed;			/* over a caller's buffer (ehi_sb_init_fixed) */
} ehi_strbuf;

void		ehi_sb_append(ehi_strbuf *b, const char *str, size_t n);
void		ehi_sb_puts(ehi_strbuf *b, const char *str);
void		ehi_sb_printf(ehi_strbuf *b, const char *fmt,...) __attribute__((format(printf, 2, 3)));
/* Appends str as a JSON string. */
void		ehi_sb_json_string(ehi_strbuf *b, const char *str);
/* Appends str as an element of a PostgreSQL array literal (quoted). */
void		ehi_sb_array_element(ehi_strbuf *b, const char *str);
/*
 * Appends str escaped as a Prometheus label value (\\, \", \n), or
 * with help set as a # HELP text (\\ and \n only).
 */
void		ehi_sb_prometheus(ehi_strbuf *b, const char *str, int help);
/*
 * A builder over the caller's buf of len bytes, with snprintf's
 * semantics: it keeps what fits, NUL-terminated, and counts in ->len the
 * length of everything appended.  Never allocates; not to be freed.
 */
void		ehi_sb_init_fixed(ehi_strbuf *b, char *buf, size_t len);
void		ehi_sb_free(ehi_strbuf *b);

#endif							/* EVENTHUB_STRBUF_H */
