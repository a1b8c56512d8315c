#!/bin/sh
# check_layers.sh: proves that libeventhub's files call and include one way.
# The order of its files, bottom first, is the list of "layer:" lines in
# internal.h; it fails on a use of a function or variable defined in a file
# higher in the order, read with nm from the object files (the part shared
# with the extension's check, ../scripts/layers.sh), and on an object file
# the order does not name.  It also fails when a file includes a local
# header that is not of its layer or below: foo.h is foo.c's, internal.h
# util.c's (it declares the handle), eventhub.h (the public header)
# everyone's.  Run from client/ after the build, by `make check`.
set -eu
cd "$(dirname "$0")"
. ../scripts/layers.sh
layer_order internal.h
status=0
check_calls "internal.h's"
includes=0
for f in $order; do
	mine=$(rank_of "$f")
	for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)\.h".*/\1/p' "$f.c"); do
		includes=$((includes + 1))
		# eventhub.h is the public header; internal.h declares the handle, util.c's layer.
		case "$h" in eventhub) continue ;; internal) of=util ;; *) of=$h ;; esac
		theirs=$(rank_of "$of")
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
[ $status -eq 0 ] && echo "ok - the library's files call one way ($calls calls between files checked) and include one way ($includes includes checked): $(echo $order | sed 's/ / < /g')"
exit $status
