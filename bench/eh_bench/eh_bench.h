/*
 * eh_bench.h: what the files of eh_bench share: the helpers of common.c
 * and the modes main.c dispatches to.
 */
#ifndef EH_BENCH_H
#define EH_BENCH_H

#define _GNU_SOURCE
#include <stddef.h>
#include <time.h>

#include "eventhub.h"

/* common.c */
extern double now_s(clockid_t clk);
extern void die(const char *fmt, const char *arg) __attribute__((noreturn));
extern void *xrealloc(void *p, size_t n);
extern void append_value(double **v, size_t *n, size_t *cap, double x);
extern double parse_ts(const char *s);
extern void print_pcts(double *v, size_t n);
extern void write_values(const char *path, const double *v, size_t n);
extern void touch(const char *path);
extern int	count_event(eh_client *client, const eh_event *ev, void *arg);

/* subscribe.c */
extern int	run_sub(const char *org, int n, int listen, int poll_ms, double drain_s,
					const char *ready_file, const char *lat_file);
extern int	run_catchup(const char *org, long long expect);
extern int	run_listen(int n, int listen, const char *ready_file);

/* stamp.c */
extern int	run_stamp(int nfifos, char **fifos, long long expect, double drain_s,
					  const char *ready_file, const char *done_file, const char *lat_file);
extern int	run_pctl(int nfiles, char **files, double from, double until);

/* read.c */
extern int	run_select(const char *org, long long expect, int fetch, int ordered);
extern int	run_snapshot_sql(const char *org, long long expect, int page);
extern int	run_snapshot(const char *org, long long expect, int page);

#endif							/* EH_BENCH_H */
