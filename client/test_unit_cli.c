/*
 * test_unit_cli.c: unit tests of the eventhub tool's argument parsing,
 * command by command, and of its escaping for terminals and JSON.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "eventhub.h"
#include "internal.h"
#include "test_unit.h"

/* Parses a command line given as a NULL-terminated list. */
static int
parse(cli_options *o, char *err, const char *first,...)
{
	char	   *argv[64];
	int			argc = 0;
	va_list		ap;

	argv[argc++] = (char *) "eventhub";
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *))
		argv[argc++] = (char *) a;
	va_end(ap);
	argv[argc] = NULL;
	return cli_parse(argc, argv, o, err, 256);
}

/* publish: its options, their defaults and refusals. */
static void
test_cli_publish(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, "publish", "--org", "acme", "--type", "API", "--action", "CREATE",
				"--entity", "e1", NULL) == 0 &&
		  o.command == CMD_PUBLISH && strcmp(o.org, "acme") == 0 && strcmp(o.type, "API") == 0 &&
		  strcmp(o.entity, "e1") == 0 && o.correlation_id == NULL && strcmp(o.data, "{}") == 0,
		  "cli: publish with defaults");
	check(parse(&o, err, "-d", "dbname=x", "publish", "--org=acme", "--type=API", "--action=DELETE",
				"--entity=e1", "--correlation-id=c1", "--data", "[1]", NULL) == 0 &&
		  strcmp(o.conninfo, "dbname=x") == 0 && strcmp(o.correlation_id, "c1") == 0 &&
		  strcmp(o.data, "[1]") == 0 && strcmp(o.action, "DELETE") == 0,
		  "cli: publish with every option, -d before the command");
	check(parse(&o, err, "publish", "--org", "acme", "--type", "API", "--action", "UPSERT",
				"--entity", "e1", NULL) == -1 && strstr(err, "CREATE, UPDATE or DELETE"),
		  "cli: publish refuses an unknown action");
	check(parse(&o, err, "publish", "--org", "acme", "--type", "API", "--action", "CREATE", NULL) == -1 &&
		  strstr(err, "--entity"), "cli: publish needs --entity");
	check(parse(&o, err, "publish", "--org", "", "--type", "API", "--action", "CREATE", "--entity", "e", NULL) == -1 &&
		  strstr(err, "empty"), "cli: an empty --org is refused");
	check(parse(&o, err, "publish", "--org", "a", "--type", "API", "--action", "CREATE", "--entity", "e",
				"--count", "3", NULL) == -1 && strstr(err, "does not take"),
		  "cli: publish refuses watch options");
}

