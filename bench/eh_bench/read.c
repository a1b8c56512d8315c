/*
 * read.c: eh_bench's readers of an organization's state (select,
 * snapshot-sql, snapshot) and the sampler of their server backend's memory.
 *
 * Each prints rows, seconds, rows_per_s, the client's peak RSS (maxrss_kb),
 * the server backend's pid and its peak anonymous memory
 * (backend_rss_anon_kb: RssAnon of /proc/PID/status, sampled every 10 ms
 * from connection to the last row; backend_rss_anon_start_kb is the first
 * sample).  Each reads every column's text, as an application would.
 * EXPECT is the number of rows; another count fails.
 */
#include "eh_bench.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <libpq-fe.h>

/*
 * A thread that samples RssAnon of a server backend every 10 ms.  RssAnon,
 * not VmHWM: a backend's VmHWM counts the shared_buffers pages it touched,
 * which grow with the rows read whatever the backend keeps.
 */
typedef struct mem_sampler
{
	pthread_t	thread;
	atomic_int	pid;			/* 0 until found by application name */
	const char *appname;
	atomic_int	stop;
	long		start_kb;		/* first sample; -1 until read */
	long		peak_kb;
	long		samples;
} mem_sampler;

/* RssAnon of process PID in kB; -1 if unreadable. */
static long
rss_anon_kb(int pid)
{
	char		path[64],
				line[256];
	FILE	   *f;
	long		kb = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/*
 * The pid of the backend of the session named appname that reads a
 * snapshot (its client may have other sessions); 0 until there is one.
 */
static int
find_backend(PGconn *conn, const char *appname)
{
	const char *params[1] = {appname};
	PGresult   *res = PQexecParams(conn, "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
									" AND query LIKE '%snapshot%' ORDER BY backend_start LIMIT 1",
									1, NULL, params, NULL, NULL, 0);
	int			pid = 0;

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		pid = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return pid;
}

/* The sampler's thread: finds the backend if need be, then samples it. */
static void *
sampler_main(void *arg)
{
	mem_sampler *m = arg;
	PGconn	   *conn = NULL;

	if (m->appname)
	{
		conn = PQconnectdb("");
		if (PQstatus(conn) != CONNECTION_OK)
			die("connect: %s", PQerrorMessage(conn));
	}
	while (!atomic_load(&m->stop))
	{
		long		kb;

		if (atomic_load(&m->pid) == 0)
		{
			int			pid = find_backend(conn, m->appname);

			if (pid == 0)
			{
				usleep(2000);
				continue;
			}
			atomic_store(&m->pid, pid);
		}
		kb = rss_anon_kb(atomic_load(&m->pid));

		if (kb >= 0)
		{
			if (m->start_kb < 0)
				m->start_kb = kb;
			if (kb > m->peak_kb)
				m->peak_kb = kb;
			m->samples++;
		}
		usleep(10000);
	}
	PQfinish(conn);
	return NULL;
}

/* Samples the backend pid, or (pid 0) the one of the session named appname. */
static void
sampler_start(mem_sampler *m, int pid, const char *appname)
{
	memset(m, 0, sizeof(*m));
	m->pid = pid;
	m->appname = appname;
	m->start_kb = -1;
	m->peak_kb = -1;
	if (pthread_create(&m->thread, NULL, sampler_main, m) != 0)
		die("%s", "pthread_create failed");
}

/* Stops the sampler after one last sample. */
static void
sampler_stop(mem_sampler *m)
{
	long		kb = m->pid ? rss_anon_kb(m->pid) : -1;

	atomic_store(&m->stop, 1);
	pthread_join(m->thread, NULL);
	if (kb > m->peak_kb)
		m->peak_kb = kb;
}

/* The line select and snapshot-sql print (snapshot too, with its extras). */
static void
print_read(const char *what, long long rows, double secs, const mem_sampler *m)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	printf("mode=%s rows=%lld seconds=%.3f rows_per_s=%.0f maxrss_kb=%ld backend_pid=%d"
		   " backend_rss_anon_kb=%ld backend_rss_anon_start_kb=%ld samples=%ld",
		   what, rows, secs, rows / secs, ru.ru_maxrss, (int) m->pid, m->peak_kb, m->start_kb, m->samples);
}

/* A libpq connection from the environment, or death. */
static PGconn *
connect_plain(void)
{
	PGconn	   *conn = PQconnectdb("");

	if (PQstatus(conn) != CONNECTION_OK)
		die("connect: %s", PQerrorMessage(conn));
	return conn;
}

