/*
 * worker.h
 *	  The maintenance background worker (worker.c): its settings, its
 *	  entry point, and the registration of both workers.
 */
#ifndef EVENTHUB_WORKER_H
#define EVENTHUB_WORKER_H

#include "fmgr.h"

extern void EventhubDefineWorkerSettings(void);
extern void EventhubRegisterWorkers(void);
extern PGDLLEXPORT void eventhub_worker_main(Datum main_arg);

#endif							/* EVENTHUB_WORKER_H */