/* watch: where it starts, which organizations, the values of its options. */
static void
test_cli_watch(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, "watch", "--org", "a", "--org", "b", NULL) == 0 &&
		  o.command == CMD_WATCH && o.norgs == 2 && strcmp(o.orgs[1], "b") == 0 &&
		  o.after == -1 && o.count == 0 && o.timeout_s < 0 && o.poll_interval_ms == 0 && !o.no_listen,
		  "cli: watch defaults (from the head, forever)");
	check(parse(&o, err, "watch", "--org", "a", "--after", "0", "--count", "5", "--timeout", "2.5",
				"--poll-interval", "100", "--no-listen", NULL) == 0 &&
		  o.after == 0 && o.count == 5 && o.timeout_s == 2.5 && o.poll_interval_ms == 100 && o.no_listen,
		  "cli: watch with every option");
	check(parse(&o, err, "watch", NULL) == -1 && strstr(err, "--org"), "cli: watch needs --org");
	check(parse(&o, err, "watch", "--all", NULL) == 0 && o.all && o.norgs == 0 && o.after == -1,
		  "cli: watch --all, from the heads");
	check(parse(&o, err, "watch", "--all", "--after", "0", "--batch-bytes", "65536", "--query-timeout", "2000",
				NULL) == 0 && o.all && o.after == 0 && o.batch_bytes == 65536 && o.query_timeout_ms == 2000,
		  "cli: watch --all --after 0 with a byte bound and a query timeout");
	check(parse(&o, err, "watch", "--org", "a", "--reconnect-backoff", "5000", NULL) == 0 &&
		  o.reconnect_backoff_ms == 5000, "cli: watch --reconnect-backoff");
	check(parse(&o, err, "watch", "--org", "a", "--reconnect-backoff", "0", NULL) == -1 &&
		  strstr(err, "--reconnect-backoff"), "cli: --reconnect-backoff 0 is refused");
	check(parse(&o, err, "status", "--reconnect-backoff", "5000", NULL) == -1 &&
		  strstr(err, "--reconnect-backoff"), "cli: status does not take --reconnect-backoff");
	check(parse(&o, err, "watch", "--all", "--org", "a", NULL) == -1 && strstr(err, "--all"),
		  "cli: --all does not take --org");
	check(parse(&o, err, "watch", "--all", "--after", "5", NULL) == -1 && strstr(err, "--after 0"),
		  "cli: --all resumes from nowhere but 0");
	check(parse(&o, err, "watch", "--org", "a", "--batch-bytes", "100", NULL) == -1 && strstr(err, "1024"),
		  "cli: --batch-bytes below 1024");
	check(parse(&o, err, "status", "--all", NULL) == -1 && strstr(err, "does not take"),
		  "cli: status does not take --all");
	check(parse(&o, err, "watch", "--org", "a", "--org", "a", NULL) == -1 && strstr(err, "twice"),
		  "cli: watch refuses an organization twice");
	check(parse(&o, err, "watch", "--org", "a", "--after", "-1", NULL) == -1, "cli: negative --after");
	check(parse(&o, err, "watch", "--org", "a", "--after", "12x", NULL) == -1, "cli: --after not a number");
	check(parse(&o, err, "watch", "--org", "a", "--count", "0", NULL) == -1, "cli: --count 0");
	check(parse(&o, err, "watch", "--org", "a", "--timeout", "0", NULL) == -1, "cli: --timeout 0");
}

/* watch --metrics-file and --metrics-interval; the metrics command. */
static void
test_cli_metrics(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, "watch", "--org", "a", "--metrics-file", "/tmp/m.prom", NULL) == 0 &&
		  strcmp(o.metrics_file, "/tmp/m.prom") == 0 && o.metrics_interval_s == 0,
		  "cli: watch --metrics-file, the interval left to its default");
	check(parse(&o, err, "watch", "--all", "--metrics-file=m.prom", "--metrics-interval", "0.5", NULL) == 0 &&
		  o.metrics_interval_s == 0.5, "cli: watch --metrics-interval in seconds");
	check(parse(&o, err, "watch", "--org", "a", "--metrics-interval", "5", NULL) == -1 &&
		  strstr(err, "goes with --metrics-file"), "cli: --metrics-interval needs --metrics-file");
	check(parse(&o, err, "watch", "--org", "a", "--metrics-file", "m", "--metrics-interval", "0", NULL) == -1 &&
		  strstr(err, "seconds > 0"), "cli: --metrics-interval 0");
	check(parse(&o, err, "get", "--org", "a", "--metrics-file", "m", NULL) == -1 &&
		  strstr(err, "--metrics-file"), "cli: get does not take --metrics-file");
	check(parse(&o, err, "metrics", NULL) == 0 && o.command == CMD_METRICS &&
		  parse(&o, err, "-d", "dbname=x", "metrics", NULL) == 0 && strcmp(o.conninfo, "dbname=x") == 0,
		  "cli: metrics, with -d");
	check(parse(&o, err, "metrics", "--org", "a", NULL) == -1 && parse(&o, err, "metrics", "--json", NULL) == -1,
		  "cli: metrics takes no other option");
	check(strcmp(cli_command_name(CMD_METRICS), "metrics") == 0 && strcmp(cli_command_name(CMD_NONE), "") == 0,
		  "cli: command names");
}

