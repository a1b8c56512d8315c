/*
 * guard.h
 *	  The write guard (guard.c): only eventhub's own functions write its
 *	  tables, through EventhubAsOwner, which runs their statements as the
 *	  extension's owner; eventhub.protect_tables turns the guard off.
 */
#ifndef EVENTHUB_GUARD_H
#define EVENTHUB_GUARD_H

#include "common.h"

typedef void (*EventhubOwnerWork) (void *arg);

extern void EventhubDefineGuardSettings(void);
extern void EventhubAsOwner(EventhubOwnerWork work, void *arg);
extern Oid	EventhubCallingRole(void);
extern int	EventhubExecuteAsOwner(EventhubPlan *cache, const EventhubStatement *s,
								   Datum *values, const char *nulls, long count);
extern void EventhubRunAsOwner(EventhubPlan *cache, const EventhubStatement *s,
							   Datum *values, int expected, const char *what);

#endif							/* EVENTHUB_GUARD_H */
