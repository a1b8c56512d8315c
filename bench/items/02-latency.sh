# 2 latency: publish-to-callback latency of library subscribers (eh_bench
# sub: one eh_client each, listening), at a steady publish rate, for a few
# numbers of subscribers of one organization; and the events_since queries
# each delivered event costs.  Why: the delay a consumer sees is the
# product's main promise; a wake-up that brings several events should cost
# one query, not one each.  With gnuplot, the latencies' CDF as a plot.

#      variable  full      smoke
scaled LAT_SUBS  "1 16 64" "1 4 8"   # subscribers
scaled LAT_RATE  200       100       # events a second
scaled LAT_T     5         1         # seconds of publishing

publish_script publish_lat-org.sql "'lat-org'"
say "2/18 publish-to-callback latency, $LAT_SUBS subscribers, ${LAT_RATE}/s for ${LAT_T} s"
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
	[ -n "$tgt" ] && ver=$(at_most "$p99" "$tgt") && tgt="p99 <= $tgt ms"
	row "2. publish-to-callback ms p50/p95/p99/max, $n $(plural "$n" subscriber) (${achieved}/s published)" \
		"$(kv "$f" p50)/$(kv "$f" p95)/$p99/$(kv "$f" max)" "$tgt" "$ver"
	# Queries per delivered event: below 1 when a wake-up brings several.
	fpe=$(calc "$(kv "$f" fetches) / $(kv "$f" count)")
	row "2. events_since queries per event delivered, $n $(plural "$n" subscriber)" "$fpe"
	json2+=("{\"subscribers\": $n, \"rate_per_s\": $LAT_RATE, \"achieved_rate_per_s\": $achieved, \"events_delivered\": $(kv "$f" count), \"fetches\": $(kv "$f" fetches), \"notifications\": $(kv "$f" notifications), \"p50_ms\": $(kv "$f" p50), \"p95_ms\": $(kv "$f" p95), \"p99_ms\": $p99, \"max_ms\": $(kv "$f" max)}")
done
jadd callback_latency "$(jlist "${json2[@]}")"

if command -v gnuplot >/dev/null 2>&1; then
	plot=()
	for n in $LAT_SUBS; do
		sort -n "$out/lat_listen_$n.txt" >"$out/cdf_$n.txt"
		plot+=("'$out/cdf_$n.txt' using 1:((\$0 + 1) / $(wc -l <"$out/cdf_$n.txt")) with lines title '$n subscribers'")
	done
	gnuplot >/dev/null 2>&1 <<GNUPLOT || true
set terminal png size 900,600
set output '$out/latency.png'
set title 'eventhub publish-to-callback latency (CDF, ${LAT_RATE} events/s)'
set xlabel 'latency (ms)'
set ylabel 'fraction of events'
set logscale x
set key bottom right
set grid
plot $(IFS=,; echo "${plot[*]}")
GNUPLOT
fi
