/*
 * access.h
 *	  Per-organization grants and replica ownership (access.c): the checks
 *	  eventhub's functions make, and what dropped roles leave behind.
 */
#ifndef EVENTHUB_ACCESS_H
#define EVENTHUB_ACCESS_H

#include "fmgr.h"

typedef enum EventhubPrivilege
{
	EVENTHUB_PRIV_PUBLISH = 1,
	EVENTHUB_PRIV_READ = 2
} EventhubPrivilege;

extern bool EventhubAccessControlEnabled(void);
extern void EventhubGrantsInvalidate(Oid relid);
extern bool EventhubHasOrgPrivilege(Oid role, const char *org, int orglen, EventhubPrivilege priv);
extern void EventhubCheckOrgPrivilege(Datum org, EventhubPrivilege priv);
extern int64 EventhubRemoveDroppedRoles(void);
extern void EventhubRoleDropped(Oid role);

#endif							/* EVENTHUB_ACCESS_H */
