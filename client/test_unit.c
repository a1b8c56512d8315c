/*
 * test_unit.c: unit tests of libeventhub's payload parser, its memory of
 * delivered and notified versions, option handling, the delivery of a
 * fetch's transactions and the steps of a snapshot (from results made
 * here), and of the CLI's argument parsing.  No server needed.
 * Prints TAP ("ok N - ...") and exits non-zero on any failure.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "eventhub.h"
#include "internal.h"

static int tests = 0;
static int failures = 0;

static void
check(int ok, const char *what)
{
	tests++;
	if (!ok)
		failures++;
	printf("%sok %d - %s\n", ok ? "" : "not ", tests, what);
}

#define V1 "0b7e1f5a-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
#define T1 "b6f992a68d00f11aa47a6cf48ed94bca"

/* Parses payload; checks it gives T1 and V1. */
static void
payload_ok(const char *payload, const char *what)
{
	char		token[EH_TOKEN_LEN + 1] = "";
	char		version[EH_VERSION_ID_LEN + 1] = "";
	int			rc = ehi_parse_payload(payload, token, version, NULL);

	check(rc == 0 && strcmp(token, T1) == 0 && strcmp(version, V1) == 0, what);
}

static void
payload_bad(const char *payload, const char *what)
{
	char		token[EH_TOKEN_LEN + 1] = "";
	char		version[EH_VERSION_ID_LEN + 1] = "";

	check(ehi_parse_payload(payload, token, version, NULL) == -1 && token[0] == '\0' && version[0] == '\0', what);
}

static void
test_payload(void)
{
	payload_ok("{\"notification_token\": \"" T1 "\", \"version_id\": \"" V1 "\"}",
			   "payload: the server's format");
	payload_ok("{\"version_id\":\"" V1 "\",\"notification_token\":\"" T1 "\"}",
			   "payload: keys in any order, no spaces");
	payload_ok(" \n{ \"notification_token\" : \"" T1 "\" , \"version_id\" : \"" V1 "\" }\t",
			   "payload: white space anywhere");
	payload_ok("{\"notification_token\": \"" T1 "\", \"new_key\": \"x\", \"n\": -1.5e3, \"t\": true, \"z\": null,"
			   " \"s\": \"q\\\"b\\\\s\\/n\\nt\\tc\\u0001\\u00e9\\ud83d\\ude00\", \"version_id\": \"" V1 "\"}",
			   "payload: unknown scalar keys are skipped, escapes included");
	payload_ok("{\"notification_token\": \"" T1 "\", \"r\\u00e9v\": 1, \"version_id\": \"" V1 "\"}",
			   "payload: an escaped unknown key");

	payload_bad("{\"notification_token\": \"" T1 "\", \"extra\": [1], \"version_id\": \"" V1 "\"}",
				"payload: nested values are refused");
	payload_bad(NULL, "payload: NULL");
	payload_bad("", "payload: empty");
	payload_bad("{}", "payload: empty object");
	payload_bad("[1]", "payload: not an object");
	payload_bad("{\"version_id\": \"" V1 "\"}", "payload: notification_token missing");
	payload_bad("{\"notification_token\": \"" T1 "\"}", "payload: version_id missing");
	payload_bad("{\"notification_token\": \"\", \"version_id\": \"" V1 "\"}", "payload: empty token");
	payload_bad("{\"notification_token\": \"B6F992A68D00F11AA47A6CF48ED94BCA\", \"version_id\": \"" V1 "\"}",
				"payload: upper-case token");
	payload_bad("{\"notification_token\": \"" T1 "0\", \"version_id\": \"" V1 "\"}", "payload: token too long");
	payload_bad("{\"notification_token\": \"acme\", \"version_id\": \"" V1 "\"}", "payload: an organization id is no token");
	payload_bad("{\"notification_token\": 5, \"version_id\": \"" V1 "\"}", "payload: token not a string");
	payload_bad("{\"notification_token\": \"" T1 "\", \"version_id\": \"short\"}", "payload: version_id not a UUID");
	payload_bad("{\"notification_token\": \"" T1 "\", \"version_id\": \"0b7e1f5a2c3d-4e5f-8a9b-0c1d2e3f4a5b0\"}",
				"payload: hyphens out of place");
	payload_bad("{\"notification_token\": \"" T1 "\", \"notification_token\": \"" T1 "\", \"version_id\": \"" V1 "\"}",
				"payload: a key given twice");
	payload_bad("{\"notification_token\": \"" T1 "\", \"version_id\": \"" V1 "\"} x", "payload: trailing text");
	payload_bad("{\"notification_token\": \"" T1 "\", \"version_id\": \"" V1 "\"", "payload: unterminated object");
	payload_bad("{\"notification_token\": \"" T1 ", \"version_id\": 1}", "payload: unterminated string");
	payload_bad("{\"notification_token\": \"" T1 "\", \"s\": \"a\\x\", \"version_id\": \"" V1 "\"}", "payload: bad escape");
	payload_bad("{\"notification_token\": \"" T1 "\", \"s\": \"a\\u00zz\", \"version_id\": \"" V1 "\"}", "payload: bad \\u escape");
	payload_bad("{\"notification_token\": \"" T1 "\", \"s\": \"a\\u0000\", \"version_id\": \"" V1 "\"}", "payload: NUL escape");
	payload_bad("{\"notification_token\": \"" T1 "\", \"s\": \"a\\ud83d\", \"version_id\": \"" V1 "\"}", "payload: lone high surrogate");
	payload_bad("{\"notification_token\": \"" T1 "\", \"s\": \"a\\ude00\", \"version_id\": \"" V1 "\"}", "payload: lone low surrogate");
	payload_bad("{\"notification_token\": \"" T1 "\", \"s\": \"a\nb\", \"version_id\": \"" V1 "\"}", "payload: raw control character");
	payload_bad("{\"notification_token\": \"" T1 "\" \"version_id\": \"" V1 "\"}", "payload: missing comma");
	payload_bad("{\"notification_token\": \"" T1 "\", \"version_id\": \"" V1 "\",}", "payload: trailing comma");
	payload_bad("{\"notification_token\": \"" T1 "\\", "payload: backslash at the end");
	payload_bad("{\"notification_token\": \"" T1 "\", \"n\": 01, \"version_id\": \"" V1 "\"}", "payload: a malformed number");
}

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

