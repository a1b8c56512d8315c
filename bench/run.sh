#!/usr/bin/env bash
# make bench: measure eventhub on one throwaway cluster and print one table.
# This driver stages the run and runs the measurements (bench/items/*.sh,
# one script each, on the helpers of bench/lib.sh) in their order.
#
#   bench/run.sh                       full sizes (about 12 minutes on 2 cores,
#                                      and 21 more for the soak of item 18)
#   BENCH_SOAK_SECONDS=60 bench/run.sh  the same with a short soak
#   BENCH_SCALE=smoke bench/run.sh     tiny sizes, about a minute
#   BENCH_ONLY="8 9" bench/run.sh      only the measurements numbered 8 and 9
#   BENCH_ONLY=metrics BENCH_SCALE=smoke bench/run.sh   the metrics scrapes alone, small
#   bench/run.sh --check               only whether what it needs is installed
#
# The measurements, by number and name (in the order they run):
#   1 publish      publish throughput against a bare INSERT and PgQ
#   2 latency      publish-to-callback latency of library subscribers
#   3 listeners    what idle listeners cost publishers (NOTIFY)
#   4 catchup      catching up on a backlog; events_since against a SELECT
#   5 new-orgs     creating organizations from an old and a fresh session
#   6 retention    the retention worker's pass beside publishers
#   7 poll         delivery by polling, without LISTEN
#   8 compaction   what compaction's index costs a publish
#   9 snapshot     snapshots against a plain SELECT; memory
#   10 metrics     eventhub.metrics() and what a scrape costs publishers
#   11 fanout      eventhub watch processes following one organization
#   13 go-watch    the Go package's watchers against eventhub watch
#   14 go-publish  the Go package's Publish against pgbench
#   12 history     publish and read beside a long kept history
#   15 standby     eventhub watch processes on a hot standby; its replay lag
#   16 pooler      eventhub watch processes through pgbouncer (transaction pooling)
#   18 soak        64 eventhub watch processes waiting on a hot standby for
#                  10 minutes against none: publish cost, replay lag,
#                  recovery conflicts (about 21 minutes)
#   17 outage      a watcher across a restart of the server (runs last: it
#                  stops the cluster)
#
# Environment:
#   BENCH_SCALE  full (default) or smoke
#   BENCH_ONLY   the measurements to run, by number (1-18) or name,
#                separated by spaces or commas; default all
#   BENCH_FAN_PROCS  the numbers of watch processes of item 11 (default
#                "1 16 64 128")
#   BENCH_GO_FAN_PROCS  the numbers of Go watchers (and of watch
#                processes) of item 13 (default "1 16 64")
#   BENCH_SOAK_SECONDS  how long each of item 18's two phases publishes
#                (default 600; 20 at smoke scale)
#   BENCH_KEEP   a directory to copy every raw output of the run into
#                (pgbench logs, latencies, eh_bench outputs)
#   BENCH_PERF   set: item 11 records a perf profile of the watchers and
#                of their backends at each point, and writes the report
#                (perf_fan_N_server.txt, perf_fan_N_client.txt) beside the
#                JSON; "all": of the whole machine instead
#                (perf_fan_N_all.txt by process and symbol,
#                perf_fan_N_comm.txt by process).  Kernel symbols need kernel.perf_event_paranoid <= 1
#                and kernel.kptr_restrict = 0.
#   BENCH_JSON   where to write the figures as JSON; default
#                bench/results.json under the directory it was called from.
#                With gnuplot installed, the latency plot goes next to it
#                (same name, .png).
#
# Run as root it stages itself and the C helper (bench/eh_bench/, compiled
# here against client/libeventhub.a) into a mktemp directory under /tmp and
# runs the measurements as the unprivileged user postgres (PostgreSQL refuses
# root).  It needs the extension installed (make install), pgbench, PgQ,
# pgbouncer and Go with pgx: scripts/deps.sh installs them; this script installs nothing.
# Performance figures are ratios against baselines measured in the same run;
# a missed target prints MISS but does not fail the run.  The exit status is
# non-zero only when the benchmark itself breaks.
set -euo pipefail