/* Values that are not numbers or out of range, unknown options, stray arguments. */
static void
test_cli_refusals(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, "watch", "--org", "a", "--timeout", "soon", NULL) == -1, "cli: --timeout not a number");
	check(parse(&o, err, "watch", "--org", "a", "--poll-interval", "5", NULL) == -1, "cli: --poll-interval below 10");
	check(parse(&o, err, "watch", "--org", "a", "--bogus", NULL) == -1 && strstr(err, "unknown option"),
		  "cli: unknown option");
	check(parse(&o, err, "watch", "--org", NULL) == -1 && strstr(err, "needs a value"), "cli: --org without a value");
	check(parse(&o, err, "watch", "--org", "a", "stray", NULL) == -1 && strstr(err, "unexpected"),
		  "cli: stray argument");
}

/* watch as a replica; get; --snapshot. */
static void
test_cli_replica_get(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, "watch", "--org", "a", "--replica-id", "r1", "--labels", "{\"zone\": \"x\"}",
				"--heartbeat-interval", "250", NULL) == 0 &&
		  strcmp(o.replica_id, "r1") == 0 && strcmp(o.labels, "{\"zone\": \"x\"}") == 0 &&
		  o.heartbeat_interval_ms == 250, "cli: watch as a replica");
	check(parse(&o, err, "watch", "--org", "a", "--labels", "{}", NULL) == -1 && strstr(err, "--replica-id"),
		  "cli: --labels needs --replica-id");
	check(parse(&o, err, "watch", "--org", "a", "--replica-id", "r", "--heartbeat-interval", "99", NULL) == -1,
		  "cli: --heartbeat-interval below 100");
	check(parse(&o, err, "watch", "--org", "a", "--replica-id", "", NULL) == -1, "cli: empty --replica-id");
	check(parse(&o, err, "get", "--org", "a", "--batch-bytes", "2048", "--query-timeout", "500", NULL) == 0 &&
		  o.command == CMD_GET && o.norgs == 1 && strcmp(o.orgs[0], "a") == 0 && o.batch_bytes == 2048 &&
		  o.query_timeout_ms == 500, "cli: get --org with --batch-bytes and --query-timeout");
	check(parse(&o, err, "get", NULL) == -1 && strstr(err, "--org"), "cli: get needs --org");
	check(parse(&o, err, "get", "--org", "a", "--org", "b", NULL) == -1 && strstr(err, "one --org"),
		  "cli: get takes one --org");
	check(parse(&o, err, "get", "--org", "a", "--after", "0", NULL) == -1 && strstr(err, "does not take"),
		  "cli: get refuses watch's options");
	check(parse(&o, err, "get", "--org", "a", "--snapshot", NULL) == -1, "cli: get refuses --snapshot");
	check(parse(&o, err, "watch", "--org", "a", "--snapshot", NULL) == 0 && o.snapshot,
		  "cli: watch --org --snapshot");
	check(parse(&o, err, "watch", "--all", "--snapshot", NULL) == 0 && o.snapshot && o.all,
		  "cli: watch --all --snapshot");
	check(parse(&o, err, "watch", "--org", "a", "--snapshot", "--after", "0", NULL) == -1 &&
		  strstr(err, "--snapshot"), "cli: --snapshot excludes --after");
	check(parse(&o, err, "status", "--batch-bytes", "2048", NULL) == -1 && strstr(err, "does not take"),
		  "cli: status refuses --batch-bytes");
	check(strstr(cli_usage(CMD_GET), "Usage: eventhub get") && strstr(cli_usage(CMD_NONE), "get "),
		  "cli: get's usage, and the overview names it");
}

/* status and cleanup. */
static void
test_cli_status_cleanup(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, "status", NULL) == 0 && o.command == CMD_STATUS && o.norgs == 0 &&
		  !o.json && o.fail_if_lag == -1, "cli: status");
	check(parse(&o, err, "status", "--json", "--fail-if-lag", "0", NULL) == 0 && o.json && o.fail_if_lag == 0,
		  "cli: status --json --fail-if-lag 0");
	check(parse(&o, err, "status", "--fail-if-lag", "-1", NULL) == -1, "cli: negative --fail-if-lag");
	check(parse(&o, err, "watch", "--org", "a", "--json", NULL) == -1 && strstr(err, "does not take"),
		  "cli: watch refuses --json");
	check(parse(&o, err, "status", "--replica-id", "r", NULL) == -1, "cli: status refuses --replica-id");
	check(parse(&o, err, "status", "--org", "a", NULL) == 0 && o.norgs == 1, "cli: status --org");
	check(parse(&o, err, "status", "--org", "a", "--org", "b", NULL) == -1, "cli: status takes one --org");
	check(parse(&o, err, "cleanup", "--older-than", "1h", NULL) == 0 && strcmp(o.older_than, "1h") == 0,
		  "cli: cleanup");
	check(parse(&o, err, "cleanup", NULL) == -1 && strstr(err, "--older-than"), "cli: cleanup needs --older-than");
	check(parse(&o, err, "status", "--older-than", "1h", NULL) == -1, "cli: status refuses --older-than");
}

