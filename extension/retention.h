/*
 * retention.h
 *	  Deleting expired events (retention.c): its settings, the limits of a
 *	  pass and the batch delete the background worker runs.
 */
#ifndef EVENTHUB_RETENTION_H
#define EVENTHUB_RETENTION_H

#include "datatype/timestamp.h"
#include "storage/itemptr.h"

typedef struct EventhubRetention
{
	TimestampTz expired_before;	/* eventhub.retention */
	TimestampTz forced_before;	/* eventhub.max_retention, or +infinity */
	TimestampTz live_since;		/* heartbeats after this are live replicas */
	TimestampTz resume_from;	/* where the pass's next batch starts: after */
	ItemPointerData resume_tid; /* (resume_from, resume_tid) */
} EventhubRetention;

/* A retention batch looks at no more than this many times its size of events. */
#define EVENTHUB_SCAN_FACTOR 10

/* eventhub.cleanup_batch_size: the most events one batch deletes */
extern int	eventhub_cleanup_batch_size;

extern void EventhubDefineRetentionSettings(void);
extern void EventhubRetentionLimits(EventhubRetention *r, TimestampTz now);
extern void EventhubRetentionNow(EventhubRetention *r);
extern int64 EventhubDeleteExpiredBatch(EventhubRetention *r, int batch_size, bool *more);
extern int64 EventhubRemoveStaleReplicas(void);

#endif							/* EVENTHUB_RETENTION_H */
