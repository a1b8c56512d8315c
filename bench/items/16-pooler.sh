# 16 pooler: POOL_PROCS `eventhub watch --org fan-org` processes connected
# through pgbouncer in transaction pooling (bench/fan.sh pooler_start:
# POOL_SIZE server connections) to the primary, while one publisher
# publishes FAN_EVENTS events to fan-org directly at FAN_RATE a second:
# publish-to-printed-line latency (behind transaction pooling a watcher
# cannot LISTEN: it waits in eventhub.wait_for_events(), one CALL at a
# time, woken at commit), CPU per
# delivered event (the watchers; the pool's server connections and
# pgbouncer) and lines missing, duplicated or reordered (any fails the
# run).  Why: a pooler is how many watchers share few server connections.

source fan.sh
#      variable    full  smoke
scaled POOL_PROCS  16    4      # watch processes behind the pooler
scaled POOL_SIZE   4     2      # server connections of the pool

say "16/18 $POOL_PROCS eventhub watch processes behind pgbouncer (transaction pooling, $POOL_SIZE server connections), ${FAN_RATE}/s, $FAN_EVENTS events"
fan_setup
pooler_start
n=$POOL_PROCS
FAN_DSN="$POOL_DSN" FAN_BACKENDS=pooler_backends fan_run "$n" pooler
f=$out/fan_${n}_pooler.out
row "16. pooler: publish-to-printed-line ms p50/p95/p99/max, $n watch processes through pgbouncer (${FAN_RATE_GOT}/s); missing/dup/reordered" \
	"$(kv "$f" p50)/$(kv "$f" p95)/$(kv "$f" p99)/$(kv "$f" max); $(kv "$f" missing)/$(kv "$f" duplicated)/$(kv "$f" reordered)"
row "16. pooler: CPU us per delivered event ($POOL_SIZE server backends and pgbouncer + watcher), $n watch processes" \
	"$(calc "$FAN_CPU_S + $FAN_CPU_C") ($FAN_CPU_S + $FAN_CPU_C)"
jadd pooler "{\"watchers\": $n, \"pool_size\": $POOL_SIZE, \"rate_per_s\": $FAN_RATE, \"achieved_rate_per_s\": $FAN_RATE_GOT, \"events\": $FAN_EVENTS, \"lines\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $(kv "$f" p99), \"max_ms\": $(kv "$f" max), \"cpu_us_per_event_server\": $FAN_CPU_S, \"cpu_us_per_event_client\": $FAN_CPU_C, \"missing\": $(kv "$f" missing), \"duplicated\": $(kv "$f" duplicated), \"reordered\": $(kv "$f" reordered)}"
pooler_stop
