/*
 * replicas.h
 *	  The replica registry (replicas.c): what maintenance asks of it.
 */
#ifndef EVENTHUB_REPLICAS_H
#define EVENTHUB_REPLICAS_H

extern int64 EventhubForgetSettledSplits(void);

#endif							/* EVENTHUB_REPLICAS_H */
