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
extern void EventhubWaitBegin(const uint32 *hashes, int nhashes);
extern bool EventhubWaitWoken(void);
extern void EventhubWaitEnd(void);
extern int	EventhubWaitersOfDatabase(Oid dbid);
extern void EventhubWakeOrganization(Oid dbid, uint32 hash);
extern void EventhubWakeDatabase(Oid dbid);
extern void EventhubWaitersAttachWaker(void);

#endif							/* EVENTHUB_WAITERS_H */
