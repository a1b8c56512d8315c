# 17 outage: one `eventhub watch --org fan-org` process, connected directly
# and then through pgbouncer in transaction pooling (bench/fan.sh
# pooler_start); the primary stopped (pg_ctl stop -m fast) for OUT_DOWN
# seconds and started again, and one event published as soon as it accepts
# connections (a psql retried every 10 ms): the time from the event's
# processed_timestamp to the watcher printing it, and from the server's
# "ready to accept connections" (its log line, in ms) to the line; the
# line must be the event after the warm-up (missing, duplicated or
# reordered fails the run).  The server is started the way bench/run.sh
# left it, so it runs last.  Why: after a restart a watcher must be back
# within a second, not after its reconnect backoff has grown for as long
# as the server was down.

source fan.sh
#      variable  full  smoke
scaled OUT_DOWN  5     5     # seconds the server is down
POOL_SIZE=1

# outage_run TAG [CONNINFO]: one outage with one watcher (over CONNINFO,
# else directly); sets OUT_COMMIT_MS and OUT_ACCEPT_MS (to the line) and
# OUT_PUBLISH_MS (from accepting connections to the event's timestamp).
outage_run() {
	local f=$out/outage_$1 head wpid spid rev ready pts lat
	rm -f "$work/out_fifo" "$work/out_ready" "$work/out_done"
	mkfifo "$work/out_fifo"
	head=$(q -c "SELECT revision FROM eventhub.organization_states WHERE organization_id = 'fan-org'")
	PGAPPNAME=fan-watch "$work/eventhub" ${2:+-d "$2"} watch --org fan-org --after "$head" >"$work/out_fifo" 2>"$f.err" &
	wpid=$!
	bgpids+=("$wpid")
	"$bin" stamp -e 1 -r "$work/out_ready" -D "$work/out_done" -L "$f.lat" -t 120 "$work/out_fifo" >"$f.out" 2>"$f.stamp.err" &
	spid=$!
	bgpids+=("$spid")
	q -c "SELECT eventhub.publish_event('fan-org', 'API', 'UPDATE', 'warm-up', NULL, '{}')" >/dev/null
	wait_file "$work/out_ready" "$spid" || fail "outage ($1): the watcher did not print the warm-up: $(cat "$f.err")"
	"$PG_BINDIR/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null || fail "outage ($1): the server did not stop"
	sleep "$OUT_DOWN"
	"$PG_BINDIR/pg_ctl" -D "$PGDATA" -l "$work/cluster/server.log" -w -t 60 start >/dev/null &
	until rev=$(q -c "SELECT eventhub.publish_event('fan-org', 'API', 'UPDATE', 'after-outage', NULL, '{}')" 2>/dev/null); do
		sleep 0.01
	done
	wait "$!" || fail "outage ($1): the server did not start again"
	wait_file "$work/out_done" "$spid" || fail "outage ($1): the watcher did not print the event: $(cat "$f.out" "$f.stamp.err" "$f.err" | tail -5)"
	kill "$wpid" 2>/dev/null || true
	wait "$wpid" 2>/dev/null || true
	wait "$spid" || fail "outage ($1): eh_bench stamp failed: $(cat "$f.stamp.err")"
	order_check "$f.out" "outage ($1)"
	ready=$(date -d "$(grep 'ready to accept connections' "$work/cluster/server.log" | tail -1 | cut -d' ' -f1-3)" +%s.%N)
	pts=$(q -c "SELECT extract(epoch FROM processed_timestamp) FROM eventhub.events WHERE organization_id = 'fan-org' AND revision = $rev")
	lat=$(head -1 "$f.lat")
	OUT_COMMIT_MS=$(calc "$lat")
	OUT_ACCEPT_MS=$(calc "($pts - $ready) * 1000 + $lat")
	OUT_PUBLISH_MS=$(calc "($pts - $ready) * 1000")
}

say "17/18 a watcher across a ${OUT_DOWN} s outage of the server, directly and through pgbouncer (transaction pooling)"
fan_setup
json17=()
for how in direct pooler; do
	dsn=
	if [ $how = pooler ]; then
		pooler_start
		dsn=$POOL_DSN
	fi
	outage_run "$how" "$dsn"
	label="17. outage: ${OUT_DOWN} s down, 1 watch process $([ $how = direct ] && echo directly || echo "through pgbouncer")"
	row "$label: event's commit to printed line ms" "$OUT_COMMIT_MS" "<= 1000 ms" "$(at_most "$OUT_COMMIT_MS" 1000)"
	row "$label: accepting connections to printed line ms (to the event: $OUT_PUBLISH_MS)" "$OUT_ACCEPT_MS" "<= 1000 ms" "$(at_most "$OUT_ACCEPT_MS" 1000)"
	json17+=("{\"via\": \"$how\", \"down_s\": $OUT_DOWN, \"commit_to_line_ms\": $OUT_COMMIT_MS, \"accept_to_line_ms\": $OUT_ACCEPT_MS, \"accept_to_event_ms\": $OUT_PUBLISH_MS}")
	[ $how = direct ] || pooler_stop
done
jadd outage "$(jlist "${json17[@]}")"
