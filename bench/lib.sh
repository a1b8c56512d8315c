# The shared helpers of make bench's measurements (bench/items/*.sh): the
# cluster, queries and pgbench, waits, the table and the JSON.  Source it.
#
# Defining functions and empty collections is all sourcing it does, so that
# a script outside the run (bench/gofloor/run.sh) can use cpu_ns.  The
# measurements use these globals, set by bench/run.sh: work (the staged
# directory), out (raw outputs), bin (eh_bench), data (an event's JSON),
# T_TPS and ROUNDS.

# scaled VAR FULL SMOKE: sets VAR to FULL, or to SMOKE when BENCH_SCALE is
# smoke.
scaled() {
	if [ "${BENCH_SCALE:-full}" = smoke ]; then printf -v "$1" %s "$3"; else printf -v "$1" %s "$2"; fi
}

say() { echo "bench: $*" >&2; }
# fail MESSAGE: ends the run, with the end of the server's log if there is one.
fail() {
	echo "bench: $*" >&2
	[ -f "${work:-}/cluster/server.log" ] && tail -20 "$work/cluster/server.log" >&2
	exit 1
}
q() { "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# pgb ARGS...: pgbench without vacuum, prepared statements, against postgres.
pgb() { "$PG_BINDIR/pgbench" -n -M prepared "$@"; }
# tps_of LOG, latency_of LOG: throughput and average latency (ms) of a pgbench run.
tps_of() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }
latency_of() { sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' "$1"; }
# kv FILE KEY: the value of KEY in eh_bench's key=value output line.
kv() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | head -1; }
# order_check FILE WHAT: fails the run, naming WHAT, when eh_bench stamp's
# output FILE counts a missing, duplicated or reordered line.
order_check() {
	local bad
	bad=$(grep -Eo '(missing|duplicated|reordered)=[0-9]+' "$1" | grep -v '=0$' | paste -sd' ' -) || true
	[ -z "$bad" ] || fail "$2: $bad (per watcher: $(grep -h 'missing=' "${1%.out}".stamp.err 2>/dev/null | head -3))"
}
# calc EXPR: floating-point arithmetic with awk.
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
ge() { awk "BEGIN { exit !($1 >= $2) }"; }
# median V...: the median of the values (the lower middle one of an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# mean V...: their mean.
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.3f", s / NR }'; }
# spread V...: "least-greatest" of the values.
spread() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- -; }
pgjobs() { [ "$1" -lt 2 ] && echo 1 || echo 2; }
plural() { [ "$1" = 1 ] && echo "$2" || echo "${2}s"; }

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
# retention_passes: how many retention passes the worker has logged.
retention_passes() { grep -c 'eventhub retention deleted' "$work/cluster/server.log" || true; }

# tps_point LOG PGBENCH_ARGS...: one throughput point.
tps_point() {
	local log=$1
	shift
	pgb "$@" >"$log" 2>&1 || fail "pgbench failed: $(tail -5 "$log")"
}
# tps_rounds NAME CLIENTS SCRIPT...: ROUNDS interleaved rounds of T_TPS
# seconds per script; sets TPS[SCRIPT] to the median tps of each.  A
# SCRIPT ending in .sql is a pgbench script (a file in $work); any other
# names a function run as SCRIPT LOG CLIENTS, which writes tps=X to LOG.
declare -A TPS
tps_rounds() {
	local name=$1 c=$2 r f log
	shift 2
	local -A got=()
	for ((r = 0; r < ROUNDS; r++)); do
		for f in "$@"; do
			log=$out/tps_${name}_${f%.sql}_$r.log
			case $f in
			*.sql)
				# The floor writes eventhub's tables directly: the write guard is off for it.
				PGOPTIONS="$([ "$f" = floor_own.sql ] && echo "-c eventhub.protect_tables=off")" \
					tps_point "$log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/$f"
				got[$f]+=" $(tps_of "$log")"
				;;
			*)
				"$f" "$log" "$c"
				got[$f]+=" $(kv "$log" tps)"
				;;
			esac
		done
	done
	for f in "$@"; do
		# shellcheck disable=SC2086
		TPS[$f]=$(median ${got[$f]})
	done
}

rows=()   # table rows: label|value|target|verdict
row() { rows+=("$1|$2|${3:-}|${4:-}"); }
verdict() { if ge "$1" "$2"; then echo PASS; else echo MISS; fi; }
# at_most VALUE LIMIT: PASS when VALUE <= LIMIT, else MISS.
at_most() { awk "BEGIN { print ($1 <= $2) ? \"PASS\" : \"MISS\" }"; }
# ratio_row LABEL NUM DEN [TARGET]: a row "NUM/DEN" (tps), with a verdict
# against TARGET if given; sets RATIO.
ratio_row() {
	RATIO=$(calc "$2 / $3")
	row "$1" "$RATIO ($(printf %.0f "$2")/$(printf %.0f "$3") tps)" "${4:+>= $4}" "${4:+$(verdict "$RATIO" "$4")}"
}
json_items=()
# jadd KEY JSON: one member of the results' JSON object.
jadd() { json_items+=("\"$1\": $2"); }
# jlist ITEM...: the items as a JSON array.
jlist() { echo "[$(IFS=,; echo "$*")]"; }

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

# bench_cluster: the throwaway cluster every measurement runs on, with
# eventhub, PgQ and the organizations and baseline table they share; sets
# MODE to eventhub's notification mode.
bench_cluster() {
	cat >"$work/bench.conf" <<EOF
shared_preload_libraries = 'eventhub'
max_connections = 200
log_timezone = 'UTC'
log_line_prefix = '%m [%p] '
# Retention stays out of the way until the retention measurement lowers it
# with ALTER SYSTEM.
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
	MODE=$(q -c "SELECT eventhub.notification_mode()")
	[ "$MODE" = worker ] || fail "notification mode is '$MODE', not 'worker': is eventhub in shared_preload_libraries?"
}

# publish_script FILE ORG: a pgbench script that publishes one event to
# ORG (an SQL expression).
publish_script() {
	echo "SELECT eventhub.publish_event($2, 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/$1"
}

# report: the JSON to $out/results.json and the table to stdout.
report() {
	local fmt='%-78s %-30s %-16s %s\n' r a b c d
	{
		printf '{"scale": "%s", "postgres": "%s", "cpus": %s, "date": "%s",\n' \
			"${BENCH_SCALE:-full}" "$("$PG_BINDIR/postgres" --version | awk '{ print $3 }')" "$(nproc)" "$(date -u +%FT%TZ)"
		(IFS=$'\n'; echo "${json_items[*]}") | sed '$!s/$/,/'
		printf '}\n'
	} >"$out/results.json"
	# shellcheck disable=SC2059
	printf "$fmt" MEASUREMENT VALUE TARGET RESULT
	for r in "${rows[@]}"; do
		IFS='|' read -r a b c d <<<"$r"
		# shellcheck disable=SC2059
		printf "$fmt" "$a" "$b" "$c" "$d"
	done
}