/* Runs SQL, a command, or dies. */
static void
exec_ok(PGconn *conn, const char *sql)
{
	PGresult   *res = PQexec(conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die("%s", PQerrorMessage(conn));
	PQclear(res);
}

/* Reads every value of every row, as an application would: total bytes. */
static size_t
touch_rows(const PGresult *res)
{
	size_t		bytes = 0;
	int			nf = PQnfields(res);

	for (int r = 0; r < PQntuples(res); r++)
		for (int f = 0; f < nf; f++)
			bytes += strlen(PQgetvalue(res, r, f));
	return bytes;
}

/* What the snapshot callback read, for its output line. */
static size_t touched_bytes;

#define SNAPSHOT_COLUMNS "event_type, entity_id, revision, version_id, action, event_data, originated_timestamp"

/* QUERY's rows through a cursor, FETCH at a time; adds to *ROWS, *BYTES. */
static void
select_by_cursor(PGconn *conn, const char *query, const char *org, int fetch,
				 long long *rows, size_t *bytes)
{
	const char *params[1] = {org};
	char		sql[256];
	PGresult   *res;

	snprintf(sql, sizeof(sql), "DECLARE snap_rows NO SCROLL CURSOR FOR %s", query);
	res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die("%s", PQerrorMessage(conn));
	PQclear(res);
	snprintf(sql, sizeof(sql), "FETCH %d FROM snap_rows", fetch);
	for (;;)
	{
		int			n;

		res = PQexec(conn, sql);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die("%s", PQerrorMessage(conn));
		n = PQntuples(res);
		*bytes += touch_rows(res);
		*rows += n;
		PQclear(res);
		if (n < fetch)
			break;
	}
}

/* QUERY's rows in single-row mode; adds to *ROWS and *BYTES. */
static void
select_streamed(PGconn *conn, const char *query, const char *org, long long *rows, size_t *bytes)
{
	const char *params[1] = {org};
	PGresult   *res;

	if (!PQsendQueryParams(conn, query, 1, NULL, params, NULL, NULL, 0) || !PQsetSingleRowMode(conn))
		die("%s", PQerrorMessage(conn));
	while ((res = PQgetResult(conn)) != NULL)
	{
		ExecStatusType st = PQresultStatus(res);

		if (st == PGRES_SINGLE_TUPLE)
		{
			*bytes += touch_rows(res);
			(*rows)++;
		}
		else if (st != PGRES_TUPLES_OK)
			die("%s", PQerrorMessage(conn));
		PQclear(res);
	}
}

/*
 * eh_bench select -o ORG -e EXPECT [-c FETCH] [-s]
 *     The baseline of a snapshot: the organization's rows of
 *     eventhub.events (the snapshot's columns) streamed to this client in
 *     one REPEATABLE READ, READ ONLY transaction, in single-row mode, or
 *     with -c through a cursor FETCH rows at a time; with -s in the
 *     snapshot's order (ORDER BY event_type, entity_id).
 */
int
run_select(const char *org, long long expect, int fetch, int ordered)
{
	PGconn	   *conn = connect_plain();
	mem_sampler m;
	const char *query = ordered ?
		"SELECT " SNAPSHOT_COLUMNS " FROM eventhub.events WHERE organization_id = $1 ORDER BY event_type, entity_id" :
		"SELECT " SNAPSHOT_COLUMNS " FROM eventhub.events WHERE organization_id = $1";
	char		what[32];
	long long	rows = 0;
	size_t		bytes = 0;
	double		t0,
				t1;

	snprintf(what, sizeof(what), "select%s%s", ordered ? "-ordered" : "", fetch > 0 ? "-cursor" : "");
	sampler_start(&m, PQbackendPID(conn), NULL);
	t0 = now_s(CLOCK_MONOTONIC);
	exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
	if (fetch > 0)
		select_by_cursor(conn, query, org, fetch, &rows, &bytes);
	else
		select_streamed(conn, query, org, &rows, &bytes);
	exec_ok(conn, "COMMIT");
	t1 = now_s(CLOCK_MONOTONIC);
	sampler_stop(&m);
	print_read(what, rows, t1 - t0, &m);
	printf(" bytes=%zu\n", bytes);
	PQfinish(conn);
	return rows == expect ? 0 : 1;
}

/*
 * eh_bench snapshot-sql -o ORG -e EXPECT [-P PAGE]
 *     A snapshot through the SQL functions, as the library reads one:
 *     snapshot_head, then pages of PAGE entities of snapshot_entities
 *     keyed by the previous page's last (event_type, entity_id), in one
 *     REPEATABLE READ, READ ONLY transaction.
 */
int
run_snapshot_sql(const char *org, long long expect, int page)
{
	PGconn	   *conn = connect_plain();
	mem_sampler m;
	const char *params[5];
	char		head[32],
				limit[16],
			   *after_type = NULL,
			   *after_id = NULL;
	PGresult   *res;
	long long	rows = 0,
				pages = 0;
	size_t		bytes = 0;
	double		t0,
				t1;

	snprintf(limit, sizeof(limit), "%d", page);
	sampler_start(&m, PQbackendPID(conn), NULL);
	t0 = now_s(CLOCK_MONOTONIC);
	exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY");
	params[0] = org;
	res = PQexecParams(conn, "SELECT revision FROM eventhub.snapshot_head($1)", 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die("snapshot_head: %s", PQerrorMessage(conn));
	snprintf(head, sizeof(head), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	for (;;)
	{
		int			n;

		params[1] = head;
		params[2] = after_type;
		params[3] = after_id;
		params[4] = limit;
		res = PQexecParams(conn, "SELECT " SNAPSHOT_COLUMNS " FROM eventhub.snapshot_entities($1, $2, $3, $4, $5)",
						   5, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			die("snapshot_entities: %s", PQerrorMessage(conn));
		n = PQntuples(res);
		bytes += touch_rows(res);
		rows += n;
		pages++;
		if (n > 0)
		{
			free(after_type);
			free(after_id);
			after_type = strdup(PQgetvalue(res, n - 1, 0));
			after_id = strdup(PQgetvalue(res, n - 1, 1));
		}
		PQclear(res);
		if (n < page)
			break;
	}
	exec_ok(conn, "COMMIT");
	t1 = now_s(CLOCK_MONOTONIC);
	sampler_stop(&m);
	print_read("snapshot-sql", rows, t1 - t0, &m);
	printf(" bytes=%zu pages=%lld head=%s\n", bytes, pages, head);
	free(after_type);
	free(after_id);
	PQfinish(conn);
	return rows == expect ? 0 : 1;
}

/* What the snapshot callback has seen. */
typedef struct snap_state
{
	long long	entities;
	long long	pages;
	int			aborts;
	int			done;
	int64_t		head;
	double		t_begin;		/* CLOCK_MONOTONIC at BEGIN */
	double		t_end;			/* and at END */
} snap_state;

/* The snapshot callback: counts the entities, stamps BEGIN and END. */
static void
snap_on_step(eh_client *client, const char *org, eh_snapshot_phase phase, int reason,
			 const eh_entity *const *entities, int n_entities, int64_t head_revision,
			 const char *head_version, void *arg)
{
	snap_state *st = arg;

	(void) client;
	(void) org;
	(void) reason;
	(void) head_version;
	switch (phase)
	{
		case EH_SNAPSHOT_BEGIN:
			st->entities = 0;
			st->pages = 0;
			st->t_begin = now_s(CLOCK_MONOTONIC);
			break;
		case EH_SNAPSHOT_ENTITIES:
			/* Read every value, as select does. */
			for (int i = 0; i < n_entities; i++)
				touched_bytes += strlen(entities[i]->event_type) + strlen(entities[i]->entity_id) +
					strlen(entities[i]->version_id) + strlen(entities[i]->action) +
					strlen(entities[i]->event_data) + strlen(entities[i]->originated_timestamp);
			st->entities += n_entities;
			st->pages++;
			break;
		case EH_SNAPSHOT_END:
			st->head = head_revision;
			st->t_end = now_s(CLOCK_MONOTONIC);
			st->done = 1;
			break;
		case EH_SNAPSHOT_ABORT:
			st->aborts++;
			break;
	}
}

/*
 * eh_bench snapshot -o ORG -e EXPECT [-P PAGE]
 *     The same through the library: eh_subscribe with EH_FROM_SNAPSHOT
 *     (batch size PAGE), counting the snapshot callback's entities until
 *     its END; seconds count from its BEGIN (after snapshot_head) to its
 *     END, not the client's start-up (connections, LISTEN, its probe).
 */
int
run_snapshot(const char *org, long long expect, int page)
{
	eh_client  *c = eh_client_new("application_name=eh_bench_snapshot");
	snap_state	st;
	long long	events = 0;
	mem_sampler m;
	double		t0,
				t1;

	if (!c)
		die("%s", "out of memory");
	memset(&st, 0, sizeof(st));
	eh_set_event_callback(c, count_event, &events);
	eh_set_snapshot_callback(c, snap_on_step, &st);
	if (eh_set_batch_size(c, page) != EH_OK)
		die("batch size: %s", eh_error_message(c));
	if (eh_subscribe(c, org, EH_FROM_SNAPSHOT) != EH_OK)
		die("subscribe: %s", eh_error_message(c));
	sampler_start(&m, 0, "eh_bench_snapshot");
	t0 = now_s(CLOCK_MONOTONIC);
	if (eh_connect(c) != EH_OK)
		fprintf(stderr, "eh_bench: connect: %s (retrying)\n", eh_error_message(c));
	while (!st.done)
	{
		if (now_s(CLOCK_MONOTONIC) - t0 > 300)
			die("%s", "the snapshot did not end within 300 s");
		if (eh_wait(c, 100) < 0)
			die("%s", eh_error_message(c));
	}
	t1 = now_s(CLOCK_MONOTONIC);
	sampler_stop(&m);
	/*
	 * From BEGIN to END, as select counts from its BEGIN to its COMMIT: not
	 * the client's start-up, nor eh_wait() going on after END.
	 */
	print_read("snapshot", st.entities, st.t_end - st.t_begin, &m);
	printf(" seconds_from_connect=%.3f bytes=%zu pages=%lld head=%lld aborts=%d\n", t1 - t0, touched_bytes,
		   st.pages, (long long) st.head, st.aborts);
	eh_client_free(c);
	return st.entities == expect ? 0 : 1;
}
