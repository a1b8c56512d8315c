/*
 * replica.c: a gateway-controller replica for the demo, on libeventhub.
 *
 * It keeps, as a controller does, an in-memory map of the entities of the
 * organizations it follows (CREATE and UPDATE set an entity's data, DELETE
 * removes it), reports its progress and a hash of each organization's map
 * with heartbeats, and measures the publish-to-apply latency of every event.
 * On SIGTERM it writes its map, sorted, to MAPFILE and prints a summary as
 * one JSON line.
 *
 *   replica CONNINFO REPLICA_ID MAPFILE ORGANIZATION...
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eventhub.h"

typedef struct entity
{
	char	   *org;
	char	   *id;
	char	   *data;
} entity;

typedef struct replica
{
	entity	   *items;
	size_t		n;
	size_t		cap;
	double	   *lat_ms;
	size_t		nlat;
	size_t		latcap;
	int			failed;			/* out of memory */
} replica;

static volatile sig_atomic_t stopping = 0;

static void
on_signal(int signo)
{
	(void) signo;
	stopping = 1;
}

static int
compare_entities(const void *a, const void *b)
{
	const entity *x = a;
	const entity *y = b;
	int			c = strcmp(x->org, y->org);

	return c ? c : strcmp(x->id, y->id);
}

static int
compare_doubles(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* "2026-11-30T07:01:53.448714Z" as seconds since the epoch. */
static double
parse_utc(const char *ts)
{
	struct tm	tm;
	int			micro = 0;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(ts, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &micro) < 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (double) timegm(&tm) + micro / 1e6;
}

static double
now_utc(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

/* FNV-1a over the sorted entities of one organization (all when org is NULL). */
static uint64_t
digest(replica *r, const char *org)
{
	uint64_t	h = 1469598103934665603ULL;

	qsort(r->items, r->n, sizeof(entity), compare_entities);
	for (size_t i = 0; i < r->n; i++)
	{
		const char *parts[3] = {r->items[i].org, r->items[i].id, r->items[i].data};

		if (org && strcmp(org, r->items[i].org) != 0)
			continue;
		for (int p = 0; p < 3; p++)
			for (const unsigned char *s = (const unsigned char *) parts[p];; s++)
			{
				h = (h ^ *s) * 1099511628211ULL;
				if (!*s)
					break;
			}
	}
	return h;
}

static int
apply(eh_client *client, const eh_event *ev, void *arg)
{
	replica    *r = arg;
	size_t		i;
	char		hash[20];

	if (r->nlat == r->latcap)
	{
		size_t		ncap = r->latcap ? r->latcap * 2 : 1024;
		double	   *n = realloc(r->lat_ms, ncap * sizeof(double));

		if (!n)
		{
			r->failed = 1;
			return 1;
		}
		r->lat_ms = n;
		r->latcap = ncap;
	}
	r->lat_ms[r->nlat++] = (now_utc() - parse_utc(ev->processed_timestamp)) * 1000.0;

	for (i = 0; i < r->n; i++)
		if (strcmp(r->items[i].org, ev->organization_id) == 0 && strcmp(r->items[i].id, ev->entity_id) == 0)
			break;
	if (strcmp(ev->action, "DELETE") == 0)
	{
		if (i < r->n)
		{
			free(r->items[i].org);
			free(r->items[i].id);
			free(r->items[i].data);
			r->items[i] = r->items[--r->n];
		}
	}
	else if (i < r->n)
	{
		char	   *data = strdup(ev->event_data);

		if (!data)
		{
			r->failed = 1;
			return 1;
		}
		free(r->items[i].data);
		r->items[i].data = data;
	}
	else
	{
		if (r->n == r->cap)
		{
			size_t		ncap = r->cap ? r->cap * 2 : 64;
			entity	   *n = realloc(r->items, ncap * sizeof(entity));

			if (!n)
			{
				r->failed = 1;
				return 1;
			}
			r->items = n;
			r->cap = ncap;
		}
		r->items[r->n].org = strdup(ev->organization_id);
		r->items[r->n].id = strdup(ev->entity_id);
		r->items[r->n].data = strdup(ev->event_data);
		if (!r->items[r->n].org || !r->items[r->n].id || !r->items[r->n].data)
		{
			r->failed = 1;
			return 1;
		}
		r->n++;
	}
	/* What this replica now serves for the organization, for replica_status. */
	snprintf(hash, sizeof(hash), "%016llx", (unsigned long long) digest(r, ev->organization_id));
	eh_set_config_hash(client, ev->organization_id, hash);
	return 0;
}

static void
resync(eh_client *client, const char *org, eh_resync_reason reason, int64_t head, void *arg)
{
	(void) client;
	(void) arg;
	/* A real controller reloads the organization from its own tables here. */
	fprintf(stderr, "%s: resync (reason %d) at %lld\n", org, (int) reason, (long long) head);
}

static void
log_line(eh_client *client, eh_log_level level, const char *message, void *arg)
{
	(void) client;
	if (level >= EH_LOG_INFO)
		fprintf(stderr, "%s: %s\n", (const char *) arg, message);
}

static double
percentile(const double *sorted, size_t n, double p)
{
	size_t		i;

	if (n == 0)
		return 0;
	i = (size_t) (p * (double) (n - 1) + 0.5);
	return sorted[i];
}

int
main(int argc, char **argv)
{
	replica		r;
	eh_client  *client;
	struct sigaction sa;
	FILE	   *map;

	if (argc < 5)
	{
		fprintf(stderr, "usage: %s CONNINFO REPLICA_ID MAPFILE ORGANIZATION...\n", argv[0]);
		return 2;
	}
	memset(&r, 0, sizeof(r));
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	client = eh_client_new(argv[1]);
	if (!client)
		return 1;
	eh_set_event_callback(client, apply, &r);
	eh_set_resync_callback(client, resync, NULL);
	eh_set_log_callback(client, log_line, argv[2]);
	eh_set_poll_interval(client, 1000);
	eh_set_replica(client, argv[2], "{\"role\": \"demo\"}", EVENTHUB_VERSION);
	eh_set_heartbeat_interval(client, 200);
	for (int i = 4; i < argc; i++)
		eh_subscribe(client, argv[i], 0);
	if (eh_connect(client) != EH_OK)
	{
		fprintf(stderr, "%s: %s\n", argv[2], eh_error_message(client));
		eh_client_free(client);
		return 1;
	}
	while (!stopping && !r.failed)
	{
		if (eh_wait(client, 1000) < 0)
		{
			fprintf(stderr, "%s: %s\n", argv[2], eh_error_message(client));
			break;
		}
	}

	map = fopen(argv[3], "w");
	if (map)
	{
		qsort(r.items, r.n, sizeof(entity), compare_entities);
		for (size_t i = 0; i < r.n; i++)
			fprintf(map, "%s\t%s\t%s\n", r.items[i].org, r.items[i].id, r.items[i].data);
		fclose(map);
	}
	qsort(r.lat_ms, r.nlat, sizeof(double), compare_doubles);
	printf("{\"replica\": \"%s\", \"applied\": {", argv[2]);
	for (int i = 4; i < argc; i++)
		printf("%s\"%s\": %lld", i > 4 ? ", " : "", argv[i], (long long) eh_cursor(client, argv[i]));
	printf("}, \"events\": %llu, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f,"
		   " \"reconnects\": %llu, \"resyncs\": %llu, \"digest\": \"%016llx\"}\n",
		   (unsigned long long) eh_stat(client, EH_STAT_EVENTS_DELIVERED), percentile(r.lat_ms, r.nlat, 0.50),
		   percentile(r.lat_ms, r.nlat, 0.99), r.nlat ? r.lat_ms[r.nlat - 1] : 0.0,
		   (unsigned long long) eh_stat(client, EH_STAT_RECONNECTS),
		   (unsigned long long) eh_stat(client, EH_STAT_RESYNCS),
		   (unsigned long long) digest(&r, NULL));

	eh_client_free(client);
	for (size_t i = 0; i < r.n; i++)
	{
		free(r.items[i].org);
		free(r.items[i].id);
		free(r.items[i].data);
	}
	free(r.items);
	free(r.lat_ms);
	return r.failed ? 1 : 0;
}
