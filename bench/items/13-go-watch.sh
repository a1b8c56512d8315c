# 13 go-watch: the fan-out of item 11 (bench/fan.sh) with the Go package's
# watchers (bench/gowatch: the CLI's lines, from a Watcher) against as many
# `eventhub watch` processes, alternating which goes first, notifications
# carrying their events (the default: both deliver them without a fetch).
# Why: a controller written in Go follows organizations with the package;
# it should deliver as fast as the C client, at a comparable CPU cost.

source fan.sh
#      variable      full                                 smoke
scaled GO_FAN_PROCS  "${BENCH_GO_FAN_PROCS:-1 16 64}"     "1 4"   # watchers of each kind

say "13/18 Go watchers against eventhub watch processes: $GO_FAN_PROCS, ${FAN_RATE}/s, $FAN_EVENTS events"
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
jadd go_fan_out "$(jlist "${json13[@]}")"