static void
test_cli(void)
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
	check(parse(&o, err, "watch", "--org", "a", "--timeout", "soon", NULL) == -1, "cli: --timeout not a number");
	check(parse(&o, err, "watch", "--org", "a", "--poll-interval", "5", NULL) == -1, "cli: --poll-interval below 10");
	check(parse(&o, err, "watch", "--org", "a", "--bogus", NULL) == -1 && strstr(err, "unknown option"),
		  "cli: unknown option");
	check(parse(&o, err, "watch", "--org", NULL) == -1 && strstr(err, "needs a value"), "cli: --org without a value");
	check(parse(&o, err, "watch", "--org", "a", "stray", NULL) == -1 && strstr(err, "unexpected"),
		  "cli: stray argument");

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
	{
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
}

/* What cli_put_escaped writes for str at max_width, and the width it returns. */
static const char *
escaped(const char *str, int max_width, int *width)
{
	static char buf[512];
	FILE	   *f = fmemopen(buf, sizeof(buf) - 1, "w");

	*width = cli_put_escaped(f, str, max_width);
	fputc('\0', f);
	fclose(f);
	buf[sizeof(buf) - 1] = '\0';
	return buf;
}

static const char *
jsoned(const char *json)
{
	static char buf[512];
	FILE	   *f = fmemopen(buf, sizeof(buf) - 1, "w");

	cli_put_json(f, json);
	fputc('\0', f);
	fclose(f);
	buf[sizeof(buf) - 1] = '\0';
	return buf;
}

static void
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
}

static void
test_library_options(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	char		long_id[EH_MAX_ID_BYTES + 2];

	check(c != NULL, "lib: a client is created without connecting");
	check(eh_socket(c) == -1 && !eh_is_connected(c), "lib: not connected before eh_connect");
	check(eh_set_poll_interval(c, 9) == EH_ERR_ARGUMENT && strstr(eh_error_message(c), "10 ms"),
		  "lib: poll interval below 10 ms refused");
	check(eh_set_poll_interval(c, 10) == EH_OK, "lib: poll interval of 10 ms");
	check(eh_set_batch_size(c, 0) == EH_ERR_ARGUMENT && eh_set_batch_size(c, 100001) == EH_ERR_ARGUMENT &&
		  eh_set_batch_size(c, 1) == EH_OK, "lib: batch size bounds");
	check(eh_set_reconnect_backoff(c, 0, 10) == EH_ERR_ARGUMENT &&
		  eh_set_reconnect_backoff(c, 100, 50) == EH_ERR_ARGUMENT &&
		  eh_set_reconnect_backoff(c, 50, 50) == EH_OK, "lib: backoff bounds");
	check(eh_subscribe(c, "acme", 0) == EH_OK && eh_cursor(c, "acme") == 0, "lib: subscribe from 0");
	check(eh_subscribe(c, "globex", EH_FROM_HEAD) == EH_OK && eh_cursor(c, "globex") == -1,
		  "lib: subscribe from the head waits for the head");
	check(eh_subscribe(c, "acme", 5) == EH_ERR_ARGUMENT && strstr(eh_error_message(c), "already"),
		  "lib: subscribing twice refused");
	check(eh_subscribe(c, "", 0) == EH_ERR_ARGUMENT && eh_subscribe(c, NULL, 0) == EH_ERR_ARGUMENT,
		  "lib: empty organization refused");
	check(eh_subscribe(c, "x", -3) == EH_ERR_ARGUMENT, "lib: after_revision below EH_FROM_SNAPSHOT refused");
	check(eh_subscribe(c, "x", EH_FROM_SNAPSHOT) == EH_ERR_ARGUMENT && strstr(eh_error_message(c), "snapshot callback") &&
		  eh_subscribe_all(c, EH_FROM_SNAPSHOT) == EH_ERR_ARGUMENT,
		  "lib: EH_FROM_SNAPSHOT without a snapshot callback refused");
	check(eh_unsubscribe(c, "acme") == EH_OK && eh_cursor(c, "acme") == -1 &&
		  eh_unsubscribe(c, "acme") == EH_ERR_ARGUMENT, "lib: unsubscribe");
	check(eh_set_listen(c, 0) == EH_OK && !eh_is_listening(c), "lib: listening can be turned off");
	check(eh_set_replica(c, "", NULL, NULL) == EH_ERR_ARGUMENT && eh_set_replica(c, NULL, NULL, NULL) == EH_ERR_ARGUMENT,
		  "lib: an empty replica id is refused");
	check(eh_set_replica(c, "r1", "{}", "1.0") == EH_OK && eh_set_replica(c, "r2", NULL, NULL) == EH_OK,
		  "lib: a replica id can be set and replaced");
	check(eh_set_heartbeat_interval(c, 99) == EH_ERR_ARGUMENT && eh_set_heartbeat_interval(c, 100) == EH_OK,
		  "lib: heartbeat interval bounds");
	check(eh_set_config_hash(c, "nobody", "h") == EH_ERR_ARGUMENT && eh_set_config_hash(c, "globex", "h") == EH_OK &&
		  eh_set_config_hash(c, "globex", NULL) == EH_OK, "lib: config hash only for subscribed organizations");
	check(eh_ack(c, "globex", 0) == EH_ERR_ARGUMENT && strstr(eh_error_message(c), "delivered up to -1"),
		  "lib: nothing can be acknowledged before delivery");
	check(eh_ack(c, "nobody", 0) == EH_ERR_ARGUMENT, "lib: acknowledging an unknown organization is refused");
	check(eh_stat(c, EH_STAT_EVENTS_DELIVERED) == 0 && eh_stat(c, EH_STAT_RECONNECTS) == 0 &&
		  eh_stat(c, EH_STAT_POLLS) == 0 && eh_last_lag_ms(c) == 0, "lib: counters start at zero");
	check(eh_stat(c, EH_STAT_COUNT) == 0 && eh_stat(c, (eh_stat_id) -1) == 0 && eh_stat(NULL, EH_STAT_POLLS) == 0,
		  "lib: an unknown counter reads 0");
	check(strcmp(eh_stat_name(EH_STAT_FETCHES), "fetches") == 0 && strcmp(eh_stat_name(EH_STAT_COUNT), "unknown") == 0,
		  "lib: counter names");
	for (int i = 0; i < EH_STAT_COUNT; i++)
		if (strcmp(eh_stat_name((eh_stat_id) i), "unknown") == 0)
			check(0, "lib: every counter has a name");
	check(strcmp(eh_resync_reason_name(EH_RESYNC_HISTORY_REMOVED), "history_removed") == 0 &&
		  strcmp(eh_resync_reason_name(EH_RESYNC_CURSOR_AHEAD), "cursor_ahead") == 0 &&
		  strcmp(eh_resync_reason_name(EH_RESYNC_VERSION_MISMATCH), "version_mismatch") == 0 &&
		  strcmp(eh_resync_reason_name((eh_resync_reason) 0), "unknown") == 0, "lib: resync reason names");
	check(strcmp(eh_stat_name(EH_STAT_SNAPSHOTS), "snapshots") == 0 &&
		  strcmp(eh_stat_name(EH_STAT_SNAPSHOT_ENTITIES), "snapshot_entities") == 0, "lib: the snapshot counters' names");
	check(strcmp(eh_snapshot_phase_name(EH_SNAPSHOT_BEGIN), "begin") == 0 &&
		  strcmp(eh_snapshot_phase_name(EH_SNAPSHOT_ENTITIES), "entities") == 0 &&
		  strcmp(eh_snapshot_phase_name(EH_SNAPSHOT_END), "end") == 0 &&
		  strcmp(eh_snapshot_phase_name(EH_SNAPSHOT_ABORT), "abort") == 0 &&
		  strcmp(eh_snapshot_phase_name((eh_snapshot_phase) 0), "unknown") == 0, "lib: snapshot phase names");
	check(strcmp(eh_log_level_name(EH_LOG_WARNING), "warning") == 0 &&
		  strcmp(eh_log_level_name((eh_log_level) 9), "unknown") == 0, "lib: log level names");
	check(eh_set_batch_bytes(c, 0) == EH_ERR_ARGUMENT && eh_set_batch_bytes(c, 1) == EH_OK,
		  "lib: batch bytes bounds");
	check(eh_set_query_timeout(c, 99) == EH_ERR_ARGUMENT && eh_set_query_timeout(c, 100) == EH_OK &&
		  eh_set_close_timeout(c, -1) == EH_ERR_ARGUMENT && eh_set_close_timeout(c, 0) == EH_OK,
		  "lib: query and close timeout bounds");
	check(eh_subscribe_all(c, 5) == EH_ERR_ARGUMENT && eh_subscribe_all(c, EH_FROM_HEAD) == EH_OK &&
		  eh_subscribe_all(c, 0) == EH_ERR_ARGUMENT, "lib: follow all from 0 or the head, once");
	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	check(eh_subscribe(c, long_id, 0) == EH_ERR_ARGUMENT && strstr(eh_error_message(c), "too long") &&
		  eh_set_replica(c, long_id, NULL, NULL) == EH_ERR_ARGUMENT,
		  "lib: ids longer than the server's limit refused");
	check(eh_socket_wants(c) == 0 && eh_socket_wants(NULL) == 0, "lib: nothing to wait for before connecting");
	check(eh_subscribe(NULL, "a", 0) == EH_ERR_ARGUMENT && eh_process(NULL) == EH_ERR_ARGUMENT &&
		  eh_wait(NULL, 0) == EH_ERR_ARGUMENT && eh_socket(NULL) == -1 && eh_cursor(NULL, "a") == -1,
		  "lib: a NULL client is an argument error, not a crash");
	check(strcmp(eh_version(), EVENTHUB_VERSION) == 0, "lib: version");
	eh_client_free(c);
	eh_client_free(NULL);
	check(1, "lib: freeing NULL is a no-op");
}