# The measurements in the order they run: NN-NAME, the script bench/items/NN-NAME.sh.
ITEMS=(01-publish 02-latency 03-listeners 04-catchup 05-new-orgs 06-retention 07-poll
	08-compaction 09-snapshot 10-metrics 11-fanout 13-go-watch 14-go-publish 12-history
	15-standby 16-pooler 18-soak 17-outage)

# item_number WORD: the number of the measurement WORD names (its number or
# its name); nothing if none.
item_number() {
	local i
	for i in "${ITEMS[@]}"; do
		if [ "$1" = "${i#*-}" ] || [ "$1" = "$((10#${i%%-*}))" ]; then echo "$((10#${i%%-*}))"; fi
	done
}

# requirements: fails, naming scripts/deps.sh, when something the run needs
# is not installed.
requirements() {
	local missing=() pg_config list
	pg_config=${PG_CONFIG:-$(command -v /usr/lib/postgresql/15/bin/pg_config || command -v pg_config || true)}
	if [ -z "$pg_config" ]; then
		missing+=("pg_config (postgresql-server-dev-15)")
	else
		[ -x "$("$pg_config" --bindir)/pgbench" ] || missing+=("pgbench (postgresql-15)")
		[ -f "$("$pg_config" --sharedir)/extension/pgq.control" ] || missing+=("PgQ (postgresql-15-pgq3)")
	fi
	command -v "${CC:-cc}" >/dev/null || missing+=("a C compiler (gcc)")
	command -v go >/dev/null || missing+=("go (golang-go)")
	[ -x /usr/sbin/pgbouncer ] || missing+=("pgbouncer (pgbouncer)")
	[ -d /usr/share/gocode/src/github.com/jackc/pgx/v4 ] || missing+=("pgx (golang-github-jackc-pgx-v4-dev)")
	[ ${#missing[@]} -eq 0 ] && return 0
	printf -v list '%s, ' "${missing[@]}"
	echo "bench: missing ${list%, }" >&2
	echo "bench: scripts/deps.sh installs them (as root); make bench installs nothing" >&2
	exit 1
}

# stage WORK REPO: the scripts, eh_bench and the Go watcher and publisher in WORK.
stage() {
	local work=$1 repo=$2 cflags libs prog
	mkdir -p "$work/scripts"
	cp -r "$repo/bench/run.sh" "$repo/bench/lib.sh" "$repo/bench/fan.sh" "$repo/bench/items" "$work/"
	cp "$repo/scripts/cluster.sh" "$work/scripts/"
	cflags=(-O2 -Wall -Wextra -Werror -pthread)
	if [ -f "$repo/client/libeventhub.a" ]; then
		libs=(-I"$repo/client" -I"$("$pg_config" --includedir)" "$repo/client/libeventhub.a" -lpq -lcrypto)
	else
		read -r -a libs <<<"$(pkg-config --cflags --libs eventhub) -lpq"
	fi
	${CC:-cc} "${cflags[@]}" -o "$work/eh_bench" "$repo"/bench/eh_bench/*.c "${libs[@]}"
	# The CLI that item 11 runs: this tree's if built, else the installed one.
	if [ -x "$repo/client/eventhub" ]; then cp "$repo/client/eventhub" "$work/"; else cp "$(command -v eventhub)" "$work/"; fi
	# Items 13's and 14's Go watcher and publisher, built offline in GOPATH
	# mode (Debian's pgx).
	mkdir -p "$work/gopath/src/github.com/eventhub/eventhub"
	ln -s "$repo/go" "$work/gopath/src/github.com/eventhub/eventhub/go"
	for prog in gowatch gopublish; do
		GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/gocache" GOFLAGS= \
			go build -o "$work/$prog" "$repo/bench/$prog/main.go"
	done
	rm -rf "$work/gopath" "$work/gocache"
}

if [ "${1:-}" = --check ]; then
	requirements
	exit 0
fi

if [ "${1:-}" != "--inner" ]; then
	# ---------------------------------------------------------------- outer
	started=$SECONDS
	repo=$(cd "$(dirname "$0")/.." && pwd)
	scale=${BENCH_SCALE:-full}
	case $scale in full | smoke) ;; *)
		echo "bench: BENCH_SCALE must be full or smoke, not '$scale'" >&2
		exit 2
		;;
	esac
	only=
	only_words=${BENCH_ONLY:-}
	read -r -a words <<<"${only_words//,/ }"
	for word in "${words[@]}"; do
		n=$(item_number "$word")
		if [ -z "$n" ]; then
			echo "bench: BENCH_ONLY must list measurement numbers (1-18) or names ($(printf '%s\n' "${ITEMS[@]#*-}" | paste -sd' ' -)), not '$BENCH_ONLY'" >&2
			exit 2
		fi
		only+="${only:+ }$n"
	done
	requirements
	json=${BENCH_JSON:-bench/results.json}
	case $json in /*) ;; *) json=$PWD/$json ;; esac
	mkdir -p "$(dirname "$json")"

	work=$(mktemp -d /tmp/eventhub-bench.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	pg_config=${PG_CONFIG:-$(command -v /usr/lib/postgresql/15/bin/pg_config || command -v pg_config)}
	stage "$work" "$repo"
	source "$repo/scripts/cluster.sh"
	hand_over "$work"
	# In the background, so that a SIGTERM or SIGINT here reaches the inner run
	# (which then stops its cluster) before the staging directory goes.
	"${AS_USER[@]}" env BENCH_SCALE="$scale" BENCH_ONLY="$only" ${BENCH_GO_FAN_PROCS:+BENCH_GO_FAN_PROCS="$BENCH_GO_FAN_PROCS"} ${BENCH_GOMAXPROCS:+BENCH_GOMAXPROCS="$BENCH_GOMAXPROCS"} ${BENCH_SOAK_SECONDS:+BENCH_SOAK_SECONDS="$BENCH_SOAK_SECONDS"} PG_CONFIG="$pg_config" bash "$work/run.sh" --inner "$work" &
	child=$!
	trap 'kill -TERM "$child" 2>/dev/null || true; wait "$child" || true; exit 130' INT TERM
	wait "$child"
	trap - INT TERM
	cp "$work/out/results.json" "$json"
	[ -f "$work/out/latency.png" ] && cp "$work/out/latency.png" "${json%.json}.png"
	for f in "$work"/out/perf_fan_*.txt; do [ -f "$f" ] && cp "$f" "$(dirname "$json")/"; done
	[ -n "${BENCH_KEEP:-}" ] && rm -rf "$BENCH_KEEP" && cp -r "$work/out" "$BENCH_KEEP"
	echo "bench: JSON in $json$([ -f "$work/out/latency.png" ] && echo ", plot in ${json%.json}.png"); $scale run took $((SECONDS - started)) s" >&2
	exit 0
fi

# -------------------------------------------------------------------- inner
# Runs as an unprivileged user in the staged directory WORK.
work=$2
cd "$work"
source scripts/cluster.sh
source lib.sh
bin=$work/eh_bench
out=$work/out
mkdir -p "$out"
export PGDATABASE=postgres
# want N: whether measurement N runs (BENCH_ONLY, numbers by now).
want() { [ -z "${BENCH_ONLY:-}" ] || [[ " $BENCH_ONLY " == *" $1 "* ]]; }

# The sizes the throughput comparisons share.
#      variable  full smoke
scaled T_TPS     3    1   # seconds per publish-throughput point
scaled ROUNDS    5    1   # interleaved rounds per comparison; the median counts

bgpids=()
cleanup() {
	local p
	for p in "${bgpids[@]}"; do kill "$p" 2>/dev/null || true; done
	exec 3>&- 2>/dev/null || true
	cluster_stop "$work/standby"
	cluster_stop "$work/cluster"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_cluster
data='{"context": "/weather", "version": "v2", "upstream": "http://weather.internal:8080"}'
publish_script publish_own.sql "'bench-' || :client_id"
row "0. notification mode (eventhub.notification_mode())" "$MODE"

# Sourced at the top level: what a measurement sets (rows, JSON, TPS) stays.
for item in "${ITEMS[@]}"; do
	if want "$((10#${item%%-*}))"; then
		source "items/$item.sh"
	fi
done

cluster_stop "$work/cluster"
report
