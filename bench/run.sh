#!/usr/bin/env bash
# make bench: measure eventhub on one throwaway cluster and print one table.
#
#   bench/run.sh                       full sizes (about 3-4 minutes on 2 cores)
#   BENCH_SCALE=smoke bench/run.sh     tiny sizes, under a minute (make test)
#
# Environment:
#   BENCH_SCALE  full (default) or smoke
#   BENCH_JSON   where to write the figures as JSON; default
#                bench/results.json under the directory it was called from.
#                With gnuplot installed, the latency plot goes next to it
#                (same name, .png).
#
# Run as root it stages itself and the C helper (bench/eh_bench.c, compiled
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
		libs=(-I"$repo/client" -I"$("$pg_config" --includedir)" "$repo/client/libeventhub.a" -lpq)
	else
		read -r -a libs <<<"$(pkg-config --cflags --libs eventhub) -lpq"
	fi
	${CC:-cc} "${cflags[@]}" -o "$work/eh_bench" "$repo/bench/eh_bench.c" "${libs[@]}"
	source "$repo/scripts/cluster.sh"
	hand_over "$work"
	# In the background, so that a SIGTERM or SIGINT here reaches the inner run
	# (which then stops its cluster) before the staging directory goes.
	"${AS_USER[@]}" env BENCH_SCALE="$scale" PG_CONFIG="$pg_config" bash "$work/run.sh" --inner "$work" &
	child=$!
	trap 'kill -TERM "$child" 2>/dev/null || true; wait "$child" || true; exit 130' INT TERM
	wait "$child"
	trap - INT TERM
	cp "$work/out/results.json" "$json"
	[ -f "$work/out/latency.png" ] && cp "$work/out/latency.png" "${json%.json}.png"
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

case ${BENCH_SCALE:-full} in
full)
	T_TPS=5          # seconds per publish-throughput point
	LAT_SUBS="1 16 64"
	LAT_RATE=200 LAT_T=5
	LISTENERS=64
	CATCHUP=100000
	RETENTION=500000
	RET_CLIENTS=2 RET_RATE=500 RET_BASE_CHUNKS=4   # 2 s chunks
	POLLERS=16
	POLL_SLOW_RATE=20 POLL_SLOW_T=8
	POLL_FAST_RATE=50 POLL_FAST_T=4
	;;
smoke)
	T_TPS=1
	LAT_SUBS="1 4 8"
	LAT_RATE=100 LAT_T=1
	LISTENERS=8
	CATCHUP=5000
	RETENTION=20000
	RET_CLIENTS=2 RET_RATE=100 RET_BASE_CHUNKS=1
	POLLERS=4
	POLL_SLOW_RATE=10 POLL_SLOW_T=1
	POLL_FAST_RATE=20 POLL_FAST_T=1
	;;
