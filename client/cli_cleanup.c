/*
 * cli_cleanup.c: `eventhub cleanup`, eventhub.cleanup_events() of the
 * events older than a duration, the count printed.
 */
#include <string.h>

#include "cli.h"

/* cleanup: deletes the events older than --older-than; prints how many. */
int
run_cleanup(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	const char *params[1] = {o->older_than};
	PGresult   *res;

	if (!conn)
		return 1;
	res = PQexecParams(conn,
					   "SELECT $1::interval < interval '0',"
					   " CASE WHEN $1::interval >= interval '0'"
					   " THEN eventhub.cleanup_events(now() - $1::interval) END",
					   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("cleanup failed", res, conn);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
	{
		fputs("eventhub: --older-than must not be negative, not \"", stderr);
		cli_put_escaped(stderr, o->older_than, 0);
		fputs("\"\n", stderr);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	printf("%s\n", PQgetvalue(res, 0, 1));
	PQclear(res);
	PQfinish(conn);
	return 0;
}
