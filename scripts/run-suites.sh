#!/usr/bin/env bash
# Runs the pg_regress, isolation and TAP suites staged in WORK (see test.sh)
# and prints "tests: N passed, N failed".  Must not run as root.
set -uo pipefail
work=$1
cd "$work"
source scripts/cluster.sh

passed=0
failed=0

# count LOG: add pg_regress-style "... ok" and "... FAILED" lines to the tally.
count() {
	local ok bad
	ok=$(grep -cE '\.\.\. ok|^ok ' "$1" || true)
	bad=$(grep -ciE '\.\.\. failed|^not ok ' "$1" || true)
	passed=$((passed + ok))
	failed=$((failed + bad))
}

names() { for f in "$@"; do basename "${f%.*}"; done; }

mkdir -p out
trap 'cluster_stop "$work/cluster"' EXIT
if ! cluster_start "$work/cluster" regress/eventhub.conf; then
	echo "tests: 0 passed, 1 failed"
	exit 1
fi

"$PGXS_DIR/src/test/regress/pg_regress" --inputdir=regress --outputdir=out/regress \
	--bindir="$PG_BINDIR" --host="$PGHOST" --port="$PGPORT" --dbname=contrib_regression \
	$(names regress/sql/*.sql) 2>&1 | tee out/regress.log
count out/regress.log
[ -f out/regress/regression.diffs ] && cat out/regress/regression.diffs

"$PGXS_DIR/src/test/isolation/pg_isolation_regress" --inputdir=regress --outputdir=out/isolation \
	--bindir="$PG_BINDIR" --host="$PGHOST" --port="$PGPORT" --dbname=isolation_regression \
	$(names regress/specs/*.spec) 2>&1 | tee out/isolation.log
count out/isolation.log
[ -f out/isolation/regression.diffs ] && cat out/isolation/regression.diffs

cluster_stop "$work/cluster"

# TAP suites: each file starts its own clusters with regress/eventhub.conf.
for t in regress/t/*.pl; do
	[ -e "$t" ] || continue
	if PATH="$PG_BINDIR:$PATH" PG_REGRESS="$PGXS_DIR/src/test/regress/pg_regress" \
		TESTDIR="$work/tap/$(names "$t")" TEMP_CONFIG="$work/regress/eventhub.conf" \
		EVENTHUB_WORK="$work" prove -I "$PGXS_DIR/src/test/perl" "$t"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		cat "$work/tap/$(names "$t")"/tmp_check/log/regress_log_* 2>/dev/null | tail -50
	fi
done

echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
