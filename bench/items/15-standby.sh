# 15 standby: `eventhub watch --org fan-org` processes connected to a hot
# standby of the bench cluster (streaming, bench/fan.sh standby_start)
# while one publisher publishes FAN_EVENTS events to fan-org on the primary
# at FAN_RATE a second: publish-to-printed-line latency (a standby cannot
# LISTEN: each watcher waits in eventhub.wait_for_events(), woken by the
# standby waker after replay), CPU
# per delivered event (the watchers and their backends on the standby),
# lines missing, duplicated or reordered (any fails the run), and the
# standby's replay lag, sampled every 100 ms on the primary, beside the
# same publish with no watcher.  Why: reads scale out by moving watchers
# to standbys; they must get every event, in order, and not hold replay
# back.

source fan.sh
#      variable  full         smoke
scaled SB_PROCS  "16 64 128"  4      # watch processes on the standby

say "15/18 $SB_PROCS eventhub watch processes on a hot standby, ${FAN_RATE}/s published on the primary, $FAN_EVENTS events"
fan_setup
standby_start
json15=()
lag_start "$out/lag_standby_0.txt"
pgb -c 1 -R "$FAN_RATE" -t "$FAN_EVENTS" -f "$work/publish_fan-org.sql" >"$out/pub_standby_0.log" 2>&1 ||
	fail "pgbench failed: $(tail -5 "$out/pub_standby_0.log")"
lag_stop "$out/lag_standby_0.txt"
row "15. standby replay lag ms max/p99 of $LAG_N samples (100 ms), no watcher ($(printf %.0f "$(tps_of "$out/pub_standby_0.log")")/s)" "$LAG_MAX/$LAG_P99"
json15+=("{\"watchers\": 0, \"replay_lag_max_ms\": $LAG_MAX, \"replay_lag_p99_ms\": $LAG_P99}")
for n in $SB_PROCS; do
	lag_start "$out/lag_standby_$n.txt"
	FAN_DSN="host=$SB_HOST port=$SB_PORT" FAN_BACKENDS=standby_backends fan_run "$n" standby
	lag_stop "$out/lag_standby_$n.txt"
	f=$out/fan_${n}_standby.out
	row "15. standby: publish-to-printed-line ms p50/p95/p99/max, $n watch processes on the standby (${FAN_RATE_GOT}/s); missing/dup/reordered" \
		"$(kv "$f" p50)/$(kv "$f" p95)/$(kv "$f" p99)/$(kv "$f" max); $(kv "$f" missing)/$(kv "$f" duplicated)/$(kv "$f" reordered)"
	row "15. standby: CPU us per delivered event (standby backend + watcher), $n watch processes" \
		"$(calc "$FAN_CPU_S + $FAN_CPU_C") ($FAN_CPU_S + $FAN_CPU_C)"
	row "15. standby replay lag ms max/p99 of $LAG_N samples (100 ms), $n watch processes on the standby" "$LAG_MAX/$LAG_P99"
	json15+=("{\"watchers\": $n, \"rate_per_s\": $FAN_RATE, \"achieved_rate_per_s\": $FAN_RATE_GOT, \"events\": $FAN_EVENTS, \"lines\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $(kv "$f" p99), \"max_ms\": $(kv "$f" max), \"cpu_us_per_event_server\": $FAN_CPU_S, \"cpu_us_per_event_client\": $FAN_CPU_C, \"missing\": $(kv "$f" missing), \"duplicated\": $(kv "$f" duplicated), \"reordered\": $(kv "$f" reordered), \"replay_lag_max_ms\": $LAG_MAX, \"replay_lag_p99_ms\": $LAG_P99}")
done
cluster_stop "$work/standby"
jadd standby "$(jlist "${json15[@]}")"
