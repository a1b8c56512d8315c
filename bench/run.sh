#!/usr/bin/env bash
# make bench: measure eventhub on one throwaway cluster and print one table.
#
#   bench/run.sh                       full sizes (about 12 minutes on 2 cores)
#   BENCH_SCALE=smoke bench/run.sh     tiny sizes, about a minute (make test)
#   BENCH_ONLY="8 9" bench/run.sh      only the measurements numbered 8 and 9
#   BENCH_ONLY=10 BENCH_SCALE=smoke bench/run.sh   the metrics scrapes alone, small
#
# Environment:
#   BENCH_SCALE  full (default) or smoke
#   BENCH_ONLY   the numbers of the measurements to run (1-14, separated by
#                spaces or commas); default all
#   BENCH_FAN_PROCS  the numbers of watch processes of item 11 (default
#                "1 4 8 16 64")
#   BENCH_GO_FAN_PROCS  the numbers of Go watchers (and of watch
#                processes) of item 13 (default "1 16 64")
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
# root).  It needs the extension installed (make install) and pgbench.
# Performance figures are ratios against baselines measured in the same run;
# a missed target prints MISS but does not fail the run.  The exit status is
# non-zero only when the benchmark itself breaks.
set -euo pipefail

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
	only=${BENCH_ONLY:-}
	case $only in *[!0-9,\ ]*)
		echo "bench: BENCH_ONLY must list measurement numbers (1-14), not '$only'" >&2
		exit 2
		;;
	esac
	json=${BENCH_JSON:-bench/results.json}
	case $json in /*) ;; *) json=$PWD/$json ;; esac
	mkdir -p "$(dirname "$json")"

	work=$(mktemp -d /tmp/eventhub-bench.XXXXXX)
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/scripts"
	cp "$repo/bench/run.sh" "$work/"
	cp "$repo/scripts/cluster.sh" "$work/scripts/"
	pg_config=${PG_CONFIG:-$(command -v /usr/lib/postgresql/15/bin/pg_config || command -v pg_config)}
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
	GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/gocache" GOFLAGS= \
		go build -o "$work/gowatch" "$repo/bench/gowatch/main.go"
	GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/gocache" GOFLAGS= \
		go build -o "$work/gopublish" "$repo/bench/gopublish/main.go"
	rm -rf "$work/gopath" "$work/gocache"
	source "$repo/scripts/cluster.sh"
	hand_over "$work"
	# In the background, so that a SIGTERM or SIGINT here reaches the inner run
	# (which then stops its cluster) before the staging directory goes.
	"${AS_USER[@]}" env BENCH_SCALE="$scale" BENCH_ONLY="$only" ${BENCH_GO_FAN_PROCS:+BENCH_GO_FAN_PROCS="$BENCH_GO_FAN_PROCS"} ${BENCH_GOMAXPROCS:+BENCH_GOMAXPROCS="$BENCH_GOMAXPROCS"} PG_CONFIG="$pg_config" bash "$work/run.sh" --inner "$work" &
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
bin=$work/eh_bench
out=$work/out
mkdir -p "$out"
export PGDATABASE=postgres
# want N: whether measurement N runs (BENCH_ONLY).
want() { [ -z "${BENCH_ONLY:-}" ] || [[ " ${BENCH_ONLY//,/ } " == *" $1 "* ]]; }

case ${BENCH_SCALE:-full} in
full)
	T_TPS=3          # seconds per publish-throughput point
	ROUNDS=5         # interleaved rounds per comparison; the median counts
	LAT_SUBS="1 16 64"
	LAT_RATE=200 LAT_T=5
	LISTENERS=64
	CATCHUP=100000
	T_READ=4
	NEW_ORGS=100000
	RETENTION=500000
	RET_CLIENTS=2 RET_RATE=500 RET_BASE_S=20   # 10,000 publishes before the cleanup
	POLLERS=16
	POLL_SLOW_RATE=20 POLL_SLOW_T=8
	POLL_FAST_RATE=50 POLL_FAST_T=4
	SNAP_SMALL=100000 SNAP_BIG=1000000   # entities of the two snapshot organizations
	SNAP_ROUNDS=3
	COMPACTION_ROUNDS=7
	METRICS_ORGS=100000 METRICS_REPLICAS=100   # eventhub.metrics()' data set
	METRICS_FOLLOW="1000 10000"                # organizations each replica follows
	METRICS_CALLS=10
	METRICS_BLOCK=5 METRICS_BLOCKS=16   # publish with and without scrapes: blocks of seconds
	FAN_PROCS=${BENCH_FAN_PROCS:-"1 4 8 16 64"}   # eventhub watch processes following one organization
	FAN_RATE=200 FAN_EVENTS=1000
	GO_FAN_PROCS=${BENCH_GO_FAN_PROCS:-"1 16 64"}   # item 13
	HIST_ORGS=1000 HIST_SIZES="10000 2000000" HIST_READER=10000   # kept events of item 12
	HIST_T=5 HIST_ROUNDS=3
	;;
smoke)
	T_TPS=1
	ROUNDS=1
	LAT_SUBS="1 4 8"
	LAT_RATE=100 LAT_T=1
	LISTENERS=8
	CATCHUP=5000
	T_READ=1
	NEW_ORGS=2000
	RETENTION=20000
	RET_CLIENTS=2 RET_RATE=100 RET_BASE_S=2
	POLLERS=4
	POLL_SLOW_RATE=10 POLL_SLOW_T=1
	POLL_FAST_RATE=20 POLL_FAST_T=1
	SNAP_SMALL=2000 SNAP_BIG=20000
	SNAP_ROUNDS=1
	COMPACTION_ROUNDS=1
	METRICS_ORGS=2000 METRICS_REPLICAS=10
	METRICS_FOLLOW="200 2000"
	METRICS_CALLS=3
	METRICS_BLOCK=2 METRICS_BLOCKS=4
	FAN_PROCS="1 4"
	FAN_RATE=100 FAN_EVENTS=100
	GO_FAN_PROCS="1 4"
	HIST_ORGS=100 HIST_SIZES="2000 20000" HIST_READER=1000
	HIST_T=1 HIST_ROUNDS=1
	;;
esac

bgpids=()
cleanup() {
	local p
	for p in "${bgpids[@]}"; do kill "$p" 2>/dev/null || true; done
	exec 3>&- 2>/dev/null || true
	cluster_stop "$work/cluster"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "bench: $*" >&2; }
fail() {
	echo "bench: $*" >&2
	[ -f "$work/cluster/server.log" ] && tail -20 "$work/cluster/server.log" >&2
	exit 1
}
q() { "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# pgb ARGS...: pgbench without vacuum, prepared statements, against postgres.
pgb() { "$PG_BINDIR/pgbench" -n -M prepared "$@"; }
tps_of() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }
# kv FILE KEY: the value of KEY in eh_bench's key=value output line.
kv() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | head -1; }
# calc EXPR: floating-point arithmetic with awk.
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
ge() { awk "BEGIN { exit !($1 >= $2) }"; }
# median V...: the median of the values (the lower middle one of an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# Every wait below is on a condition; its bound only stops a run that hangs,
# so it is generous (minutes) and never what a measurement depends on.
WAIT_LIMIT=${BENCH_WAIT_LIMIT:-600}
# wait_until WHAT CMD...: runs CMD until it succeeds, every WAIT_STEP
# seconds (0.05 unless set); fails the run after WAIT_LIMIT seconds,
# naming WHAT.
wait_until() {
	local what=$1 end=$((SECONDS + WAIT_LIMIT))
	shift
	until "$@"; do
		[ $SECONDS -lt $end ] || fail "waited $WAIT_LIMIT s for $what"
		sleep "${WAIT_STEP:-0.05}"
	done
}
wait_file() { # wait_file FILE PID: until FILE exists; 1 if PID died first
	local end=$((SECONDS + WAIT_LIMIT))
	until [ -f "$1" ]; do
		kill -0 "$2" 2>/dev/null || return 1
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}
# reload_conf SQL...: runs the ALTER SYSTEM statements SQL, reloads, and
# waits until the reload is in force: until a new session's
# pg_conf_load_time() is past the request.  The postmaster signals every
# process (the worker too) in the same step as it rereads the files, and
# each rereads them itself, so from then on no session that starts and no
# worker cycle that begins runs with the old values.
reload_conf() {
	local args=() sql asked
	for sql in "$@"; do args+=(-c "$sql"); done
	asked=$(q -c "SELECT clock_timestamp()" "${args[@]}" -c "SELECT pg_reload_conf()" | sed -n 1p)
	wait_until "the reload asked at $asked to be in force" conf_loaded_since "$asked"
}
conf_loaded_since() { [ "$(q -c "SELECT pg_conf_load_time() >= '$1'::timestamptz")" = t ]; }
# sessions_idle: whether no client session but this one is running a statement.
sessions_idle() {
	[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
		AND state <> 'idle' AND pid <> pg_backend_pid()")" = 0 ]
}
# pgbench_connected N: whether N pgbench sessions are connected.
pgbench_connected() {
	[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'")" -ge "$1" ]
}
pgjobs() { [ "$1" -lt 2 ] && echo 1 || echo 2; }
plural() { [ "$1" = 1 ] && echo "$2" || echo "${2}s"; }
# tps_point LOG PGBENCH_ARGS...: one throughput point.
tps_point() {
	local log=$1
	shift
	pgb "$@" >"$log" 2>&1 || fail "pgbench failed: $(tail -5 "$log")"
}
# tps_rounds NAME CLIENTS SCRIPT...: ROUNDS interleaved rounds of T_TPS
# seconds per script (files in $work); sets TPS[SCRIPT] to the median tps of
# each.
declare -A TPS
tps_rounds() {
	local name=$1 c=$2 r f
	shift 2
	local -A got=()
	for ((r = 0; r < ROUNDS; r++)); do
		for f in "$@"; do
			# The floor writes eventhub's tables directly: the write guard is off for it.
			PGOPTIONS="$([ "$f" = floor_own.sql ] && echo "-c eventhub.protect_tables=off")" \
				tps_point "$out/tps_${name}_${f%.sql}_$r.log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/$f"
			got[$f]+=" $(tps_of "$out/tps_${name}_${f%.sql}_$r.log")"
		done
	done
	for f in "$@"; do
		# shellcheck disable=SC2086
		TPS[$f]=$(median ${got[$f]})
	done
}

cat >"$work/bench.conf" <<EOF
shared_preload_libraries = 'eventhub'
max_connections = 200
log_timezone = 'UTC'
log_line_prefix = '%m [%p] '
# Retention stays out of the way until item 6 lowers it with ALTER SYSTEM.
eventhub.retention = '30d'
eventhub.maintenance_interval = '1h'
EOF
say "starting a throwaway cluster (scale ${BENCH_SCALE:-full})"
cluster_start "$work/cluster" "$work/bench.conf" || fail "cluster did not start"
q >/dev/null <<'EOF' || fail "setup failed"
CREATE EXTENSION eventhub;
CREATE EXTENSION pgq;
SELECT pgq.create_queue('bench');
CREATE SCHEMA bench;
-- The baseline: the same columns, constraints and indexes as eventhub.events.
CREATE TABLE bench.bare_events (LIKE eventhub.events INCLUDING ALL);
CREATE SEQUENCE bench.bare_revision;
CREATE SEQUENCE bench.new_org;
SELECT eventhub.register_organization(o)
  FROM (SELECT 'bench-' || g FROM generate_series(0, 63) g
        UNION ALL VALUES ('bench-shared'), ('lat-org'), ('poll-org')) AS t(o);
EOF
[ "$(q -c "SELECT count(*) FILTER (WHERE schemaname = 'bench') = count(*) FILTER (WHERE schemaname = 'eventhub')
	FROM pg_indexes WHERE tablename IN ('bare_events', 'events')")" = t ] ||
	fail "the baseline table does not have the indexes of eventhub.events"
mode=$(q -c "SELECT eventhub.notification_mode()")
[ "$mode" = worker ] || fail "notification mode is '$mode', not 'worker': is eventhub in shared_preload_libraries?"

data='{"context": "/weather", "version": "v2", "upstream": "http://weather.internal:8080"}'
for v in own shared; do
	[ $v = own ] && org="'bench-' || :client_id" || org="'bench-shared'"
	echo "SELECT eventhub.publish_event($org, 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/publish_$v.sql"
	echo "INSERT INTO bench.bare_events VALUES ($org, nextval('bench.bare_revision'), gen_random_uuid(), now(), now()," \
		"'API', 'UPDATE', 'weather-api', gen_random_uuid()::text, '$data');" >"$work/bare_$v.sql"
done
# The floor: publish_event's UPDATE and INSERT as one top-level statement,
# without the function (run with the write guard off).
echo "WITH adv AS (UPDATE eventhub.organization_states s SET revision = s.revision + 1, version_id = gen_random_uuid()," \
	"updated_at = clock_timestamp() WHERE s.organization_id = 'bench-' || :client_id" \
	"RETURNING s.revision, s.version_id, s.updated_at)" \
	"INSERT INTO eventhub.events SELECT 'bench-' || :client_id, adv.revision, adv.version_id, adv.updated_at, now()," \
	"'API', 'UPDATE', 'weather-api', adv.version_id::text, '$data' FROM adv;" >"$work/floor_own.sql"
echo "SELECT pgq.insert_event('bench', 'API', '$data');" >"$work/pgq.sql"
# Item 14: what the Go package's Publish sends without a correlation id
# (gopub_event.sql) and with one (gopub_result.sql), as pgbench sends it.
echo "SELECT eventhub.publish_event('gopub-' || :client_id, 'API', 'UPDATE', 'weather-api', NULL," \
	"'$data'::jsonb, coalesce(NULL::timestamptz, pg_catalog.now())), false;" >"$work/gopub_event.sql"
echo "SELECT revision, replayed FROM eventhub.publish_event_result('gopub-' || :client_id, 'API', 'UPDATE', 'weather-api', NULL," \
	"'$data'::jsonb, coalesce(NULL::timestamptz, pg_catalog.now()));" >"$work/gopub_result.sql"
for o in lat-org poll-org; do
	echo "SELECT eventhub.publish_event('$o', 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/publish_$o.sql"
done
echo "SELECT eventhub.publish_event('new-' || nextval('bench.new_org'), 'API', 'CREATE', 'weather-api', NULL, '$data');" \
	>"$work/publish_new.sql"

rows=()   # table rows: label|value|target|verdict
row() { rows+=("$1|$2|${3:-}|${4:-}"); }
verdict() { if ge "$1" "$2"; then echo PASS; else echo MISS; fi; }
# ratio_row LABEL NUM DEN [TARGET]: a row "NUM/DEN" (tps), with a verdict
# against TARGET if given; sets RATIO.
ratio_row() {
	RATIO=$(calc "$2 / $3")
	row "$1" "$RATIO ($(printf %.0f "$2")/$(printf %.0f "$3") tps)" "${4:+>= $4}" "${4:+$(verdict "$RATIO" "$4")}"
}
json_items=()
jadd() { json_items+=("\"$1\": $2"); }
row "0. notification mode (eventhub.notification_mode())" "$mode"

# ------------------------------------------- 1. publish vs bare INSERT and PgQ
if want 1; then
	say "1/14 publish throughput vs bare INSERT and PgQ ($ROUNDS interleaved rounds of ${T_TPS} s per point)"
	json1=()
	for point in "1 own off" "8 own off" "8 shared off" "8 own on"; do
		read -r c v fsync <<<"$point"
		scripts=("bare_$v.sql" "publish_$v.sql" pgq.sql)
		[ "$v" = own ] && scripts+=(floor_own.sql)
		[ "$fsync" = on ] && reload_conf "ALTER SYSTEM SET fsync = on"
		tps_rounds "${c}_${v}_fsync_$fsync" "$c" "${scripts[@]}"
		[ "$fsync" = on ] && reload_conf "ALTER SYSTEM RESET fsync"
		label="$c $(plural "$c" client), $([ $v = own ] && echo "organization per client" || echo "one organization")"
		[ "$fsync" = on ] && label+=", fsync on"
		bare=${TPS[bare_$v.sql]} pub=${TPS[publish_$v.sql]} pgq=${TPS[pgq.sql]}
		tgt=
		[ $v = own ] && { [ "$c" = 1 ] && tgt=0.75 || tgt=0.8; }
		ratio_row "1. publish/bare INSERT, $label" "$pub" "$bare" "$tgt"
		r_bare=$RATIO
		tgt=
		[ "$c" = 8 ] && [ $v = own ] && tgt=0.9
		ratio_row "1. publish/PgQ insert_event, $label" "$pub" "$pgq" "$tgt"
		r_pgq=$RATIO
		floor=null r_floor=null
		if [ "${#scripts[@]}" = 4 ]; then
			floor=${TPS[floor_own.sql]}
			ratio_row "1. (floor) its UPDATE + INSERT as one plain statement/bare, $label" "$floor" "$bare"
			r_floor=$RATIO
			# What any publish that keeps the contract (a gapless revision per
			# organization, unique correlation ids) can reach against PgQ,
			# whose event tables have one index (on the transaction id) and
			# no per-queue row to update: two rows and four index entries a
			# publish, against one row and one entry.
			ratio_row "1. (ceiling) the floor/PgQ insert_event, $label" "$floor" "$pgq"
			ratio_row "1. (ceiling) bare INSERT/PgQ insert_event, $label" "$bare" "$pgq"
		fi
		json1+=("{\"clients\": $c, \"organizations\": \"$v\", \"fsync\": \"$fsync\", \"publish_tps\": $pub, \"bare_insert_tps\": $bare, \"pgq_tps\": $pgq, \"floor_tps\": $floor, \"ratio_bare\": $r_bare, \"ratio_pgq\": $r_pgq, \"ratio_floor\": $r_floor}")
	done
	jadd publish_throughput "[$(IFS=,; echo "${json1[*]}")]"
fi

# sub_run NAME ORG CLIENTS LISTEN POLL_MS DRAIN_S PUBLISH_ARGS...: start
# eh_bench sub, wait until every client is connected and at the head,
# publish with pgbench, hand over the head revision, collect the results.
sub_run() {
	local name=$1 org=$2 n=$3 listen=$4 poll=$5 drain=$6 pid head status
	shift 6
	rm -f "$work/ctl" "$work/ready"
	mkfifo "$work/ctl"
	"$bin" sub -o "$org" -n "$n" -l "$listen" -p "$poll" -t "$drain" -r "$work/ready" \
		-L "$out/lat_$name.txt" <"$work/ctl" >"$out/sub_$name.out" 2>"$out/sub_$name.err" &
	pid=$!
	bgpids+=("$pid")
	exec 3>"$work/ctl"
	wait_file "$work/ready" "$pid" || fail "subscribers of $name did not get ready: $(cat "$out/sub_$name.err")"
	# At the head (and listening), and done with the queries that got them there.
	wait_until "the subscribers of $name to be idle" sessions_idle
	pgb "$@" >"$out/pub_$name.log" 2>&1 || fail "pgbench failed: $(tail -5 "$out/pub_$name.log")"
	head=$(q -c "SELECT revision FROM eventhub.organization_states WHERE organization_id = '$org'")
	echo "$head" >&3
	exec 3>&-
	status=0
	wait "$pid" || status=$?
	[ $status -eq 0 ] || fail "eh_bench sub $name failed ($status): $(cat "$out/sub_$name.out" "$out/sub_$name.err")"
}

# ---------------------------------------- 2. publish-to-callback latency
if want 2; then
	say "2/14 publish-to-callback latency, $LAT_SUBS subscribers, ${LAT_RATE}/s for ${LAT_T} s"
	json2=()
	for n in $LAT_SUBS; do
		sub_run "listen_$n" lat-org "$n" 1 5000 20 -c 1 -R "$LAT_RATE" -T "$LAT_T" -f "$work/publish_lat-org.sql"
		f=$out/sub_listen_$n.out
		p99=$(kv "$f" p99)
		achieved=$(printf %.0f "$(tps_of "$out/pub_listen_$n.log")")
		tgt="" ver=""
		case $n in
		16) tgt=5 ;;
		64) tgt=20 ;;
		esac
		[ -n "$tgt" ] && ver=$(awk "BEGIN { print ($p99 <= $tgt) ? \"PASS\" : \"MISS\" }") && tgt="p99 <= $tgt ms"
		row "2. publish-to-callback ms p50/p95/p99/max, $n $(plural "$n" subscriber) (${achieved}/s published)" \
			"$(kv "$f" p50)/$(kv "$f" p95)/$p99/$(kv "$f" max)" "$tgt" "$ver"
		# Queries per delivered event: below 1 when a wake-up brings several.
		fpe=$(calc "$(kv "$f" fetches) / $(kv "$f" count)")
		row "2. events_since queries per event delivered, $n $(plural "$n" subscriber)" "$fpe"
		json2+=("{\"subscribers\": $n, \"rate_per_s\": $LAT_RATE, \"achieved_rate_per_s\": $achieved, \"events_delivered\": $(kv "$f" count), \"fetches\": $(kv "$f" fetches), \"notifications\": $(kv "$f" notifications), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $p99, \"max_ms\": $(kv "$f" max)}")
	done
	jadd callback_latency "[$(IFS=,; echo "${json2[*]}")]"
fi

# ------------------------------------------------- 3. cost of NOTIFY
# conns_point LOG LISTEN: a publish point beside LISTENERS connections that
# LISTEN eventhub (LISTEN=1) or sit idle (0); adds the notifications they
# consumed to CONSUMED.
conns_point() {
	local lpid
	rm -f "$work/ctl" "$work/ready"
	mkfifo "$work/ctl"
	"$bin" listen -n "$LISTENERS" -l "$2" -r "$work/ready" <"$work/ctl" >"$1.out" 2>"$1.err" &
	lpid=$!
	bgpids+=("$lpid")
	exec 3>"$work/ctl"
	wait_file "$work/ready" "$lpid" || fail "listeners did not get ready: $(cat "$1.err")"
	tps_point "$1.log" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
	exec 3>&-
	wait "$lpid" || fail "eh_bench listen failed: $(cat "$1.err")"
	CONSUMED=$((CONSUMED + $(kv "$1.out" notifications)))
}
if want 3; then
	say "3/14 publish throughput with 0 and $LISTENERS listening or idle connections ($ROUNDS interleaved rounds)"
	without=() with=() idle=() r_with=() r_idle=() CONSUMED=0
	for ((r = 0; r < ROUNDS; r++)); do
		# Which goes first alternates: a later point runs on a larger table.
		if ((r % 2 == 0)); then
			tps_point "$out/notify_0_$r.log" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
			conns_point "$out/notify_idle_$r" 0
			conns_point "$out/notify_n_$r" 1
		else
			conns_point "$out/notify_n_$r" 1
			conns_point "$out/notify_idle_$r" 0
			tps_point "$out/notify_0_$r.log" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
		fi
		without+=("$(tps_of "$out/notify_0_$r.log")")
		idle+=("$(tps_of "$out/notify_idle_$r.log")")
		with+=("$(tps_of "$out/notify_n_$r.log")")
		# Paired within the round: the machine's drift from round to round
		# (15% here between 3 s points) cancels.
		r_with+=("$(calc "${with[r]} / ${without[r]}")")
		r_idle+=("$(calc "${idle[r]} / ${without[r]}")")
	done
	t0=$(median "${without[@]}")
	ti=$(median "${idle[@]}")
	tn=$(median "${with[@]}")
	spread() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- -; }
	rw=$(median "${r_with[@]}")
	ri=$(median "${r_idle[@]}")
	row "3. publish tps with $LISTENERS idle listeners / with none, 8 clients (median of paired rounds; range)" \
		"$rw ($(spread "${r_with[@]}"); $(printf %.0f "$tn")/$(printf %.0f "$t0") tps)" ">= 0.9" "$(verdict "$rw" 0.9)"
	row "3. (apart) publish tps with $LISTENERS idle connections that do not listen / with none" \
		"$ri ($(spread "${r_idle[@]}"); $(printf %.0f "$ti")/$(printf %.0f "$t0") tps)"
	jadd notify_cost "{\"clients\": 8, \"listeners\": $LISTENERS, \"tps_without\": $t0, \"tps_with\": $tn, \"tps_with_idle_connections\": $ti, \"ratio\": $rw, \"ratio_idle_connections\": $ri, \"paired_ratios\": [$(IFS=,; echo "${r_with[*]}")], \"notifications_consumed\": $CONSUMED}"
fi

# load_backlog ORG N AGE: N events at revisions 1..N, the last processed
# AGE ago and each one a millisecond after the one before (as publish_event
# stamps them: its clock at each event, never two alike), inserted directly
# (as superuser, with the write guard off), with organization_states at the
# head event's revision and version.
load_backlog() {
	q <<EOF || fail "loading $2 events failed"
SET eventhub.protect_tables = off;
INSERT INTO eventhub.events
SELECT '$1', g, gen_random_uuid(), t.ts, t.ts, 'API', 'UPDATE',
       'api-' || (g % 500), '$1-' || g,
       jsonb_build_object('context', '/weather', 'version', 'v2', 'n', g)
  FROM generate_series(1, $2) g,
       LATERAL (SELECT now() - interval '$3' - ($2 - g) * interval '1 ms') AS t(ts);
INSERT INTO eventhub.organization_states
SELECT organization_id, version_id, revision, now() FROM eventhub.events
 WHERE organization_id = '$1' AND revision = $2;
EOF
}

# --------------------------------------------------- 4. catch-up and reads
if want 4; then
	small=$((CATCHUP / 10))
	say "4/14 catch-up from $CATCHUP and $small events behind; events_since against a plain SELECT"
	load_backlog catchup-big "$CATCHUP" '0 s'
	load_backlog catchup-small "$small" '0 s'
	q -c "VACUUM ANALYZE eventhub.events" >/dev/null
	"$bin" catchup -o catchup-small -e "$small" >"$out/catchup_small.out" 2>&1 || fail "catch-up failed: $(cat "$out/catchup_small.out")"
	"$bin" catchup -o catchup-big -e "$CATCHUP" >"$out/catchup_big.out" 2>&1 || fail "catch-up failed: $(cat "$out/catchup_big.out")"
	eps=$(kv "$out/catchup_big.out" events_per_s)
	eps_small=$(kv "$out/catchup_small.out" events_per_s)
	rss_big=$(kv "$out/catchup_big.out" maxrss_kb)
	rss_small=$(kv "$out/catchup_small.out" maxrss_kb)
	rss_ratio=$(calc "$rss_big / $rss_small")
	row "4. catch-up events/s, $CATCHUP behind" "$eps" ">= 50000" "$(verdict "$eps" 50000)"
	row "4. peak RSS kB, $CATCHUP / $small behind" "$rss_big / $rss_small (x$rss_ratio)" "flat (<= 1.25x)" \
		"$(awk "BEGIN { print ($rss_ratio <= 1.25) ? \"PASS\" : \"MISS\" }")"
	# Pages from random cursors: the function against the query it answers
	# (same rows, same order, same columns), each row sent to pgbench, which
	# receives it through libpq as any client does.  1000 is max_events'
	# default (a catch-up); 1 the common case of a consumer at the head.
	T_TPS_SAVED=$T_TPS T_TPS=$T_READ
	read_json=()
	for page in 1000 100 1; do
		printf '%s\n' "\\set r random(0, $((CATCHUP - page)))" \
			"SELECT * FROM eventhub.events_since('catchup-big', :r, $page);" >"$work/read_events_since_$page.sql"
		printf '%s\n' "\\set r random(0, $((CATCHUP - page)))" \
			"SELECT * FROM eventhub.events WHERE organization_id = 'catchup-big' AND revision > :r ORDER BY revision LIMIT $page;" \
			>"$work/read_select_$page.sql"
		tps_rounds "read_$page" 1 "read_select_$page.sql" "read_events_since_$page.sql"
		tgt=
		[ "$page" = 1000 ] && tgt=0.95
		ratio_row "4. events_since/plain SELECT, pages of $page $(plural "$page" event), 1 client" \
			"${TPS[read_events_since_$page.sql]}" "${TPS[read_select_$page.sql]}" "$tgt"
		read_json+=("{\"page\": $page, \"events_since_pages_per_s\": ${TPS[read_events_since_$page.sql]}, \"select_pages_per_s\": ${TPS[read_select_$page.sql]}, \"ratio\": $RATIO}")
		[ "$page" = 1000 ] && read_ratio=$RATIO
	done
	T_TPS=$T_TPS_SAVED
	jadd catch_up "{\"backlog\": $CATCHUP, \"events_per_s\": $eps, \"maxrss_kb\": $rss_big, \"small_backlog\": $small, \"small_events_per_s\": $eps_small, \"small_maxrss_kb\": $rss_small, \"rss_ratio\": $rss_ratio, \"read_ratio\": $read_ratio, \"reads\": [$(IFS=,; echo "${read_json[*]}")]}"
fi

# ------------------------------------------------ 5. creating organizations
# One session that started while organization_states was small creates
# NEW_ORGS organizations; then, after ANALYZE, a fresh session creates as
# many more.  A plan kept from the small table must not slow the first.
if want 5; then
	say "5/14 creating $NEW_ORGS organizations: a session started on a small table, then a fresh one after ANALYZE"
	tps_point "$out/new_orgs_old.log" -c 1 -t "$NEW_ORGS" -f "$work/publish_new.sql"
	q -c "ANALYZE eventhub.organization_states" -c "ANALYZE eventhub.events" >/dev/null
	tps_point "$out/new_orgs_fresh.log" -c 1 -t "$NEW_ORGS" -f "$work/publish_new.sql"
	ratio_row "5. creating organizations: session from a small table/fresh session after ANALYZE" \
		"$(tps_of "$out/new_orgs_old.log")" "$(tps_of "$out/new_orgs_fresh.log")" 0.8
	jadd organization_creation "{\"organizations\": $NEW_ORGS, \"old_session_per_s\": $(tps_of "$out/new_orgs_old.log"), \"fresh_session_per_s\": $(tps_of "$out/new_orgs_fresh.log"), \"ratio\": $RATIO}"
fi

# ------------------------------------------------------- 6. retention
# cluster_pids: the postmaster and its children (from /proc: no procps).
cluster_pids() {
	local pm f st fields
	pm=$(head -1 "$PGDATA/postmaster.pid")
	echo "$pm"
	for f in /proc/[0-9]*/stat; do
		st=$(<"$f") 2>/dev/null || continue
		read -r -a fields <<<"${st##*) }"
		if [ "${fields[1]}" = "$pm" ]; then f=${f#/proc/} && echo "${f%/stat}"; fi
	done
	return 0
}
# pin_apart WORKER_PID: the worker on the last CPU, the rest of the cluster
# on the others (the postmaster too, so that a backend it forks later
# inherits its set; pgbench is started on them).
pin_apart() {
	local last=$(($(nproc) - 1)) p
	for p in $(cluster_pids); do
		# A process that ended meanwhile is no failure.
		[ "$p" = "$1" ] || taskset -a -p -c "0-$((last - 1))" "$p" >/dev/null 2>&1 || [ ! -d "/proc/$p" ] || return 1
	done
	taskset -p -c "$last" "$1" >/dev/null
}
# pin_restore: every cluster process back on every CPU.
pin_restore() {
	local p
	for p in $(cluster_pids); do
		taskset -a -p -c "0-$(($(nproc) - 1))" "$p" >/dev/null 2>&1 || true
	done
}
# retention_point NAME LABEL BATCH DELAY [pinned]: the worker deletes a
# backlog with eventhub.cleanup_batch_size BATCH and
# eventhub.cleanup_batch_delay DELAY while publishers publish at a steady
# rate; publish p99 during the cleanup against p99 just before it.  The
# publishers are one pgbench run whose sessions stay connected throughout,
# as a controller's do: a new session's first transactions (catalog caches,
# PREPARE) are not what a publish costs, and restarting pgbench every few
# seconds, as this did before, put them in both windows.  With "pinned",
# the worker runs on a CPU of its own for both windows (pin_apart).
retention_point() {
	local name=$1 label=$2 batch=$3 delay=$4 pinned=${5:-} logdir="$out/retlogs-$1" skip line t_base t_reload t_done deleted xacts secs rps b99 c99 pr ppid wpid
	say "6/14 retention of $RETENTION expired events ($label), publish p99 with and without it"
	# In force before the backlog goes in: the worker's cycle at this reload
	# keeps it (the previous point left retention at 1h).
	reload_conf "ALTER SYSTEM SET eventhub.retention = '30d'" "ALTER SYSTEM SET eventhub.cleanup_batch_size = $batch" \
		"ALTER SYSTEM SET eventhub.cleanup_batch_delay = $delay"
	load_backlog "retention-$name" "$RETENTION" '1 day'
	q -c "VACUUM ANALYZE eventhub.events" -c CHECKPOINT >/dev/null
	mkdir -p "$logdir"
	if [ -n "$pinned" ]; then
		wpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'")
		[ -n "$wpid" ] || fail "no eventhub maintenance worker to pin"
		pin_apart "$wpid" || fail "could not pin the cluster's processes"
	fi
	# Runs until stopped below (its bound only ends a run that hangs).
	pgb -c "$RET_CLIENTS" -j "$(pgjobs "$RET_CLIENTS")" -R "$RET_RATE" -T $((WAIT_LIMIT * 2)) -l \
		--log-prefix="$logdir/pub" -f "$work/publish_own.sql" >"$logdir/pub.out" 2>&1 &
	ppid=$!
	bgpids+=("$ppid")
	[ -z "$pinned" ] || taskset -a -p -c "0-$(($(nproc) - 2))" "$ppid" >/dev/null || fail "could not pin pgbench"
	wait_until "the publishers of the retention point to connect" pgbench_connected "$RET_CLIENTS"
	# The baseline: RET_BASE_S seconds of the same sessions just before the
	# cleanup, from their second second on.
	sleep 1
	t_base=$(date +%s.%N)
	sleep "$RET_BASE_S"
	skip=$(grep -c 'eventhub retention deleted' "$work/cluster/server.log" || true)
	t_reload=$(q -c "ALTER SYSTEM SET eventhub.retention = '1h'" -c "SELECT pg_reload_conf()" \
		-c "SELECT extract(epoch FROM clock_timestamp())" | tail -1)
	# Until the worker logs the pass, with the publishers running all along;
	# looking once a second (a look forks three processes: looking 20
	# times a second took a fifth of a core from the publishers).
	line=
	retention_logged() {
		line=$(grep 'eventhub retention deleted' "$work/cluster/server.log" | tail -n +$((skip + 1)) | head -1 || true)
		[ -n "$line" ] || ! kill -0 "$ppid" 2>/dev/null
	}
	WAIT_STEP=1 wait_until "the worker to log the retention pass" retention_logged
	[ -n "$line" ] || fail "pgbench ended during retention: $(tail -3 "$logdir/pub.out")"
	# pgbench ends on SIGTERM without writing what it buffered (under a
	# second of transactions, all after the cleanup); pctl skips a line cut short.
	sleep 3
	kill -TERM "$ppid" 2>/dev/null || true
	wait "$ppid" 2>/dev/null || true
	[ -n "$pinned" ] && pin_restore
	t_done=$(date -u -d "$(echo "$line" | awk '{ print $1, $2 }') UTC" +%s.%N)
	deleted=$(echo "$line" | sed -n 's/.*retention deleted \([0-9]*\) expired events in \([0-9]*\) trans.*/\1/p')
	xacts=$(echo "$line" | sed -n 's/.*retention deleted \([0-9]*\) expired events in \([0-9]*\) trans.*/\2/p')
	# Compaction (on by default) keeps each entity's latest event: one per entity.
	[ "$(q -c "SELECT count(*) = count(DISTINCT entity_id) FROM eventhub.events WHERE organization_id = 'retention-$name'")" = t ] ||
		fail "retention left superseded events of retention-$name behind"
	secs=$(calc "$t_done - $t_reload")
	rps=$(calc "$deleted / $secs")
	"$bin" pctl -f "$t_base" -u "$t_reload" "$logdir"/pub.*[0-9] >"$out/ret_base_$name.out" || fail "no baseline pgbench latencies"
	"$bin" pctl -f "$t_reload" -u "$t_done" "$logdir"/pub.*[0-9] >"$out/ret_clean_$name.out" ||
		fail "no pgbench latencies during cleanup"
	b99=$(kv "$out/ret_base_$name.out" p99)
	c99=$(kv "$out/ret_clean_$name.out" p99)
	pr=$(calc "$c99 / $b99")
	row "6. retention rows/s deleted, $label ($deleted in $xacts xacts, $secs s)" "$(printf %.0f "$rps")"
	if [ -n "$pinned" ]; then
		# A diagnosis, not the product as users run it: no target.
		row "6. publish p99 during cleanup / without, $label, ${RET_RATE}/s" "$pr ($c99/$b99 ms)"
	else
		row "6. publish p99 during cleanup / without, $label, ${RET_RATE}/s" "$pr ($c99/$b99 ms)" "<= 2" \
			"$(awk "BEGIN { print ($pr <= 2) ? \"PASS\" : \"MISS\" }")"
	fi
	jadd "retention_$name" "{\"backlog\": $RETENTION, \"batch_size\": $batch, \"batch_delay_ms\": $delay, \"worker_on_own_cpu\": $([ -n "$pinned" ] && echo true || echo false), \"deleted\": $deleted, \"transactions\": $xacts, \"seconds\": $secs, \"rows_per_s\": $rps, \"publish_rate_per_s\": $RET_RATE, \"clients\": $RET_CLIENTS, \"p99_ms_without\": $b99, \"p99_ms_during\": $c99, \"p99_ratio\": $pr, \"samples_without\": $(kv "$out/ret_base_$name.out" count), \"samples_during\": $(kv "$out/ret_clean_$name.out" count)}"
}
if want 6; then
	retention_point default "defaults (batch 10000, the worker paces itself)" 10000 -1
	retention_point gentle "batch 2000, delay 50ms" 2000 50
	# Where the disk is what publishers and the worker share: three runs.
	reload_conf "ALTER SYSTEM SET fsync = on"
	for k in 1 2 3; do
		retention_point "fsync_on_$k" "defaults, fsync on, run $k of 3" 10000 -1
	done
	# The same with the worker on a CPU of its own: what is left when the
	# publishers never share a CPU with it (docs/performance.md).
	if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
		retention_point fsync_on_pinned "defaults, fsync on, worker on a CPU of its own" 10000 -1 pinned
	else
		say "6/14 skipping the pinned retention point: it needs taskset and 2 CPUs"
	fi
	reload_conf "ALTER SYSTEM RESET fsync"
	reload_conf "ALTER SYSTEM RESET eventhub.cleanup_batch_size" "ALTER SYSTEM RESET eventhub.cleanup_batch_delay"