/* The non-blocking publish and the sockets, without a server. */
static void
test_library_publish(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	char		long_id[EH_MAX_ID_BYTES + 2];
	int64_t		revision = 7;
	int			fds[EH_MAX_SOCKETS];
	int			wants[EH_MAX_SOCKETS];

	memset(long_id, 'x', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	check(eh_publish_result(c, &revision) == EH_ERR_ARGUMENT && revision == 7,
		  "publish: no result without a publish");
	check(eh_publish_send(c, "acme", "API", "CREATE", "e1", NULL, NULL) == EH_ERR_ARGUMENT &&
		  eh_publish_send(c, long_id, "API", "CREATE", "e1", NULL, "{}") == EH_ERR_ARGUMENT &&
		  eh_publish_send(c, "acme", "API", "CREATE", "e1", long_id, "{}") == EH_ERR_ARGUMENT &&
		  eh_publish_send(NULL, "acme", "API", "CREATE", "e1", NULL, "{}") == EH_ERR_ARGUMENT,
		  "publish: missing arguments and ids over EH_MAX_ID_BYTES refused");
	check(eh_publish_send(c, "acme", "API", "CREATE", "e1", NULL, "{}") == EH_OK &&
		  eh_publish_result(c, &revision) == EH_PUBLISH_PENDING,
		  "publish: sent without connecting, pending until eh_process");
	check(eh_publish_send(c, "acme", "API", "CREATE", "e2", NULL, "{}") == EH_ERR_ARGUMENT &&
		  strstr(eh_error_message(c), "under way"), "publish: one at a time");
	check(eh_timeout_ms(c) == 0, "publish: a queued publish makes the client due now");
	check(eh_sockets(c, fds, wants, EH_MAX_SOCKETS) == 0 && eh_sockets(NULL, fds, wants, 3) == 0 &&
		  eh_sockets(c, fds, wants, 0) == 0, "sockets: none before connecting");
	eh_client_free(c);			/* frees the publish's copies */
	check(1, "publish: a client freed with a publish under way");
}

/* ------------------------------------------------ delivery and snapshots */

/* What the callbacks of the delivery and snapshot tests saw. */
typedef struct seen
{
	char		log[1024];
	int			stop_after;		/* the transaction callback stops after this many calls (0: never) */
	int			calls;
} seen;

static void
seen_add(seen *w, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
seen_add(seen *w, const char *fmt,...)
{
	size_t		len = strlen(w->log);
	va_list		ap;

	if (len)
		w->log[len++] = ' ';
	va_start(ap, fmt);
	vsnprintf(w->log + len, sizeof(w->log) - len, fmt, ap);
	va_end(ap);
}

static int
seen_transaction(eh_client *c, const char *org, const eh_event *const *events, int n, int ends, void *arg)
{
	seen	   *w = arg;

	(void) c;
	seen_add(w, "%s:%lld-%lld/%lld%s", org, (long long) events[0]->revision, (long long) events[n - 1]->revision,
			 (long long) events[0]->transaction_first_revision, ends ? "" : "+");
	return w->stop_after && ++w->calls >= w->stop_after;
}

static int
seen_event(eh_client *c, const eh_event *ev, void *arg)
{
	(void) c;
	seen_add(arg, "%lld/%lld%s", (long long) ev->revision, (long long) ev->transaction_first_revision,
			 ev->transaction_end ? "." : "");
	return 0;
}

static void
seen_snapshot(eh_client *c, const char *org, eh_snapshot_phase phase, int reason, const eh_entity *const *entities,
			  int n, int64_t head, const char *head_version, void *arg)
{
	seen	   *w = arg;

	(void) c;
	seen_add(w, "%s:%s:%d:%lld:%s", org, eh_snapshot_phase_name(phase), reason, (long long) head,
			 head_version ? head_version : "-");
	for (int i = 0; i < n; i++)
		seen_add(w, "%s/%s@%lld", entities[i]->event_type, entities[i]->entity_id, (long long) entities[i]->revision);
}

/*
 * A result as a fetch returns it: rows "revision first end" ("t"/"f"),
 * each event its own version, at head.
 */
static PGresult *
fetch_result(int64_t head, int nrows, const char *const *rows)
{
	static const char *const names[] = {
		"organization_id", "revision", "version_id", "pts", "ots", "event_type", "action", "entity_id",
		"correlation_id", "event_data", "lag", "transaction_first_revision", "transaction_end", "head_revision"
	};
	PGresAttDesc attrs[14];
	PGresult   *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	char		head_text[24];

	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i < 14; i++)
	{
		attrs[i].name = (char *) names[i];
		attrs[i].format = 0;
		attrs[i].typid = 25;
		attrs[i].typlen = -1;
		attrs[i].atttypmod = -1;
	}
	PQsetResultAttrs(res, 14, attrs);
	snprintf(head_text, sizeof(head_text), "%lld", (long long) head);
	for (int r = 0; r < nrows; r++)
	{
		char		rev[24],
					first[24],
					end[2],
					version[EH_VERSION_ID_LEN + 1];
		const char *values[14];

		sscanf(rows[r], "%23s %23s %1s", rev, first, end);
		snprintf(version, sizeof(version), "00000000-0000-4000-8000-%012lld", atoll(rev));
		values[0] = "acme";
		values[1] = rev;
		values[2] = version;
		values[3] = values[4] = "2026-01-01T00:00:00.000000Z";
		values[5] = "API";
		values[6] = "UPDATE";
		values[7] = "e";
		values[8] = version;
		values[9] = "{}";
		values[10] = "1.5";
		values[11] = first;
		values[12] = end;
		values[13] = head_text;
		for (int col = 0; col < 14; col++)
			PQsetvalue(res, r, col, (char *) values[col], (int) strlen(values[col]));
	}
	return res;
}

/* Hands a made fetch result to the delivery, as session.c would. */
static void
deliver(eh_client *c, eh_sub *s, PGresult *res)
{
	if (ehi_handle_delivery(c, OP_FETCH, s, res) == 0)
		PQclear(res);
}

/* A fetch's transactions, grouped for the transaction callback; the event callback as before. */
static void
test_delivery(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	seen		w = {"", 0, 0};
	eh_sub	   *s;
	const char *batch[] = {"1 1 f", "2 1 f", "3 1 t", "4 4 t", "5 5 f", "6 5 f"};
	const char *rest[] = {"7 5 t"};

	eh_set_transaction_callback(c, seen_transaction, &w);
	eh_subscribe(c, "acme", 0);
	s = ehi_find_sub(c, "acme");
	deliver(c, s, fetch_result(7, 6, batch));
	check(strcmp(w.log, "acme:1-3/1 acme:4-4/4 acme:5-6/5+") == 0,
		  "delivery: one call per transaction; the part of one cut by the batch says it does not end it");
	check(s->cursor == 6 && strcmp(s->version, "00000000-0000-4000-8000-000000000006") == 0 && s->needs_fetch,
		  "delivery: the cursor at the last event; below the head, the next fetch is due");
	w.log[0] = '\0';
	deliver(c, s, fetch_result(7, 1, rest));
	check(strcmp(w.log, "acme:7-7/5") == 0 && s->cursor == 7 && !s->needs_fetch,
		  "delivery: the rest of the transaction ends it; at the head, nothing more is due");
	check(eh_stat(c, EH_STAT_EVENTS_DELIVERED) == 7, "delivery: every event counts as delivered");

	/* A callback that stops: the rest is held, from the next transaction on. */
	w.log[0] = '\0';
	w.stop_after = 1;
	eh_unsubscribe(c, "acme");
	eh_subscribe(c, "acme", 0);
	s = ehi_find_sub(c, "acme");
	deliver(c, s, fetch_result(7, 6, batch));
	check(strcmp(w.log, "acme:1-3/1") == 0 && s->cursor == 3 && c->held.res && c->held.row == 3,
		  "delivery: a stopping callback leaves the next transactions held");
	c->stop = 0;
	w.stop_after = 0;
	ehi_deliver_held(c);
	check(strcmp(w.log, "acme:1-3/1 acme:4-4/4 acme:5-6/5+") == 0 && s->cursor == 6 && !c->held.res,
		  "delivery: the held ones come next");

	/* Without a transaction callback: an event at a time, with the two fields. */
	w.log[0] = '\0';
	eh_set_transaction_callback(c, NULL, NULL);
	eh_set_event_callback(c, seen_event, &w);
	eh_unsubscribe(c, "acme");
	eh_subscribe(c, "acme", 0);
	s = ehi_find_sub(c, "acme");
	deliver(c, s, fetch_result(7, 6, batch));
	check(strcmp(w.log, "1/1 2/1 3/1. 4/4. 5/5 6/5") == 0 && s->cursor == 6,
		  "delivery: the event callback gets each event, with where its transaction starts and ends");

	/* A gap is never delivered. */
	w.log[0] = '\0';
	deliver(c, s, fetch_result(7, 1, batch));
	check(w.log[0] == '\0' && s->cursor == 6 && strstr(eh_error_message(c), "revision 1"),
		  "delivery: an event that is not cursor + 1 is refused");
	eh_client_free(c);
}

/* A result of the snapshot's queries. */
static PGresult *
tuples(int ncols, int nrows, const char *const *values)
{
	PGresAttDesc attrs[8];
	PGresult   *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);

	memset(attrs, 0, sizeof(attrs));
	for (int i = 0; i < ncols; i++)
	{
		attrs[i].name = (char *) "c";
		attrs[i].typid = 25;
		attrs[i].typlen = -1;
		attrs[i].atttypmod = -1;
	}
	PQsetResultAttrs(res, ncols, attrs);
	for (int r = 0; r < nrows; r++)
		for (int col = 0; col < ncols; col++)
		{
			const char *v = values[r * ncols + col];

			PQsetvalue(res, r, col, (char *) v, v ? (int) strlen(v) : -1);
		}
	return res;
}

