/*
 * cli_options.c: the eventhub tool's command line: the usage texts, and
 * the parse, read from a table of options, with what each command needs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
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
"                      [--batch-bytes N] [--query-timeout MS] [--reconnect-backoff MS]\n"
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
"  --reconnect-backoff MS  wait at most this long between connection attempts\n"
"                         (default 1000; the waits double from 100 ms to it)\n"
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
"                    [--reconnect-backoff MS]\n"
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
"                         reconnecting (default 30000)\n"
"  --reconnect-backoff MS  wait at most this long between connection attempts\n"
"                         (default 1000; the waits double from 100 ms to it)\n";

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

/* Usage text of a command (CMD_NONE: the overview). */
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

/* The commands' names, by cli_command. */
static const char *const command_names[] = {"", "publish", "watch", "status", "cleanup", "get", "metrics"};

#define lengthof(array) (sizeof(array) / sizeof((array)[0]))

/* A command's name ("" for CMD_NONE). */
const char *
cli_command_name(cli_command command)
{
	return (size_t) command < lengthof(command_names) ? command_names[command] : "";
}

/* Says in err what is wrong (a printf format); returns -1. */
static int
refuse(char *err, size_t errlen, const char *fmt,...) __attribute__((format(printf, 3, 4)));

static int
refuse(char *err, size_t errlen, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
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

/* A number of seconds > 0 and at most max; -1 otherwise. */
static int
parse_seconds(const char *value, double max, double *out)
{
	char	   *end;
	double		t;

	errno = 0;
	t = strtod(value, &end);
	if (errno != 0 || end == value || *end != '\0' || !(t > 0) || t > max)
		return -1;
	*out = t;
	return 0;
}

/* ------------------------------------------------------ the option table */

/* The commands as bits, for what an option group is for. */
#define FOR(command) (1u << (command))
#define FOR_EVERY (FOR(CMD_PUBLISH) | FOR(CMD_WATCH) | FOR(CMD_STATUS) | FOR(CMD_CLEANUP) | \
				   FOR(CMD_GET) | FOR(CMD_METRICS))

/*
 * The options a command may not take come in groups, checked in this
 * order once the command line is read; a group given to a command that
 * does not take it is refused, naming the whole group.
 */
enum
{
	G_ORG, G_PUBLISH, G_WATCH, G_FETCH, G_STATUS, G_CLEANUP, G_ANY
};

static const struct option_group
{
	unsigned	commands;		/* FOR() the commands that take it */
	const char *names;			/* its options, for the message */
}			option_groups[] = {
	[G_ORG] = {FOR_EVERY & ~(FOR(CMD_CLEANUP) | FOR(CMD_METRICS)), "--org"},
	[G_PUBLISH] = {FOR(CMD_PUBLISH), "--type, --action, --entity, --correlation-id or --data"},
	[G_WATCH] = {FOR(CMD_WATCH),
		"--after, --after-version, --count, --timeout, --poll-interval, --fallback-poll-interval, "
		"--no-listen, --all, --snapshot, --replica-id, --labels, --heartbeat-interval, "
	"--heartbeat-conninfo, --metrics-file or --metrics-interval"},
	[G_FETCH] = {FOR(CMD_WATCH) | FOR(CMD_GET), "--batch-bytes, --query-timeout or --reconnect-backoff"},
	[G_STATUS] = {FOR(CMD_STATUS), "--json or --fail-if-lag"},
	[G_CLEANUP] = {FOR(CMD_CLEANUP), "--older-than"},
};

/* How an option's value is read, and where it goes. */
typedef enum option_kind
{
	K_STRING,					/* a const char * field: the value as it is */
	K_FLAG,						/* an int field set to 1; no value */
	K_INT,						/* an int field: an integer in [min, max] */
	K_INT64,					/* an int64_t field: an integer in [min, max] */
	K_SECONDS,					/* a double field: seconds > 0 and <= max */
	K_ORG,						/* --org: org, and orgs[] for watch, status and get */
	K_CONNINFO,					/* --dbname, as -d */
	K_HELP						/* --help: the command's usage */
} option_kind;

