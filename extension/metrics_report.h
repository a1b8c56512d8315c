/*
 * metrics_report.h
 *	  eventhub.metrics() (metrics_report.c): its setting.
 */
#ifndef EVENTHUB_METRICS_REPORT_H
#define EVENTHUB_METRICS_REPORT_H

extern void EventhubDefineMetricsReportSettings(void);

#endif							/* EVENTHUB_METRICS_REPORT_H */
