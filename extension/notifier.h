/*
 * notifier.h
 *	  The notifier background worker (notifier.c): its settings and its
 *	  entry point, which worker.c registers.
 */
#ifndef EVENTHUB_NOTIFIER_H
#define EVENTHUB_NOTIFIER_H

#include "fmgr.h"

extern void EventhubDefineNotifierSettings(void);
extern PGDLLEXPORT void eventhub_notifier_main(Datum main_arg);

#endif							/* EVENTHUB_NOTIFIER_H */