typedef struct option_spec
{
	const char *name;			/* the long option, without "--" */
	option_kind kind;
	int			group;			/* in option_groups; G_ANY: every command */
	size_t		field;			/* offsetof(cli_options, ...) */
	int64_t		min;			/* K_INT, K_INT64 */
	int64_t		max;			/* K_INT, K_INT64, K_SECONDS */
	const char *what;			/* K_INT, K_INT64: what the value must be */
} option_spec;

#define FIELD(name) offsetof(cli_options, name)
#define MS_FROM(min) (min), 86400000, "milliseconds from " #min " to 86400000"
#define NO_VALUE 0, 0, NULL

static const option_spec option_specs[] = {
	{"org", K_ORG, G_ORG, FIELD(org), NO_VALUE},
	{"type", K_STRING, G_PUBLISH, FIELD(type), NO_VALUE},
	{"action", K_STRING, G_PUBLISH, FIELD(action), NO_VALUE},
	{"entity", K_STRING, G_PUBLISH, FIELD(entity), NO_VALUE},
	{"correlation-id", K_STRING, G_PUBLISH, FIELD(correlation_id), NO_VALUE},
	{"data", K_STRING, G_PUBLISH, FIELD(data), NO_VALUE},
	{"after", K_INT64, G_WATCH, FIELD(after), 0, INT64_MAX, "a revision >= 0"},
	{"count", K_INT64, G_WATCH, FIELD(count), 1, INT64_MAX, "a number >= 1"},
	{"timeout", K_SECONDS, G_WATCH, FIELD(timeout_s), 0, 31536000, NULL},
	{"poll-interval", K_INT, G_WATCH, FIELD(poll_interval_ms), MS_FROM(10)},
	{"no-listen", K_FLAG, G_WATCH, FIELD(no_listen), NO_VALUE},
	{"older-than", K_STRING, G_CLEANUP, FIELD(older_than), NO_VALUE},
	{"help", K_HELP, G_ANY, FIELD(help), NO_VALUE},
	{"replica-id", K_STRING, G_WATCH, FIELD(replica_id), NO_VALUE},
	{"labels", K_STRING, G_WATCH, FIELD(labels), NO_VALUE},
	{"heartbeat-interval", K_INT, G_WATCH, FIELD(heartbeat_interval_ms), MS_FROM(100)},
	{"json", K_FLAG, G_STATUS, FIELD(json), NO_VALUE},
	{"fail-if-lag", K_INT64, G_STATUS, FIELD(fail_if_lag), 0, INT64_MAX, "a number of revisions >= 0"},
	{"after-version", K_STRING, G_WATCH, FIELD(after_version), NO_VALUE},
	{"fallback-poll-interval", K_INT, G_WATCH, FIELD(fallback_poll_interval_ms), MS_FROM(10)},
	{"heartbeat-conninfo", K_STRING, G_WATCH, FIELD(heartbeat_conninfo), NO_VALUE},
	{"all", K_FLAG, G_WATCH, FIELD(all), NO_VALUE},
	{"batch-bytes", K_INT, G_FETCH, FIELD(batch_bytes), 1024, 1073741824, "a number of bytes from 1024 to 1073741824"},
	{"query-timeout", K_INT, G_FETCH, FIELD(query_timeout_ms), MS_FROM(100)},
	{"reconnect-backoff", K_INT, G_FETCH, FIELD(reconnect_backoff_ms), 1, 3600000,
	"milliseconds from 1 to 3600000"},
	{"snapshot", K_FLAG, G_WATCH, FIELD(snapshot), NO_VALUE},
	{"metrics-file", K_STRING, G_WATCH, FIELD(metrics_file), NO_VALUE},
	{"metrics-interval", K_SECONDS, G_WATCH, FIELD(metrics_interval_s), 0, 86400, NULL},
	{"dbname", K_CONNINFO, G_ANY, FIELD(conninfo), NO_VALUE},
};

