/*
 * eventhub.c
 *	  Module entry point of the eventhub extension.
 *
 * The SQL-callable functions live in publish.c (writing) and notify.c (the
 * NOTIFY trigger); this file only holds what runs when the library loads.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "eventhub.h"

PG_MODULE_MAGIC;

/*
 * Library load: reserve the "eventhub." configuration prefix so that a
 * misspelt setting is reported instead of silently ignored.
 */
void
_PG_init(void)
{
#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("eventhub");
#else
	EmitWarningsOnPlaceholders("eventhub");
#endif
}
