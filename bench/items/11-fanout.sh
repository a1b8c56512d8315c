# 11 fanout: FAN_PROCS `eventhub watch` processes following one
# organization (bench/fan.sh), with eventhub.notification_events on (the
# notifications carry the events: the default) and off (every watcher
# fetches every event), alternating which goes first: publish-to-printed-
# line latency, CPU per delivered event, and the lines missing, duplicated
# or reordered (any fails the run).  Once the latencies are measured, 8
# clients publish to organizations of their own, unthrottled, for T_TPS
# seconds beside FAN_TPS_PROCS watch processes that follow fan-org (idle:
# nothing is published to it), FAN_TPS_ROUNDS times, each between two
# points beside none: the mean with them over the mean without, what
# N watchers cost the publishers of other organizations (the fan-out's own
# rate is fixed by pgbench -R).  Why: watch is how users follow an
# organization from a shell or a sidecar; many of them must not cost the
# server a fetch each per event.

source fan.sh
#      variable      full                                smoke
scaled FAN_PROCS     "${BENCH_FAN_PROCS:-1 16 64 128}"   "1 4"   # watch processes
scaled FAN_TPS_PROCS "16 64 128"                         4       # idle watchers beside publishers
scaled FAN_TPS_ROUNDS 2                                  1       # their points (between points without)

# watchers_idle N: whether N watch processes are connected and idle.
watchers_idle() {
	[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fan-watch' AND state = 'idle'")" = "$1" ]
}
# idle_tps LOG N: publish throughput of 8 clients of organizations of their
# own beside N `eventhub watch` processes that follow fan-org (nothing is
# published to it), or beside none (N = 0).
idle_tps() {
	local i pids=()
	for ((i = 0; i < $2; i++)); do
		PGAPPNAME=fan-watch "$work/eventhub" watch --org fan-org >/dev/null 2>>"$1.err" &
		pids+=("$!")
		bgpids+=("$!")
	done
	wait_until "$2 idle watchers" watchers_idle "$2"
	tps_point "$1" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
	[ "$2" = 0 ] || kill "${pids[@]}" 2>/dev/null || true
	for i in "${pids[@]}"; do wait "$i" 2>/dev/null || true; done
}

say "11/18 fan-out to $FAN_PROCS eventhub watch processes, ${FAN_RATE}/s, $FAN_EVENTS events; notifications with and without their events; publishers beside $FAN_TPS_PROCS idle watchers"
fan_setup
json11=()
k=0
for n in $FAN_PROCS; do
	procs="$n watch $([ "$n" = 1 ] && echo process || echo processes)"
	declare -A FCPU=()
	for mode in $( ((k++ % 2 == 0)) && echo "on off" || echo "off on"); do
		reload_conf "ALTER SYSTEM SET eventhub.notification_events = $mode"
		fan_run "$n" "$mode"
		f=$out/fan_${n}_$mode.out
		p99=$(kv "$f" p99)
		tgt= ver=
		if [ "$mode" = on ]; then
			case $n in 1) tgt=2 ;; 4 | 8) tgt=5 ;; 16) tgt=10 ;; esac
			[ -n "$tgt" ] && ver=$(at_most "$p99" "$tgt") && tgt="p99 <= $tgt ms"
		fi
		row "11. publish-to-printed-line ms p50/p95/p99/max, $procs, events $([ $mode = on ] && echo "in the notification" || echo fetched) (${FAN_RATE_GOT}/s); missing/dup/reordered" \
			"$(kv "$f" p50)/$(kv "$f" p95)/$p99/$(kv "$f" max); $(kv "$f" missing)/$(kv "$f" duplicated)/$(kv "$f" reordered)" "$tgt" "$ver"
		FCPU[$mode]=$(calc "$FAN_CPU_S + $FAN_CPU_C")
		FCPU[${mode}_s]=$FAN_CPU_S FCPU[${mode}_c]=$FAN_CPU_C
		json11+=("{\"watchers\": $n, \"notification_events\": \"$mode\", \"rate_per_s\": $FAN_RATE, \"achieved_rate_per_s\": $FAN_RATE_GOT, \"events\": $FAN_EVENTS, \"lines\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $p99, \"max_ms\": $(kv "$f" max), \"cpu_us_per_event_server\": $FAN_CPU_S, \"cpu_us_per_event_client\": $FAN_CPU_C, \"missing\": $(kv "$f" missing), \"duplicated\": $(kv "$f" duplicated), \"reordered\": $(kv "$f" reordered)}")
	done
	row "11. CPU us per delivered event (backend + watcher), $procs: events in the notification / fetched" \
		"${FCPU[on]} (${FCPU[on_s]} + ${FCPU[on_c]}) / ${FCPU[off]} (${FCPU[off_s]} + ${FCPU[off_c]}) = $(calc "${FCPU[on]} / ${FCPU[off]}")"
done
reload_conf "ALTER SYSTEM RESET eventhub.notification_events"
# What idle watchers cost the publishers of other organizations: beside
# none, N, none, ... (after the latencies, which the bursts would disturb).
for n in $FAN_TPS_PROCS; do
	with=() none=()
	for ((r = 0; r <= 2 * FAN_TPS_ROUNDS; r++)); do
		idle_tps "$out/fan_tps_${n}_$r.log" $((r % 2 == 1 ? n : 0))
		tps=$(printf %.0f "$(tps_of "$out/fan_tps_${n}_$r.log")")
		if ((r % 2 == 1)); then with+=("$tps"); else none+=("$tps"); fi
	done
	ratio_row "11. publish throughput, 8 clients of other organizations, beside $n idle watch processes / none (means; with $(spread "${with[@]}"), none $(spread "${none[@]}"))" \
		"$(mean "${with[@]}")" "$(mean "${none[@]}")"
	json11+=("{\"idle_watchers\": $n, \"publish_tps\": $(mean "${with[@]}"), \"no_watcher_publish_tps\": $(mean "${none[@]}"), \"ratio\": $RATIO}")
done
jadd fan_out "$(jlist "${json11[@]}")"
