/*
 * cli.c: the eventhub command-line tool: main, which parses the command
 * line and runs the command, and the error lines every command writes.
 *
 * Exit status: 0 success, 1 an error (connection, server, bad input; `get`
 * of an incomplete state or an interrupted snapshot; a --metrics-file that
 * cannot be written at start), 2 a usage error, 3 `watch --timeout` passed before --count events arrived,
 * 4 `status --fail-if-lag N` found a live replica more than N behind, 130
 * SIGINT or SIGTERM ended the command, 141 the reader of `watch`'s or
 * `get`'s standard output went away.  Neither of the last two says anything
 * on stderr.
 *
 * Strings from the database (organization and replica ids, hashes, labels,
 * server messages) are escaped in tables and on stderr (cli_put_escaped)
 * and in JSON (cli_put_json): a value cannot send the terminal a control
 * sequence, fake a line, or widen every row of a table.
 *
 * The tool uses libeventhub's public API only (eventhub.h), as any program
 * would: no file of it includes the library's internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/*
 * Standard input, output and error that are closed get /dev/null, so that
 * no descriptor the command opens (a pipe, libpq's socket) takes their
 * number and receives what was meant for them.  Returns whether standard
 * output was closed.
 */
static bool
open_standard_fds(void)
{
	bool		stdout_closed = false;

	for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
		{
			stdout_closed |= fd == STDOUT_FILENO;
			if (open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY) != fd)
				return true;	/* no /dev/null: fail as for a closed stdout */
		}
	return stdout_closed;
}

/*
 * Writes "eventhub: <prefix><message>" and a newline to stderr, each line of
 * the message escaped (a server's message quotes what it was given) and the
 * newline libpq ends its own with dropped.  libpq's line breaks stay: its
 * connection errors come as two lines, the second indented.
 */
void
report(const char *prefix, const char *message)
{
	size_t		len = strlen(message);
	char	   *copy = malloc(len + 1);

	while (len > 0 && message[len - 1] == '\n')
		len--;
	fprintf(stderr, "eventhub: %s", prefix);
	if (copy)
	{
		char	   *line = copy;
		char	   *end;

		memcpy(copy, message, len);
		copy[len] = '\0';
		while ((end = strchr(line, '\n')) != NULL)
		{
			*end = '\0';
			cli_put_escaped(stderr, line, 0);
			fputs("\n\t", stderr);
			line = end[1] == '\t' ? end + 2 : end + 1;
		}
		cli_put_escaped(stderr, line, 0);
		free(copy);
	}
	fputc('\n', stderr);
}

/* Connects with libpq for the commands that run plain SQL. */
PGconn *
connect_or_report(const char *conninfo)
{
	const char *keys[] = {"fallback_application_name", "dbname", NULL};
	const char *values[] = {"eventhub", conninfo, NULL};
	PGconn	   *conn = PQconnectdbParams(keys, values, 1);

	if (!conn || PQstatus(conn) != CONNECTION_OK)
	{
		report("could not connect: ", conn ? PQerrorMessage(conn) : "out of memory");
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/* Prints a failed result the way psql would, on one or two lines. */
void
report_result_error(const char *what, const PGresult *res, const PGconn *conn)
{
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);

	fprintf(stderr, "eventhub: %s: ", what);
	cli_put_escaped(stderr, primary ? primary : PQerrorMessage(conn), 0);
	fputc('\n', stderr);
	if (detail)
	{
		fputs("DETAIL: ", stderr);
		cli_put_escaped(stderr, detail, 0);
		fputc('\n', stderr);
	}
	if (hint)
	{
		fputs("HINT: ", stderr);
		cli_put_escaped(stderr, hint, 0);
		fputc('\n', stderr);
	}
}

/* Runs the command that o names; returns its exit status. */
static int
run_command(const cli_options *o)
{
	switch (o->command)
	{
		case CMD_PUBLISH:
			return run_publish(o);
		case CMD_WATCH:
		case CMD_GET:
			return run_watch(o);
		case CMD_STATUS:
			return run_status(o);
		case CMD_CLEANUP:
			return run_cleanup(o);
		case CMD_METRICS:
			return run_metrics(o);
		default:
			return EXIT_USAGE;
	}
}

/* The eventhub tool: parses the command line and runs the command. */
int
main(int argc, char **argv)
{
	cli_options o;
	char		err[256];
	int			status;

	/* Every command prints: a closed standard output is an error at once. */
	if (open_standard_fds())
	{
		fprintf(stderr, "eventhub: could not write to standard output: %s\n", strerror(EBADF));
		return 1;
	}
	if (argc == 2 && strcmp(argv[1], "--version") == 0)
	{
		printf("eventhub %s\n", eh_version());
		return 0;
	}
	if (cli_parse(argc, argv, &o, err, sizeof(err)) != 0)
	{
		report("", err);
		fprintf(stderr, "Try \"eventhub%s%s --help\".\n", o.command ? " " : "", cli_command_name(o.command));
		return EXIT_USAGE;
	}
	if (o.help)
	{
		fputs(cli_usage(o.command), stdout);
		return 0;
	}
	if (handle_signals(o.command) != 0)
	{
		fprintf(stderr, "eventhub: could not set up signal handling: %s\n", strerror(errno));
		return 1;
	}
	status = run_command(&o);
	/* What a command printed last may still wait in the buffer. */
	if ((fflush(stdout) != 0 || ferror(stdout)) && status == 0)
		status = errno == EPIPE ? EXIT_PIPE : 1;
	return status;
}