fi

# ----------------------------------------------------- 7. poll fallback
if want 7; then
	say "7/14 poll fallback, $POLLERS pollers without LISTEN, 5000 and 100 ms"
	json6=()
	for spec in "5000 $POLL_SLOW_RATE $POLL_SLOW_T" "100 $POLL_FAST_RATE $POLL_FAST_T"; do
		read -r poll rate t <<<"$spec"
		sub_run "poll_$poll" poll-org "$POLLERS" 0 "$poll" $((poll * 2 / 1000 + 10)) -c 1 -R "$rate" -T "$t" -f "$work/publish_poll-org.sql"
		f=$out/sub_poll_$poll.out
		row "7. poll ${poll} ms: delivery ms p50/p99/max; polls/s" \
			"$(kv "$f" p50)/$(kv "$f" p99)/$(kv "$f" max); $(kv "$f" polls_per_s)"
		json6+=("{\"poll_interval_ms\": $poll, \"pollers\": $POLLERS, \"events_delivered\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p99_ms\": $(kv "$f" p99), \"max_ms\": $(kv "$f" max), \"polls_per_s\": $(kv "$f" polls_per_s)}")
	done
	jadd poll_fallback "[$(IFS=,; echo "${json6[*]}")]"
fi

# ------------------------------------------- 8. publish cost of compaction
# eventhub.compaction changes only what retention deletes; what compaction
# costs a publish is the index it needs, events_entity_idx (one more btree
# insert).  So: publish with the index as installed against publish with it
# dropped, in the same database (the one the notifier worker serves), in
# COMPACTION_ROUNDS rounds of alternating order (with, without; without, with; ...),
# the index built again between rounds; the median of each counts.
entity_index_on() {
	q -c "SET client_min_messages = warning" -c "CREATE INDEX IF NOT EXISTS events_entity_idx ON eventhub.events (organization_id, event_type, entity_id, revision)" \
		-c CHECKPOINT >/dev/null || fail "creating events_entity_idx failed"
}
entity_index_off() {
	q -c "SET client_min_messages = warning" -c "DROP INDEX IF EXISTS eventhub.events_entity_idx" -c CHECKPOINT >/dev/null || fail "dropping events_entity_idx failed"
}
if want 8; then
	say "8/14 publish throughput with and without events_entity_idx, the publish-time cost of compaction ($COMPACTION_ROUNDS rounds of ${T_TPS} s per point)"
	printf '%s\n' "\\set e random(1, 100000)" \
		"SELECT eventhub.publish_event('bench-' || :client_id, 'API', 'UPDATE', 'api-' || :e, NULL, '$data');" \
		>"$work/publish_many.sql"
	json8=()
	for point in "1 publish_own.sql" "8 publish_own.sql" "8 publish_many.sql"; do
		read -r c f <<<"$point"
		on=() off=() pairs=()
		for ((r = 0; r < COMPACTION_ROUNDS; r++)); do
			for idx in $( ((r % 2 == 0)) && echo "on off" || echo "off on"); do
				"entity_index_$idx"
				tps_point "$out/compaction_${c}_${f%.sql}_${idx}_$r.log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/$f"
				v=$(tps_of "$out/compaction_${c}_${f%.sql}_${idx}_$r.log")
				[ "$idx" = on ] && on+=("$v") || off+=("$v")
			done
			pairs+=("$(calc "${on[r]} / ${off[r]}")")
		done
		entity_index_on
		t_on=$(median "${on[@]}")
		t_off=$(median "${off[@]}")
		# The median of each round's ratio: the two points of a round ran
		# back to back, so the load the machine's other users add cancels
		# better than between the medians of each.
		RATIO=$(median "${pairs[@]}")
		spread="$(printf '%s\n' "${pairs[@]}" | sort -g | sed -n '1p;$p' | paste -sd-)"
		label="$c $(plural "$c" client), organization per client, $([ "$f" = publish_own.sql ] && echo "one entity" || echo "100000 entities") each"
		row "8. publish with events_entity_idx (compaction)/without, $label" \
			"$RATIO ($(printf %.0f "$t_on")/$(printf %.0f "$t_off") tps; rounds $spread)" ">= 0.95" "$(verdict "$RATIO" 0.95)"
		json8+=("{\"clients\": $c, \"entities_per_organization\": $([ "$f" = publish_own.sql ] && echo 1 || echo 100000), \"tps_with_index\": $t_on, \"tps_without_index\": $t_off, \"ratio\": $RATIO, \"round_ratios\": [$(IFS=,; echo "${pairs[*]}")], \"rounds_with\": [$(IFS=,; echo "${on[*]}")], \"rounds_without\": [$(IFS=,; echo "${off[*]}")]}")
	done
	jadd compaction_publish "[$(IFS=,; echo "${json8[*]}")]"