/*
 * What getopt_long returns for option_specs[i].  glibc's getopt_long
 * leaves it in optopt for a flag given a value (--json=1), which the
 * message for an unknown option then shows: the table keeps its order.
 */
#define OPTION_VALUE(i) (1000 + (int) (i))

/* --org: the list of organizations for the commands that keep one. */
static int
add_org(cli_options *opts, const char *org, char *err, size_t errlen)
{
	if (opts->command == CMD_WATCH || opts->command == CMD_STATUS || opts->command == CMD_GET)
	{
		if (opts->norgs == CLI_MAX_ORGS)
			return refuse(err, errlen, "at most %d --org options", CLI_MAX_ORGS);
		opts->orgs[opts->norgs++] = org;
	}
	opts->org = org;
	return 0;
}

/* Stores an option's value (arg) where its spec says, read as it says. */
static int
apply_option(const option_spec *spec, const char *arg, cli_options *opts, char *err, size_t errlen)
{
	char	   *field = (char *) opts + spec->field;
	int64_t		v;

	switch (spec->kind)
	{
		case K_ORG:
			return add_org(opts, arg, err, errlen);
		case K_STRING:
		case K_CONNINFO:
			*(const char **) field = arg;
			return 0;
		case K_FLAG:
		case K_HELP:
			*(int *) field = 1;
			return 0;
		case K_SECONDS:
			if (parse_seconds(arg, (double) spec->max, (double *) field) == 0)
				return 0;
			return refuse(err, errlen, "--%s needs a number of seconds > 0, not \"%s\"", spec->name, arg);
		case K_INT:
		case K_INT64:
			if (parse_int64(arg, spec->min, spec->max, &v) != 0)
				return refuse(err, errlen, "--%s needs %s, not \"%s\"", spec->name, spec->what, arg);
			if (spec->kind == K_INT)
				*(int *) field = (int) v;
			else
				*(int64_t *) field = v;
			return 0;
	}
	return 0;
}

/* ------------------------------------------------------------ the parse */

/*
 * The global options before the command (-d CONNINFO, --help) and the
 * command.  Returns 0 with *first at the command, 1 for --help, or -1.
 */
static int
parse_command(int argc, char **argv, cli_options *opts, int *first, char *err, size_t errlen)
{
	int			i;

	for (i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "-d") == 0 || strcmp(argv[i], "--dbname") == 0)
		{
			if (i + 1 >= argc)
				return refuse(err, errlen, "%s needs a connection string", argv[i]);
			opts->conninfo = argv[++i];
		}
		else if (strncmp(argv[i], "--dbname=", 9) == 0)
			opts->conninfo = argv[i] + 9;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
		{
			opts->help = 1;
			return 1;
		}
		else
			break;
	}
	if (i >= argc)
		return refuse(err, errlen, "no command given");
	for (size_t c = 1; c < lengthof(command_names); c++)
		if (strcmp(argv[i], command_names[c]) == 0)
			opts->command = (cli_command) c;
	if (opts->command == CMD_NONE)
		return refuse(err, errlen, "unknown command \"%s\"", argv[i]);
	*first = i;
	return 0;
}

/*
 * An option getopt_long could not read: an unknown one, or one without
 * its value.  argv is the command's (argv[0] the command).
 */
static int
refuse_option(int ch, char **argv, const char *name, char *err, size_t errlen)
{
	const char *arg = argv[optind - 1];

	if (ch == ':')
		return refuse(err, errlen, "%s needs a value", arg);

	/*
	 * optopt is the unknown letter of a short option, which may sit inside
	 * a cluster (-xyz) whose argument optind has not passed yet; for an
	 * unknown long option it is 0 and optind has moved past it.
	 */
	if (optopt != 0)
		return refuse(err, errlen, "unknown option \"-%c\" for %s", optopt, name);
	return refuse(err, errlen, "unknown option \"%.*s\" for %s", (int) strcspn(arg, "="), arg, name);
}

