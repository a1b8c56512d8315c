#!/bin/sh
# check_layers.sh: proves that the server extension's files call one way.
# The order of its files, bottom first, is the list of "layer:" lines in
# eventhub.c's header comment.  It fails on a call to a function (or a use
# of a variable) defined in a file higher in the order, read with nm from
# the object files, and on an #include of a header of a higher file (each
# X.h belongs to X.c's layer), in the .c files and in the headers.  Run from
# anywhere after the build; scripts/run-suites.sh runs it in `make test`.
set -eu
cd "$(dirname "$0")"
order=$(sed -n 's/^ \*[[:space:]]*layer:[[:space:]]*\([a-z_]*\)\.c.*/\1/p' eventhub.c)
[ -n "$order" ] || { echo "check_layers: no \"layer:\" lines in eventhub.c" >&2; exit 1; }
rank=0
ranks=""
for f in $order; do
	[ -f "$f.c" ] || { echo "check_layers: $f.c is missing" >&2; exit 1; }
	[ -f "$f.o" ] || { echo "check_layers: $f.o is missing (build first; is it in the Makefile's OBJS?)" >&2; exit 1; }
	rank=$((rank + 1))
	ranks="$ranks$f $rank
"
done
rank_of() { printf '%s' "$ranks" | awk -v f="$1" '$1 == f { print $2 }'; }
status=0
for c in *.c; do
	f=${c%.c}
	[ -n "$(rank_of "$f")" ] || { echo "not ok: $c is not in eventhub.c's layer order"; status=1; }
done
for h in *.h; do
	f=${h%.h}
	[ -n "$(rank_of "$f")" ] || { echo "not ok: $h belongs to no file of eventhub.c's layer order"; status=1; }
done
[ $status -eq 0 ] || exit $status
# What each object defines: "symbol file".
defs=$(for f in $order; do nm --defined-only "$f.o" | awk -v f="$f" '$2 ~ /^[TDBR]$/ { print $3, f }'; done)
calls=0
for f in $order; do
	mine=$(rank_of "$f")
	for sym in $(nm --undefined-only "$f.o" | awk '{ print $2 }'); do
		to=$(printf '%s\n' "$defs" | awk -v s="$sym" '$1 == s { print $2; exit }')
		[ -n "$to" ] || continue
		calls=$((calls + 1))
		if [ "$(rank_of "$to")" -ge "$mine" ]; then
			echo "not ok: $f.c uses $sym of $to.c, a file above it (eventhub.c's layer order)"
			status=1
		fi
	done
done
includes=0
for src in *.c *.h; do
	f=${src%.*}
	mine=$(rank_of "$f")
	for h in $(sed -n 's/^#include "\([a-z_]*\)\.h"$/\1/p' "$src"); do
		theirs=$(rank_of "$h")
		[ -n "$theirs" ] || continue	# not one of ours (postgres.h and the like)
		includes=$((includes + 1))
		if [ "$theirs" -gt "$mine" ]; then
			echo "not ok: $src includes $h.h, the header of a file above it (eventhub.c's layer order)"
			status=1
		fi
	done
done
[ $status -eq 0 ] && echo "ok - the extension's files call one way ($calls calls, $includes includes between files checked): $(echo $order | sed 's/ / < /g')"
exit $status
