/*
 * main.c: eh_bench, the subscriber-side measurements of make bench
 * (bench/run.sh): its options and its modes.
 *
 *   eh_bench sub      library subscribers: delivery latency (subscribe.c)
 *   eh_bench catchup  one library client catching up (subscribe.c)
 *   eh_bench listen   connections that LISTEN, or sit idle (subscribe.c)
 *   eh_bench stamp    latency of the lines of watch processes (stamp.c)
 *   eh_bench pctl     percentiles of pgbench -l logs (stamp.c)
 *   eh_bench select, snapshot-sql, snapshot
 *                     an organization's state read whole (read.c)
 *
 * Each mode is described above the function that runs it.  Each prints
 * one line of key=value pairs on stdout (milliseconds, seconds, kB).
 * Connections use libpq's environment (PGHOST, PGPORT...).
 */
#include "eh_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every option of every mode, with its default. */
typedef struct bench_options
{
	const char *org;			/* -o */
	const char *ready;			/* -r */
	const char *done;			/* -D */
	const char *latfile;		/* -L */
	int			n;				/* -n */
	int			listen;			/* -l */
	int			poll_ms;		/* -p */
	int			fetch;			/* -c */
	int			page;			/* -P */
	int			ordered;		/* -s */
	long long	expect;			/* -e */
	double		drain_s;		/* -t */
	double		from;			/* -f */
	double		until;			/* -u */
} bench_options;

/* How an option's argument is stored. */
typedef enum
{
	OPT_STRING, OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_FLAG
} option_kind;

/* The options: letter, kind, and where in bench_options it goes. */
static const struct
{
	char		letter;
	option_kind kind;
	size_t		offset;
}			option_table[] =
{
	{'o', OPT_STRING, offsetof(bench_options, org)},
	{'r', OPT_STRING, offsetof(bench_options, ready)},
	{'D', OPT_STRING, offsetof(bench_options, done)},
	{'L', OPT_STRING, offsetof(bench_options, latfile)},
	{'n', OPT_INT, offsetof(bench_options, n)},
	{'l', OPT_INT, offsetof(bench_options, listen)},
	{'p', OPT_INT, offsetof(bench_options, poll_ms)},
	{'c', OPT_INT, offsetof(bench_options, fetch)},
	{'P', OPT_INT, offsetof(bench_options, page)},
	{'s', OPT_FLAG, offsetof(bench_options, ordered)},
	{'e', OPT_LONG, offsetof(bench_options, expect)},
	{'t', OPT_DOUBLE, offsetof(bench_options, drain_s)},
	{'f', OPT_DOUBLE, offsetof(bench_options, from)},
	{'u', OPT_DOUBLE, offsetof(bench_options, until)},
};

/* Prints the usage and ends the process. */
static void
usage(void)
{
	fprintf(stderr,
			"usage: eh_bench sub -o ORG -n CLIENTS [-l 0|1] [-p POLL_MS] [-r READY] [-L LATFILE] [-t DRAIN_S]\n"
			"       eh_bench stamp -e LINES [-r READY] [-D DONE] [-L LATFILE] [-t DRAIN_S] FIFO...\n"
			"       eh_bench catchup -o ORG -e EXPECT\n"
			"       eh_bench listen -n CONNS [-l 0|1] [-r READY]\n"
			"       eh_bench pctl [-f FROM_EPOCH] [-u UNTIL_EPOCH] PGBENCH_LOG...\n"
			"       eh_bench select -o ORG -e EXPECT [-c FETCH] [-s]\n"
			"       eh_bench snapshot-sql -o ORG -e EXPECT [-P PAGE]\n"
			"       eh_bench snapshot -o ORG -e EXPECT [-P PAGE]\n");
	exit(2);
}

/* Stores option LETTER's argument ARG in O through option_table. */
static void
set_option(bench_options *o, int letter, const char *arg)
{
	for (size_t i = 0; i < sizeof(option_table) / sizeof(option_table[0]); i++)
	{
		char	   *field = (char *) o + option_table[i].offset;

		if (option_table[i].letter != letter)
			continue;
		switch (option_table[i].kind)
		{
			case OPT_STRING:
				*(const char **) field = arg;
				break;
			case OPT_INT:
				*(int *) field = atoi(arg);
				break;
			case OPT_LONG:
				*(long long *) field = atoll(arg);
				break;
			case OPT_DOUBLE:
				*(double *) field = atof(arg);
				break;
			case OPT_FLAG:
				*(int *) field = 1;
				break;
		}
		return;
	}
	usage();
}

int
main(int argc, char **argv)
{
	const char *mode;
	bench_options o = {.n = 1, .listen = 1, .poll_ms = 5000, .page = 1000, .drain_s = 30};
	int			opt;

	if (argc < 2)
		usage();
	mode = argv[1];
	optind = 2;
	while ((opt = getopt(argc, argv, "o:n:l:p:r:D:L:t:e:f:u:c:P:s")) != -1)
		set_option(&o, opt, optarg);
	if (o.n < 1 || o.fetch < 0 || o.page < 1)
		usage();
	if (strcmp(mode, "sub") == 0 && o.org)
		return run_sub(o.org, o.n, o.listen, o.poll_ms, o.drain_s, o.ready, o.latfile);
	if (strcmp(mode, "stamp") == 0 && o.expect > 0 && optind < argc)
		return run_stamp(argc - optind, argv + optind, o.expect, o.drain_s, o.ready, o.done, o.latfile);
	if (strcmp(mode, "catchup") == 0 && o.org && o.expect > 0)
		return run_catchup(o.org, o.expect);
	if (strcmp(mode, "listen") == 0)
		return run_listen(o.n, o.listen, o.ready);
	if (strcmp(mode, "select") == 0 && o.org && o.expect > 0)
		return run_select(o.org, o.expect, o.fetch, o.ordered);
	if (strcmp(mode, "snapshot-sql") == 0 && o.org && o.expect > 0)
		return run_snapshot_sql(o.org, o.expect, o.page);
	if (strcmp(mode, "snapshot") == 0 && o.org && o.expect > 0)
		return run_snapshot(o.org, o.expect, o.page);
	if (strcmp(mode, "pctl") == 0 && optind < argc)
		return run_pctl(argc - optind, argv + optind, o.from, o.until);
	usage();
	return 2;
}
