/*
 * conn.h: one libpq connection driven without waiting (conn.c).
 */
#ifndef EVENTHUB_CONN_H
#define EVENTHUB_CONN_H

#include <stdint.h>

#include <libpq-fe.h>

#include "eventhub.h"

/* One libpq connection driven without waiting. */
typedef enum ehi_conn_state
{
	EHI_CONN_NONE,				/* no connection */
	EHI_CONN_CONNECTING,
	EHI_CONN_IDLE,
	EHI_CONN_BUSY				/* a query is out */
} ehi_conn_state;

typedef struct ehi_conn
{
	PGconn	   *pg;
	ehi_conn_state state;
	PostgresPollingStatusType polling;	/* while connecting */
	int			flushing;		/* PQflush has more to send */
	int64_t		deadline;		/* of the attempt or of the query; monotonic ms */
	PGresult   *result;			/* the query's first failed result, or its last */
	char		error[512];		/* why the last attempt or query failed */
	char		sqlstate[6];	/* its SQLSTATE, "" if the server gave none */
	int			not_now;		/* the attempt failed, but a server answered "not
								 * now" (ehi_conn_not_now) */
} ehi_conn;

/* What ehi_conn_step() found. */
typedef enum ehi_step
{
	EHI_STEP_NOTHING,			/* nothing new */
	EHI_STEP_CONNECTED,			/* the attempt succeeded: idle */
	EHI_STEP_RESULT,			/* the query finished: its result is in ->result */
	EHI_STEP_FAILED				/* the attempt failed or the connection broke (error) */
} ehi_step;

/* Starts connecting; EHI_STEP_FAILED at once if libpq refuses (error set). */
ehi_step	ehi_conn_start(ehi_conn *ac, const char *conninfo, int timeout_ms, const char *app_name);
/* Makes what progress it can without waiting. */
ehi_step	ehi_conn_step(ehi_conn *ac);
/*
 * Sends a query (stmt_name NULL) or executes a prepared statement;
 * with prepare set, prepares sql as stmt_name instead.  nparams 0 and no
 * statement: the simple protocol (several statements allowed).  Returns 0,
 * or -1 when the connection broke (error set, state NONE).
 */
int			ehi_conn_send(ehi_conn *ac, const char *sql, const char *stmt_name, int prepare,
						  int nparams, const char *const *params, int timeout_ms);
/* Takes the finished query's result (the caller PQclear()s it). */
PGresult   *ehi_conn_take_result(ehi_conn *ac);
/* poll()'s events (POLLIN, POLLOUT) for EH_WANT_* flags. */
short		ehi_poll_events(int wants);
/* EH_WANT_READ and/or EH_WANT_WRITE for the socket; 0 without one. */
int			ehi_conn_wants(const ehi_conn *ac);
void		ehi_conn_close(ehi_conn *ac);
/* Whether the result says the connection itself failed (not a refused query). */
int			ehi_result_breaks_connection(const ehi_conn *ac, const PGresult *res);
/*
 * Whether the failed attempt reached a server that will take it soon: one
 * starting up, shutting down or in recovery (SQLSTATE 57P03), or, of a
 * multi-host conninfo, a host that answered but is not of the kind
 * target_session_attrs asks for (a standby while a failover promotes
 * another).
 */
int			ehi_conn_not_now(const ehi_conn *ac);
/* Waits, on the socket, until the connection is idle or deadline passes (0). */
int			ehi_conn_wait_idle(ehi_conn *ac, int64_t deadline);

#endif							/* EVENTHUB_CONN_H */
