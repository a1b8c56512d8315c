# 11 fanout: FAN_PROCS `eventhub watch` processes following one
# organization (bench/fan.sh), with eventhub.notification_events on (the
# notifications carry the events: the default) and off (every watcher
# fetches every event), alternating which goes first: publish-to-printed-
# line latency and CPU per delivered event.  Why: watch is how users
# follow an organization from a shell or a sidecar; many of them must not
# cost the server a fetch each per event.

source fan.sh
#      variable   full                              smoke
scaled FAN_PROCS  "${BENCH_FAN_PROCS:-1 4 8 16 64}" "1 4"   # watch processes

say "11/14 fan-out to $FAN_PROCS eventhub watch processes, ${FAN_RATE}/s, $FAN_EVENTS events; notifications with and without their events"
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
jadd fan_out "$(jlist "${json11[@]}")"
