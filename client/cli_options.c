/*
 * cli_options.c: command-line parsing of the eventhub tool, and the escaping
 * of the database's strings in what it prints.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "eventhub.h"

static const char usage_main[] =
"eventhub: publish, watch and inspect eventhub events\n"
"\n"
"Usage: eventhub [-d CONNINFO] COMMAND [OPTIONS]\n"
"\n"
"Commands:\n"
"  publish   publish an event and print its revision\n"
"  watch     print events as JSON lines as they are committed\n"
"  get       print an organization's current entities as JSON lines\n"
"  status    show each organization's head revision, version and kept events\n"
"  metrics   print the server's metrics in Prometheus' text format\n"
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
"       eventhub watch --all [--after 0]\n"
"       eventhub watch (--org ORG [--org ORG ...] | --all) --snapshot\n"
"                      [--count N] [--timeout SECONDS] [--poll-interval MS]\n"
"                      [--fallback-poll-interval MS] [--no-listen]\n"
"                      [--batch-bytes N] [--query-timeout MS]\n"
"                      [--replica-id ID [--labels JSON] [--heartbeat-interval MS]\n"
"                       [--heartbeat-conninfo CONNINFO]]\n"
"                      [--metrics-file PATH [--metrics-interval SECONDS]]\n"
"\n"
"Prints each event of the organizations as one JSON object per line, in\n"
"revision order, and a line {\"resync\": true, ...} when an organization must\n"
"be reloaded.  An event's transaction_first_revision and transaction_end\n"
"tell which events were published in one transaction.  To resume, store the\n"
"revision and version_id of the last line applied with transaction_end true\n"
"(a resync line's head_revision and head_version_id) and pass them back\n"
"with --after and --after-version.  Transient server errors are retried\n"
"with a warning on stderr.\n"
"  --org ORG              organization to follow (repeatable)\n"
"  --all                  follow every organization, present and future\n"
"                         (from their heads; with --after 0, all kept history)\n"
"  --after REVISION       start after this revision (0: the whole kept\n"
"                         history; default: from the current head)\n"
"  --snapshot             start with each organization's current entities,\n"
"                         between {\"snapshot\": \"begin\", ...} and\n"
"                         {\"snapshot\": \"end\", ...} lines, then its events;\n"
"                         answer a resync with a new snapshot\n"
"  --after-version UUID   the version_id at --after: a history that differs\n"
"                         (a failover) prints a resync line first\n"
"                         (one --org only)\n"
"  --count N              exit 0 after N events (and the rest of the\n"
"                         transaction of the Nth)\n"
"  --timeout SECONDS      exit 3 if this time passes first\n"
"  --poll-interval MS     poll organization_states this often (default 5000)\n"
"  --fallback-poll-interval MS  ... and this often while notifications cannot\n"
"                         reach the connection (default 250)\n"
"  --no-listen            do not LISTEN; poll only, every --poll-interval\n"
"  --batch-bytes N        fetch at most about N bytes of events at a time, as\n"
"                         stored (default 8388608; one larger event still\n"
"                         comes, a larger transaction in parts)\n"
"  --query-timeout MS     give a query or connection attempt this long before\n"
"                         reconnecting (default 30000)\n"
"  --replica-id ID        report progress as this replica (eventhub.heartbeat)\n"
"  --labels JSON          the replica's labels, a JSON object\n"
"  --heartbeat-interval MS  heartbeat this often (default 10000)\n"
"  --heartbeat-conninfo CONNINFO  send heartbeats over this connection (the\n"
"                         primary, when reading from a standby)\n"
"  --metrics-file PATH    write the client's metrics (connected, ready,\n"
"                         freshness...) to PATH in Prometheus' text format, for\n"
"                         node_exporter's textfile collector: at start, every\n"
"                         --metrics-interval and at exit, replaced atomically\n"
"                         (PATH.tmp beside it, fsync, rename)\n"
"  --metrics-interval SECONDS  how often (default 10)\n";

static const char usage_get[] =
"Usage: eventhub get --org ORG [--batch-bytes N] [--query-timeout MS]\n"
"\n"
"Prints the organization's current entities, each live entity's latest\n"
"event, as one JSON object per line in (event_type, entity_id) order, then\n"
"a line {\"snapshot\": \"end\", ...} with the head revision and version they\n"
"are consistent with (watch --after HEAD --after-version VERSION goes on\n"
"from there).  An entity line repeats its event_type as entity_type, a\n"
"deprecated key that the next release removes.  Exits 1 when the server\n"
"reports the organization's state incomplete (SQLSTATE ZE004) or the\n"
"snapshot is interrupted.\n"
"  --org ORG              the organization\n"
"  --batch-bytes N        read at most about N bytes of entities at a time\n"
"                         (default 8388608)\n"
"  --query-timeout MS     give a query or connection attempt this long before\n"
"                         reconnecting (default 30000)\n";

static const char usage_status[] =
"Usage: eventhub status [--org ORG] [--json] [--fail-if-lag N]\n"
"\n"
"Prints each organization's head revision, version id, last update and\n"
"number of kept events, then each replica's progress (eventhub.replica_status).\n"
"  --org ORG              only this organization\n"
"  --json                 one JSON object instead of tables\n"
"  --fail-if-lag N        exit 4 when a live replica is more than N revisions\n"
"                         behind (a readiness or alerting probe)\n";

static const char usage_metrics[] =
"Usage: eventhub metrics\n"
"\n"
"Prints the server's metrics (eventhub.metrics(): events published,\n"
"replicas live and stale, their lag, retention, notifications...) in\n"
"Prometheus' text exposition format, for node_exporter's textfile\n"
"collector or a check.  The role needs EXECUTE on eventhub.metrics() (the\n"
"operator bundle of docs/operations.md).\n";

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
		case CMD_GET:
			return usage_get;
		case CMD_STATUS:
			return usage_status;
		case CMD_CLEANUP:
			return usage_cleanup;
		case CMD_METRICS:
			return usage_metrics;
		default:
			return usage_main;
	}
}

const char *
cli_command_name(cli_command command)
{
	switch (command)
	{
		case CMD_PUBLISH:
			return "publish";
		case CMD_WATCH:
			return "watch";
		case CMD_GET:
			return "get";
		case CMD_STATUS:
			return "status";
		case CMD_CLEANUP:
			return "cleanup";
		case CMD_METRICS:
			return "metrics";
		case CMD_NONE:
			break;
	}
	return "";
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

/*
 * An integer option's value in [min, max]; otherwise says in err that
 * flag needs what (a phrase such as "milliseconds from 10 to 86400000").
 */
