#!/bin/sh
# check_sizes.sh: no function over 80 lines and no file over 700 lines in
# the extension and the client (library, CLI and their tests).  A function
# is counted from its opening "{" to its closing "}" in column 0, as
# PostgreSQL's style writes them.  Prints one "ok - ..." line, or a
# "not ok: ..." line for each one too long and exits non-zero.
set -eu
cd "$(dirname "$0")/.."
max_function=80
max_file=700
status=0
files=$(ls extension/*.c extension/*.h client/*.c client/*.h)
for f in $files; do
	n=$(wc -l <"$f")
	if [ "$n" -gt "$max_file" ]; then
		echo "not ok: $f has $n lines (at most $max_file)"
		status=1
	fi
done
long=$(awk -v max="$max_function" '
	FNR == 1 { start = 0 }
	/^[A-Za-z_].*\(/ { name = $0 }
	/^\{/ { start = FNR; fn = name }
	/^\}/ && start {
		if (FNR - start + 1 > max)
			printf "not ok: %s:%d: %s is %d lines (at most %d)\n", FILENAME, start, fn, FNR - start + 1, max
		start = 0
	}' $files)
if [ -n "$long" ]; then
	echo "$long"
	status=1
fi
count=$(echo "$files" | wc -w)
[ $status -eq 0 ] && echo "ok - no function over $max_function lines, no file over $max_file lines ($count files of extension/ and client/)"
exit $status
