/*
 * cli_options.c: command-line parsing of the eventhub tool.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"

static const char usage_main[] =
"eventhub: publish, watch and inspect eventhub events\n"
"\n"
"Usage: eventhub [-d CONNINFO] COMMAND [OPTIONS]\n"
"\n"
"Commands:\n"
"  publish   publish an event and print its revision\n"
"  watch     print events as JSON lines as they are committed\n"
"  status    show each organization's head revision, version and kept events\n"
"  cleanup   delete events older than a duration\n"
"\n"
"Connection: -d CONNINFO (a libpq connection string or URI), or libpq's\n"
"PGHOST, PGPORT, PGDATABASE, PGUSER... environment variables.\n"
"'eventhub COMMAND --help' describes a command.\n";

static const char usage_publish[] =
"Usage: eventhub publish --org ORG --type TYPE --action CREATE|UPDATE|DELETE --entity ID\n"
"                        [--correlation-id ID] [--data JSON]\n"
"\n"
"Publishes one event with eventhub.publish_event() and prints its revision.\n"
"  --org ORG              organization id\n"
"  --type TYPE            event type, for example API, CERTIFICATE, LLM_TEMPLATE\n"
"  --action ACTION        CREATE, UPDATE or DELETE\n"
"  --entity ID            id of the entity that changed\n"
"  --correlation-id ID    idempotency key (default: generated); repeating an\n"
"                         identical event with it prints the original revision\n"
"  --data JSON            event data (default: {})\n";

static const char usage_watch[] =
"Usage: eventhub watch --org ORG [--org ORG ...] [--after REVISION [--after-version UUID]]\n"
"                      [--count N] [--timeout SECONDS] [--poll-interval MS]\n"
"                      [--fallback-poll-interval MS] [--no-listen]\n"
"                      [--replica-id ID [--labels JSON] [--heartbeat-interval MS]\n"
"                       [--heartbeat-conninfo CONNINFO]]\n"
"\n"
"Prints each event of the organizations as one JSON object per line, in\n"
"revision order, and a line {\"resync\": true, ...} when an organization must\n"
"be reloaded.  To resume, store the revision and version_id of the last line\n"
"applied (a resync line's head_revision and head_version_id) and pass them\n"
"back with --after and --after-version.  Transient server errors are retried\n"
"with a warning on stderr.\n"
"  --org ORG              organization to follow (repeatable)\n"
"  --after REVISION       start after this revision (0: the whole kept\n"
"                         history; default: from the current head)\n"
"  --after-version UUID   the version_id at --after: a history that differs\n"
"                         (a failover) prints a resync line first\n"
"                         (one --org only)\n"
"  --count N              exit 0 after N events\n"
"  --timeout SECONDS      exit 3 if this time passes first\n"
"  --poll-interval MS     poll organization_states this often (default 5000)\n"
"  --fallback-poll-interval MS  ... and this often while notifications cannot\n"
"                         reach the connection (default 250)\n"
"  --no-listen            do not LISTEN; poll only, every --poll-interval\n"
"  --replica-id ID        report progress as this replica (eventhub.heartbeat)\n"
"  --labels JSON          the replica's labels, a JSON object\n"
"  --heartbeat-interval MS  heartbeat this often (default 10000)\n"
"  --heartbeat-conninfo CONNINFO  send heartbeats over this connection (the\n"
"                         primary, when reading from a standby)\n";

static const char usage_status[] =
"Usage: eventhub status [--org ORG] [--json] [--fail-if-lag N]\n"
"\n"
"Prints each organization's head revision, version id, last update and\n"
"number of kept events, then each replica's progress (eventhub.replica_status).\n"
"  --org ORG              only this organization\n"
"  --json                 one JSON object instead of tables\n"
"  --fail-if-lag N        exit 4 when a live replica is more than N revisions\n"
"                         behind (a readiness or alerting probe)\n";

static const char usage_cleanup[] =
"Usage: eventhub cleanup --older-than DURATION\n"
"\n"
"Deletes the events older than DURATION (a PostgreSQL interval such as 1h,\n"
"'30 min' or '2 days') with eventhub.cleanup_events() and prints the count.\n";

const char *
cli_usage(cli_command command)
{
	switch (command)
	{
		case CMD_PUBLISH:
			return usage_publish;
		case CMD_WATCH:
			return usage_watch;
		case CMD_STATUS:
			return usage_status;
		case CMD_CLEANUP:
			return usage_cleanup;
		default:
			return usage_main;
	}
}

/* Parses a whole decimal integer in [min, max]. */
static int
parse_int64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char	   *end;
	long long	v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

