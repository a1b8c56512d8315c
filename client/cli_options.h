/*
 * cli_options.h: command-line parsing of the eventhub tool (cli_options.c)
 * and the escaping of what it prints (cli_escape.c), kept apart from its
 * I/O so that the unit tests can drive them.
 */
#ifndef EVENTHUB_CLI_OPTIONS_H
#define EVENTHUB_CLI_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#define CLI_MAX_ORGS 1024

/* The widest cell of a table, in characters, the ellipsis included. */
#define CLI_CELL_WIDTH 48

typedef enum cli_command
{
	CMD_NONE = 0,
	CMD_PUBLISH,
	CMD_WATCH,
	CMD_STATUS,
	CMD_CLEANUP,
	CMD_GET,
	CMD_METRICS
} cli_command;

typedef struct cli_options
{
	cli_command command;
	int			help;			/* --help given: print the command's usage */
	const char *conninfo;		/* -d; NULL: libpq's environment */

	/* publish */
	const char *org;
	const char *type;
	const char *action;
	const char *entity;
	const char *correlation_id;
	const char *data;

	/* watch (orgs also for status and get, where at most one is allowed) */
	const char *orgs[CLI_MAX_ORGS];
	int			norgs;
	int64_t		after;			/* -1: from the head */
	const char *after_version;	/* the version at --after, or NULL */
	int64_t		count;			/* 0: no limit */
	double		timeout_s;		/* < 0: none */
	int			poll_interval_ms;	/* 0: library default */
	int			no_listen;
	int			all;			/* --all: every organization */
	int			snapshot;		/* --snapshot: start from a snapshot, resync with one */
	int			batch_bytes;	/* 0: library default */
	int			query_timeout_ms;	/* 0: library default */
	int			reconnect_backoff_ms;	/* the backoff's cap; 0: library default */
	int			fallback_poll_interval_ms;	/* 0: library default */
	const char *replica_id;		/* heartbeats as this replica */
	const char *labels;			/* its labels, a JSON object */
	int			heartbeat_interval_ms;	/* 0: library default */
	const char *heartbeat_conninfo;	/* heartbeats over this connection */
	const char *metrics_file;	/* write the client's metrics there */
	double		metrics_interval_s; /* this often; 0: not given (10 s) */

	/* status */
	int			json;
	int64_t		fail_if_lag;	/* -1: off */

	/* cleanup */
	const char *older_than;
} cli_options;

/*
 * Parses argv (argv[0] is the program, argv[1] the command) into *opts.
 * Returns 0 on success; otherwise -1 with a message for the user in err.
 * Strings in *opts point into argv.
 */
int			cli_parse(int argc, char **argv, cli_options *opts, char *err, size_t errlen);

/* Usage text of a command (CMD_NONE: the overview). */
const char *cli_usage(cli_command command);

/* A command's name ("" for CMD_NONE). */
const char *cli_command_name(cli_command command);

/*
 * Writes str for a terminal, to out (NULL: only measures): every character
 * that could move the cursor, change the terminal's state or reorder what
 * it shows is escaped visibly: C0 controls and DEL as \n, \r, \t or \xNN,
 * C1 controls (U+0080 to U+009F), U+2028, U+2029 and the bidirectional
 * controls as \uNNNN, bytes that are not UTF-8 as \xNN, and a backslash as
 * \\.  With max_width > 0, a string wider than max_width characters is cut
 * to max_width - 1 and ends with an ellipsis; an escape is never cut.
 * Returns the width written, one column per character.
 */
int			cli_put_escaped(FILE *out, const char *str, int max_width);

/*
 * Writes JSON text produced elsewhere (jsonb output, json_build_object,
 * a quoted string) to out, with DEL, the C1 controls, U+2028, U+2029 and
 * the bidirectional controls as \uNNNN escapes.  Outside strings JSON has
 * none of them, so the value the text stands for does not change.
 */
void		cli_put_json(FILE *out, const char *json);

/*
 * Writes str as a JSON string (NULL: null) with the escapes of
 * cli_put_json() besides JSON's own.
 */
void		cli_put_json_string(FILE *out, const char *str);

#endif							/* EVENTHUB_CLI_OPTIONS_H */
