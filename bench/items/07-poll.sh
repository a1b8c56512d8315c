# 7 poll: delivery to POLLERS library subscribers that do not LISTEN and
# poll every 5000 and every 100 ms: delivery latency and polls a second.
# Why: where LISTEN is not available (a transaction pooler), polling is
# the fallback; its delay and its load on the server are what it costs.

#      variable        full smoke
scaled POLLERS         16   4    # subscribers
scaled POLL_SLOW_RATE  20   10   # publishes a second, polls every 5000 ms
scaled POLL_SLOW_T     8    1    # and seconds of publishing
scaled POLL_FAST_RATE  50   20   # the same, polls every 100 ms
scaled POLL_FAST_T     4    1

publish_script publish_poll-org.sql "'poll-org'"
say "7/18 poll fallback, $POLLERS pollers without LISTEN, 5000 and 100 ms"
json7=()
for spec in "5000 $POLL_SLOW_RATE $POLL_SLOW_T" "100 $POLL_FAST_RATE $POLL_FAST_T"; do
	read -r poll rate t <<<"$spec"
	sub_run "poll_$poll" poll-org "$POLLERS" 0 "$poll" $((poll * 2 / 1000 + 10)) -c 1 -R "$rate" -T "$t" -f "$work/publish_poll-org.sql"
	f=$out/sub_poll_$poll.out
	row "7. poll ${poll} ms: delivery ms p50/p99/max; polls/s" \
		"$(kv "$f" p50)/$(kv "$f" p99)/$(kv "$f" max); $(kv "$f" polls_per_s)"
	json7+=("{\"poll_interval_ms\": $poll, \"pollers\": $POLLERS, \"events_delivered\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p99_ms\": $(kv "$f" p99), \"max_ms\": $(kv "$f" max), \"polls_per_s\": $(kv "$f" polls_per_s)}")
done
jadd poll_fallback "$(jlist "${json7[@]}")"
