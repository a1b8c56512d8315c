/*
 * cli.h: what the eventhub command-line tool's files share: exit statuses,
 * the stop after a signal, error lines, output helpers and the commands.
 * The tool uses libeventhub's public API only (eventhub.h), as any program.
 */
#ifndef EVENTHUB_CLI_H
#define EVENTHUB_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <libpq-fe.h>

#include "cli_options.h"
#include "eventhub.h"

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3
#define EXIT_LAGGING 4
#define EXIT_INTERRUPTED 130	/* 128 + SIGINT, for SIGTERM too */
#define EXIT_PIPE 141			/* 128 + SIGPIPE, as a shell reports a process it killed */

#define STOP_GRACE_MS 250		/* after a signal: for the lines being written */
#define STOP_CLOSE_MS 500		/* after a signal: for the deregistration */

/* ------------------------------------------------------- cli_signals.c */

/*
 * SIGINT or SIGTERM arrived (watch and get); then a byte went to the read
 * end of the signal pipe, which every wait of theirs polls.
 */
extern volatile sig_atomic_t signalled;
extern int	signal_pipe[2];

/* Sets up SIGINT, SIGTERM, SIGPIPE (and the stop timer) for a command. */
int			handle_signals(cli_command command);

/* Seconds on the monotonic clock. */
double		now_seconds(void);

/* --------------------------------------------------------------- cli.c */

/* "eventhub: <prefix><message>" on stderr, escaped. */
void		report(const char *prefix, const char *message);

/* A failed result on stderr, as psql prints one. */
void		report_result_error(const char *what, const PGresult *res, const PGconn *conn);

/* A libpq connection for the commands that run plain SQL; NULL: reported. */
PGconn	   *connect_or_report(const char *conninfo);

/* -------------------------------------------------------- cli_output.c */

void		json_string(FILE *out, const char *str);
void		json_field(FILE *out, const char *key, const char *value);
void		print_head(FILE *out, int64_t head, const char *version);
void		print_event(FILE *out, const eh_event *ev);
void		print_entity(FILE *out, const eh_entity *e);
void		print_snapshot_marker(FILE *out, const char *org, eh_snapshot_phase phase, int reason,
								  int64_t head, const char *head_version, int64_t entities);
void		print_resync_line(FILE *out, const char *org, eh_resync_reason reason, int64_t head,
							  const char *version);
void		print_table(const PGresult *res, int ncols);
void		prometheus_escaped(FILE *out, const char *str, int help);

/* --------------------------------------------------------- cli_lines.c */

/* What watch and get print, and how far they got. */
typedef struct watch_state
{
	int			get;			/* `get`: entity lines, the end line, done */
	int64_t		limit;			/* 0: none */
	int64_t		seen;
	int			write_errno;	/* writing to stdout failed with this */
	int			done;			/* get: the snapshot ended */
	int			aborted;		/* get: the snapshot was interrupted */
	int64_t		entities;		/* of the snapshot under way (one at a time) */
	char	   *lines;			/* the lines begun by begin_lines() */
	size_t		lines_len;
	int			cut;			/* a callback's lines were dropped or cut short */
} watch_state;

/* The client's callbacks of watch and get; arg is the watch_state. */
int			print_transaction(eh_client *client, const char *org, const eh_event *const *events, int n,
							  int ends_transaction, void *arg);
void		print_snapshot(eh_client *client, const char *org, eh_snapshot_phase phase, int reason,
						   const eh_entity *const *entities, int n, int64_t head, const char *head_version,
						   void *arg);
void		print_resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg);

/* ------------------------------------------------------------ commands */

int			run_publish(const cli_options *o);
int			run_watch(const cli_options *o);	/* watch and get */
int			run_status(const cli_options *o);
int			run_cleanup(const cli_options *o);
int			run_metrics(const cli_options *o);

#endif							/* EVENTHUB_CLI_H */
