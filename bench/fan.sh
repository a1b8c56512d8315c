# The fan-out that items 11 (fanout) and 13 (go-watch) measure: watcher
# processes following one organization while one publisher publishes to
# it.  Source it after bench/lib.sh.
#
# N `eventhub watch --org fan-org` processes (or Go watchers), as users run
# them, each printing into a FIFO that one `eh_bench stamp` reads (it
# stamps each line as it arrives: publish-to-printed-line latency =
# arrival - the line's processed_timestamp).  A warm-up event, printed by
# every watcher, makes sure all follow the organization and listen; then
# one publisher publishes FAN_EVENTS events at FAN_RATE a second.  CPU per
# delivered event: the CPU time (/proc/PID/schedstat) of the watcher
# processes and of their backends from just before publishing until the
# last line is printed, over N * FAN_EVENTS.

#      variable    full smoke
scaled FAN_RATE    200  100    # events a second
scaled FAN_EVENTS  1000 100    # events published

# fan_setup: the organization the watchers follow, and its publish.
fan_setup() {
	q -c "SELECT eventhub.register_organization('fan-org')" >/dev/null
	publish_script publish_fan-org.sql "'fan-org'"
}
# fan_perf_start N TAG WPIDS BPIDS: with BENCH_PERF, perf records the
# watchers (pids WPIDS, comma-separated) and their backends (BPIDS), or the
# whole machine; sets PERFS to the recorders.
fan_perf_start() {
	local n=$1 tag=$2
	PERFS=()
	if [ "${BENCH_PERF:-}" = all ]; then
		perf record -q -a -F 999 -o "$out/perf_fan_${n}_${tag}_all.data" 2>/dev/null &
		PERFS+=("$!")
		sleep 0.5
	elif [ -n "${BENCH_PERF:-}" ]; then
		perf record -q -F 1999 ${BENCH_PERF_G:+-g} -p "$4" -o "$out/perf_fan_${n}_${tag}_server.data" 2>/dev/null &
		PERFS+=("$!")
		perf record -q -F 1999 ${BENCH_PERF_G:+-g} -p "$3" -o "$out/perf_fan_${n}_${tag}_client.data" 2>/dev/null &
		PERFS+=("$!")
		sleep 0.5
	fi
}
# fan_perf_report N TAG: stops the recorders of PERFS and writes their reports.
fan_perf_report() {
	local n=$1 tag=$2 i
	[ "${#PERFS[@]}" -gt 0 ] || return 0
	kill -INT "${PERFS[@]}"
	wait "${PERFS[@]}" || true
	for i in server client all; do
		[ -f "$out/perf_fan_${n}_${tag}_$i.data" ] || continue
		perf report -i "$out/perf_fan_${n}_${tag}_$i.data" --stdio --no-children \
			--sort "$([ $i = all ] && echo comm,sym || echo sym)" 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -80 >"$out/perf_fan_${n}_${tag}_$i.txt" || true
		[ $i = all ] && perf report -i "$out/perf_fan_${n}_${tag}_$i.data" --stdio --no-children --sort comm 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -20 >"$out/perf_fan_${n}_${tag}_comm.txt"
	done
	return 0
}
# fan_backends N PER: the backends of N watchers, PER each, on the primary
# (by their application name): sets FAN_BPIDS.
fan_backends() {
	mapfile -t FAN_BPIDS < <(q -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'fan-watch'")
	[ "${#FAN_BPIDS[@]}" = "$(($1 * $2))" ] || fail "fan-out $1: ${#FAN_BPIDS[@]} watcher backends, not $(($1 * $2))"
}
# fan_run N TAG [go]: N `eventhub watch` processes, or N Go watchers (two
# backends each: one listens, one fetches); sets FAN_CPU_C and FAN_CPU_S
# (CPU us per delivered event of the watchers and of their backends) and
# FAN_RATE_GOT.  The latencies are in $out/fan_N_TAG.out; a missing,
# duplicated or reordered line fails the run.  Where the watchers connect:
# FAN_DSN, a conninfo (default: the primary, as PG* say), and FAN_BACKENDS,
# the function that finds the server processes that serve them (default
# fan_backends; given FAN_DSN, the watchers poll, so no wait for idle
# sessions).  FAN_PGB_ARGS: more arguments for the publishing pgbench
# (e.g. -l --log-prefix=FILE).
fan_run() {
	local n=$1 tag=$2 kind=${3:-cli} i head fifos=() wpids=() bpids spid t0c t0s t1c t1s per=1
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
			PGAPPNAME=fan-watch "$work/eventhub" ${FAN_DSN:+-d "$FAN_DSN"} watch --org fan-org --after "$head" >"$work/fan/w$i" 2>"$out/fan_${n}_${tag}_$i.err" &
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
	[ -n "${FAN_DSN:-}" ] || wait_until "the watchers of fan-out $n to be idle" sessions_idle
	"${FAN_BACKENDS:-fan_backends}" "$n" "$per"
	bpids=("${FAN_BPIDS[@]}")
	t0c=$(cpu_ns "${wpids[@]}")
	t0s=$(cpu_ns "${bpids[@]}")
	fan_perf_start "$n" "$tag" "$(IFS=,; echo "${wpids[*]}")" "$(IFS=,; echo "${bpids[*]}")"
	# shellcheck disable=SC2086
	pgb -c 1 -R "$FAN_RATE" -t "$FAN_EVENTS" ${FAN_PGB_ARGS:-} -f "$work/publish_fan-org.sql" >"$out/pub_fan_${n}_$tag.log" 2>&1 ||
		fail "pgbench failed: $(tail -5 "$out/pub_fan_${n}_$tag.log")"
	# The watchers stop once their output is gone: their CPU first.
	wait_file "$work/fan_done" "$spid" || fail "fan-out $n: not every watcher printed every event: $(cat "$out/fan_${n}_$tag.out" "$out/fan_${n}_$tag.stamp.err")"
	t1c=$(cpu_ns "${wpids[@]}")
	t1s=$(cpu_ns "${bpids[@]}")
	fan_perf_report "$n" "$tag"
	kill "${wpids[@]}" 2>/dev/null || true
	for i in "${wpids[@]}"; do wait "$i" 2>/dev/null || true; done
	wait "$spid" || fail "fan-out $n: eh_bench stamp failed: $(cat "$out/fan_${n}_$tag.stamp.err")"
	order_check "$out/fan_${n}_$tag.out" "fan-out to $n watchers ($tag)"
	FAN_CPU_C=$(calc "($t1c - $t0c) / 1000 / ($n * $FAN_EVENTS)")
	FAN_CPU_S=$(calc "($t1s - $t0s) / 1000 / ($n * $FAN_EVENTS)")
	FAN_RATE_GOT=$(printf %.0f "$(tps_of "$out/pub_fan_${n}_$tag.log")")
}

# standby_start [LINE...]: a hot standby of the bench cluster in
# $work/standby (pg_basebackup -R, its own socket directory and port 5433,
# the primary's settings, shared_preload_libraries too, then the
# postgresql.conf lines LINE), caught up; sets SB_HOST and SB_PORT.
# cleanup (bench/run.sh) stops it.
standby_start() {
	local dir=$work/standby lsn
	rm -rf "$dir"
	mkdir -p "$dir/socket"
	"$PG_BINDIR/pg_basebackup" -D "$dir/data" -R -X stream -c fast >"$dir.log" 2>&1 || fail "pg_basebackup failed: $(cat "$dir.log")"
	printf '%s\n' "unix_socket_directories = '$dir/socket'" "port = 5433" "hot_standby = on" "$@" >>"$dir/data/postgresql.conf"
	"$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null || fail "the standby did not start: $(tail -5 "$dir/server.log")"
	SB_HOST=$dir/socket SB_PORT=5433
	lsn=$(q -c "SELECT pg_current_wal_lsn()")
	wait_until "the standby to replay $lsn" standby_at "$lsn"
}
standby_at() { [ "$(q -h "$SB_HOST" -p "$SB_PORT" -c "SELECT pg_last_wal_replay_lsn() >= '$1'")" = t ]; }
# standby_backends N PER: the backends of N watchers on the standby: FAN_BPIDS.
standby_backends() {
	mapfile -t FAN_BPIDS < <(q -h "$SB_HOST" -p "$SB_PORT" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'fan-watch'")
	[ "${#FAN_BPIDS[@]}" = "$1" ] || fail "standby fan-out $1: ${#FAN_BPIDS[@]} watcher backends, not $1"
}
# lag_start FILE: the standby's replay lag (pg_stat_replication.replay_lag on
# the primary, ms, 0 when none is reported) sampled every 100 ms into FILE,
# until lag_stop.  The primary shows the last lag measured until a new one
# comes: first one event is published and replayed, so that the first
# sample is not that of an earlier burst.
lag_start() {
	local lsn
	q -c "SELECT eventhub.publish_event('bench-shared', 'API', 'UPDATE', 'lag', NULL, '{}')" >/dev/null
	lsn=$(q -c "SELECT pg_current_wal_lsn()")
	wait_until "the standby to replay $lsn" standby_at "$lsn"
	sleep 0.2
	"$PG_BINDIR/psql" -X -q -At >"$1" 2>&1 <<<"SELECT coalesce(extract(epoch FROM replay_lag) * 1000, 0)::numeric(10,3) FROM pg_stat_replication \watch 0.1" &
	LAG_PID=$!
	bgpids+=("$LAG_PID")
}
# lag_stop FILE: stops the sampling; sets LAG_MAX, LAG_P99 (ms) and LAG_N (samples).
lag_stop() {
	kill "$LAG_PID" 2>/dev/null || true
	wait "$LAG_PID" 2>/dev/null || true
	LAG_N=$(grep -c '^[0-9.]*$' "$1" || true)
	LAG_MAX=$(grep '^[0-9.]*$' "$1" | sort -g | tail -1)
	LAG_P99=$(grep '^[0-9.]*$' "$1" | sort -g | awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; print v[i] }')
}

# pooler_start: pgbouncer (pool_mode = transaction) in front of the primary,
# on 127.0.0.1 (a free port from 6432), logging in to the server as the
# superuser bench_pool (so that its server connections are known by their
# user): POOL_SIZE server connections, opened at once (min_pool_size); a
# query waits at most a second for a server, and a failed login is retried
# after a second (as regress/t/010_pgbouncer.pl: the defaults, 120 s and
# 15 s, are for pools that wait out a restart).  Sets POOL_DSN and
# POOL_PID; cleanup (bench/run.sh) stops it.
pooler_start() {
	local dir=$work/pooler port=6432
	while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
	rm -rf "$dir"
	mkdir -p "$dir"
	q -c "DO \$\$ BEGIN CREATE ROLE bench_pool LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object THEN END \$\$" >/dev/null
	echo '"postgres" ""' >"$dir/users.txt"
	cat >"$dir/pgbouncer.ini" <<-EOF2
		[databases]
		postgres = host=$PGHOST port=$PGPORT dbname=postgres user=bench_pool
		[pgbouncer]
		listen_addr = 127.0.0.1
		listen_port = $port
		unix_socket_dir =
		auth_type = trust
		auth_file = $dir/users.txt
		pool_mode = transaction
		default_pool_size = $POOL_SIZE
		min_pool_size = $POOL_SIZE
		max_client_conn = 300
		server_login_retry = 1
		query_wait_timeout = 1
		logfile = $dir/pgbouncer.log
		pidfile = $dir/pgbouncer.pid
	EOF2
	/usr/sbin/pgbouncer "$dir/pgbouncer.ini" >"$dir/pgbouncer.out" 2>&1 &
	POOL_PID=$!
	bgpids+=("$POOL_PID")
	POOL_DSN="host=127.0.0.1 port=$port dbname=postgres user=postgres"
	wait_until "pgbouncer on port $port" pooler_up
}
pooler_up() {
	kill -0 "$POOL_PID" 2>/dev/null || fail "pgbouncer did not start: $(cat "$work/pooler/pgbouncer.out")"
	q -d "$POOL_DSN" -c "SELECT 1" >/dev/null 2>&1
}
# pooler_backends N PER: the pool's server connections, once there are
# POOL_SIZE, and pgbouncer itself: FAN_BPIDS.
pooler_backends() {
	wait_until "$POOL_SIZE server connections of the pool" pooler_full
	mapfile -t FAN_BPIDS < <(q -c "SELECT pid FROM pg_stat_activity WHERE usename = 'bench_pool'")
	FAN_BPIDS+=("$POOL_PID")
}
# pooler_stop: stops the pgbouncer of pooler_start.
pooler_stop() {
	kill "$POOL_PID" 2>/dev/null || true
	wait "$POOL_PID" 2>/dev/null || true
}
pooler_full() { [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'bench_pool'")" = "$POOL_SIZE" ]; }