enum
{
	OPT_ORG = 1000, OPT_TYPE, OPT_ACTION, OPT_ENTITY, OPT_CORRELATION, OPT_DATA,
	OPT_AFTER, OPT_COUNT, OPT_TIMEOUT, OPT_POLL, OPT_NO_LISTEN, OPT_OLDER_THAN, OPT_HELP,
	OPT_REPLICA, OPT_LABELS, OPT_HEARTBEAT, OPT_JSON, OPT_FAIL_IF_LAG,
	OPT_AFTER_VERSION, OPT_FALLBACK_POLL, OPT_HEARTBEAT_CONNINFO
};

int
cli_parse(int argc, char **argv, cli_options *opts, char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{"org", required_argument, NULL, OPT_ORG},
		{"type", required_argument, NULL, OPT_TYPE},
		{"action", required_argument, NULL, OPT_ACTION},
		{"entity", required_argument, NULL, OPT_ENTITY},
		{"correlation-id", required_argument, NULL, OPT_CORRELATION},
		{"data", required_argument, NULL, OPT_DATA},
		{"after", required_argument, NULL, OPT_AFTER},
		{"after-version", required_argument, NULL, OPT_AFTER_VERSION},
		{"fallback-poll-interval", required_argument, NULL, OPT_FALLBACK_POLL},
		{"heartbeat-conninfo", required_argument, NULL, OPT_HEARTBEAT_CONNINFO},
		{"count", required_argument, NULL, OPT_COUNT},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{"poll-interval", required_argument, NULL, OPT_POLL},
		{"no-listen", no_argument, NULL, OPT_NO_LISTEN},
		{"older-than", required_argument, NULL, OPT_OLDER_THAN},
		{"replica-id", required_argument, NULL, OPT_REPLICA},
		{"labels", required_argument, NULL, OPT_LABELS},
		{"heartbeat-interval", required_argument, NULL, OPT_HEARTBEAT},
		{"json", no_argument, NULL, OPT_JSON},
		{"fail-if-lag", required_argument, NULL, OPT_FAIL_IF_LAG},
		{"dbname", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, OPT_HELP},
		{NULL, 0, NULL, 0}
	};
	const char *name;
	int			first;
	int			ch;

	memset(opts, 0, sizeof(*opts));
	opts->after = -1;
	opts->timeout_s = -1;
	opts->fail_if_lag = -1;
	err[0] = '\0';

	/* Global options before the command: -d CONNINFO, --help. */
	for (first = 1; first < argc; first++)
	{
		if (strcmp(argv[first], "-d") == 0 || strcmp(argv[first], "--dbname") == 0)
		{
			if (first + 1 >= argc)
			{
				snprintf(err, errlen, "%s needs a connection string", argv[first]);
				return -1;
			}
			opts->conninfo = argv[++first];
		}
		else if (strncmp(argv[first], "--dbname=", 9) == 0)
			opts->conninfo = argv[first] + 9;
		else if (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0)
		{
			opts->help = 1;
			return 0;
		}
		else
			break;
	}
	if (first >= argc)
	{
		snprintf(err, errlen, "no command given");
		return -1;
	}
	name = argv[first];
	if (strcmp(name, "publish") == 0)
		opts->command = CMD_PUBLISH;
	else if (strcmp(name, "watch") == 0)
		opts->command = CMD_WATCH;
	else if (strcmp(name, "status") == 0)
		opts->command = CMD_STATUS;
	else if (strcmp(name, "cleanup") == 0)
		opts->command = CMD_CLEANUP;
	else
	{
		snprintf(err, errlen, "unknown command \"%s\"", name);
		return -1;
	}

	/*
	 * The command's options; getopt_long starts over at argv[first] (optind
	 * 0 makes glibc's getopt forget any earlier parse).
	 */
	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc - first, argv + first, ":d:", longopts, NULL)) != -1)
	{
		int64_t		v;

		switch (ch)
		{
			case 'd':
				opts->conninfo = optarg;
				break;
			case OPT_HELP:
				opts->help = 1;
				return 0;
			case OPT_ORG:
				if (opts->command == CMD_WATCH || opts->command == CMD_STATUS)
				{
					if (opts->norgs == CLI_MAX_ORGS)
					{
						snprintf(err, errlen, "at most %d --org options", CLI_MAX_ORGS);
						return -1;
					}
					opts->orgs[opts->norgs++] = optarg;
				}
				opts->org = optarg;
				break;
			case OPT_TYPE:
				opts->type = optarg;
				break;
			case OPT_ACTION:
				opts->action = optarg;
				break;
			case OPT_ENTITY:
				opts->entity = optarg;
				break;
			case OPT_CORRELATION:
				opts->correlation_id = optarg;
				break;
			case OPT_DATA:
				opts->data = optarg;
				break;
			case OPT_AFTER:
				if (parse_int64(optarg, 0, INT64_MAX, &v) != 0)
				{
					snprintf(err, errlen, "--after needs a revision >= 0, not \"%s\"", optarg);
					return -1;
				}
				opts->after = v;
				break;
			case OPT_COUNT:
				if (parse_int64(optarg, 1, INT64_MAX, &v) != 0)
				{
					snprintf(err, errlen, "--count needs a number >= 1, not \"%s\"", optarg);
					return -1;
				}
				opts->count = v;
				break;
			case OPT_TIMEOUT:
				{
					char	   *end;
					double		t;

					errno = 0;
					t = strtod(optarg, &end);
					if (errno != 0 || end == optarg || *end != '\0' || !(t > 0) || t > 31536000)
					{
						snprintf(err, errlen, "--timeout needs a number of seconds > 0, not \"%s\"", optarg);
						return -1;
					}
					opts->timeout_s = t;
					break;
				}
			case OPT_POLL:
				if (parse_int64(optarg, 10, 86400000, &v) != 0)
				{
					snprintf(err, errlen, "--poll-interval needs milliseconds from 10 to 86400000, not \"%s\"", optarg);
					return -1;
				}
				opts->poll_interval_ms = (int) v;
				break;
			case OPT_NO_LISTEN:
				opts->no_listen = 1;
				break;
			case OPT_AFTER_VERSION:
				opts->after_version = optarg;
				break;
			case OPT_FALLBACK_POLL:
				if (parse_int64(optarg, 10, 86400000, &v) != 0)
				{
					snprintf(err, errlen, "--fallback-poll-interval needs milliseconds from 10 to 86400000, not \"%s\"", optarg);
					return -1;
				}
				opts->fallback_poll_interval_ms = (int) v;
				break;
			case OPT_HEARTBEAT_CONNINFO:
				opts->heartbeat_conninfo = optarg;
				break;
			case OPT_OLDER_THAN:
				opts->older_than = optarg;
				break;
			case OPT_REPLICA:
				opts->replica_id = optarg;
				break;
			case OPT_LABELS:
				opts->labels = optarg;
				break;
			case OPT_HEARTBEAT:
				if (parse_int64(optarg, 100, 86400000, &v) != 0)
				{
					snprintf(err, errlen, "--heartbeat-interval needs milliseconds from 100 to 86400000, not \"%s\"", optarg);
					return -1;
				}
				opts->heartbeat_interval_ms = (int) v;
				break;
			case OPT_JSON:
				opts->json = 1;
				break;
			case OPT_FAIL_IF_LAG:
				if (parse_int64(optarg, 0, INT64_MAX, &v) != 0)
				{
					snprintf(err, errlen, "--fail-if-lag needs a number of revisions >= 0, not \"%s\"", optarg);
					return -1;
				}
				opts->fail_if_lag = v;
				break;
			case ':':
				snprintf(err, errlen, "%s needs a value", argv[first + optind - 1]);
				return -1;
			default:
				snprintf(err, errlen, "unknown option \"%s\" for %s", argv[first + optind - 1], name);
				return -1;
		}
	}
	if (optind < argc - first)
	{
		snprintf(err, errlen, "unexpected argument \"%s\"", argv[first + optind]);
		return -1;
	}

	/* Which options each command takes, and needs. */
