/*
 * eventhub.h
 *	  Declarations shared by the files of the eventhub server extension.
 */
#ifndef EVENTHUB_H
#define EVENTHUB_H

#include "datatype/timestamp.h"
#include "executor/spi.h"

/* Channel that every published event is announced on. */
#define EVENTHUB_CHANNEL "eventhub"

/*
 * Longest organization_id and correlation_id accepted, in bytes.  An
 * organization id travels in the NOTIFY payload, which PostgreSQL caps at
 * 8000 bytes; even when JSON escaping turns every byte into six, 1024 bytes
 * keep the payload well under that cap.  The same bound keeps a correlation
 * id far below the btree entry limit of its unique index.
 */
#define EVENTHUB_MAX_ID_BYTES 1024

/* eventhub.c: settings */
extern char *eventhub_database;
extern int	eventhub_retention;			/* seconds */
extern int	eventhub_maintenance_interval;	/* milliseconds */
extern int	eventhub_cleanup_batch_size;
extern int	eventhub_cleanup_batch_delay;	/* milliseconds */
extern int	eventhub_replica_ttl;		/* seconds */
extern bool eventhub_retain_until_applied;
extern int	eventhub_max_retention;		/* seconds */
extern void _PG_init(void);

/* publish.c */
extern SPIPlanPtr EventhubKeptPlan(SPIPlanPtr *cache, const char *query, int nargs, Oid *argtypes);

/* retention.c */
typedef struct EventhubRetention
{
	TimestampTz expired_before;	/* eventhub.retention */
	TimestampTz forced_before;	/* eventhub.max_retention, or +infinity */
	TimestampTz live_since;		/* heartbeats after this are live replicas */
	TimestampTz resume_from;	/* where the cycle's next batch starts */
} EventhubRetention;

extern void EventhubRetentionNow(EventhubRetention *r);
extern int64 EventhubDeleteExpiredBatch(EventhubRetention *r, int batch_size);
extern int64 EventhubRemoveStaleReplicas(void);

/* worker.c */
extern void EventhubRegisterWorker(void);
extern PGDLLEXPORT void eventhub_worker_main(Datum main_arg);

#endif							/* EVENTHUB_H */
