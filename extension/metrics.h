/*
 * metrics.h
 *	  The counters of eventhub.metrics() in shared memory (metrics.c): zero
 *	  without preloading.  EventhubCountAtCommit counts for when the current
 *	  transaction commits (a rolled-back savepoint takes its counts back);
 *	  EventhubCountNow for what is already done.
 */
#ifndef EVENTHUB_METRICS_H
#define EVENTHUB_METRICS_H

#include "datatype/timestamp.h"

typedef enum EventhubCounter
{
	EVENTHUB_COUNTER_PUBLISHED,
	EVENTHUB_COUNTER_RETENTION_DELETED,
	EVENTHUB_COUNTER_NOTIFICATIONS_SENT,
	EVENTHUB_COUNTER_STALLED_TERMINATED,
	EVENTHUB_NUM_COUNTERS
} EventhubCounter;

extern void EventhubCountAtCommit(EventhubCounter c, uint64 n);
extern void EventhubRetentionPassEndsAtCommit(void);
extern void EventhubCountNow(EventhubCounter c, uint64 n);
extern void EventhubReadCounters(uint64 *counts, TimestampTz *retention_pass_ended);
extern void EventhubMetricsShmemInit(void);

#endif							/* EVENTHUB_METRICS_H */