/* No command, an unknown one, --help, -d, unknown short and long options. */
static void
test_cli_global(void)
{
	cli_options o;
	char		err[256];

	check(parse(&o, err, NULL) == -1 && strstr(err, "no command"), "cli: no command");
	check(parse(&o, err, "frobnicate", NULL) == -1 && strstr(err, "unknown command"), "cli: unknown command");
	check(parse(&o, err, "--help", NULL) == 0 && o.help && o.command == CMD_NONE, "cli: --help");
	check(parse(&o, err, "watch", "--help", NULL) == 0 && o.help && o.command == CMD_WATCH &&
		  strstr(cli_usage(CMD_WATCH), "--no-listen"), "cli: watch --help");
	check(parse(&o, err, "-d", NULL) == -1, "cli: -d without a value");
	check(parse(&o, err, "publish", "-xyz", NULL) == -1 && strstr(err, "\"-x\"") && !strstr(err, "publish\""),
		  "cli: an unknown short option in a cluster is named by its letter");
	check(parse(&o, err, "watch", "--org", "a", "--bogus=1", NULL) == -1 && strstr(err, "\"--bogus\""),
		  "cli: an unknown long option is named without its value");
}

/* Ids over the server's limit are refused at parse; one at the limit is not. */
static void
test_cli_ids(void)
{
	cli_options o;
	char		err[256];
	char		id[1026];

	memset(id, 'o', 1025);
	id[1025] = '\0';
	check(parse(&o, err, "watch", "--org", id, NULL) == -1 && strstr(err, "1025 bytes"),
		  "cli: an --org over 1024 bytes is refused at parse");
	check(parse(&o, err, "watch", "--org", "a", "--replica-id", id, NULL) == -1 &&
		  strstr(err, "--replica-id"), "cli: a --replica-id over 1024 bytes is refused at parse");
	id[1024] = '\0';
	check(parse(&o, err, "watch", "--org", id, NULL) == 0, "cli: an --org of 1024 bytes is fine");
}

/* The CLI's argument parsing, command by command. */
void
test_cli(void)
{
	test_cli_publish();
	test_cli_watch();
	test_cli_metrics();
	test_cli_refusals();
	test_cli_replica_get();
	test_cli_status_cleanup();
	test_cli_global();
	test_cli_ids();
}

/* What one of the escaping functions wrote, NUL-terminated. */
static char written[512];

/* Starts a call of an escaping function: its text goes to written. */
static FILE *
begin_written(void)
{
	return fmemopen(written, sizeof(written) - 1, "w");
}

/* Ends the call: written, NUL-terminated. */
static const char *
end_written(FILE *f)
{
	fputc('\0', f);
	fclose(f);
	written[sizeof(written) - 1] = '\0';
	return written;
}

/* What cli_put_escaped writes for str at max_width, and the width it returns. */
static const char *
escaped(const char *str, int max_width, int *width)
{
	FILE	   *f = begin_written();

	*width = cli_put_escaped(f, str, max_width);
	return end_written(f);
}

/* What cli_put_json writes for json. */
static const char *
jsoned(const char *json)
{
	FILE	   *f = begin_written();

	cli_put_json(f, json);
	return end_written(f);
}

/* What cli_put_json_string writes for str. */
static const char *
json_quoted(const char *str)
{
	FILE	   *f = begin_written();

	cli_put_json_string(f, str);
	return end_written(f);
}