fi

# ------------------------------------------------------- 9. snapshots
# Two organizations of SNAP_SMALL and SNAP_BIG entities (one event each, so
# that the snapshot and a plain SELECT of the organization's events return
# the same rows), published with publish_event in transactions of 1,000, in
# a database of their own.  Each round reads them once with each reader:
# the plain SELECT of the same rows and columns streamed to the client (the
# baseline), the same in the snapshot's order (ORDER BY event_type,
# entity_id), and the library's snapshot (eh_subscribe with
# EH_FROM_SNAPSHOT; when this build of eh_bench has none, the SQL functions
# called directly as the library calls them): with pages of 1,000 and of
# 10,000.  (snapshot_entities sets jit = off itself: a reader with jit off
# would measure the same thing.)
# Peak memory: the server backend's RssAnon (sampled every 10 ms by
# eh_bench) and the client's maxrss, the largest over the rounds.
# Then the retention pass over the kept entities: compaction on, every event
# expired, nothing removable.
#
# snap_build ORG N: N entities of ORG, 1,000 publishes per transaction.
# Not more: every publish updates the organization's head row, and the
# versions of that row one transaction leaves pile up in one HOT chain that
# each later publish in it walks, so a transaction's publishes to one
# organization cost O(n^2) (10,000 per transaction run at a third of the
# rate of 1,000).
snap_build() {
	local org=$1 n=$2 a
	for ((a = 1; a <= n; a += 1000)); do
		echo "SELECT count(eventhub.publish_event('$org', (ARRAY['API', 'Plugin', 'Route', 'Service'])[g % 4 + 1], 'CREATE', 'e-' || g, NULL, jsonb_build_object('context', '/weather', 'version', 'v2', 'upstream', 'http://weather.internal:8080', 'n', g))) FROM generate_series($a, $((a + 999 < n ? a + 999 : n))) g;"
	done | PGDATABASE=snapshots q >/dev/null
}
if want 9; then
	say "9/14 snapshots of $SNAP_SMALL and $SNAP_BIG entities against a plain SELECT ($SNAP_ROUNDS rounds); retention over kept entities"
	# Retention of 1 s with compaction on, in force before the build, so that
	# the worker's pass at this reload (over the postgres database) overlaps
	# the build and not the measurements.  Two events of one entity there
	# make sure it has something to delete, so it logs the end of its pass.
	skip=$(grep -c 'eventhub retention deleted' "$work/cluster/server.log" || true)
	q -c "SELECT eventhub.publish_event('bench-shared', 'API', 'UPDATE', 'superseded', NULL, '{}') FROM generate_series(1, 2)" >/dev/null
	sleep 1.1
	reload_conf "ALTER SYSTEM SET eventhub.compaction = on" "ALTER SYSTEM SET eventhub.retention = '1s'"
	q -c "CREATE DATABASE snapshots" >/dev/null
	PGDATABASE=snapshots q -c "CREATE EXTENSION eventhub" >/dev/null
	t_build=$SECONDS
	# The two side by side (each organization's publishes are serial anyway).
	snap_build snap-small "$SNAP_SMALL" &
	spid=$!
	bgpids+=("$spid")
	snap_build snap-big "$SNAP_BIG" || fail "publishing the entities of snap-big failed"
	wait "$spid" || fail "publishing the entities of snap-small failed"
	t_build=$((SECONDS - t_build))
	PGDATABASE=snapshots q -c "VACUUM ANALYZE eventhub.events" -c CHECKPOINT >/dev/null
	worker_pass_logged() { [ "$(grep -c 'eventhub retention deleted' "$work/cluster/server.log" || true)" -gt "$skip" ]; }
	wait_until "the worker's retention pass at the reload" worker_pass_logged
	# The snapshot, with pages of 1,000 and of 10,000.
	usage=$("$bin" 2>&1 || true)
	if [[ $usage == *"eh_bench snapshot "* ]]; then
		lib=snapshot
	else
		lib=snapshot-sql
		say "this eh_bench has no library snapshot mode: the snapshot rows are the SQL functions called directly"
	fi
	readers="select select-ordered $lib $lib-10000"
	declare -A SNAP
	json9=()
	for size in small big; do
		[ $size = small ] && n=$SNAP_SMALL || n=$SNAP_BIG
		for ((r = 0; r < SNAP_ROUNDS; r++)); do
			for m in $readers; do
				args=(-o "snap-$size" -e "$n")
				case $m in
				select-ordered) args+=(-s) ;;
				*-10000) args+=(-P 10000) ;;
				esac
				rmode=${m%-10000}
				f=$out/snap_${size}_${m}_$r.out
				PGDATABASE=snapshots "$bin" "${rmode%-ordered}" "${args[@]}" >"$f" 2>&1 ||
					fail "eh_bench $m of snap-$size failed: $(cat "$f")"
				SNAP[$size.$m.rps]+=" $(kv "$f" rows_per_s)"
				SNAP[$size.$m.backend]+=" $(kv "$f" backend_rss_anon_kb)"
				SNAP[$size.$m.client]+=" $(kv "$f" maxrss_kb)"
			done
		done
		for m in $readers; do
			# shellcheck disable=SC2086
			SNAP[$size.$m.rps]=$(median ${SNAP[$size.$m.rps]})
			# shellcheck disable=SC2086
			SNAP[$size.$m.backend]=$(printf '%s\n' ${SNAP[$size.$m.backend]} | sort -g | tail -1)
			# shellcheck disable=SC2086
			SNAP[$size.$m.client]=$(printf '%s\n' ${SNAP[$size.$m.client]} | sort -g | tail -1)
		done
		sel=${SNAP[$size.select.rps]}
		for m in $readers; do
			[ $m = select ] && continue
			tgt=
			[ $m = "$lib" ] && tgt=0.9
			RATIO=$(calc "${SNAP[$size.$m.rps]} / $sel")
			row "9. $m/plain SELECT rows/s, $n entities" "$RATIO (${SNAP[$size.$m.rps]}/$sel rows/s)" "${tgt:+>= $tgt}" \
				"${tgt:+$(verdict "$RATIO" "$tgt")}"
		done
		items=()
		for m in $readers; do
			items+=("\"$m\": {\"rows_per_s\": ${SNAP[$size.$m.rps]}, \"backend_rss_anon_kb\": ${SNAP[$size.$m.backend]}, \"client_maxrss_kb\": ${SNAP[$size.$m.client]}}")
		done
		json9+=("\"$size\": {\"entities\": $n, $(IFS=,; echo "${items[*]}")}")
	done
	for m in $readers; do
		for w in backend client; do
			b=${SNAP[big.$m.$w]} s=${SNAP[small.$m.$w]}
			RATIO=$(calc "$b / $s")
			tgt="" ver=""
			if [ "$m" = select ] || [ "$m" = "$lib" ]; then
				tgt="flat (<= 1.25x)"
				ver=$(awk "BEGIN { print ($RATIO <= 1.25) ? \"PASS\" : \"MISS\" }")
			fi
			row "9. $m peak $([ $w = backend ] && echo "server backend RssAnon" || echo "client RSS") kB, $SNAP_BIG / $SNAP_SMALL entities" \
				"$b / $s (x$RATIO)" "$tgt" "$ver"
		done
	done
	# One maintenance pass with nothing to delete, over every kept entity.
	kept=$(PGDATABASE=snapshots q -c "SELECT count(*) FROM eventhub.events")
	t0=$(date +%s.%N)
	deleted=$(PGDATABASE=snapshots q -c "SELECT eventhub.run_maintenance()") || fail "run_maintenance failed"
	secs=$(calc "$(date +%s.%N) - $t0")
	[ "$(PGDATABASE=snapshots q -c "SELECT count(*) FROM eventhub.events")" = "$kept" ] ||
		fail "retention with compaction on deleted kept entities"
	row "9. one retention pass over $kept kept entities, nothing to delete (compaction on), seconds" "$secs ($deleted deleted)"
	reload_conf "ALTER SYSTEM RESET eventhub.compaction" "ALTER SYSTEM SET eventhub.retention = '30d'"
	jadd snapshots "{\"library\": $([ "$lib" = snapshot ] && echo true || echo false), \"build_seconds\": $t_build, $(IFS=,; echo "${json9[*]}"), \"retention_pass\": {\"kept\": $kept, \"deleted\": $deleted, \"seconds\": $secs}}"
