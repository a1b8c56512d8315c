/*
 * test_unit.h: what the files of the client's unit test program share:
 * check(), which counts and prints a TAP line, and each file's tests.
 */
#ifndef EVENTHUB_TEST_UNIT_H
#define EVENTHUB_TEST_UNIT_H

/* One test: ok or not, and what it proves. */
void		check(int ok, const char *what);

/* test_unit_cli.c */
void		test_cli(void);
void		test_escaping(void);

/* test_unit_delivery.c */
void		test_delivery(void);
void		test_snapshot_steps(void);
void		test_metrics(void);
void		test_metrics_snapshot(void);
void		test_wait_answer(void);

#endif							/* EVENTHUB_TEST_UNIT_H */
