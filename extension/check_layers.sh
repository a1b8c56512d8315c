#!/bin/sh
# check_layers.sh: proves that the server extension's files call one way.
# The order of its files, bottom first, is the list of "layer:" lines in
# eventhub.c's header comment.  It fails on a call to a function (or a use
# of a variable) defined in a file higher in the order, read with nm from
# the object files (the part shared with the client's check,
# ../scripts/layers.sh), and on an #include of a header of a higher file
# (each X.h belongs to X.c's layer), in the .c files and in the headers.
# Run from anywhere after the build; scripts/run-suites.sh runs it in
# `make test`.
set -eu
cd "$(dirname "$0")"
. ../scripts/layers.sh
layer_order eventhub.c
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
check_calls "eventhub.c's"
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
