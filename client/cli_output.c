/*
 * cli_output.c: how the eventhub tool writes what it prints: JSON strings
 * and the lines of watch and get (events, entities, snapshot and resync
 * lines), aligned tables, and Prometheus' escapes.
 */
#include <string.h>

#include "cli.h"

/* Writes str as a JSON string (null for NULL), escaped for a terminal. */
void
json_string(FILE *out, const char *str)
{
	cli_put_json_string(out, str);
}

/* Writes ,"key": "value" */
void
json_field(FILE *out, const char *key, const char *value)
{
	fprintf(out, ", \"%s\": ", key);
	json_string(out, value);
}

/* An event's line, as in 0.3.0 with the transaction's two keys appended. */
void
print_event(FILE *out, const eh_event *ev)
{
	fputs("{\"organization_id\": ", out);
	json_string(out, ev->organization_id);
	fprintf(out, ", \"revision\": %lld", (long long) ev->revision);
	json_field(out, "version_id", ev->version_id);
	json_field(out, "processed_timestamp", ev->processed_timestamp);
	json_field(out, "originated_timestamp", ev->originated_timestamp);
	json_field(out, "event_type", ev->event_type);
	json_field(out, "action", ev->action);
	json_field(out, "entity_id", ev->entity_id);
	json_field(out, "correlation_id", ev->correlation_id);
	/* event_data is jsonb's own output: valid JSON, written as a value */
	fputs(", \"event_data\": ", out);
	cli_put_json(out, ev->event_data);
	fprintf(out, ", \"transaction_first_revision\": %lld, \"transaction_end\": %s}\n",
			(long long) ev->transaction_first_revision, ev->transaction_end ? "true" : "false");
}

/* Writes , "head_revision": N, "head_version_id": "..." (null without events). */
void
print_head(FILE *out, int64_t head, const char *version)
{
	fprintf(out, ", \"head_revision\": %lld, \"head_version_id\": ", (long long) head);
	if (version)
		json_string(out, version);
	else
		fputs("null", out);
}

/*
 * An entity's line of a snapshot: its type as event_type, as the SQL
 * (eventhub.snapshot_entities) names it, then the same as entity_type,
 * the name of 0.4.0, deprecated: it goes in the next release.
 */
void
print_entity(FILE *out, const eh_entity *e)
{
	fputs("{\"organization_id\": ", out);
	json_string(out, e->organization_id);
	json_field(out, "event_type", e->event_type);
	json_field(out, "entity_type", e->event_type);
	json_field(out, "entity_id", e->entity_id);
	fprintf(out, ", \"revision\": %lld", (long long) e->revision);
	json_field(out, "version_id", e->version_id);
	fputs(", \"event_data\": ", out);
	cli_put_json(out, e->event_data);
	fputs("}\n", out);
}

/* A snapshot's marker line: begin, end or abort. */
void
print_snapshot_marker(FILE *out, const char *org, eh_snapshot_phase phase, int reason,
					  int64_t head, const char *head_version, int64_t entities)
{
	fprintf(out, "{\"snapshot\": \"%s\", \"organization_id\": ", eh_snapshot_phase_name(phase));
	json_string(out, org);
	if (phase == EH_SNAPSHOT_BEGIN)
		fprintf(out, ", \"reason\": \"%s\"", reason ? eh_resync_reason_name((eh_resync_reason) reason) : "initial");
	if (phase != EH_SNAPSHOT_ABORT)
		print_head(out, head, head_version);
	if (phase == EH_SNAPSHOT_END)
		fprintf(out, ", \"entities\": %lld", (long long) entities);
	fputs("}\n", out);
}

/*
 * A resync line: it carries the new cursor to store, the head's revision
 * and version (when there is one).
 */
void
print_resync_line(FILE *out, const char *org, eh_resync_reason reason, int64_t head, const char *version)
{
	fputs("{\"resync\": true, \"organization_id\": ", out);
	json_string(out, org);
	fprintf(out, ", \"reason\": \"%s\", \"head_revision\": %lld", eh_resync_reason_name(reason), (long long) head);
	if (version)
		json_field(out, "head_version_id", version);
	fputs("}\n", out);
}

/*
 * Prints the first ncols columns of a result as an aligned table, numbers to
 * the right.  Cells are escaped and at most CLI_CELL_WIDTH wide, so that one
 * long value cannot widen every row.
 */
void
print_table(const PGresult *res, int ncols)
{
	int			nrows = PQntuples(res);
	int			width[16];
	int			right[16];

	if (ncols > 16)
		ncols = 16;
	for (int j = 0; j < ncols; j++)
	{
		Oid			type = PQftype(res, j);

		width[j] = (int) strlen(PQfname(res, j));
		right[j] = (type == 20 || type == 21 || type == 23 || type == 1700);	/* int8, int2, int4, numeric */
		for (int i = 0; i < nrows; i++)
		{
			int			w = cli_put_escaped(NULL, PQgetvalue(res, i, j), CLI_CELL_WIDTH);

			if (w > width[j])
				width[j] = w;
		}
	}
	for (int i = -1; i < nrows; i++)
	{
		for (int j = 0; j < ncols; j++)
		{
			const char *v = i < 0 ? PQfname(res, j) : PQgetvalue(res, i, j);
			int			w = cli_put_escaped(NULL, v, CLI_CELL_WIDTH);

			if (right[j] && i >= 0)
				printf("%*s", width[j] - w, "");
			if (i < 0)
				for (const char *p = v; *p; p++)
					putchar(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
			else
				cli_put_escaped(stdout, v, CLI_CELL_WIDTH);
			if (j < ncols - 1)
				printf("%*s", (right[j] && i >= 0 ? 0 : width[j] - w) + 2, "");
		}
		putchar('\n');
	}
}

/*
 * Writes str for Prometheus' text format: a backslash and a newline
 * escaped, and in a label value (help 0) a double quote too.
 */
void
prometheus_escaped(FILE *out, const char *str, int help)
{
	const char *start = str;

	for (const char *p = str; *p; p++)
	{
		const char *escape = *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '"' && !help ? "\\\"" : NULL;

		if (escape)
		{
			fwrite(start, 1, (size_t) (p - start), out);
			fputs(escape, out);
			start = p + 1;
		}
	}
	fputs(start, out);
}
