#!/bin/sh
# check_statements.sh: proves that eventhub.statements() lists every SQL
# statement the extension runs.  Each statement is a constant EventhubSql*
# of statements.c or statements_retention.c, and the helpers that run SQL
# (common.c, guard.c) take nothing else; this fails, from the object files
# (nm), when
#   - a file other than common.c calls an SPI function that takes query
#     text (a statement the list cannot see),
#   - a statement is defined elsewhere than in statements*.c,
#   - a statement is missing from statement_list.c, or no file runs it.
# Run after the build; scripts/run-suites.sh runs it in `make test`.
set -eu
cd "$(dirname "$0")"
for o in statements.o statements_retention.o statement_list.o common.o; do
	[ -f "$o" ] || { echo "check_statements: $o is missing (build first)" >&2; exit 1; }
done
status=0
text_calls='SPI_exec SPI_execute SPI_execute_extended SPI_execute_with_args SPI_prepare SPI_prepare_cursor SPI_prepare_extended SPI_prepare_params SPI_cursor_open_with_args SPI_cursor_parse_open'
for o in *.o; do
	[ "$o" = common.o ] && continue
	for sym in $(nm --undefined-only "$o" | awk '{ print $2 }'); do
		case " $text_calls " in
			*" $sym "*) echo "not ok: ${o%.o}.c calls $sym with SQL of its own: add the statement to statements.c and run it with EventhubKeptPlan, EventhubExecuteAsOwner or EventhubExecuteOnce"; status=1 ;;
		esac
	done
done
for o in *.o; do
	case $o in statements.o | statements_retention.o) continue ;; esac
	for sym in $(nm --defined-only "$o" | awk '$3 ~ /^EventhubSql/ { print $3 }'); do
		echo "not ok: ${o%.o}.c defines statement $sym: statements live in statements.c or statements_retention.c"
		status=1
	done
done
defined=$(nm --defined-only statements.o statements_retention.o | awk '$3 ~ /^EventhubSql/ { print $3 }' | sort)
listed=$(nm --undefined-only statement_list.o | awk '$2 ~ /^EventhubSql/ { print $2 }' | sort)
used=$(for o in *.o; do case $o in statement_list.o) ;; *) nm --undefined-only "$o" | awk '$2 ~ /^EventhubSql/ { print $2 }' ;; esac; done | sort -u)
n=0
for sym in $defined; do
	n=$((n + 1))
	printf '%s\n' "$listed" | grep -qx "$sym" || { echo "not ok: $sym is missing from statement_list.c (eventhub.statements())"; status=1; }
	printf '%s\n' "$used" | grep -qx "$sym" || { echo "not ok: no file runs $sym: remove it"; status=1; }
done
[ "$n" -gt 0 ] || { echo "not ok: no EventhubSql* statement found in statements.o"; status=1; }
[ $status -eq 0 ] && echo "ok - eventhub.statements() lists every statement the extension runs ($n statements)"
exit $status