/*
 * Whether cli_put_json_string writes each string as cli_put_json writes
 * the library's JSON quoting of it (ehi_json_quote).
 */
static bool
json_quoted_as_library(void)
{
	static const char *const strings[] = {
		"", "acme", "q\"b\\s/\n\t\x01\x1f", "caf\xc3\xa9 \xf0\x9f\x98\x80", "\x7f\xc2\x9b\xe2\x80\xa8\xe2\x80\xae",
		"\xff\xc0\x80", "\xe2\x80\"", "\xc3\\", "\xe2\n", "\xf0\x9f\x98",
	};

	for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
	{
		char	   *quoted = ehi_json_quote(strings[i]);
		char		expected[512];

		if (!quoted)
			return false;
		strcpy(expected, jsoned(quoted));
		free(quoted);
		if (strcmp(json_quoted(strings[i]), expected) != 0)
			return false;
	}
	return true;
}

/* The escaping of the database's strings for a terminal and in JSON. */
void
test_escaping(void)
{
	int			w;

	check(strcmp(escaped("acme", 0, &w), "acme") == 0 && w == 4, "escape: plain text as it is");
	check(strcmp(escaped("a\x1b[2Jb", 0, &w), "a\\x1b[2Jb") == 0 && w == 9, "escape: ESC is shown, not sent");
	check(strcmp(escaped("x\ny\rz\t\\", 0, &w), "x\\ny\\rz\\t\\\\") == 0, "escape: newline, return, tab, backslash");
	check(strcmp(escaped("\x7f", 0, &w), "\\x7f") == 0, "escape: DEL");
	check(strcmp(escaped("a\xc2\x9b" "1m", 0, &w), "a\\u009b1m") == 0, "escape: the C1 CSI");
	check(strcmp(escaped("\xe2\x80\xae" "evil", 0, &w), "\\u202eevil") == 0, "escape: a bidirectional override");
	check(strcmp(escaped("caf\xc3\xa9", 0, &w), "caf\xc3\xa9") == 0 && w == 4, "escape: UTF-8 letters as they are, one column each");
	check(strcmp(escaped("\xff\xc0\x80", 0, &w), "\\xff\\xc0\\x80") == 0, "escape: bytes that are not UTF-8 (overlong too)");
	check(strcmp(escaped("abcdefghij", 5, &w), "abcd\xe2\x80\xa6") == 0 && w == 5, "escape: a wide cell is cut with an ellipsis");
	check(strcmp(escaped("abcde", 5, &w), "abcde") == 0 && w == 5, "escape: a cell that fits is not cut");
	check(strcmp(escaped("abc\x1b", 5, &w), "abc\xe2\x80\xa6") == 0 && w == 4, "escape: an escape is never cut in half");
	check(escaped("abcdefghij", 5, &w) && w == 5 && cli_put_escaped(NULL, "abcdefghij", 5) == 5,
		  "escape: measuring gives the width written");
	check(strcmp(jsoned("\"a\\u001b\xc2\x9b\xe2\x80\xa8\x7f\""), "\"a\\u001b\\u009b\\u2028\\u007f\"") == 0,
		  "json: C1, line separator and DEL as \\u escapes, the rest exact");
	check(strcmp(jsoned("{\"k\": \"caf\xc3\xa9\"}"), "{\"k\": \"caf\xc3\xa9\"}") == 0, "json: UTF-8 text as it is");
	check(strcmp(json_quoted("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\u000a\\u0001\"") == 0 &&
		  strcmp(json_quoted(NULL), "null") == 0,
		  "json string: quote and backslash escaped, C0 controls as \\u00XX; NULL is null");
	check(strcmp(json_quoted("\xc2\x9b\x7f\xe2\x80\xa8\xe2\x80\xae\xc3\xa9\xff"),
				 "\"\\u009b\\u007f\\u2028\\u202e\xc3\xa9\xff\"") == 0,
		  "json string: C1, DEL, line separator, bidirectional controls escaped; letters and non-UTF-8 bytes as they are");
	check(json_quoted_as_library(), "json string: the same text as the library's JSON quoting, escaped for a terminal");
}
