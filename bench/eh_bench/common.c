/*
 * common.c: eh_bench's helpers: clocks, errors, growing arrays,
 * timestamps, percentiles and the files the driver waits on.
 */
#include "eh_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The time of CLK in seconds. */
double
now_s(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Prints "eh_bench: " and FMT with ARG, and ends the process. */
void
die(const char *fmt, const char *arg)
{
	fprintf(stderr, "eh_bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(1);
}

/* realloc that dies when out of memory. */
void *
xrealloc(void *p, size_t n)
{
	void	   *q = realloc(p, n);

	if (!q)
		die("%s", "out of memory");
	return q;
}

/* Appends X to the array *V of *N values (room for *CAP), growing it. */
void
append_value(double **v, size_t *n, size_t *cap, double x)
{
	if (*n == *cap)
	{
		*cap = *cap ? *cap * 2 : 4096;
		*v = xrealloc(*v, *cap * sizeof(double));
	}
	(*v)[(*n)++] = x;
}

/* "2026-01-02T03:04:05.123456Z" to seconds since the epoch; -1 if malformed. */
double
parse_ts(const char *s)
{
	struct tm	tm;
	int			usec = 0;
	char		frac[8] = "";

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%6[0-9]", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, frac) < 6)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	if (frac[0])
	{
		size_t		len = strlen(frac);

		usec = atoi(frac);
		for (; len < 6; len++)
			usec *= 10;
	}
	return (double) timegm(&tm) + usec / 1e6;
}

/* qsort's comparison of doubles. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double
pct(const double *v, size_t n, double p)
{
	size_t		rank;

	if (n == 0)
		return 0;
	rank = (size_t) (p / 100.0 * n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

/* Sorts V and prints its count and percentiles (no newline). */
void
print_pcts(double *v, size_t n)
{
	qsort(v, n, sizeof(double), cmp_double);
	printf("count=%zu p50=%.3f p95=%.3f p99=%.3f max=%.3f", n, pct(v, n, 50), pct(v, n, 95),
		   pct(v, n, 99), n ? v[n - 1] : 0.0);
}

/* PATH created for writing, or death; NULL if PATH is NULL. */
static FILE *
create_file(const char *path)
{
	FILE	   *f;

	if (!path)
		return NULL;
	f = fopen(path, "w");
	if (!f)
		die("cannot create %s", path);
	return f;
}

/* The N values of V to PATH, one a line (ms, as %.3f); nothing if PATH is NULL. */
void
write_values(const char *path, const double *v, size_t n)
{
	FILE	   *f = create_file(path);

	if (!f)
		return;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%.3f\n", v[i]);
	fclose(f);
}

/* Creates PATH (a file the driver waits for); nothing if PATH is NULL. */
void
touch(const char *path)
{
	FILE	   *f = create_file(path);

	if (!f)
		return;
	fputs("ready\n", f);
	fclose(f);
}

/* An event callback that counts the events in the long long ARG points to. */
int
count_event(eh_client *client, const eh_event *ev, void *arg)
{
	(void) client;
	(void) ev;
	(*(long long *) arg)++;
	return 0;
}