/* Hands a made answer to the snapshot layer, as session.c would. */
static void
answer(eh_client *c, op_kind op, PGresult *res)
{
	ehi_handle_snapshot(c, op, res);
	PQclear(res);
}

/*
 * The steps of a snapshot, from the answers: BEGIN with the head, pages,
 * the keyset, COMMIT and END; the cursor at the head; an ABORT when the
 * connection goes.  (The queries themselves go out in ehi_next_snapshot_query,
 * which needs a connection: the TAP suites run them.)
 */
static void
test_snapshot_steps(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	seen		w = {"", 0, 0};
	eh_sub	   *s;
	const char *head[] = {"42", "00000000-0000-4000-8000-000000000042"};
	const char *page[] = {
		"API", "B", "7", "00000000-0000-4000-8000-000000000007", "CREATE", "{}", "2026-01-01T00:00:00.000000Z",
		"API", "a", "9", "00000000-0000-4000-8000-000000000009", "UPDATE", "{\"v\": 1}", "2026-01-01T00:00:00.000000Z"
	};

	eh_set_snapshot_callback(c, seen_snapshot, &w);
	check(eh_subscribe(c, "acme", EH_FROM_SNAPSHOT) == EH_OK && eh_cursor(c, "acme") == -1,
		  "snapshot: EH_FROM_SNAPSHOT with a callback; no cursor until it ends");
	check(eh_subscribe_at(c, "globex", EH_FROM_SNAPSHOT, "00000000-0000-4000-8000-000000000001") == EH_ERR_ARGUMENT,
		  "snapshot: no version with EH_FROM_SNAPSHOT");
	s = ehi_find_sub(c, "acme");
	check(s->wants_snapshot && ehi_sub_wanting_snapshot(c) && ehi_work_pending(c), "snapshot: it is due");

	/* What ehi_next_snapshot_query() does before sending BEGIN. */
	c->snap.sub = s;
	c->snap.open = 1;
	c->snap.next = SNAP_NEXT_HEAD;
	c->snap.failures = c->link.failures;
	answer(c, OP_SNAP_BEGIN, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	check(c->snap.next == SNAP_NEXT_HEAD && w.log[0] == '\0', "snapshot: BEGIN answered, the head is next");
	answer(c, OP_SNAP_HEAD, tuples(2, 1, head));
	check(strcmp(w.log, "acme:begin:0:42:00000000-0000-4000-8000-000000000042") == 0 && c->snap.next == SNAP_NEXT_PAGE,
		  "snapshot: BEGIN goes to the callback with the head, reason 0 (initial)");
	w.log[0] = '\0';
	answer(c, OP_SNAP_PAGE, tuples(7, 2, page));
	check(strcmp(w.log, "acme:entities:0:0:- API/B@7 API/a@9") == 0 && c->snap.next == SNAP_NEXT_PAGE &&
		  strcmp(c->snap.after_type, "API") == 0 && strcmp(c->snap.after_id, "a") == 0,
		  "snapshot: a page goes to the callback; the next starts after its last entity");
	check(ehi_snapshot_open(c) && s->cursor == -1, "snapshot: the transaction stays open between pages");
	w.log[0] = '\0';
	answer(c, OP_SNAP_PAGE, tuples(7, 0, page));
	check(w.log[0] == '\0' && c->snap.next == SNAP_NEXT_COMMIT, "snapshot: an empty page: COMMIT is next");
	answer(c, OP_SNAP_END, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	check(strcmp(w.log, "acme:end:0:42:00000000-0000-4000-8000-000000000042") == 0 && !ehi_snapshot_open(c),
		  "snapshot: COMMIT answered: END with the head");
	check(s->cursor == 42 && strcmp(eh_cursor_version(c, "acme"), "00000000-0000-4000-8000-000000000042") == 0 &&
		  !s->wants_snapshot && s->needs_fetch, "snapshot: the cursor at the head, the events after it due");
	check(eh_stat(c, EH_STAT_SNAPSHOTS) == 1 && eh_stat(c, EH_STAT_SNAPSHOT_ENTITIES) == 2, "snapshot: counted");

	/* A connection lost in the middle: ABORT, and it is wanted again. */
	w.log[0] = '\0';
	s->wants_snapshot = 1;
	s->snapshot_reason = EH_RESYNC_HISTORY_REMOVED;
	c->snap.sub = s;
	c->snap.open = 1;
	c->snap.next = SNAP_NEXT_HEAD;
	c->snap.failures = c->link.failures;
	answer(c, OP_SNAP_HEAD, tuples(2, 1, head));
	answer(c, OP_SNAP_PAGE, tuples(7, 2, page));
	c->link.failures++;
	ehi_snapshot_check_link(c);
	check(strcmp(w.log, "acme:begin:1:42:00000000-0000-4000-8000-000000000042 acme:entities:1:0:- API/B@7 API/a@9"
				 " acme:abort:1:0:-") == 0, "snapshot: a lost connection gives ABORT after what was given");
	check(!ehi_snapshot_open(c) && s->wants_snapshot && s->cursor == 42,
		  "snapshot: the subscription still wants one, at its old cursor");

	/* A subscription that goes during its snapshot: no callback, a ROLLBACK. */
	w.log[0] = '\0';
	c->snap.sub = s;
	c->snap.open = 1;
	c->snap.next = SNAP_NEXT_PAGE;
	c->snap.failures = c->link.failures;
	c->snap.begun = 1;
	eh_unsubscribe(c, "acme");
	check(w.log[0] == '\0' && c->snap.sub == NULL && c->snap.next == SNAP_NEXT_ROLLBACK,
		  "snapshot: unsubscribed during it: rolled back, no callback");
	answer(c, OP_SNAP_END, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	check(!ehi_snapshot_open(c) && w.log[0] == '\0', "snapshot: the ROLLBACK closes it");
	eh_client_free(c);
}

#define VA "00000000-0000-4000-8000-00000000000a"
#define VB "00000000-0000-4000-8000-00000000000b"
#define VC "00000000-0000-4000-8000-00000000000c"

/*
 * The decisions behind "no query a drained notification made useless":
 * fetch() clears pending versions as its query starts, marks each event it
 * delivers, and fetches again only while a version stays pending.
 */
static void
test_versions(void)
{
	ehi_versions v;
	char		name[EH_VERSION_ID_LEN + 1];

	ehi_versions_reset(&v);
	check(!ehi_versions_pending(&v), "versions: nothing pending at first");
	check(ehi_versions_notified(&v, VA) == 1 && ehi_versions_pending(&v),
		  "versions: an unknown version calls for a fetch and stays pending");
	ehi_versions_delivered(&v, VA);
	check(!ehi_versions_pending(&v), "versions: delivering it settles it");
	check(ehi_versions_notified(&v, VA) == 0 && !ehi_versions_pending(&v),
		  "versions: a notification of a delivered version calls for nothing");

	/* A fetch runs: B and C are notified meanwhile; the query returns B only. */
	ehi_versions_clear_pending(&v);
	check(ehi_versions_notified(&v, VB) == 1, "versions: B notified during a fetch");
	check(ehi_versions_notified(&v, VC) == 1, "versions: C notified during a fetch");
	ehi_versions_delivered(&v, VB);
	check(ehi_versions_pending(&v), "versions: C, committed after the query's snapshot, is still pending");
	ehi_versions_delivered(&v, VC);
	check(!ehi_versions_pending(&v), "versions: the next fetch returns C: nothing pending");

	/* More notified versions than it keeps: pending until cleared. */
	ehi_versions_clear_pending(&v);
	for (int i = 0; i < EHI_PENDING_VERSIONS + 1; i++)
	{
		snprintf(name, sizeof(name), "00000000-0000-4000-8000-%012d", 100 + i);
		ehi_versions_notified(&v, name);
	}
	for (int i = 0; i < EHI_PENDING_VERSIONS + 1; i++)
	{
		snprintf(name, sizeof(name), "00000000-0000-4000-8000-%012d", 100 + i);
		ehi_versions_delivered(&v, name);
	}
	check(ehi_versions_pending(&v), "versions: an overflow stays pending (one more fetch, never one less)");
	ehi_versions_clear_pending(&v);
	check(!ehi_versions_pending(&v), "versions: cleared when the next fetch starts");

	/* Only the last EHI_RECENT_VERSIONS delivered versions are remembered. */
	for (int i = 0; i < EHI_RECENT_VERSIONS; i++)
	{
		snprintf(name, sizeof(name), "00000000-0000-4000-8000-%012d", 200 + i);
		ehi_versions_delivered(&v, name);
	}
	check(ehi_versions_notified(&v, VC) == 1, "versions: an old version calls for a fetch (forgotten, never wrongly skipped)");
	ehi_versions_reset(&v);
	check(!ehi_versions_pending(&v) && ehi_versions_notified(&v, name) == 1,
		  "versions: a reset forgets what was delivered");
}

/* The hash map that finds subscriptions by organization and by token. */
static void
test_map(void)
{
	ehi_map		m = {0};
	static char keys[20000][12];
	int			ok = 1;

	check(ehi_map_get(&m, "a") == NULL, "map: empty");
	for (int i = 0; i < 20000; i++)
	{
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		if (ehi_map_put(&m, keys[i], keys[i]) != 0)
			ok = 0;
	}
	for (int i = 0; i < 20000; i++)
		if (ehi_map_get(&m, keys[i]) != keys[i])
			ok = 0;
	check(ok && m.count == 20000, "map: 20000 keys put and found");
	for (int i = 0; i < 20000; i += 2)
		ehi_map_remove(&m, keys[i]);
	ok = m.count == 10000;
	for (int i = 0; i < 20000; i++)
		if ((ehi_map_get(&m, keys[i]) != NULL) != (i % 2 == 1))
			ok = 0;
	check(ok, "map: removed keys are gone, the others stay");
	/* Churn: tombstones must not fill the table. */
	for (int round = 0; round < 50; round++)
		for (int i = 0; i < 20000; i += 2)
		{
			if (ehi_map_put(&m, keys[i], keys[i]) != 0)
				ok = 0;
			ehi_map_remove(&m, keys[i]);
		}
	check(ok && m.count == 10000 && m.cap <= 65536 && ehi_map_get(&m, keys[1]) == keys[1],
		  "map: put and remove again and again keeps it small");
	check(ehi_map_put(&m, keys[1], NULL) == 0 && ehi_map_get(&m, keys[1]) == NULL && m.count == 10000,
		  "map: put replaces");
	ehi_map_free(&m);
	check(m.count == 0 && ehi_map_get(&m, "k1") == NULL, "map: freed");
}

static void
test_strbuf(void)
{
	ehi_strbuf	b = {0};

	ehi_sb_puts(&b, "{");
	ehi_sb_array_element(&b, "plain");
	ehi_sb_array_element(&b, "qu\"ote\\");
	ehi_sb_puts(&b, "}");
	check(!b.oom && strcmp(b.data, "{\"plain\",\"qu\\\"ote\\\\\"}") == 0,
		  "strbuf: array literal elements quoted");
	ehi_sb_free(&b);
	ehi_sb_printf(&b, "%s:%d", "n", 42);
	ehi_sb_json_string(&b, "a\nb");
	check(!b.oom && strcmp(b.data, "n:42\"a\\u000ab\"") == 0, "strbuf: printf and JSON strings");
	ehi_sb_free(&b);
	ehi_sb_prometheus(&b, "q\"b\\n\nx", 0);
	ehi_sb_puts(&b, " ");
	ehi_sb_prometheus(&b, "q\"b\\n\nx", 1);
	check(!b.oom && strcmp(b.data, "q\\\"b\\\\n\\nx q\"b\\\\n\\nx") == 0,
		  "strbuf: Prometheus label values escape \\, \" and newlines; HELP texts \\ and newlines");
	ehi_sb_free(&b);
}

/* A fixed buffer: snprintf's semantics. */
static void
test_strbuf_fixed(void)
{
	char		buf[8];
	ehi_strbuf	b;

	memset(buf, 'x', sizeof(buf));
	ehi_sb_init_fixed(&b, buf, 6);
	ehi_sb_puts(&b, "abc");
	ehi_sb_printf(&b, "%d", 12345);
	ehi_sb_puts(&b, "z");
	check(b.len == 9 && strcmp(buf, "abc12") == 0 && buf[6] == 'x',
		  "strbuf: a fixed buffer keeps what fits and its NUL, never more, and counts the rest");
	ehi_sb_init_fixed(&b, NULL, 0);
	ehi_sb_printf(&b, "%s", "four");
	ehi_sb_prometheus(&b, "\"", 0);
	check(b.len == 6, "strbuf: a fixed buffer of 0 bytes only counts");
}

/*
 * The value of the sample named series (with its labels) in an
 * exposition, -1 if absent.
 */
static double
sample(const char *text, const char *series)
{
	size_t		n = strlen(series);

	for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		if (strncmp(line, series, n) == 0 && line[n] == ' ')
			return strtod(line + n + 1, NULL);
	return -1;
}

/* How many lines of text start with prefix. */
static int
lines_starting(const char *text, const char *prefix)
{
	int			count = 0;

	for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		count += strncmp(line, prefix, strlen(prefix)) == 0;
	return count;
}

/*
 * eh_render_metrics: snprintf's semantics, the escaping, and the values it
 * shows as the delivery (made results) confirms cursors at the head,
 * resyncs, and follows every organization.
 */
static void
test_metrics(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	char		text[8192];
	char		small[16];
	int			n;
	int			m;
	eh_sub	   *s;
	eh_sub	   *q;
	const char *below[] = {"1 1 t", "2 2 t"};
	const char *rest[] = {"3 3 t"};
	const char *ahead[] = {"1", "00000000-0000-4000-8000-000000000001", NULL, NULL, "f", "acme", "3"};
	const char *orgs[] = {"x", "4", "00000000-0000-4000-8000-000000000004", "f",
	"y", "6", "00000000-0000-4000-8000-000000000006", "f"};
	PGresult   *res;

	check(eh_render_metrics(NULL, text, sizeof(text)) == -1, "metrics: -1 for a NULL client");
	eh_subscribe(c, "acme", 0);
	eh_subscribe(c, "we\"ird\\org\nname", EH_FROM_HEAD);
	n = eh_render_metrics(c, NULL, 0);
	m = eh_render_metrics(c, text, sizeof(text));
	check(n > 0 && m == n && (int) strlen(text) == n, "metrics: the length it needs, without a buffer; all of it with one");
	memset(small, 'x', sizeof(small));
	check(eh_render_metrics(c, small, 10) == n && strlen(small) == 9 && strncmp(small, text, 9) == 0 &&
		  small[10] == 'x', "metrics: a buffer too small gets what fits and a NUL, and the length it needs");
	check(sample(text, "eventhub_client_connected") == 0, "metrics: not connected");
	check(lines_starting(text, "# TYPE eventhub_client_ready gauge") == 1 &&
		  lines_starting(text, "# HELP eventhub_client_ready ") == 1 &&
		  lines_starting(text, "# TYPE eventhub_client_resyncs_total counter") == 1 &&
		  lines_starting(text, "eventhub_client_ready{") == 2,
		  "metrics: # HELP and # TYPE once per family, a series per subscription");
	check(sample(text, "eventhub_client_ready{subscription=\"we\\\"ird\\\\org\\nname\"}") == 0,
		  "metrics: the label value escaped (quote, backslash, newline)");
	check(sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 0 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"we\\\"ird\\\\org\\nname\"}") == -1,
		  "metrics: the applied revision; none while a subscription waits for its head");
	check(sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"history_removed\"}") == 0 &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"version_mismatch\"}") == 0,
		  "metrics: every resync reason from the start");

	/* A fetch below the head: not ready, not fresh; the rest at the head: both. */
	s = ehi_find_sub(c, "acme");
	s->stats.fresh_at -= 5000;
	c->link.op_sent_at = ehi_now_ms() - 2000;
	deliver(c, s, fetch_result(3, 2, below));
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 0 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 5.0 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 2,
		  "metrics: a fetch below the head: applied, but neither ready nor fresh (since subscribing)");
	deliver(c, s, fetch_result(3, 1, rest));
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 2.0 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") < 4.0 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 3,
		  "metrics: at the head: ready, fresh as of when the fetch was sent");
	eh_ack(c, "acme", 2);
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 2,
		  "metrics: the applied revision is eh_ack's once it is used");

	/* A poll finds the head below the cursor: a resync, counted by reason; still ready. */
	c->link.op_sent_at = ehi_now_ms();
	res = tuples(7, 1, ahead);
	ehi_handle_delivery(c, OP_STATE, NULL, res);
	PQclear(res);
	eh_render_metrics(c, text, sizeof(text));
	check(s->cursor == 1 &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"cursor_ahead\"}") == 1 &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"history_removed\"}") == 0 &&
		  sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") < 1.0,
		  "metrics: a resync counted by its reason; at the head it read, fresh");

	/* The counters. */
	c->counters[EH_STAT_NOTIFICATIONS] = 5;
	c->counters[EH_STAT_POLLS] = 7;
	c->counters[EH_STAT_FETCHES] = 11;
	c->counters[EH_STAT_RECONNECTS] = 2;
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_wakeups_total{source=\"notification\"}") == 5 &&
		  sample(text, "eventhub_client_wakeups_total{source=\"poll\"}") == 7 &&
		  sample(text, "eventhub_client_fetches_total") == 11 &&
		  sample(text, "eventhub_client_reconnects_total") == 2 &&
		  sample(text, "eventhub_client_events_delivered_total") == 3,
		  "metrics: wakeups by source, fetches, reconnects, events delivered");

	/* Every organization: one subscription "*", ready once discovered at the head. */
	eh_subscribe_all(c, EH_FROM_HEAD);
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"*\"}") == 0, "metrics: \"*\" not ready before a discovery");
	c->link.op_sent_at = ehi_now_ms();
	res = tuples(4, 2, orgs);
	ehi_handle_delivery(c, OP_DISCOVER, NULL, res);
	PQclear(res);
	q = ehi_find_sub(c, "x");
	q->stats.fresh_at -= 9000;
	eh_render_metrics(c, text, sizeof(text));
	check(q && q->automatic && sample(text, "eventhub_client_ready{subscription=\"*\"}") == 1 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"*\"}") == 10 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"*\"}") >= 9.0 &&
		  lines_starting(text, "eventhub_client_ready{subscription=\"x\"}") == 0 &&
		  lines_starting(text, "eventhub_client_ready{") == 3,
		  "metrics: the organizations followed are one series \"*\": ready, the sum of revisions, the stalest");
	eh_client_free(c);
}

