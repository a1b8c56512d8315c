#!/usr/bin/env bash
# Runs the pg_regress, isolation and TAP suites staged in WORK (see test.sh)
# and prints their tally (scripts/tally.sh).  Must not run as root.
set -uo pipefail
shopt -s nullglob
work=$1
cd "$work"
# Which suites: all by default; make prove_installcheck runs "tap" alone.
suites=" ${SUITES:-unit prometheus sql tap go demo bench} "
want() { [[ $suites == *" $1 "* ]]; }
source scripts/cluster.sh
source scripts/tally.sh

names() { for f in "$@"; do basename "${f%.*}"; done; }

# tallied LOG COMMAND...: runs COMMAND with its output in LOG, prints LOG and
# counts its result lines (tally_log), and counts one failure more when
# COMMAND failed without a failing result line (the driver itself failed).
tallied() {
	local log=$1 status
	shift
	"$@" >"$log" 2>&1
	status=$?
	cat "$log"
	tally_log "$log"
	if [ $status -ne 0 ] && [ "$tally_failures" -eq 0 ]; then
		failed=$((failed + 1))
	fi
}

# one_test NAME LOG COMMAND...: runs COMMAND as one test, its output in LOG,
# and prints "NAME ... ok", or "NAME ... FAILED" and the end of LOG.
one_test() {
	local name=$1 log=$2
	shift 2
	if "$@" >"$log" 2>&1; then
		passed=$((passed + 1))
		echo "$name ... ok"
	else
		failed=$((failed + 1))
		echo "$name ... FAILED"
		tail -30 "$log"
	fi
}

mkdir -p out

# Client unit tests (payload parser, options): no server needed.
if want unit && [ -x client/test_unit ]; then
	tallied out/unit.log client/test_unit
fi

# The source checks, one test each, their lines as comments: the
# extension's files call one way (check_layers.sh),
# eventhub.statements() lists every statement it runs (check_statements.sh),
# and no function or file in extension/ and client/ grows too long
# (check_sizes.sh).
if want unit; then
	for check in extension/check_layers.sh extension/check_statements.sh scripts/check_sizes.sh; do
		log=out/$(echo "$check" | tr / _).log
		sh "$check" >"$log" 2>&1
		status=$?
		sed 's/^/# /' "$log"
		if [ $status -eq 0 ]; then
			tally_ok "build: $check"
		else
			tally_not_ok "build: $check"
		fi
	done
fi

# The Prometheus rules, their unit tests and the metric names they use
# (prometheus/): promtool only, no server.
if want prometheus; then
	tallied out/prometheus.log perl regress/prometheus.pl
fi

if want sql; then
trap 'cluster_stop "$work/cluster"' EXIT
if ! cluster_start "$work/cluster" regress/eventhub.conf; then
	tally_not_ok "a cluster for the SQL and isolation suites starts"
	tally_end suites
	exit 1
fi

# suite NAME DRIVER DBNAME TESTS...: run one pg_regress-style suite and tally it.
suite() {
	local name=$1 driver=$2 db=$3
	shift 3
	[ $# -gt 0 ] || return 0
	tallied "out/$name.log" "$PGXS_DIR/src/test/$driver" --inputdir=regress \
		--outputdir="out/$name" --bindir="$PG_BINDIR" --host="$PGHOST" \
		--port="$PGPORT" --dbname="$db" "$@"
	[ ! -f "out/$name/regression.diffs" ] || cat "out/$name/regression.diffs"
}

suite regress regress/pg_regress contrib_regression $(names regress/sql/*.sql)
suite isolation isolation/pg_isolation_regress isolation_regression $(names regress/specs/*.spec)

cluster_stop "$work/cluster"
fi

# TAP suites: each file starts its own clusters with regress/eventhub.conf.
# PROVE_TESTS (make prove_installcheck PROVE_TESTS=regress/t/005_replicas.pl)
# picks some; the default is all of them.
for t in ${PROVE_TESTS:-regress/t/*.pl}; do
	want tap || break
	[ -e "$t" ] || continue
	mkdir -p "$work/tap/$(names "$t")"
	if PATH="$PG_BINDIR:$PATH" PG_REGRESS="$PGXS_DIR/src/test/regress/pg_regress" \
		TESTDIR="$work/tap/$(names "$t")" TEMP_CONFIG="$work/regress/eventhub.conf" \
		EVENTHUB_WORK="$work" prove -I "$PGXS_DIR/src/test/perl" -I regress/t "$t"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		cat "$work/tap/$(names "$t")"/tmp_check/log/regress_log_* 2>/dev/null | tail -50
	fi
done

# The Go package (go/): gofmt, go vet and go test -race, offline in GOPATH
# mode (pgx from Debian's golang-github-jackc-pgx-v4-dev), the package under
# a GOPATH of its own.  Its tests start their own server.  Each test
# function counts (its "--- PASS"/"--- FAIL" line), and gofmt and vet one
# each.
if want go && [ -d go ]; then
	gopkg=$work/gopath/src/github.com/eventhub/eventhub
	mkdir -p "$gopkg"
	ln -sfn "$work/go" "$gopkg/go"
	(
		cd "$gopkg/go" || exit 1
		# The tests' servers live under TMPDIR: a test binary that panics
		# (go test's -timeout) leaves them running, and they are stopped
		# below.
		mkdir -p "$work/gotmp"
		export GO111MODULE=off GOPATH=$work/gopath:/usr/share/gocode GOCACHE=$work/gocache GOFLAGS= PG_BINDIR TMPDIR=$work/gotmp
		unformatted=$(gofmt -l .)
		if [ -z "$unformatted" ]; then echo "ok - go: gofmt"; else echo "not ok - go: gofmt: $unformatted"; fi
		if go vet ./... 2>&1; then echo "ok - go: go vet"; else echo "not ok - go: go vet"; fi
		go test -race -count=1 -v ./... 2>&1 | sed -e 's/^ok  *\t/go test passed: /' -e 's/^\( *\)--- PASS: /ok - go: \1/' -e 's/^\( *\)--- FAIL: /not ok - go: \1/'
		[ "${PIPESTATUS[0]}" -eq 0 ] || echo "not ok - go: go test exited with failure"
		for d in "$work"/gotmp/eventhub-go-*/data; do
			[ -f "$d/postmaster.pid" ] && "$PG_BINDIR/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 && echo "# stopped a server a test left: $d"
		done
	) >out/go.log 2>&1
	grep -E '^(ok|not ok) ' out/go.log
	tally_log out/go.log
	[ "$tally_failures" -eq 0 ] || tail -60 out/go.log
fi

# The demo, end to end: four replicas converge through a killed connection,
# a server restart, a late join from a snapshot and a resync from one.
if want demo; then
	one_test demo out/demo.log bash scripts/demo-run.sh "$work"
fi

# Benchmark smoke run: the benchmark must work; its targets are not checked
# here (make bench measures).  A few measurements at their smallest (about a
# minute): throughput rounds, library subscribers, a catch-up, watch
# processes, and the Go watcher and publisher, and watch processes on a
# hot standby, on the shared helpers.
if want bench; then
	one_test "bench smoke" out/bench.log env BENCH_SCALE=smoke \
		BENCH_ONLY="publish latency catchup fanout go-watch go-publish standby" \
		BENCH_JSON="$work/out/bench-smoke.json" bash bench/run.sh
fi

tally_end suites
