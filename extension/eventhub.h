/*
 * eventhub.h
 *	  Declarations shared by the files of the eventhub server extension.
 */
#ifndef EVENTHUB_H
#define EVENTHUB_H

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

/* eventhub.c */
extern void _PG_init(void);

#endif							/* EVENTHUB_H */