fi

# ------------------------------------------------ 10. metrics scrapes
# eventhub.metrics() in a database of its own with METRICS_ORGS organizations
# (three events each) and METRICS_REPLICAS replicas in groups of ten: the ten
# replicas of a group follow the same organizations (so their configuration
# hashes are compared), first F = 1,000 organizations each (each
# organization followed by one group: 100,000 progress rows at full scale),
# then 10,000 (a million rows).  The replicas report their progress as
# replicas do, with one eventhub.heartbeat() each, which records each row's
# head and the pairs where hashes differ.  One progress row in a hundred is
# behind, one replica is stale and one reports another hash here and there.
# The time is pgbench's average latency over METRICS_CALLS calls, after a
# warm-up call, each reading the tables (no reading kept between them).
# Then publish throughput (8 clients, an organization each, in database
# postgres) with a scrape of the first data set every second (on one
# connection, three calls as the exporter makes them, with the default
# eventhub.metrics_cache_time: the first call reads the tables, the next two
# reuse its reading) against without, in ROUNDS interleaved rounds; the median
# of the rounds' ratios counts.
# metrics_load F: replicas following F organizations each, in place of those
# of the previous data set (removed, and maintenance run).
metrics_load() {
	PGDATABASE=metrics q >/dev/null <<EOF || fail "loading the metrics data set failed"
SELECT count(eventhub.remove_replica(replica_id)) FROM eventhub.replicas;
SELECT eventhub.run_maintenance();
-- Replica r is in group (r - 1) / 10; group g follows organizations
-- g * F + 1 .. (g + 1) * F, wrapping around.
SELECT count(eventhub.heartbeat('replica-' || r, (
         SELECT jsonb_object_agg('org-' || (((r - 1) / 10 * $1 + i - 1) % $METRICS_ORGS + 1),
                  jsonb_build_object(
                    'revision', CASE WHEN i % 100 = 0 THEN 1 ELSE 3 END,
                    'config_hash', CASE WHEN r = 3 AND i % 1000 = 1 THEN 'other' ELSE 'h' || i % 7 END))
           FROM generate_series(1, $1) i), '{}', '1.0'))
  FROM generate_series(1, $METRICS_REPLICAS) r;
-- Replica 2 stopped an hour ago (the only way to age a heartbeat).
SET eventhub.protect_tables = off;
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '1 hour' WHERE replica_id = 'replica-2';
RESET eventhub.protect_tables;
ANALYZE eventhub.replica_progress;
ANALYZE eventhub.config_splits;
EOF
}
# metrics_time F: times METRICS_CALLS calls that each read the tables (the
# session keeps no reading: eventhub.metrics_cache_time 0); sets MS.
metrics_time() {
	echo "SELECT count(*) FROM eventhub.metrics();" >"$work/metrics.sql"
	PGDATABASE=metrics q -c "SELECT count(*) FROM eventhub.metrics()" >/dev/null || fail "eventhub.metrics() failed"
	PGOPTIONS='-c eventhub.metrics_cache_time=0' PGDATABASE=metrics pgb -c 1 -t "$METRICS_CALLS" -f "$work/metrics.sql" >"$out/metrics_$1.log" 2>&1 ||
		fail "pgbench of eventhub.metrics() failed: $(tail -5 "$out/metrics_$1.log")"
	MS=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out/metrics_$1.log")
}
# scrape_blocks STOPFILE B0: a scrape every second, three eventhub.metrics()
# calls on one connection as prometheus/postgres-exporter-queries.yml makes
# them (prometheus-postgres-exporter keeps one connection; a new psql and
# backend every second alone cost publishers about 9%: docs/performance.md),
# in the "with" blocks only.  Blocks are METRICS_BLOCK seconds of the clock;
# block b is the (b - B0)th of the run, "with" when that is 2 or 3 modulo 4:
# without, with, with, without, ... (ABBA: a steady drift of throughput
# weighs the same on both).  Each scrape starts on a whole second.
scrape_blocks() {
	local stop=$1 b0=$2 now rb
	while [ ! -f "$stop" ]; do
		now=$(date +%s.%N)
		rb=$((${now%.*} / METRICS_BLOCK - b0))
		if ((rb % 4 == 2 || rb % 4 == 3)); then
			echo "SELECT count(*) FROM eventhub.metrics(); SELECT count(*) FROM eventhub.metrics(); SELECT count(*) FROM eventhub.metrics();"
		fi
		sleep "$(awk -v n="$now" 'BEGIN { printf "%.3f", 1 - (n - int(n)) }')"
	done | PGDATABASE=metrics q >/dev/null
}
# scrape_ratio LOG B0: from pgbench's per-second progress lines (with
# --progress-timestamp), publish throughput in the "with" seconds against
# the "without" ones, over blocks 1..METRICS_BLOCKS of the run.  A second
# (t - 1, t] belongs to the block of the whole second in it (the one
# scrape it may hold); the first second of each block is left out (a scrape
# of the block before may spill into it).  Prints "ratio with without min
# max": the ratio of the mean tps, its tps, and the least and greatest ratio
# of a "with" block against the mean of the "without" blocks beside it.
scrape_ratio() {
	awk -v b0="$2" -v bs="$METRICS_BLOCK" -v nb="$METRICS_BLOCKS" '
	/^progress: / {
		t = $2 + 0; s = int(t); rb = int(s / bs) - b0
		if (rb < 1 || rb > nb || int((s - 1) / bs) - b0 != rb) next
		with = (rb % 4 == 2 || rb % 4 == 3)
		sum[with] += $4; n[with]++
		bsum[rb] += $4; bn[rb]++
	}
	END {
		if (!n[0] || !n[1]) exit 1
		w = sum[1] / n[1]; wo = sum[0] / n[0]
		min = 1e9; max = 0
		for (rb = 1; rb <= nb; rb++) {
			if (!(rb % 4 == 2 || rb % 4 == 3) || !bn[rb]) continue
			k = 0; o = 0
			for (d = -1; d <= 1; d += 2) {
				x = rb + d
				while (x >= 1 && x <= nb && (x % 4 == 2 || x % 4 == 3)) x += d
				if (x >= 1 && x <= nb && bn[x]) { o += bsum[x] / bn[x]; k++ }
			}
			if (!k) continue
			r = (bsum[rb] / bn[rb]) / (o / k)
			if (r < min) min = r; if (r > max) max = r
		}
		printf "%.3f %.1f %.1f %.3f %.3f\n", w / wo, w, wo, min, max
	}' "$1"
}
if want 10; then
	say "10/14 eventhub.metrics() with $METRICS_ORGS organizations and $METRICS_REPLICAS replicas; publish throughput with a scrape every second ($METRICS_BLOCKS alternating blocks of ${METRICS_BLOCK} s)"
	q -c "CREATE DATABASE metrics" >/dev/null || fail "creating database metrics failed"
	PGDATABASE=metrics q >/dev/null <<EOF || fail "setting up the metrics data set failed"
