/*
 * test_unit.c: unit tests of libeventhub's payload parser, its memory of
 * delivered and notified versions, its map and string builder, option
 * handling, and the build checks; the program's main, which also runs
 * those of test_unit_cli.c and test_unit_delivery.c.  No server needed.
 * Prints TAP ("ok N - ...") and exits non-zero on any failure.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eventhub.h"
#include "internal.h"
#include "test_unit.h"

static int tests = 0;
static int failures = 0;

/* Counts a test and prints its TAP line. */
void
check(int ok, const char *what)
{
	tests++;
	if (!ok)
		failures++;
	printf("%sok %d - %s\n", ok ? "" : "not ", tests, what);
}

/*
 * Runs fn(arg) in a child process, so that a crash or an abort (glibc's,
 * on a double free) fails a check instead of ending the tests.  True when
 * fn returned true.
 */
static bool
in_child(bool (*fn) (void *), void *arg)
{
	pid_t		pid;
	int			status;

	fflush(stdout);
	if ((pid = fork()) == 0)
		_exit(fn(arg) ? 0 : 1);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return false;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Frees a client (NULL too); true once it returns. */
static bool
frees_client(void *client)
{
	eh_client_free(client);
	return true;
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

/* Parses payload; checks that it is refused and nothing is written. */
static void
payload_bad(const char *payload, const char *what)
{
	char		token[EH_TOKEN_LEN + 1] = "";
	char		version[EH_VERSION_ID_LEN + 1] = "";

	check(ehi_parse_payload(payload, token, version, NULL) == -1 && token[0] == '\0' && version[0] == '\0', what);
}

/* The parser of the notification payload: what it takes, what it refuses. */
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

/* The settings of a client, and the subscriptions, before any connection. */
static void
test_library_settings(eh_client *c)
{
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
}

/* The counters, and the names of the public enums' values. */
static void
test_library_names(eh_client *c)
{
	bool		all_named = true;

	check(eh_stat(c, EH_STAT_EVENTS_DELIVERED) == 0 && eh_stat(c, EH_STAT_RECONNECTS) == 0 &&
		  eh_stat(c, EH_STAT_POLLS) == 0 && eh_last_lag_ms(c) == 0, "lib: counters start at zero");
	check(eh_stat(c, EH_STAT_COUNT) == 0 && eh_stat(c, (eh_stat_id) -1) == 0 && eh_stat(NULL, EH_STAT_POLLS) == 0,
		  "lib: an unknown counter reads 0");
	check(strcmp(eh_stat_name(EH_STAT_FETCHES), "fetches") == 0 && strcmp(eh_stat_name(EH_STAT_COUNT), "unknown") == 0,
		  "lib: counter names");
	for (int i = 0; i < EH_STAT_COUNT; i++)
		if (strcmp(eh_stat_name((eh_stat_id) i), "unknown") == 0)
			all_named = false;
	check(all_named, "lib: every counter has a name");
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
}

/* More bounds, ids over the server's limit, and calls on a NULL client. */
static void
test_library_bounds(eh_client *c)
{
	char		long_id[EH_MAX_ID_BYTES + 2];

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
}

/* A client's options and names, without a server; freeing NULL. */
static void
test_library_options(void)
{
	eh_client  *c = eh_client_new("dbname=nowhere");

	check(c != NULL, "lib: a client is created without connecting");
	test_library_settings(c);
	test_library_names(c);
	test_library_bounds(c);
	eh_client_free(c);
	check(in_child(frees_client, NULL), "lib: freeing NULL is a no-op");
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
	/* A double free of the publish's copies would abort: in a child, it fails the check. */
	check(in_child(frees_client, c), "publish: a client freed with a publish under way");
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

/* The growing string builder and its escapes. */
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

/* Runs every test, then prints the plan; exits 1 if one failed. */
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
	test_wait_answer();
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
