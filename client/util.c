/*
 * util.c: what every file of libeventhub uses and that uses nothing of
 * theirs: the clock, jitter, the error kept in the handle, the log
 * callback, and the names of the public enums.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* Monotonic clock in milliseconds. */
int64_t
ehi_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* xorshift64*, per client: jitter needs no global state and no quality. */
double
ehi_random_unit(eh_client *c)
{
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return (double) ((c->rng * 2685821657736338717ULL) >> 11) / (double) (1ULL << 53);
}

/* Formats into buf and drops trailing newlines. */
static void
format_line(char *buf, size_t size, const char *fmt, va_list ap)
{
	size_t		len;

	vsnprintf(buf, size, fmt, ap);
	len = strlen(buf);
	while (len > 0 && buf[len - 1] == '\n')
		buf[--len] = '\0';
}

void
ehi_set_error(eh_client *c, const char *fmt,...)
{
	va_list		ap;
	char		buf[sizeof(c->errmsg)];

	/* fmt's arguments may point into c->errmsg itself */
	va_start(ap, fmt);
	format_line(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(c->errmsg, buf, sizeof(buf));
	c->sqlstate[0] = '\0';
}

void
ehi_log(eh_client *c, eh_log_level level, const char *fmt,...)
{
	char		buf[1024];
	va_list		ap;
	int			was_in_callback = c->in_callback;

	if (!c->cb.log)
		return;
	va_start(ap, fmt);
	format_line(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* It may not call back into the client: the caller is mid-step. */
	c->in_callback = 1;
	c->cb.log(c, level, buf, c->cb.log_arg);
	c->in_callback = was_in_callback;
}

/* Records a failed result's message and SQLSTATE. */
void
ehi_set_result_error(eh_client *c, const ehi_conn *ac, const PGresult *res, const char *what)
{
	const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (primary)
		ehi_set_error(c, "%s: %s", what, primary);
	else
		ehi_set_error(c, "%s: %s", what, ac->pg ? PQerrorMessage(ac->pg) : "no connection");
	if (state)
		snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", state);
}

int
ehi_sqlstate_retryable(const char *state)
{
	/*
	 * What a retry cannot fix: authorization (class 28), a database that does
	 * not exist (3D000), a missing privilege (42501), a bad argument (class
	 * 22) or an unsupported feature (0A).  Everything else (lock and
	 * statement timeouts, serialization failures, the extension or a table
	 * missing while it is reinstalled, a server shutting down) may pass.
	 */
	if (!state[0])
		return 1;
	return !(strncmp(state, "28", 2) == 0 || strcmp(state, "42501") == 0 ||
			 strcmp(state, "3D000") == 0 ||
			 strncmp(state, "22", 2) == 0 || strncmp(state, "0A", 2) == 0);
}

/* ------------------------------------------------------------- names */

const char *
eh_stat_name(eh_stat_id id)
{
	static const char *const names[EH_STAT_COUNT] = {
		"events_delivered", "notifications", "polls", "reconnects", "resyncs", "heartbeats",
		"fetches", "discoveries", "snapshots", "snapshot_entities",
		"sealed_deliveries"
	};

	return (int) id >= 0 && id < EH_STAT_COUNT ? names[id] : "unknown";
}

const char *
eh_resync_reason_name(eh_resync_reason reason)
{
	switch (reason)
	{
		case EH_RESYNC_HISTORY_REMOVED:
			return "history_removed";
		case EH_RESYNC_CURSOR_AHEAD:
			return "cursor_ahead";
		case EH_RESYNC_VERSION_MISMATCH:
			return "version_mismatch";
	}
	return "unknown";
}

const char *
eh_snapshot_phase_name(eh_snapshot_phase phase)
{
	switch (phase)
	{
		case EH_SNAPSHOT_BEGIN:
			return "begin";
		case EH_SNAPSHOT_ENTITIES:
			return "entities";
		case EH_SNAPSHOT_END:
			return "end";
		case EH_SNAPSHOT_ABORT:
			return "abort";
	}
	return "unknown";
}

const char *
eh_log_level_name(eh_log_level level)
{
	switch (level)
	{
		case EH_LOG_DEBUG:
			return "debug";
		case EH_LOG_INFO:
			return "info";
		case EH_LOG_WARNING:
			return "warning";
		case EH_LOG_ERROR:
			return "error";
	}
	return "unknown";
}

const char *
eh_version(void)
{
	return EVENTHUB_VERSION;
}