CREATE EXTENSION eventhub;
SET eventhub.protect_tables = off;
INSERT INTO eventhub.organization_states
SELECT 'org-' || i, gen_random_uuid(), 3, now() - interval '10 minutes', 0 FROM generate_series(1, $METRICS_ORGS) i;
INSERT INTO eventhub.events
SELECT 'org-' || i, r, gen_random_uuid(), now() - interval '10 minutes' + r * interval '1 minute', now(),
       'API', 'UPDATE', 'api', gen_random_uuid()::text, '{}', r
  FROM generate_series(1, $METRICS_ORGS) i, generate_series(1, 3) r;
ANALYZE;
EOF
	json10=()
	scrape_json=null
	for f in $METRICS_FOLLOW; do
		metrics_load "$f"
		metrics_time "$f"
		n=$((f * METRICS_REPLICAS))
		row "10. eventhub.metrics(), $METRICS_ORGS organizations, $METRICS_REPLICAS replicas following $f each ($n progress rows), ms" \
			"$MS" "< 50" "$(awk "BEGIN { print ($MS < 50) ? \"PASS\" : \"MISS\" }")"
		json10+=("{\"organizations\": $METRICS_ORGS, \"replicas\": $METRICS_REPLICAS, \"followed_per_replica\": $f, \"progress_rows\": $n, \"ms\": $MS}")
		[ "$scrape_json" = null ] || continue
		# Publishing while the first data set is scraped, in blocks.
		b0=$(($(date +%s) / METRICS_BLOCK))
		stop=$out/scrape_stop
		scrape_blocks "$stop" "$b0" &
		scraper=$!
		bgpids+=("$scraper")
		# To the end of block METRICS_BLOCKS, from within block 0.
		t=$(((b0 + METRICS_BLOCKS + 1) * METRICS_BLOCK - $(date +%s) + 1))
		tps_point "$out/scrape_blocks.log" -c 8 -j 2 -T "$t" --progress=1 --progress-timestamp -f "$work/publish_own.sql"
		touch "$stop"
		wait "$scraper" || fail "the scrapes failed"
		read -r RATIO t_with t_without r_min r_max < <(scrape_ratio "$out/scrape_blocks.log" "$b0") ||
			fail "no seconds with and without scrapes in $out/scrape_blocks.log"
		row "10. publish with a metrics scrape every second ($f per replica)/without, 8 clients, blocks of ${METRICS_BLOCK} s" \
			"$RATIO ($(printf %.0f "$t_with")/$(printf %.0f "$t_without") tps; blocks $r_min-$r_max)" ">= 0.98" "$(verdict "$RATIO" 0.98)"
		scrape_json="{\"followed_per_replica\": $f, \"tps_with\": $t_with, \"tps_without\": $t_without, \"ratio\": $RATIO, \"block_seconds\": $METRICS_BLOCK, \"blocks\": $METRICS_BLOCKS, \"block_ratio_min\": $r_min, \"block_ratio_max\": $r_max}"
	done
	jadd metrics "{\"calls\": [$(IFS=,; echo "${json10[*]}")], \"publish_with_scrapes\": $scrape_json}"
	q -c "DROP DATABASE metrics" >/dev/null || fail "dropping database metrics failed"