/* Readiness from a snapshot, as of its head; a resync answered by one counts once. */
static void
test_metrics_snapshot(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");
	seen		w = {"", 0, 0};
	char		text[8192];
	eh_sub	   *s;
	PGresult   *res;
	const char *head[] = {"42", "00000000-0000-4000-8000-000000000042"};
	const char *ahead[] = {"7", "00000000-0000-4000-8000-000000000007", NULL, NULL, "f", "acme", "42"};

	eh_set_snapshot_callback(c, seen_snapshot, &w);
	eh_subscribe(c, "acme", EH_FROM_SNAPSHOT);
	s = ehi_find_sub(c, "acme");
	c->snap.sub = s;
	c->snap.open = 1;
	c->snap.next = SNAP_NEXT_HEAD;
	c->snap.failures = c->link.failures;
	c->link.op_sent_at = ehi_now_ms() - 3000;	/* snapshot_head() went out 3 s ago */
	answer(c, OP_SNAP_HEAD, tuples(2, 1, head));
	c->link.op_sent_at = ehi_now_ms();
	answer(c, OP_SNAP_PAGE, tuples(7, 0, head));
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 0,
		  "metrics: not ready while the snapshot is read");
	answer(c, OP_SNAP_END, PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK));
	eh_render_metrics(c, text, sizeof(text));
	check(sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_applied_revision{subscription=\"acme\"}") == 42 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 3.0,
		  "metrics: a snapshot applied: ready at its head, fresh as of its head's query");

	/* The head went below the cursor: a snapshot answers the resync; counted once, still ready. */
	res = tuples(7, 1, ahead);
	ehi_handle_delivery(c, OP_STATE, NULL, res);
	PQclear(res);
	eh_render_metrics(c, text, sizeof(text));
	check(s->wants_snapshot &&
		  sample(text, "eventhub_client_resyncs_total{subscription=\"acme\",reason=\"cursor_ahead\"}") == 1 &&
		  sample(text, "eventhub_client_ready{subscription=\"acme\"}") == 1 &&
		  sample(text, "eventhub_client_freshness_seconds{subscription=\"acme\"}") >= 3.0,
		  "metrics: a resync answered by a snapshot counts, and confirms nothing until the snapshot ends");
	eh_client_free(c);
}