#define ONLY_FOR(cond, flag) \
	do { if (!(cond)) { snprintf(err, errlen, "%s does not take %s", name, flag); return -1; } } while (0)
#define REQUIRED(value, flag) \
	do { if (!(value)) { snprintf(err, errlen, "%s needs %s", name, flag); return -1; } } while (0)

	ONLY_FOR(opts->command != CMD_CLEANUP || !opts->org, "--org");
	ONLY_FOR(opts->command == CMD_PUBLISH || !(opts->type || opts->action || opts->entity ||
											  opts->correlation_id || opts->data),
			 "--type, --action, --entity, --correlation-id or --data");
	ONLY_FOR(opts->command == CMD_WATCH || !(opts->after >= 0 || opts->after_version || opts->count ||
											opts->timeout_s > 0 || opts->poll_interval_ms ||
											opts->fallback_poll_interval_ms || opts->no_listen ||
											opts->replica_id || opts->labels ||
											opts->heartbeat_interval_ms || opts->heartbeat_conninfo),
			 "--after, --after-version, --count, --timeout, --poll-interval, --fallback-poll-interval, "
			 "--no-listen, --replica-id, --labels, --heartbeat-interval or --heartbeat-conninfo");
	ONLY_FOR(opts->command == CMD_STATUS || !(opts->json || opts->fail_if_lag >= 0),
			 "--json or --fail-if-lag");
	ONLY_FOR(opts->command == CMD_CLEANUP || !opts->older_than, "--older-than");

	switch (opts->command)
	{
		case CMD_PUBLISH:
			REQUIRED(opts->org, "--org");
			REQUIRED(opts->type, "--type");
			REQUIRED(opts->action, "--action");
			REQUIRED(opts->entity, "--entity");
			if (strcmp(opts->action, "CREATE") != 0 && strcmp(opts->action, "UPDATE") != 0 &&
				strcmp(opts->action, "DELETE") != 0)
			{
				snprintf(err, errlen, "--action must be CREATE, UPDATE or DELETE, not \"%s\"", opts->action);
				return -1;
			}
			if (!opts->data)
				opts->data = "{}";
			break;
		case CMD_WATCH:
			REQUIRED(opts->norgs, "at least one --org");
			if ((opts->labels || opts->heartbeat_interval_ms || opts->heartbeat_conninfo) && !opts->replica_id)
			{
				snprintf(err, errlen, "--labels, --heartbeat-interval and --heartbeat-conninfo need --replica-id");
				return -1;
			}
			if (opts->after_version && (opts->after < 0 || opts->norgs != 1))
			{
				snprintf(err, errlen, "--after-version goes with --after and one --org");
				return -1;
			}
			if (opts->replica_id && !opts->replica_id[0])
			{
				snprintf(err, errlen, "--replica-id must not be empty");
				return -1;
			}
			for (int i = 0; i < opts->norgs; i++)
				for (int j = 0; j < i; j++)
					if (strcmp(opts->orgs[i], opts->orgs[j]) == 0)
					{
						snprintf(err, errlen, "--org \"%s\" given twice", opts->orgs[i]);
						return -1;
					}
			break;
		case CMD_STATUS:
			if (opts->norgs > 1)
			{
				snprintf(err, errlen, "status takes at most one --org");
				return -1;
			}
			break;
		case CMD_CLEANUP:
			REQUIRED(opts->older_than, "--older-than");
			break;
		default:
			break;
	}
	for (int i = 0; i < opts->norgs; i++)
		if (!opts->orgs[i][0])
		{
			snprintf(err, errlen, "--org must not be empty");
			return -1;
		}
	if (opts->org && !opts->org[0])
	{
		snprintf(err, errlen, "--org must not be empty");
		return -1;
	}
	return 0;
#undef ONLY_FOR
#undef REQUIRED
}
