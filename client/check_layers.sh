#!/bin/sh
# check_layers.sh: proves that libeventhub's files call and include one way.
# The order of its files, bottom first, is the list of "layer:" lines in
# internal.h; for every object file this reads with nm the functions it
# uses and which object defines them, and fails on a call to a file higher
# in the list (or to a file the list does not name).  It also fails when a
# file includes a local header that is not of its layer or below: foo.h is
# foo.c's, internal.h util.c's (it declares the handle), eventhub.h (the
# public header) everyone's.  Run from client/ after the build, by
# `make check`.
set -eu
cd "$(dirname "$0")"
order=$(sed -n 's/^ \*[[:space:]]*layer:[[:space:]]*\([a-z_]*\)\.c.*/\1/p' internal.h)
[ -n "$order" ] || { echo "check_layers: no \"layer:\" lines in internal.h" >&2; exit 1; }
rank=0
ranks=""
for f in $order; do
	[ -f "$f.o" ] || { echo "check_layers: $f.o is missing (is $f.c in LIB_OBJS?)" >&2; exit 1; }
	rank=$((rank + 1))
	ranks="$ranks$f $rank
"
done
# What each object defines: "symbol file".
defs=$(for f in $order; do nm --defined-only "$f.o" | awk -v f="$f" '$2 ~ /^[TDBR]$/ { print $3, f }'; done)
status=0
edges=0
for f in $order; do
	mine=$(printf '%s' "$ranks" | awk -v f="$f" '$1 == f { print $2 }')
	for sym in $(nm --undefined-only "$f.o" | awk '{ print $2 }'); do
		to=$(printf '%s\n' "$defs" | awk -v s="$sym" '$1 == s { print $2; exit }')
		[ -n "$to" ] || continue
		theirs=$(printf '%s' "$ranks" | awk -v f="$to" '$1 == f { print $2 }')
		edges=$((edges + 1))
		if [ "$theirs" -ge "$mine" ]; then
			echo "not ok: $f.c calls $sym of $to.c, a file above it (internal.h's layer order)"
			status=1
		fi
	done
done
includes=0
for f in $order; do
	mine=$(printf '%s' "$ranks" | awk -v f="$f" '$1 == f { print $2 }')
	for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)\.h".*/\1/p' "$f.c"); do
		includes=$((includes + 1))
		# eventhub.h is the public header; internal.h declares the handle, util.c's layer.
		case "$h" in eventhub) continue ;; internal) of=util ;; *) of=$h ;; esac
		theirs=$(printf '%s' "$ranks" | awk -v f="$of" '$1 == f { print $2 }')
		if [ -z "$theirs" ] || [ "$theirs" -gt "$mine" ]; then
			echo "not ok: $f.c includes $h.h, not a header of its layer or below (internal.h's layer order)"
			status=1
		fi
	done
done
# The CLI's objects (cli*.o) and the tests' are not the library's.
for o in *.o; do
	f=${o%.o}
	case "$f" in cli* | test_*) continue ;; esac
	case " $(echo $order) " in
		*" $f "*) ;;
		*) echo "not ok: $o is not in internal.h's layer order"; status=1 ;;
	esac
done
[ $status -eq 0 ] && echo "ok - the library's files call one way ($edges calls between files checked) and include one way ($includes includes checked): $(echo $order | sed 's/ / < /g')"
exit $status