/*
 * Runs one of the build checks beside this program (check_layers.sh,
 * check_exports.sh: they read the object files and the library with nm),
 * its lines as TAP comments, its exit status as one test.
 */
static void
test_build_script(const char *argv0, const char *script, const char *what)
{
	char		cmd[4096];
	char		line[1024];
	const char *slash = strrchr(argv0, '/');
	FILE	   *f;
	int			status;

	snprintf(cmd, sizeof(cmd), "sh '%.*s%s' 2>&1", slash ? (int) (slash - argv0 + 1) : 0, argv0, script);
	if (!(f = popen(cmd, "r")))
	{
		check(0, what);
		return;
	}
	while (fgets(line, sizeof(line), f))
		printf("# %s", line);
	status = pclose(f);
	check(status == 0, what);
}

int
main(int argc, char **argv)
{
	(void) argc;
	test_payload();
	test_versions();
	test_map();
	test_strbuf();
	test_strbuf_fixed();
	test_cli();
	test_escaping();
	test_library_options();
	test_library_publish();
	test_delivery();
	test_snapshot_steps();
	test_metrics();
	test_metrics_snapshot();
	test_build_script(argv[0], "check_layers.sh", "build: the library's files call one way (internal.h's layer order)");
	test_build_script(argv[0], "check_exports.sh", "build: the library exports exactly the documented functions");
	printf("1..%d\n", tests);
	if (failures)
		printf("# %d of %d failed\n", failures, tests);
	return failures ? 1 : 0;
}