/*
 * The command's options, from argv[0] (the command) on; each group given
 * is set in *given.  Returns 0, 1 for --help, or -1.
 */
static int
parse_options(int argc, char **argv, cli_options *opts, unsigned *given, char *err, size_t errlen)
{
	struct option longopts[lengthof(option_specs) + 1];
	int			ch;

	memset(longopts, 0, sizeof(longopts));
	for (size_t i = 0; i < lengthof(option_specs); i++)
	{
		longopts[i].name = option_specs[i].name;
		longopts[i].has_arg = option_specs[i].kind == K_FLAG || option_specs[i].kind == K_HELP
			? no_argument : required_argument;
		longopts[i].val = OPTION_VALUE(i);
	}

	/* optind 0 makes glibc's getopt forget any earlier parse. */
	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":d:", longopts, NULL)) != -1)
	{
		const option_spec *spec;

		if (ch == 'd')
		{
			opts->conninfo = optarg;
			continue;
		}
		if (ch < OPTION_VALUE(0) || ch >= OPTION_VALUE(lengthof(option_specs)))
			return refuse_option(ch, argv, argv[0], err, errlen);
		spec = &option_specs[ch - OPTION_VALUE(0)];
		if (apply_option(spec, optarg, opts, err, errlen) != 0)
			return -1;
		if (spec->kind == K_HELP)
			return 1;
		if (spec->group != G_ANY)
			*given |= 1u << spec->group;
	}
	if (optind < argc)
		return refuse(err, errlen, "unexpected argument \"%s\"", argv[optind]);
	return 0;
}

/* ---------------------------------------------- what each command needs */

/* The groups given that the command does not take: the first is refused. */
static int
check_groups(const cli_options *opts, unsigned given, const char *name, char *err, size_t errlen)
{
	for (size_t g = 0; g < lengthof(option_groups); g++)
		if ((given & (1u << g)) && !(option_groups[g].commands & FOR(opts->command)))
			return refuse(err, errlen, "%s does not take %s", name, option_groups[g].names);
	return 0;
}

/* publish: the event's four fields, a known action; data defaults to {}. */
static int
check_publish(cli_options *opts, char *err, size_t errlen)
{
	if (!opts->org)
		return refuse(err, errlen, "publish needs --org");
	if (!opts->type)
		return refuse(err, errlen, "publish needs --type");
	if (!opts->action)
		return refuse(err, errlen, "publish needs --action");
	if (!opts->entity)
		return refuse(err, errlen, "publish needs --entity");
	if (strcmp(opts->action, "CREATE") != 0 && strcmp(opts->action, "UPDATE") != 0 &&
		strcmp(opts->action, "DELETE") != 0)
		return refuse(err, errlen, "--action must be CREATE, UPDATE or DELETE, not \"%s\"", opts->action);
	if (!opts->data)
		opts->data = "{}";
	return 0;
}

/* watch: where it starts (--all, --org, --snapshot, --after, --after-version). */
static int
check_watch_start(const cli_options *opts, char *err, size_t errlen)
{
	if (opts->all && opts->norgs)
		return refuse(err, errlen, "--all follows every organization: it does not take --org");
	if (opts->snapshot && (opts->after >= 0 || opts->after_version))
		return refuse(err, errlen, "--snapshot starts from a snapshot: it does not take --after or --after-version");
	if (opts->all && (opts->after > 0 || opts->after_version))
		return refuse(err, errlen, "--all starts from the heads or, with --after 0, from the kept history; "
					  "to resume one organization, watch it with --org, --after and --after-version");
	if (!opts->all && !opts->norgs)
		return refuse(err, errlen, "watch needs --all or at least one --org");
	return 0;
}