esac
CHUNK_T=2

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
wait_file() { # wait_file FILE PID: until FILE exists, or fail if PID died
	local i
	for ((i = 0; i < 1200; i++)); do
		[ -f "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}
pgjobs() { [ "$1" -lt 2 ] && echo 1 || echo 2; }
plural() { [ "$1" = 1 ] && echo "$2" || echo "${2}s"; }
# tps_point LOG PGBENCH_ARGS...: one throughput point.
tps_point() {
	local log=$1
	shift
	pgb "$@" >"$log" 2>&1 || fail "pgbench failed: $(tail -5 "$log")"
}

cat >"$work/bench.conf" <<EOF
shared_preload_libraries = 'eventhub'
max_connections = 200
log_timezone = 'UTC'
log_line_prefix = '%m [%p] '
# Retention stays out of the way until item 5 lowers it with ALTER SYSTEM.
eventhub.retention = '30d'
eventhub.maintenance_interval = '1h'
EOF
say "starting a throwaway cluster (scale ${BENCH_SCALE:-full})"
cluster_start "$work/cluster" "$work/bench.conf" || fail "cluster did not start"
q >/dev/null <<'EOF' || fail "setup failed"
CREATE EXTENSION eventhub;
CREATE SCHEMA bench;
-- The baseline: the same columns, constraints and indexes as eventhub.events.
CREATE TABLE bench.bare_events (LIKE eventhub.events INCLUDING ALL);
CREATE SEQUENCE bench.bare_revision;
SELECT eventhub.register_organization(o)
  FROM (SELECT 'bench-' || g FROM generate_series(0, 63) g
        UNION ALL VALUES ('bench-shared'), ('lat-org'), ('poll-org')) AS t(o);
EOF
[ "$(q -c "SELECT count(*) FROM pg_indexes WHERE schemaname = 'bench' AND tablename = 'bare_events'")" = 3 ] ||
	fail "the baseline table does not have the 3 indexes of eventhub.events"

data='{"context": "/weather", "version": "v2", "upstream": "http://weather.internal:8080"}'
for v in own shared; do
	[ $v = own ] && org="'bench-' || :client_id" || org="'bench-shared'"
	echo "SELECT eventhub.publish_event($org, 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/publish_$v.sql"
	echo "INSERT INTO bench.bare_events VALUES ($org, nextval('bench.bare_revision'), gen_random_uuid(), now(), now()," \
		"'API', 'UPDATE', 'weather-api', gen_random_uuid()::text, '$data');" >"$work/bare_$v.sql"
done
for o in lat-org poll-org; do
	echo "SELECT eventhub.publish_event('$o', 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/publish_$o.sql"
done

rows=()   # table rows: label|value|target|verdict
row() { rows+=("$1|$2|${3:-}|${4:-}"); }
verdict() { if ge "$1" "$2"; then echo PASS; else echo MISS; fi; }
json_items=()
jadd() { json_items+=("\"$1\": $2"); }

# ------------------------------------------------ 1. publish vs bare INSERT
say "1/6 publish throughput vs bare INSERT (${T_TPS} s per point)"
json1=()
for c in 1 8; do
	for v in own shared; do
		for kind in bare publish; do
			tps_point "$out/tps_${kind}_${v}_$c.log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/${kind}_$v.sql"
		done
		bare=$(tps_of "$out/tps_bare_${v}_$c.log")
		pub=$(tps_of "$out/tps_publish_${v}_$c.log")
		ratio=$(calc "$pub / $bare")
		label="organization per client"
		[ $v = shared ] && label="one organization"
		if [ $v = own ]; then
			row "1. publish/bare INSERT, $c $(plural "$c" client), $label" "$ratio ($(printf %.0f "$pub")/$(printf %.0f "$bare") tps)" ">= 0.7" "$(verdict "$ratio" 0.7)"
		else
			row "1. publish/bare INSERT, $c $(plural "$c" client), $label" "$ratio ($(printf %.0f "$pub")/$(printf %.0f "$bare") tps)"
		fi
		json1+=("{\"clients\": $c, \"organizations\": \"$v\", \"notify\": true, \"publish_tps\": $pub, \"bare_insert_tps\": $bare, \"ratio\": $ratio}")
	done
	# Diagnostic: the same publish without notifications (a superuser's
	# session_replication_role = replica sends none), to show what NOTIFY costs.
	PGOPTIONS="-c session_replication_role=replica" tps_point "$out/tps_nonotify_$c.log" \
		-c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/publish_own.sql"
	nn=$(tps_of "$out/tps_nonotify_$c.log")
	bare=$(tps_of "$out/tps_bare_own_$c.log")
	ratio=$(calc "$nn / $bare")
	row "1. (diagnostic) publish without NOTIFY/bare, $c $(plural "$c" client), org per client" "$ratio ($(printf %.0f "$nn")/$(printf %.0f "$bare") tps)"
	json1+=("{\"clients\": $c, \"organizations\": \"own\", \"notify\": false, \"publish_tps\": $nn, \"bare_insert_tps\": $bare, \"ratio\": $ratio}")
done
jadd publish_throughput "[$(IFS=,; echo "${json1[*]}")]"

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
	sleep 0.5   # connected and idle before the first publish
	pgb "$@" >"$out/pub_$name.log" 2>&1 || fail "pgbench failed: $(tail -5 "$out/pub_$name.log")"
	head=$(q -c "SELECT revision FROM eventhub.organization_states WHERE organization = '$org'")
	echo "$head" >&3
	exec 3>&-
	status=0
	wait "$pid" || status=$?
	[ $status -eq 0 ] || fail "eh_bench sub $name failed ($status): $(cat "$out/sub_$name.out" "$out/sub_$name.err")"
}

# ---------------------------------------- 2. publish-to-callback latency
say "2/6 publish-to-callback latency, $LAT_SUBS subscribers, ${LAT_RATE}/s for ${LAT_T} s"
json2=()
for n in $LAT_SUBS; do
	sub_run "listen_$n" lat-org "$n" 1 5000 20 -c 1 -R "$LAT_RATE" -T "$LAT_T" -f "$work/publish_lat-org.sql"
	f=$out/sub_listen_$n.out
	p99=$(kv "$f" p99)
	achieved=$(printf %.0f "$(tps_of "$out/pub_listen_$n.log")")
	if [ "$n" = 16 ]; then
		tgt="p99 <= 10 ms"
		ver=$(awk "BEGIN { print ($p99 <= 10) ? \"PASS\" : \"MISS\" }")
	else
		tgt="" ver=""
	fi
	row "2. publish-to-callback ms p50/p95/p99/max, $n subscribers (${achieved}/s published)" \
		"$(kv "$f" p50)/$(kv "$f" p95)/$p99/$(kv "$f" max)" "$tgt" "$ver"
	json2+=("{\"subscribers\": $n, \"rate_per_s\": $LAT_RATE, \"achieved_rate_per_s\": $achieved, \"events_delivered\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $p99, \"max_ms\": $(kv "$f" max)}")
done
jadd callback_latency "[$(IFS=,; echo "${json2[*]}")]"

# ------------------------------------------------- 3. cost of NOTIFY
say "3/6 publish throughput with 0 and $LISTENERS listening connections"
pgb -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql" >"$out/notify_0.log" 2>&1 || fail "pgbench failed"
rm -f "$work/ctl" "$work/ready"
mkfifo "$work/ctl"
"$bin" listen -n "$LISTENERS" -r "$work/ready" <"$work/ctl" >"$out/listen.out" 2>"$out/listen.err" &
lpid=$!
bgpids+=("$lpid")
exec 3>"$work/ctl"
wait_file "$work/ready" "$lpid" || fail "listeners did not get ready: $(cat "$out/listen.err")"
pgb -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql" >"$out/notify_n.log" 2>&1 || fail "pgbench failed"
exec 3>&-
wait "$lpid" || fail "eh_bench listen failed: $(cat "$out/listen.err")"
t0=$(tps_of "$out/notify_0.log")
tn=$(tps_of "$out/notify_n.log")
ratio=$(calc "$tn / $t0")
row "3. publish tps with $LISTENERS listeners / with none, 8 clients" "$ratio ($(printf %.0f "$tn")/$(printf %.0f "$t0") tps)"
jadd notify_cost "{\"clients\": 8, \"listeners\": $LISTENERS, \"tps_without\": $t0, \"tps_with\": $tn, \"ratio\": $ratio, \"notifications_consumed\": $(kv "$out/listen.out" notifications)}"

# load_backlog ORG N AGE: N events at revisions 1..N, processed AGE ago,
# inserted directly (as superuser, with the write guard off), with
# organization_states at the head event's revision and version.
load_backlog() {
	q <<EOF || fail "loading $2 events failed"
SET eventhub.protect_tables = off;
INSERT INTO eventhub.events
SELECT '$1', g, gen_random_uuid(), now() - interval '$3', now() - interval '$3', 'API', 'UPDATE',
       'api-' || (g % 500), '$1-' || g,
       jsonb_build_object('context', '/weather', 'version', 'v2', 'n', g)
  FROM generate_series(1, $2) g;
INSERT INTO eventhub.organization_states
SELECT organization_id, version_id, revision, now() FROM eventhub.events
 WHERE organization_id = '$1' AND revision = $2;
EOF
}

# -------------------------------------------------------- 4. catch-up
small=$((CATCHUP / 10))
say "4/6 catch-up from $CATCHUP and $small events behind"
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
jadd catch_up "{\"backlog\": $CATCHUP, \"events_per_s\": $eps, \"maxrss_kb\": $rss_big, \"small_backlog\": $small, \"small_events_per_s\": $eps_small, \"small_maxrss_kb\": $rss_small, \"rss_ratio\": $rss_ratio}"

# ------------------------------------------------------- 5. retention
# chunks PREFIX STOPFILE MAX: pgbench in ${CHUNK_T} s chunks at a steady rate
# with per-transaction logs, until STOPFILE exists or MAX chunks ran.
chunks() {
	local k
	for ((k = 0; k < $3; k++)); do
		[ -f "$2" ] && break
		pgb -c "$RET_CLIENTS" -j "$(pgjobs "$RET_CLIENTS")" -R "$RET_RATE" -T "$CHUNK_T" -l \
			--log-prefix="$1_$k" -f "$work/publish_own.sql" >"$1_$k.out" 2>&1 || return 1
	done
}
# retention_point NAME LABEL BATCH DELAY: the worker deletes a backlog with
# eventhub.cleanup_batch_size BATCH and eventhub.cleanup_batch_delay DELAY
# while publishers publish at a steady rate; publish p99 during the cleanup
# against p99 just before it.
retention_point() {
	local name=$1 label=$2 batch=$3 delay=$4 logdir="$out/retlogs-$1" skip line t_reload t_done deleted xacts secs rps b99 c99 pr cpid i
	say "5/6 retention of $RETENTION expired events ($label), publish p99 with and without it"
	q -c "ALTER SYSTEM SET eventhub.retention = '30d'" -c "ALTER SYSTEM SET eventhub.cleanup_batch_size = $batch" \
		-c "ALTER SYSTEM SET eventhub.cleanup_batch_delay = '${delay}ms'" -c "SELECT pg_reload_conf()" >/dev/null
	load_backlog "retention-$name" "$RETENTION" '1 day'
	q -c "VACUUM ANALYZE eventhub.events" -c CHECKPOINT >/dev/null
	mkdir -p "$logdir"
	chunks "$logdir/base" /nonexistent "$RET_BASE_CHUNKS" || fail "pgbench failed"
	rm -f "$work/ret_done"
	chunks "$logdir/clean" "$work/ret_done" 200 &
	cpid=$!
	bgpids+=("$cpid")
	sleep 1
	skip=$(grep -c 'eventhub retention deleted' "$work/cluster/server.log" || true)
	t_reload=$(q -c "ALTER SYSTEM SET eventhub.retention = '1h'" -c "SELECT pg_reload_conf()" \
		-c "SELECT extract(epoch FROM clock_timestamp())" | tail -1)
	line=
	for ((i = 0; i < 3000; i++)); do
		line=$(grep 'eventhub retention deleted' "$work/cluster/server.log" | tail -n +$((skip + 1)) | head -1 || true)
		[ -n "$line" ] && break
		kill -0 "$cpid" 2>/dev/null || break
		sleep 0.1
	done
	touch "$work/ret_done"
	wait "$cpid" || fail "pgbench failed during retention: $(tail -3 "$logdir"/clean_*.out)"
	[ -n "$line" ] || fail "no 'eventhub retention deleted' line in the server log"
	t_done=$(date -u -d "$(echo "$line" | awk '{ print $1, $2 }') UTC" +%s.%N)
	deleted=$(echo "$line" | sed -n 's/.*retention deleted \([0-9]*\) expired events in \([0-9]*\) trans.*/\1/p')
	xacts=$(echo "$line" | sed -n 's/.*retention deleted \([0-9]*\) expired events in \([0-9]*\) trans.*/\2/p')
	[ "$(q -c "SELECT count(*) FROM eventhub.events WHERE organization_id = 'retention-$name'")" = 0 ] ||
		fail "retention left events of retention-$name behind"
	secs=$(calc "$t_done - $t_reload")
	rps=$(calc "$deleted / $secs")
	"$bin" pctl "$logdir"/base_*[0-9] >"$out/ret_base_$name.out" || fail "no baseline pgbench latencies"
	"$bin" pctl -f "$t_reload" -u "$t_done" "$logdir"/clean_*[0-9] >"$out/ret_clean_$name.out" ||
		fail "no pgbench latencies during cleanup"
	b99=$(kv "$out/ret_base_$name.out" p99)
	c99=$(kv "$out/ret_clean_$name.out" p99)
	pr=$(calc "$c99 / $b99")
	row "5. retention rows/s deleted, $label ($deleted in $xacts xacts, $secs s)" "$(printf %.0f "$rps")"
	row "5. publish p99 during cleanup / without, $label, ${RET_RATE}/s" "$pr ($c99/$b99 ms)" "<= 2" \
		"$(awk "BEGIN { print ($pr <= 2) ? \"PASS\" : \"MISS\" }")"
	jadd "retention_$name" "{\"backlog\": $RETENTION, \"batch_size\": $batch, \"batch_delay_ms\": $delay, \"deleted\": $deleted, \"transactions\": $xacts, \"seconds\": $secs, \"rows_per_s\": $rps, \"publish_rate_per_s\": $RET_RATE, \"clients\": $RET_CLIENTS, \"p99_ms_without\": $b99, \"p99_ms_during\": $c99, \"p99_ratio\": $pr, \"samples_without\": $(kv "$out/ret_base_$name.out" count), \"samples_during\": $(kv "$out/ret_clean_$name.out" count)}"
}
retention_point default "defaults (batch 10000, no delay)" 10000 0
retention_point gentle "batch 2000, delay 50ms" 2000 50
q -c "ALTER SYSTEM RESET eventhub.cleanup_batch_size" -c "ALTER SYSTEM RESET eventhub.cleanup_batch_delay" \
	-c "SELECT pg_reload_conf()" >/dev/null

# ----------------------------------------------------- 6. poll fallback
say "6/6 poll fallback, $POLLERS pollers without LISTEN, 5000 and 100 ms"
json6=()
for spec in "5000 $POLL_SLOW_RATE $POLL_SLOW_T" "100 $POLL_FAST_RATE $POLL_FAST_T"; do
	read -r poll rate t <<<"$spec"
	sub_run "poll_$poll" poll-org "$POLLERS" 0 "$poll" $((poll * 2 / 1000 + 10)) -c 1 -R "$rate" -T "$t" -f "$work/publish_poll-org.sql"
	f=$out/sub_poll_$poll.out
	row "6. poll ${poll} ms: delivery ms p50/p99/max; polls/s" \
		"$(kv "$f" p50)/$(kv "$f" p99)/$(kv "$f" max); $(kv "$f" polls_per_s)"
	json6+=("{\"poll_interval_ms\": $poll, \"pollers\": $POLLERS, \"events_delivered\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p99_ms\": $(kv "$f" p99), \"max_ms\": $(kv "$f" max), \"polls_per_s\": $(kv "$f" polls_per_s)}")
done
jadd poll_fallback "[$(IFS=,; echo "${json6[*]}")]"

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

if command -v gnuplot >/dev/null 2>&1; then
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
