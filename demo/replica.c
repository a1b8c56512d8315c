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

/* A set of entities: the map, or a snapshot being received. */
typedef struct entities
{
	entity	   *items;
	size_t		n;
	size_t		cap;
} entities;

typedef struct replica
{
	entities	map;
	entities	pending;		/* the snapshot being received (--snapshot) */
	double	   *lat_ms;
	size_t		nlat;
	size_t		latcap;
	int			failed;			/* out of memory */
	const char *name;
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
digest(entities *m, const char *org)
{
	uint64_t	h = 1469598103934665603ULL;

	qsort(m->items, m->n, sizeof(entity), compare_entities);
	for (size_t i = 0; i < m->n; i++)
	{
		const char *parts[3] = {m->items[i].org, m->items[i].id, m->items[i].data};

		if (org && strcmp(org, m->items[i].org) != 0)
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

/* Reports what this replica now serves for org, for replica_status. */
static void
report_hash(eh_client *client, replica *r, const char *org)
{
	char		hash[20];

	snprintf(hash, sizeof(hash), "%016llx", (unsigned long long) digest(&r->map, org));
	eh_set_config_hash(client, org, hash);
}

static void
free_entity(entity *e)
{
	free(e->org);
	free(e->id);
	free(e->data);
}

/* Sets org/id to data in m, adding it if missing; 0 when out of memory. */
static int
set_entity(entities *m, const char *org, const char *id, const char *data)
{
	size_t		i;
	char	   *copy = strdup(data);

	if (!copy)
		return 0;
	for (i = 0; i < m->n; i++)
		if (strcmp(m->items[i].org, org) == 0 && strcmp(m->items[i].id, id) == 0)
			break;
	if (i < m->n)
	{
		free(m->items[i].data);
		m->items[i].data = copy;
		return 1;
	}
	if (m->n == m->cap)
	{
		size_t		ncap = m->cap ? m->cap * 2 : 64;
		entity	   *n = realloc(m->items, ncap * sizeof(entity));

		if (!n)
		{
			free(copy);
			return 0;
		}
		m->items = n;
		m->cap = ncap;
	}
	m->items[m->n].org = strdup(org);
	m->items[m->n].id = strdup(id);
	m->items[m->n].data = copy;
	if (!m->items[m->n].org || !m->items[m->n].id)
	{
		free_entity(&m->items[m->n]);
		return 0;
	}
	m->n++;
	return 1;
}

/* Removes org/id from m, if there; or every entity of org when id is NULL. */
static void
remove_entities(entities *m, const char *org, const char *id)
{
	for (size_t i = 0; i < m->n;)
	{
		if (strcmp(m->items[i].org, org) == 0 && (!id || strcmp(m->items[i].id, id) == 0))
		{
			free_entity(&m->items[i]);
			m->items[i] = m->items[--m->n];
		}
		else
			i++;
	}
}

/* Applies one event to the map and records its latency; 0 when out of memory. */
static int
apply_event(replica *r, const eh_event *ev)
{
	if (r->nlat == r->latcap)
	{
		size_t		ncap = r->latcap ? r->latcap * 2 : 1024;
		double	   *n = realloc(r->lat_ms, ncap * sizeof(double));

		if (!n)
			return 0;
		r->lat_ms = n;
		r->latcap = ncap;
	}
	r->lat_ms[r->nlat++] = (now_utc() - parse_utc(ev->processed_timestamp)) * 1000.0;

	if (strcmp(ev->action, "DELETE") == 0)
	{
		remove_entities(&r->map, ev->organization_id, ev->entity_id);
		return 1;
	}
	return set_entity(&r->map, ev->organization_id, ev->entity_id, ev->event_data);
}

/* The event callback (without --snapshot). */
static int
apply(eh_client *client, const eh_event *ev, void *arg)
{
	replica    *r = arg;

	if (!apply_event(r, ev))
	{
		r->failed = 1;
		return 1;
	}
	report_hash(client, r, ev->organization_id);
	return 0;
}

/* The transaction callback (--snapshot): a transaction's events at once. */
static int
apply_transaction(eh_client *client, const char *org, const eh_event *const *events, int n_events,
				  int ends_transaction, void *arg)
{
	replica    *r = arg;

	for (int i = 0; i < n_events; i++)
		if (!apply_event(r, events[i]))
		{
			r->failed = 1;
			return 1;
		}
	if (ends_transaction)
		report_hash(client, r, org);
	return 0;
}

/*
 * The snapshot callback (--snapshot): the organization's entities are
 * received aside and replace its part of the map at END, so that the map
 * stays whole while a snapshot is read or aborted.
 */
static void
snapshot(eh_client *client, const char *org, eh_snapshot_phase phase, int reason,
		 const eh_entity *const *ents, int n_entities, int64_t head_revision, const char *head_version,
		 void *arg)
{
	replica    *r = arg;

	(void) head_version;
	switch (phase)
	{
		case EH_SNAPSHOT_BEGIN:
			remove_entities(&r->pending, org, NULL);
			fprintf(stderr, "%s: %s: snapshot begin (reason %s) at %lld\n", r->name, org,
					reason ? eh_resync_reason_name((eh_resync_reason) reason) : "initial",
					(long long) head_revision);
			break;
		case EH_SNAPSHOT_ENTITIES:
			for (int i = 0; i < n_entities; i++)
				if (!set_entity(&r->pending, org, ents[i]->entity_id, ents[i]->event_data))
					r->failed = 1;
			break;
		case EH_SNAPSHOT_END:
			{
				size_t		n = 0;

				remove_entities(&r->map, org, NULL);
				for (size_t i = 0; i < r->pending.n; i++)
					if (strcmp(r->pending.items[i].org, org) == 0)
					{
						if (!set_entity(&r->map, org, r->pending.items[i].id, r->pending.items[i].data))
							r->failed = 1;
						n++;
					}
				remove_entities(&r->pending, org, NULL);
				report_hash(client, r, org);
				fprintf(stderr, "%s: %s: snapshot end at %lld: %zu entities\n", r->name, org,
						(long long) head_revision, n);
				break;
			}
		case EH_SNAPSHOT_ABORT:
			remove_entities(&r->pending, org, NULL);
			fprintf(stderr, "%s: %s: snapshot abort\n", r->name, org);
			break;
	}
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
	int			from_snapshot = argc > 1 && strcmp(argv[1], "--snapshot") == 0;

	/* From here on, argv[1] is CONNINFO. */
	argc -= from_snapshot;
	argv += from_snapshot;
	if (argc < 5)
	{
		fprintf(stderr, "usage: replica [--snapshot] CONNINFO REPLICA_ID MAPFILE ORGANIZATION...\n");
		return 2;
	}
	memset(&r, 0, sizeof(r));
	r.name = argv[2];
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	client = eh_client_new(argv[1]);
	if (!client)
		return 1;
	eh_set_event_callback(client, apply, &r);
	eh_set_resync_callback(client, resync, NULL);
	if (from_snapshot)
	{
		eh_set_transaction_callback(client, apply_transaction, &r);
		eh_set_snapshot_callback(client, snapshot, &r);
	}
	eh_set_log_callback(client, log_line, argv[2]);
	eh_set_poll_interval(client, 1000);
	eh_set_replica(client, argv[2], "{\"role\": \"demo\"}", EVENTHUB_VERSION);
	eh_set_heartbeat_interval(client, 200);
	for (int i = 4; i < argc; i++)
		eh_subscribe(client, argv[i], from_snapshot ? EH_FROM_SNAPSHOT : 0);
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
		qsort(r.map.items, r.map.n, sizeof(entity), compare_entities);
		for (size_t i = 0; i < r.map.n; i++)
			fprintf(map, "%s\t%s\t%s\n", r.map.items[i].org, r.map.items[i].id, r.map.items[i].data);
		fclose(map);
	}
	qsort(r.lat_ms, r.nlat, sizeof(double), compare_doubles);
	printf("{\"replica\": \"%s\", \"applied\": {", argv[2]);
	for (int i = 4; i < argc; i++)
		printf("%s\"%s\": %lld", i > 4 ? ", " : "", argv[i], (long long) eh_cursor(client, argv[i]));
	printf("}, \"events\": %llu, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f,"
		   " \"reconnects\": %llu, \"resyncs\": %llu, \"digest\": \"%016llx\","
		   " \"snapshots\": %llu, \"snapshot_entities\": %llu}\n",
		   (unsigned long long) eh_stat(client, EH_STAT_EVENTS_DELIVERED), percentile(r.lat_ms, r.nlat, 0.50),
		   percentile(r.lat_ms, r.nlat, 0.99), r.nlat ? r.lat_ms[r.nlat - 1] : 0.0,
		   (unsigned long long) eh_stat(client, EH_STAT_RECONNECTS),
		   (unsigned long long) eh_stat(client, EH_STAT_RESYNCS),
		   (unsigned long long) digest(&r.map, NULL),
		   (unsigned long long) eh_stat(client, EH_STAT_SNAPSHOTS),
		   (unsigned long long) eh_stat(client, EH_STAT_SNAPSHOT_ENTITIES));

	eh_client_free(client);
	for (size_t i = 0; i < r.map.n; i++)
		free_entity(&r.map.items[i]);
	for (size_t i = 0; i < r.pending.n; i++)
		free_entity(&r.pending.items[i]);
	free(r.map.items);
	free(r.pending.items);
	free(r.lat_ms);
	return r.failed ? 1 : 0;
}
