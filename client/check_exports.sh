#!/bin/sh
# check_exports.sh: the shared library exports exactly the documented API.
# Compares three lists of function names: nm -D of libeventhub.so.1 (the
# version suffix, @@EVENTHUB_1 or @@EVENTHUB_1.N, removed), the functions eventhub.h
# declares, and the list under "Symbols" in docs/client.md (between its
# <!-- symbols --> markers).  Run from client/ after the build, by
# `make check`; the docs are looked for beside client/ (a source tree) and
# skipped, with a note, where they are not.
set -eu
cd "$(dirname "$0")"
# The library of this version (eventhub.h's EVENTHUB_VERSION), not whatever
# an earlier build of another version left beside it.
lib=libeventhub.so.$(sed -n 's/^#define EVENTHUB_VERSION "\(.*\)"/\1/p' eventhub.h)
[ -f "$lib" ] || { echo "check_exports: $lib is not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort -u >"$tmp/nm"
# Function declarations: a name followed by "(" at the start of a
# prototype line (callback typedefs are "(*name)" and do not match).
sed -n 's/^[a-z].*[[:space:]*]\(eh_[a-z_]*\)(.*/\1/p' eventhub.h | sort -u >"$tmp/header"
status=0
if ! diff -u "$tmp/header" "$tmp/nm" >"$tmp/diff1"; then
	echo "not ok: nm -D $lib differs from eventhub.h's functions (- header, + library):"
	sed -n '3,$p' "$tmp/diff1"
	status=1
fi
# EVENTHUB_1, or a later node of the same soname (EVENTHUB_1.1: 0.4.0).
if nm -D --defined-only "$lib" | awk '$2 == "T"' | grep -qv '@@EVENTHUB_1\(\.[0-9]*\)\{0,1\}$'; then
	echo "not ok: a symbol of $lib is not versioned EVENTHUB_1 or EVENTHUB_1.N"
	status=1
fi
if [ -f ../docs/client.md ]; then
	sed -n '/<!-- symbols -->/,/<!-- \/symbols -->/p' ../docs/client.md |
		grep -o 'eh_[a-z_]*' | sort -u >"$tmp/docs"
	if ! diff -u "$tmp/docs" "$tmp/nm" >"$tmp/diff2"; then
		echo "not ok: nm -D $lib differs from docs/client.md's Symbols (- docs, + library):"
		sed -n '3,$p' "$tmp/diff2"
		status=1
	fi
else
	echo "# check_exports: no ../docs/client.md here; compared with eventhub.h only"
fi
[ $status -eq 0 ] && echo "ok - $lib exports exactly the $(wc -l <"$tmp/nm") documented functions, versioned EVENTHUB_1 or EVENTHUB_1.N"
exit $status
