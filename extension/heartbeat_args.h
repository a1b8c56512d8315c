/*
 * heartbeat_args.h
 *	  Checking what a heartbeat reports (heartbeat_args.c): its progress
 *	  object and its labels.
 */
#ifndef EVENTHUB_HEARTBEAT_ARGS_H
#define EVENTHUB_HEARTBEAT_ARGS_H

#include "utils/jsonb.h"

/*
 * What a heartbeat may carry.  Each goes into replica_status and the CLI's
 * output, once per replica (labels, version) or per replica and
 * organization (config_hash): the limits keep a replica following 100,000
 * organizations to megabytes there.  A hash is 64 hex digits for SHA-256;
 * 256 bytes leaves room for a prefix or SHA-512 in hex.
 */
#define EVENTHUB_MAX_LABELS_BYTES 4096	/* as JSON text, labels::text */
#define EVENTHUB_MAX_VERSION_BYTES 256
#define EVENTHUB_MAX_CONFIG_HASH_BYTES 256

/* One organization of a heartbeat's progress, checked. */
typedef struct ProgressEntry
{
	char	   *org;
	int64		revision;
	Datum		version;		/* uuid, or 0 */
	Datum		config_hash;	/* text, or 0 */
} ProgressEntry;

extern ProgressEntry *EventhubParseProgress(Jsonb *progress, int *count);
extern void EventhubCheckLabels(Jsonb *labels);

#endif							/* EVENTHUB_HEARTBEAT_ARGS_H */
