/*
 * cli_metrics.c: `eventhub metrics`, the server's eventhub.metrics() in
 * Prometheus' text exposition format.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/*
 * eventhub.metrics(), a row per series, with its labels a row each
 * (jsonb_each_text), ordered so that a family's series are together and
 * each series' labels follow one another in key order: the output is the
 * same for the same metrics.
 */
#define METRICS_SQL \
	"SELECT m.n, m.name, m.type, m.help, m.value, l.key, l.value" \
	" FROM (SELECT row_number() OVER () AS n, f.* FROM eventhub.metrics() f) m" \
	" LEFT JOIN LATERAL jsonb_each_text(m.labels) l ON true" \
	" ORDER BY m.name COLLATE \"C\", m.labels::text COLLATE \"C\", m.n, l.key COLLATE \"C\""

enum
{
	MET_N, MET_NAME, MET_TYPE, MET_HELP, MET_VALUE, MET_KEY, MET_LABEL
};

/* A float8's text as Prometheus writes it: +Inf, -Inf, NaN. */
static const char *
prometheus_value(const char *v)
{
	if (strcmp(v, "Infinity") == 0)
		return "+Inf";
	if (strcmp(v, "-Infinity") == 0)
		return "-Inf";
	return v;
}

/*
 * The rows of METRICS_SQL in the text exposition format: # HELP and # TYPE
 * once per family (its first series'), label values and help texts
 * escaped (prometheus_escaped).  A series without a value is left out.
 */
static void
format_metrics(const PGresult *res, FILE *out)
{
	int			nrows = PQntuples(res);
	const char *family = NULL;

	for (int i = 0; i < nrows;)
	{
		const char *name = PQgetvalue(res, i, MET_NAME);
		const char *n = PQgetvalue(res, i, MET_N);
		int			first = i;

		if (!family || strcmp(family, name) != 0)
		{
			const char *type = PQgetvalue(res, i, MET_TYPE);

			family = name;
			if (!PQgetisnull(res, i, MET_HELP))
			{
				fprintf(out, "# HELP %s ", name);
				prometheus_escaped(out, PQgetvalue(res, i, MET_HELP), 1);
				fputs("\n", out);
			}
			fprintf(out, "# TYPE %s %s\n", name,
					strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ? type : "untyped");
		}
		/* The series: its rows, one per label (one with NULLs without labels). */
		while (i < nrows && strcmp(PQgetvalue(res, i, MET_N), n) == 0)
			i++;
		if (PQgetisnull(res, first, MET_VALUE))
			continue;
		fputs(name, out);
		for (int j = first; j < i; j++)
		{
			if (PQgetisnull(res, j, MET_KEY))
				continue;
			fprintf(out, "%s%s=\"", j == first ? "{" : ",", PQgetvalue(res, j, MET_KEY));
			prometheus_escaped(out, PQgetvalue(res, j, MET_LABEL), 0);
			fputs(j == i - 1 ? "\"}" : "\"", out);
		}
		fprintf(out, " %s\n", prometheus_value(PQgetvalue(res, first, MET_VALUE)));
	}
}

/*
 * The exposition of a result of METRICS_SQL, in memory (malloc'd, *len
 * bytes): nothing is printed unless all of it is there.  NULL when out of
 * memory.
 */
static char *
metrics_text(const PGresult *res, size_t *len)
{
	char	   *text = NULL;
	FILE	   *out = open_memstream(&text, len);
	bool		ok;

	if (!out)
		return NULL;
	format_metrics(res, out);
	ok = !ferror(out);
	if (fclose(out) != 0)
		ok = false;
	if (!ok)
	{
		free(text);
		return NULL;
	}
	return text;
}

/* metrics: eventhub.metrics() in Prometheus' text exposition format. */
int
run_metrics(const cli_options *o)
{
	PGconn	   *conn = connect_or_report(o->conninfo);
	PGresult   *res;
	char	   *text;
	size_t		len = 0;

	if (!conn)
		return 1;
	res = PQexec(conn, METRICS_SQL);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		report_result_error("metrics failed", res, conn);
		PQclear(res);
		PQfinish(conn);
		return 1;
	}
	text = metrics_text(res, &len);
	PQclear(res);
	PQfinish(conn);
	if (!text)
	{
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	if (len)
		fwrite(text, 1, len, stdout);
	free(text);
	return 0;
}
