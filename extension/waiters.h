/*
 * waiters.h
 *	  Sessions waiting in eventhub.wait_for_events() for their organizations
 *	  to move, and the calls that wake them (waiters.c).
 */
#ifndef EVENTHUB_WAITERS_H
#define EVENTHUB_WAITERS_H

/*
 * The most organizations a waiter names one by one; one that follows more
 * is woken by a move of any organization of its database, and looks.
 */
#define EVENTHUB_WAIT_MAX_NAMED 16

extern void EventhubWaitersShmemInit(void);
extern bool EventhubWaitersPresent(void);
extern uint32 EventhubOrganizationHash(const char *id, int idlen);
/*
 * The longest organization id a waiter's slot keeps, in bytes: a wake for
 * a longer one makes the waiter look again.
 */
#define EVENTHUB_WAIT_ID_BYTES 64

/* What EventhubWaitWoken() returns for "look at every organization again". */
#define EVENTHUB_WOKEN_LOOK 0xFFFFFFFFU

/* An organization to wait for, past cursor. */
typedef struct EventhubWaitFor
{
	const char *id;
	int			len;
	int64		cursor;
} EventhubWaitFor;

extern void EventhubWaitBegin(const EventhubWaitFor *orgs, int n);
extern void EventhubWaitTrust(const bool *visible, int n);
extern uint32 EventhubWaitWoken(void);
extern void EventhubWaitEnd(void);
extern int	EventhubWaitersOfDatabase(Oid dbid);
extern int	EventhubWakerIdle(Oid dbid);
extern void EventhubWakerBusy(void);
extern void EventhubWakeOrganization(Oid dbid, const char *id, int len, uint32 hash,
									 int64 revision);
extern void EventhubWakeDatabase(Oid dbid);
extern void EventhubWaitersAttachWaker(void);

#endif							/* EVENTHUB_WAITERS_H */