fi

# ------------------------------------------ 11. fan-out to watch processes
# N `eventhub watch --org fan-org` processes, as users run them, each
# printing into a FIFO that one `eh_bench stamp` reads (it stamps each line
# as it arrives: publish-to-printed-line latency = arrival - the line's
# processed_timestamp).  A warm-up event, printed by every watcher, makes
# sure all follow the organization and listen; then one publisher publishes
# FAN_EVENTS events at FAN_RATE a second.  CPU per delivered event: the
# CPU time (/proc/PID/schedstat) of the watcher processes and of
# their backends from just before publishing until the last line is
# printed, over N * FAN_EVENTS.
# cpu_ns PID...: their summed CPU time in nanoseconds (/proc/PID/task/TID/schedstat:
# the scheduler's own count, exact, where /proc/PID/stat counts in ticks).
# Every thread counts (a Go program runs on several): /proc/PID/task/*.
cpu_ns() {
	local p t=0 f task
	for p in "$@"; do
		[ -d "/proc/$p/task" ] || fail "process $p is gone"
		for task in /proc/"$p"/task/*/schedstat; do
			read -r f _ <"$task" || continue # a thread that just ended
			t=$((t + f))
		done
	done
	echo "$t"
}
# fan_run N TAG [go]: N `eventhub watch` processes, or N Go watchers (two
# backends each: one listens, one fetches).
fan_run() {
	local n=$1 tag=$2 kind=${3:-cli} i head fifos=() wpids=() bpids spid t0c t0s t1c t1s f perfs per=1
	rm -rf "$work/fan" "$work/fan_ready" "$work/fan_done"
	mkdir "$work/fan"
	head=$(q -c "SELECT revision FROM eventhub.organization_states WHERE organization_id = 'fan-org'")
	for ((i = 0; i < n; i++)); do
		mkfifo "$work/fan/w$i"
		fifos+=("$work/fan/w$i")
		if [ "$kind" = go ]; then
			per=2
			GOMAXPROCS=${BENCH_GOMAXPROCS:-} "$work/gowatch" -conninfo "application_name=fan-watch" -org fan-org -after "$head" >"$work/fan/w$i" 2>"$out/fan_${n}_${tag}_$i.err" &
		else
			PGAPPNAME=fan-watch "$work/eventhub" watch --org fan-org --after "$head" >"$work/fan/w$i" 2>"$out/fan_${n}_${tag}_$i.err" &
		fi
		wpids+=("$!")
		bgpids+=("$!")
	done
	"$bin" stamp -e "$FAN_EVENTS" -r "$work/fan_ready" -D "$work/fan_done" -L "$out/lat_fan_${n}_$tag.txt" -t 60 "${fifos[@]}" \
		>"$out/fan_${n}_$tag.out" 2>"$out/fan_${n}_$tag.stamp.err" &
	spid=$!
	bgpids+=("$spid")
	q -c "SELECT eventhub.publish_event('fan-org', 'API', 'UPDATE', 'warm-up', NULL, '{}')" >/dev/null
	wait_file "$work/fan_ready" "$spid" || fail "the watchers of fan-out $n did not print the warm-up: $(cat "$out/fan_${n}_$tag.stamp.err" "$out"/fan_"${n}_$tag"_*.err | head -5)"
	wait_until "the watchers of fan-out $n to be idle" sessions_idle
	mapfile -t bpids < <(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'fan-watch'")
	[ "${#bpids[@]}" = "$((n * per))" ] || fail "fan-out $n: ${#bpids[@]} watcher backends, not $((n * per))"
	t0c=$(cpu_ns "${wpids[@]}")
	t0s=$(cpu_ns "${bpids[@]}")
	perfs=()
	if [ "${BENCH_PERF:-}" = all ]; then
		perf record -q -a -F 999 -o "$out/perf_fan_${n}_${tag}_all.data" 2>/dev/null &
		perfs+=("$!")
		sleep 0.5
	elif [ -n "${BENCH_PERF:-}" ]; then
		perf record -q -F 1999 ${BENCH_PERF_G:+-g} -p "$(IFS=,; echo "${bpids[*]}")" -o "$out/perf_fan_${n}_${tag}_server.data" 2>/dev/null &
		perfs+=("$!")
		perf record -q -F 1999 ${BENCH_PERF_G:+-g} -p "$(IFS=,; echo "${wpids[*]}")" -o "$out/perf_fan_${n}_${tag}_client.data" 2>/dev/null &
		perfs+=("$!")
		sleep 0.5
	fi
	pgb -c 1 -R "$FAN_RATE" -t "$FAN_EVENTS" -f "$work/publish_fan-org.sql" >"$out/pub_fan_${n}_$tag.log" 2>&1 ||
		fail "pgbench failed: $(tail -5 "$out/pub_fan_${n}_$tag.log")"
	# The watchers stop once their output is gone: their CPU first.
	wait_file "$work/fan_done" "$spid" || fail "fan-out $n: not every watcher printed every event: $(cat "$out/fan_${n}_$tag.out" "$out/fan_${n}_$tag.stamp.err")"
	t1c=$(cpu_ns "${wpids[@]}")
	t1s=$(cpu_ns "${bpids[@]}")
	if [ "${#perfs[@]}" -gt 0 ]; then
		kill -INT "${perfs[@]}"
		wait "${perfs[@]}" || true
		for i in server client all; do
			[ -f "$out/perf_fan_${n}_${tag}_$i.data" ] || continue
			perf report -i "$out/perf_fan_${n}_${tag}_$i.data" --stdio --no-children \
				--sort "$([ $i = all ] && echo comm,sym || echo sym)" 2>/dev/null |
				grep -v '^#' | grep -v '^$' | head -80 >"$out/perf_fan_${n}_${tag}_$i.txt" || true
			[ $i = all ] && perf report -i "$out/perf_fan_${n}_${tag}_$i.data" --stdio --no-children --sort comm 2>/dev/null |
				grep -v '^#' | grep -v '^$' | head -20 >"$out/perf_fan_${n}_${tag}_comm.txt"
		done
	fi
	kill "${wpids[@]}" 2>/dev/null || true
	for i in "${wpids[@]}"; do wait "$i" 2>/dev/null || true; done
	wait "$spid" || fail "fan-out $n: eh_bench stamp failed: $(cat "$out/fan_${n}_$tag.stamp.err")"
	f=$out/fan_${n}_$tag.out
	FAN_CPU_C=$(calc "($t1c - $t0c) / 1000 / ($n * $FAN_EVENTS)")
	FAN_CPU_S=$(calc "($t1s - $t0s) / 1000 / ($n * $FAN_EVENTS)")
	FAN_RATE_GOT=$(printf %.0f "$(tps_of "$out/pub_fan_${n}_$tag.log")")
}
# fan_setup: the organization of items 11 and 13, and its publish.
fan_setup() {
	q -c "SELECT eventhub.register_organization('fan-org')" >/dev/null
	echo "SELECT eventhub.publish_event('fan-org', 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/publish_fan-org.sql"
}
if want 11; then
	say "11/14 fan-out to $FAN_PROCS eventhub watch processes, ${FAN_RATE}/s, $FAN_EVENTS events; notifications with and without their events"
	fan_setup
	json11=()
	k=0
	for n in $FAN_PROCS; do
		procs="$n watch $([ "$n" = 1 ] && echo process || echo processes)"
		declare -A FCPU=()
		# Alternating which goes first: eventhub.notification_events on
		# (notifications carry the events: the default) and off (every
		# watcher fetches every event, as before 0.5.0).
		for mode in $( ((k++ % 2 == 0)) && echo "on off" || echo "off on"); do
			reload_conf "ALTER SYSTEM SET eventhub.notification_events = $mode"
			fan_run "$n" "$mode"
			f=$out/fan_${n}_$mode.out
			p99=$(kv "$f" p99)
			tgt= ver=
			if [ "$mode" = on ]; then
				case $n in 1) tgt=2 ;; 4 | 8) tgt=5 ;; 16) tgt=10 ;; esac
				[ -n "$tgt" ] && ver=$(awk "BEGIN { print ($p99 <= $tgt) ? \"PASS\" : \"MISS\" }") && tgt="p99 <= $tgt ms"
			fi
			row "11. publish-to-printed-line ms p50/p95/p99/max, $procs, events $([ $mode = on ] && echo "in the notification" || echo fetched) (${FAN_RATE_GOT}/s)" \
				"$(kv "$f" p50)/$(kv "$f" p95)/$p99/$(kv "$f" max)" "$tgt" "$ver"
			FCPU[$mode]=$(calc "$FAN_CPU_S + $FAN_CPU_C")
			FCPU[${mode}_s]=$FAN_CPU_S FCPU[${mode}_c]=$FAN_CPU_C
			json11+=("{\"watchers\": $n, \"notification_events\": \"$mode\", \"rate_per_s\": $FAN_RATE, \"achieved_rate_per_s\": $FAN_RATE_GOT, \"events\": $FAN_EVENTS, \"lines\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $p99, \"max_ms\": $(kv "$f" max), \"cpu_us_per_event_server\": $FAN_CPU_S, \"cpu_us_per_event_client\": $FAN_CPU_C}")
		done
		row "11. CPU us per delivered event (backend + watcher), $procs: events in the notification / fetched" \
			"${FCPU[on]} (${FCPU[on_s]} + ${FCPU[on_c]}) / ${FCPU[off]} (${FCPU[off_s]} + ${FCPU[off_c]}) = $(calc "${FCPU[on]} / ${FCPU[off]}")"
	done
	reload_conf "ALTER SYSTEM RESET eventhub.notification_events"
	jadd fan_out "[$(IFS=,; echo "${json11[*]}")]"
fi

# ------------------------------- 13. Go watchers against eventhub watch
# Item 11's fan-out, with the Go package's watchers (bench/gowatch: the
# CLI's lines, from a Watcher) against as many `eventhub watch` processes,
# alternating which goes first, notifications carrying their events (the
# default: both deliver them without a fetch).
if want 13; then
	say "13/14 Go watchers against eventhub watch processes: $GO_FAN_PROCS, ${FAN_RATE}/s, $FAN_EVENTS events"
	fan_setup
	json13=()
	k=0
	for n in $GO_FAN_PROCS; do
		declare -A GP99=() GCPU=()
		for kind in $( ((k++ % 2 == 0)) && echo "cli go" || echo "go cli"); do
			fan_run "$n" "$kind" "$kind"
			f=$out/fan_${n}_$kind.out
			GP99[$kind]=$(kv "$f" p99)
			GCPU[$kind]=$(calc "$FAN_CPU_S + $FAN_CPU_C")
			row "13. publish-to-line ms p50/p99, $n $([ "$kind" = go ] && echo "Go watchers" || echo "eventhub watch processes") (${FAN_RATE_GOT}/s); CPU us/event backend + watcher" \
				"$(kv "$f" p50)/${GP99[$kind]}; $FAN_CPU_S + $FAN_CPU_C"
			json13+=("{\"watchers\": $n, \"kind\": \"$kind\", \"p50_ms\": $(kv "$f" p50), \"p99_ms\": ${GP99[$kind]}, \"cpu_us_per_event_server\": $FAN_CPU_S, \"cpu_us_per_event_client\": $FAN_CPU_C}")
		done
		tgt= ver=
		if [ "$n" = 16 ]; then
			tgt="<= 1.2" ver=$(awk "BEGIN { print (${GP99[go]} <= 1.2 * ${GP99[cli]}) ? \"PASS\" : \"MISS\" }")
		fi
		row "13. Go/CLI at $n: p99 ratio; CPU per event ratio" \
			"$(calc "${GP99[go]} / ${GP99[cli]}"); $(calc "${GCPU[go]} / ${GCPU[cli]}")" "$tgt" "$ver"
	done
	jadd go_fan_out "[$(IFS=,; echo "${json13[*]}")]"
fi

# ------------------------------------------- 14. Go publish against pgbench
# Publish throughput at 1 and 8 clients, each to an organization of its own:
# bench/gopublish (the Go package's Publish on one pgx connection per
# client, in a process of its own, no correlation id) against pgbench -M
# prepared sending the same statement (publish_event), and pgbench with
# publish_event_result (what Publish sends with a correlation id: what the
# result form costs).  ROUNDS interleaved
# rounds of T_TPS seconds; medians.  Target: Go at 0.9 of pgbench or
# better at 1 client.
if want 14; then
	say "14/14 Go publish throughput against pgbench ($ROUNDS interleaved rounds of ${T_TPS} s per point)"
	json14=()
	for c in 1 8; do
		gos=() ev= res=
		for ((r = 0; r < ROUNDS; r++)); do
			tps_point "$out/gopub_${c}_event_$r.log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/gopub_event.sql"
			tps_point "$out/gopub_${c}_result_$r.log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/gopub_result.sql"
			"$work/gopublish" -conninfo "application_name=gopublish" -clients "$c" -seconds "$T_TPS" -prefix gopub- -data "$data" \
				>"$out/gopub_${c}_go_$r.log" 2>&1 || fail "gopublish failed: $(tail -5 "$out/gopub_${c}_go_$r.log")"
			gos+=("$(kv "$out/gopub_${c}_go_$r.log" tps)")
			ev+=" $(tps_of "$out/gopub_${c}_event_$r.log")"
			res+=" $(tps_of "$out/gopub_${c}_result_$r.log")"
		done
		# shellcheck disable=SC2086
		t_ev=$(median $ev) t_res=$(median $res) t_go=$(median "${gos[@]}")
		label="$c $(plural "$c" client), organization per client"
		# A target at 1 client, where a publish's time is the round trip a
		# controller waits for.  At 8 on 2 cores the client's CPU competes
		# with the server's, and Go's network I/O costs about three times
		# libpq's per publish (docs/performance.md): no target there.
		ratio_row "14. Go Publish/pgbench, the same statement, $label" "$t_go" "$t_ev" "$([ "$c" = 1 ] && echo 0.9)"
		r_go=$RATIO
		ratio_row "14. publish_event_result/publish_event (pgbench), $label" "$t_res" "$t_ev"
		json14+=("{\"clients\": $c, \"go_tps\": $t_go, \"pgbench_event_tps\": $t_ev, \"pgbench_result_tps\": $t_res, \"go_ratio\": $r_go, \"result_ratio\": $RATIO}")
	done
	jadd go_publish "[$(IFS=,; echo "${json14[*]}")]"
fi

# ------------------------------------------- 12. the cost of a long history
# In a database of its own, HIST_ORGS organizations with each size of
# HIST_SIZES kept events in all, and one more, "reader", with HIST_READER
# events spread evenly among them (loaded directly: what publish_event
# writes, a generated correlation id being the event's version id); beside
# them bench.bare_events with the same rows, columns and indexes.  Each
# round: publish throughput (4 clients, a random organization of the
# HIST_ORGS each time, correlation id NULL) and a bare INSERT of the same
# row (a random correlation id), HIST_T seconds each after a second of
# warm-up (the other's pages leave shared_buffers), alternating which goes
# first.  Then pages of 100 of reader's events with events_since, the same
# organization and pages at both sizes: from random cursors among its last
# 1,000 events (a consumer near the head) and among all (catching up).
hist_load() {
	local n=$1
	PGDATABASE=history q >/dev/null <<EOF || fail "loading $n events failed"
SET eventhub.protect_tables = off;
TRUNCATE eventhub.events, eventhub.organization_states, bench.bare_events;
INSERT INTO eventhub.events
SELECT CASE WHEN g % k = 0 THEN 'reader' ELSE 'h-' || (g % $HIST_ORGS) END,
       row_number() OVER (PARTITION BY CASE WHEN g % k = 0 THEN 'reader' ELSE 'h-' || (g % $HIST_ORGS) END ORDER BY g),
       v, now(), now(), 'API', 'UPDATE', 'api-' || (g % 50), v::text, '$data', NULL
  FROM (SELECT g, gen_random_uuid() AS v, ($n + $HIST_READER) / $HIST_READER AS k
          FROM generate_series(0, $n + $HIST_READER - 1) g) s;
UPDATE eventhub.events SET transaction_first_revision = revision;
INSERT INTO eventhub.organization_states (organization_id, version_id, revision, updated_at)
SELECT DISTINCT ON (organization_id) organization_id, version_id, revision, now()
  FROM eventhub.events ORDER BY organization_id, revision DESC;
INSERT INTO bench.bare_events SELECT * FROM eventhub.events;
SELECT setval('bench.hist_revision', $n + $HIST_READER);
VACUUM ANALYZE eventhub.events;
VACUUM ANALYZE eventhub.organization_states;
VACUUM ANALYZE bench.bare_events;
CHECKPOINT;
EOF
}
if want 12; then
	say "12/14 publish and read with $HIST_SIZES kept events of $HIST_ORGS organizations, against a bare INSERT ($HIST_ROUNDS rounds of ${HIST_T} s)"
	q -c "CREATE DATABASE history" >/dev/null || fail "creating database history failed"
	PGDATABASE=history q >/dev/null <<EOF || fail "setting up database history failed"
CREATE EXTENSION eventhub;
CREATE SCHEMA bench;
CREATE TABLE bench.bare_events (LIKE eventhub.events INCLUDING ALL);
CREATE SEQUENCE bench.hist_revision;
EOF
	printf '%s\n' "\\set o random(0, $((HIST_ORGS - 1)))" \
		"SELECT eventhub.publish_event('h-' || :o, 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/hist_publish.sql"
	printf '%s\n' "\\set o random(0, $((HIST_ORGS - 1)))" \
		"INSERT INTO bench.bare_events VALUES ('h-' || :o, nextval('bench.hist_revision'), gen_random_uuid(), now(), now(), 'API', 'UPDATE', 'weather-api', gen_random_uuid()::text, '$data', NULL);" \
		>"$work/hist_bare.sql"
	declare -A HPUB=() HBARE=() HHEAD=() HALL=() HSPREAD=()
	json12=()
	for n in $HIST_SIZES; do
		hist_load "$n"
		rr=$(PGDATABASE=history q -c "SELECT revision FROM eventhub.organization_states WHERE organization_id = 'reader'")
		for where in head all; do
			lo=$([ $where = head ] && echo $((rr > 1100 ? rr - 1100 : 0)) || echo 0)
			printf '%s\n' "\\set r random($lo, $((rr - 100)))" \
				"SELECT count(*) FROM eventhub.events_since('reader', :r, 100);" >"$work/hist_read_$where.sql"
		done
		pubs=() bares=() pairs=()
		for ((r = 0; r < HIST_ROUNDS; r++)); do
			for f in $( ((r % 2 == 0)) && echo "publish bare" || echo "bare publish"); do
				for t in warm "$r"; do
					PGDATABASE=history PGOPTIONS="$([ $f = bare ] && echo "-c eventhub.protect_tables=off")" \
						tps_point "$out/hist_${n}_${f}_$t.log" -c 4 -j 2 -T "$([ $t = warm ] && echo 1 || echo "$HIST_T")" \
						-f "$work/hist_$f.sql"
				done
			done
			pubs+=("$(tps_of "$out/hist_${n}_publish_$r.log")")
			bares+=("$(tps_of "$out/hist_${n}_bare_$r.log")")
			pairs+=("$(calc "${pubs[r]} / ${bares[r]}")")
		done
		for where in head all; do
			PGDATABASE=history tps_point "$out/hist_${n}_read_$where.log" -c 1 -T "$HIST_T" -f "$work/hist_read_$where.sql"
		done
		HPUB[$n]=$(median "${pubs[@]}") HBARE[$n]=$(median "${bares[@]}")
		HHEAD[$n]=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out/hist_${n}_read_head.log")
		HALL[$n]=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$out/hist_${n}_read_all.log")
		HSPREAD[$n]="$(printf '%s\n' "${pairs[@]}" | sort -g | sed -n '1p;$p' | paste -sd-)"
		ratio_row "12. publish/bare INSERT, $n kept events, 4 clients (rounds ${HSPREAD[$n]})" "${HPUB[$n]}" "${HBARE[$n]}" 0.9
		row "12. events_since page of 100, $n kept events, ms: near the head / anywhere" "${HHEAD[$n]} / ${HALL[$n]}"
		json12+=("{\"kept_events\": $n, \"organizations\": $HIST_ORGS, \"reader_events\": $HIST_READER, \"publish_tps\": ${HPUB[$n]}, \"bare_insert_tps\": ${HBARE[$n]}, \"round_ratios\": [$(IFS=,; echo "${pairs[*]}")], \"page_ms_near_head\": ${HHEAD[$n]}, \"page_ms_anywhere\": ${HALL[$n]}}")
	done
	read -r small big <<<"$HIST_SIZES"
	ratio_row "12. publish with $big kept events/with $small" "${HPUB[$big]}" "${HPUB[$small]}" 0.8
	pr=$(calc "${HHEAD[$big]} / ${HHEAD[$small]}")
	row "12. events_since page near the head with $big kept events/with $small (time)" "$pr (${HHEAD[$big]}/${HHEAD[$small]} ms)" "<= 1.5" \
		"$(awk "BEGIN { print ($pr <= 1.5) ? \"PASS\" : \"MISS\" }")"
	row "12. events_since page anywhere with $big kept events/with $small (time)" "$(calc "${HALL[$big]} / ${HALL[$small]}") (${HALL[$big]}/${HALL[$small]} ms)"
	jadd history "[$(IFS=,; echo "${json12[*]}")]"
	q -c "DROP DATABASE history" >/dev/null || fail "dropping database history failed"
fi

cluster_stop "$work/cluster"

# ------------------------------------------------------------- report
{
	printf '{"scale": "%s", "postgres": "%s", "cpus": %s, "date": "%s",\n' \
		"${BENCH_SCALE:-full}" "$("$PG_BINDIR/postgres" --version | awk '{ print $3 }')" "$(nproc)" "$(date -u +%FT%TZ)"
	(IFS=$'\n'; echo "${json_items[*]}") | sed '$!s/$/,/'
	printf '}\n'
} >"$out/results.json"

fmt='%-78s %-30s %-16s %s\n'
printf "$fmt" MEASUREMENT VALUE TARGET RESULT
for r in "${rows[@]}"; do
	IFS='|' read -r a b c d <<<"$r"
	printf "$fmt" "$a" "$b" "$c" "$d"
done

if want 2 && command -v gnuplot >/dev/null 2>&1; then
	plot=()
	for n in $LAT_SUBS; do
		sort -n "$out/lat_listen_$n.txt" >"$out/cdf_$n.txt"
		plot+=("'$out/cdf_$n.txt' using 1:((\$0 + 1) / $(wc -l <"$out/cdf_$n.txt")) with lines title '$n subscribers'")
	done
	gnuplot >/dev/null 2>&1 <<EOF || true
set terminal png size 900,600
set output '$out/latency.png'
set title 'eventhub publish-to-callback latency (CDF, ${LAT_RATE} events/s)'
set xlabel 'latency (ms)'
set ylabel 'fraction of events'
set logscale x
set key bottom right
set grid
plot $(IFS=,; echo "${plot[*]}")
EOF
fi
