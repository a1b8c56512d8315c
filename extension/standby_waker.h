/*
 * standby_waker.h
 *	  The standby waker background worker (standby_waker.c): its setting and
 *	  its entry point, which worker.c registers.
 */
#ifndef EVENTHUB_STANDBY_WAKER_H
#define EVENTHUB_STANDBY_WAKER_H

#include "fmgr.h"

extern void EventhubDefineStandbyWakerSettings(void);
extern PGDLLEXPORT void eventhub_standby_waker_main(Datum main_arg);

#endif							/* EVENTHUB_STANDBY_WAKER_H */