/* watch: the options that go with others, and values that must not be empty. */
static int
check_watch(const cli_options *opts, char *err, size_t errlen)
{
	if (check_watch_start(opts, err, errlen) != 0)
		return -1;
	if ((opts->labels || opts->heartbeat_interval_ms || opts->heartbeat_conninfo) && !opts->replica_id)
		return refuse(err, errlen, "--labels, --heartbeat-interval and --heartbeat-conninfo need --replica-id");
	if (opts->after_version && (opts->after < 0 || opts->norgs != 1))
		return refuse(err, errlen, "--after-version goes with --after and one --org");
	if (opts->metrics_interval_s > 0 && !opts->metrics_file)
		return refuse(err, errlen, "--metrics-interval goes with --metrics-file");
	if (opts->metrics_file && !opts->metrics_file[0])
		return refuse(err, errlen, "--metrics-file must not be empty");
	if (opts->replica_id && !opts->replica_id[0])
		return refuse(err, errlen, "--replica-id must not be empty");
	for (int i = 0; i < opts->norgs; i++)
		for (int j = 0; j < i; j++)
			if (strcmp(opts->orgs[i], opts->orgs[j]) == 0)
				return refuse(err, errlen, "--org \"%s\" given twice", opts->orgs[i]);
	return 0;
}

/* What the command needs, and what it takes only together. */
static int
check_command(cli_options *opts, char *err, size_t errlen)
{
	switch (opts->command)
	{
		case CMD_PUBLISH:
			return check_publish(opts, err, errlen);
		case CMD_WATCH:
			return check_watch(opts, err, errlen);
		case CMD_GET:
			if (!opts->norgs)
				return refuse(err, errlen, "get needs --org");
			if (opts->norgs > 1)
				return refuse(err, errlen, "get takes one --org");
			return 0;
		case CMD_STATUS:
			if (opts->norgs > 1)
				return refuse(err, errlen, "status takes at most one --org");
			return 0;
		case CMD_CLEANUP:
			if (!opts->older_than)
				return refuse(err, errlen, "cleanup needs --older-than");
			return 0;
		default:
			return 0;
	}
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

/*
 * Ids that are empty, or that the server would refuse at every call, are
 * refused here, once.
 */
static int
check_ids(const cli_options *opts, char *err, size_t errlen)
{
	for (int i = 0; i < opts->norgs; i++)
		if (!opts->orgs[i][0])
			return refuse(err, errlen, "--org must not be empty");
	if (opts->org && !opts->org[0])
		return refuse(err, errlen, "--org must not be empty");
	for (int i = 0; i < opts->norgs; i++)
		if (id_too_long("--org", opts->orgs[i], err, errlen))
			return -1;
	if (id_too_long("--org", opts->org, err, errlen) ||
		id_too_long("--replica-id", opts->replica_id, err, errlen) ||
		id_too_long("--correlation-id", opts->correlation_id, err, errlen))
		return -1;
	return 0;
}

/*
 * Parses argv: the global options, the command, its options (read as
 * option_specs says), then what the command takes and needs.
 */
int
cli_parse(int argc, char **argv, cli_options *opts, char *err, size_t errlen)
{
	unsigned	given = 0;
	int			first = 0;
	int			rc;

	memset(opts, 0, sizeof(*opts));
	opts->after = -1;
	opts->timeout_s = -1;
	opts->fail_if_lag = -1;
	err[0] = '\0';
	if ((rc = parse_command(argc, argv, opts, &first, err, errlen)) != 0)
		return rc > 0 ? 0 : -1;
	if ((rc = parse_options(argc - first, argv + first, opts, &given, err, errlen)) != 0)
		return rc > 0 ? 0 : -1;
	if (check_groups(opts, given, command_names[opts->command], err, errlen) != 0 ||
		check_command(opts, err, errlen) != 0 ||
		check_ids(opts, err, errlen) != 0)
		return -1;
	return 0;
}