static int
int_option(const char *flag, const char *what, const char *value, int64_t min, int64_t max,
		   int64_t *out, char *err, size_t errlen)
{
	if (parse_int64(value, min, max, out) == 0)
		return 0;
	snprintf(err, errlen, "%s needs %s, not \"%s\"", flag, what, value);
	return -1;
}

/* A number of seconds > 0 and at most max; otherwise says so in err. */
static int
seconds_option(const char *flag, const char *value, double max, double *out, char *err, size_t errlen)
{
	char	   *end;
	double		t;

	errno = 0;
	t = strtod(value, &end);
	if (errno != 0 || end == value || *end != '\0' || !(t > 0) || t > max)
	{
		snprintf(err, errlen, "%s needs a number of seconds > 0, not \"%s\"", flag, value);
		return -1;
	}
	*out = t;
	return 0;
}

static int	id_too_long(const char *flag, const char *id, char *err, size_t errlen);

enum
{
	OPT_ORG = 1000, OPT_TYPE, OPT_ACTION, OPT_ENTITY, OPT_CORRELATION, OPT_DATA,
	OPT_AFTER, OPT_COUNT, OPT_TIMEOUT, OPT_POLL, OPT_NO_LISTEN, OPT_OLDER_THAN, OPT_HELP,
	OPT_REPLICA, OPT_LABELS, OPT_HEARTBEAT, OPT_JSON, OPT_FAIL_IF_LAG,
	OPT_AFTER_VERSION, OPT_FALLBACK_POLL, OPT_HEARTBEAT_CONNINFO, OPT_ALL, OPT_BATCH_BYTES,
	OPT_QUERY_TIMEOUT, OPT_SNAPSHOT, OPT_METRICS_FILE, OPT_METRICS_INTERVAL
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
		{"all", no_argument, NULL, OPT_ALL},
		{"snapshot", no_argument, NULL, OPT_SNAPSHOT},
		{"batch-bytes", required_argument, NULL, OPT_BATCH_BYTES},
		{"query-timeout", required_argument, NULL, OPT_QUERY_TIMEOUT},
		{"older-than", required_argument, NULL, OPT_OLDER_THAN},
		{"replica-id", required_argument, NULL, OPT_REPLICA},
		{"labels", required_argument, NULL, OPT_LABELS},
		{"heartbeat-interval", required_argument, NULL, OPT_HEARTBEAT},
		{"json", no_argument, NULL, OPT_JSON},
		{"fail-if-lag", required_argument, NULL, OPT_FAIL_IF_LAG},
		{"metrics-file", required_argument, NULL, OPT_METRICS_FILE},
		{"metrics-interval", required_argument, NULL, OPT_METRICS_INTERVAL},
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
	else if (strcmp(name, "get") == 0)
		opts->command = CMD_GET;
	else if (strcmp(name, "metrics") == 0)
		opts->command = CMD_METRICS;
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
				if (opts->command == CMD_WATCH || opts->command == CMD_STATUS || opts->command == CMD_GET)
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
				if (int_option("--after", "a revision >= 0", optarg, 0, INT64_MAX, &v, err, errlen) != 0)
					return -1;
				opts->after = v;
				break;
			case OPT_COUNT:
				if (int_option("--count", "a number >= 1", optarg, 1, INT64_MAX, &v, err, errlen) != 0)
					return -1;
				opts->count = v;
				break;
			case OPT_TIMEOUT:
				if (seconds_option("--timeout", optarg, 31536000, &opts->timeout_s, err, errlen) != 0)
					return -1;
				break;
			case OPT_METRICS_FILE:
				opts->metrics_file = optarg;
				break;
			case OPT_METRICS_INTERVAL:
				if (seconds_option("--metrics-interval", optarg, 86400, &opts->metrics_interval_s, err, errlen) != 0)
					return -1;
				break;
			case OPT_POLL:
				if (int_option("--poll-interval", "milliseconds from 10 to 86400000", optarg, 10, 86400000, &v, err, errlen) != 0)
					return -1;
				opts->poll_interval_ms = (int) v;
				break;
			case OPT_NO_LISTEN:
				opts->no_listen = 1;
				break;
			case OPT_ALL:
				opts->all = 1;
				break;
			case OPT_SNAPSHOT:
				opts->snapshot = 1;
				break;
			case OPT_BATCH_BYTES:
				if (int_option("--batch-bytes", "a number of bytes from 1024 to 1073741824", optarg, 1024, 1073741824, &v, err, errlen) != 0)
					return -1;
				opts->batch_bytes = (int) v;
				break;
			case OPT_QUERY_TIMEOUT:
				if (int_option("--query-timeout", "milliseconds from 100 to 86400000", optarg, 100, 86400000, &v, err, errlen) != 0)
					return -1;
				opts->query_timeout_ms = (int) v;
				break;
			case OPT_AFTER_VERSION:
				opts->after_version = optarg;
				break;
			case OPT_FALLBACK_POLL:
				if (int_option("--fallback-poll-interval", "milliseconds from 10 to 86400000", optarg, 10, 86400000, &v, err, errlen) != 0)
					return -1;
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
				if (int_option("--heartbeat-interval", "milliseconds from 100 to 86400000", optarg, 100, 86400000, &v, err, errlen) != 0)
					return -1;
				opts->heartbeat_interval_ms = (int) v;
				break;
			case OPT_JSON:
				opts->json = 1;
				break;
			case OPT_FAIL_IF_LAG:
				if (int_option("--fail-if-lag", "a number of revisions >= 0", optarg, 0, INT64_MAX, &v, err, errlen) != 0)
					return -1;
				opts->fail_if_lag = v;
				break;
			case ':':
				snprintf(err, errlen, "%s needs a value", argv[first + optind - 1]);
				return -1;
			default:

				/*
				 * optopt is the unknown letter of a short option, which may
				 * sit inside a cluster (-xyz) whose argument optind has not
				 * passed yet; for an unknown long option it is 0 and optind
				 * has moved past it.
				 */
				if (optopt != 0)
					snprintf(err, errlen, "unknown option \"-%c\" for %s", optopt, name);
				else
					snprintf(err, errlen, "unknown option \"%.*s\" for %s",
							 (int) strcspn(argv[first + optind - 1], "="), argv[first + optind - 1], name);
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

	ONLY_FOR((opts->command != CMD_CLEANUP && opts->command != CMD_METRICS) || !opts->org, "--org");
	ONLY_FOR(opts->command == CMD_PUBLISH || !(opts->type || opts->action || opts->entity ||
											  opts->correlation_id || opts->data),
			 "--type, --action, --entity, --correlation-id or --data");
	ONLY_FOR(opts->command == CMD_WATCH || !(opts->after >= 0 || opts->after_version || opts->count ||
											opts->timeout_s > 0 || opts->poll_interval_ms ||
											opts->fallback_poll_interval_ms || opts->no_listen ||
											opts->all || opts->snapshot ||
											opts->replica_id || opts->labels ||
											opts->heartbeat_interval_ms || opts->heartbeat_conninfo ||
											opts->metrics_file || opts->metrics_interval_s > 0),
			 "--after, --after-version, --count, --timeout, --poll-interval, --fallback-poll-interval, "
			 "--no-listen, --all, --snapshot, --replica-id, --labels, --heartbeat-interval, "
			 "--heartbeat-conninfo, --metrics-file or --metrics-interval");
	ONLY_FOR(opts->command == CMD_WATCH || opts->command == CMD_GET ||
			 !(opts->batch_bytes || opts->query_timeout_ms), "--batch-bytes or --query-timeout");
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
			if (opts->all && opts->norgs)
			{
				snprintf(err, errlen, "--all follows every organization: it does not take --org");
				return -1;
			}
			if (opts->snapshot && (opts->after >= 0 || opts->after_version))
			{
				snprintf(err, errlen, "--snapshot starts from a snapshot: it does not take --after or --after-version");
				return -1;
			}
			if (opts->all && (opts->after > 0 || opts->after_version))
			{
				snprintf(err, errlen, "--all starts from the heads or, with --after 0, from the kept history; "
						 "to resume one organization, watch it with --org, --after and --after-version");
				return -1;
			}
			if (!opts->all)
				REQUIRED(opts->norgs, "--all or at least one --org");
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
			if (opts->metrics_interval_s > 0 && !opts->metrics_file)
			{
				snprintf(err, errlen, "--metrics-interval goes with --metrics-file");
				return -1;
			}
			if (opts->metrics_file && !opts->metrics_file[0])
			{
				snprintf(err, errlen, "--metrics-file must not be empty");
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
		case CMD_GET:
			REQUIRED(opts->norgs, "--org");
			if (opts->norgs > 1)
			{
				snprintf(err, errlen, "get takes one --org");
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

	/* Ids the server would refuse at every call are refused here, once. */
	for (int i = 0; i < opts->norgs; i++)
		if (id_too_long("--org", opts->orgs[i], err, errlen))
			return -1;
	if (id_too_long("--org", opts->org, err, errlen) ||
		id_too_long("--replica-id", opts->replica_id, err, errlen) ||
		id_too_long("--correlation-id", opts->correlation_id, err, errlen))
		return -1;
	return 0;
#undef ONLY_FOR
#undef REQUIRED
}

/* Whether an id is over the server's limit; says so in err. */
static int
id_too_long(const char *flag, const char *id, char *err, size_t errlen)
{
	size_t		len = id ? strlen(id) : 0;

	if (len <= EH_MAX_ID_BYTES)
		return 0;
	snprintf(err, errlen, "%s is %zu bytes long; the limit is %d bytes", flag, len, EH_MAX_ID_BYTES);
	return 1;
}
