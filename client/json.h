/*
 * json.h: the notification payload and JSON quoting (json.c); the lengths of
 * a notification token and a version id.
 */
#ifndef EVENTHUB_JSON_H
#define EVENTHUB_JSON_H

#include <stddef.h>

#define EH_VERSION_ID_LEN 36
#define EH_TOKEN_LEN 32

/*
 * Parses a notification payload of channel eventhub:
 *	  {"notification_token": "<32 hex digits>", "version_id": "<uuid>"
 *	   [, "events": "<base64>"]}
 * Keys may come in any order and unknown scalar keys are skipped, so that
 * the server may add some.  With sealed not NULL, *sealed is the "events"
 * string (malloc'd; the caller frees it) or NULL.  Returns 0 on success,
 * -1 for anything malformed.
 */
int			ehi_parse_payload(const char *payload, char token[EH_TOKEN_LEN + 1],
							  char version_id[EH_VERSION_ID_LEN + 1], char **sealed);

/*
 * Returns str as a quoted JSON string (control characters as \u00XX; other
 * bytes, UTF-8 included, as they are).  malloc'd; NULL when out of memory.
 */
char	   *ehi_json_quote(const char *str);

#endif							/* EVENTHUB_JSON_H */
