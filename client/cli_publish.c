/*
 * cli_publish.c: `eventhub publish`, one event through libeventhub, its
 * revision printed.
 */
#include "cli.h"

/* publish: eh_publish() of the options' event; prints its revision. */
int
run_publish(const cli_options *o)
{
	eh_client  *c = eh_client_new(o->conninfo);
	int64_t		revision;
	int			rc;

	if (!c)
	{
		fprintf(stderr, "eventhub: out of memory\n");
		return 1;
	}
	eh_set_listen(c, 0);		/* it follows nothing: no LISTEN probe */
	rc = eh_connect(c);
	if (rc == EH_OK)
		rc = eh_publish(c, o->org, o->type, o->action, o->entity, o->correlation_id, o->data, &revision);
	if (rc != EH_OK)
	{
		fputs("eventhub: ", stderr);
		cli_put_escaped(stderr, eh_error_message(c), 0);
		if (eh_error_sqlstate(c)[0])
			fprintf(stderr, " (SQLSTATE %s)", eh_error_sqlstate(c));
		fputc('\n', stderr);
		eh_client_free(c);
		return 1;
	}
	printf("%lld\n", (long long) revision);
	eh_client_free(c);
	return 0;
}
