# 14 go-publish: publish throughput at 1 and 8 clients, each to an
# organization of its own: bench/gopublish (the Go package's Publish on one
# pgx connection per client, in a process of its own, no correlation id)
# against pgbench -M prepared sending the same statement (publish_event),
# and pgbench with publish_event_result (what Publish sends with a
# correlation id: what the result form costs).  ROUNDS interleaved rounds
# of T_TPS seconds; medians.  Target: Go at 0.9 of pgbench or better at 1
# client.  Why: a controller publishes with the Go package; its overhead
# over the statement it sends should be small.

# What the Go package's Publish sends without a correlation id
# (gopub_event.sql) and with one (gopub_result.sql), as pgbench sends it.
echo "SELECT eventhub.publish_event('gopub-' || :client_id, 'API', 'UPDATE', 'weather-api', NULL," \
	"'$data'::jsonb, coalesce(NULL::timestamptz, pg_catalog.now())), false;" >"$work/gopub_event.sql"
echo "SELECT revision, replayed FROM eventhub.publish_event_result('gopub-' || :client_id, 'API', 'UPDATE', 'weather-api', NULL," \
	"'$data'::jsonb, coalesce(NULL::timestamptz, pg_catalog.now()));" >"$work/gopub_result.sql"

# gopublish_point LOG CLIENTS: one throughput point of bench/gopublish.
gopublish_point() {
	"$work/gopublish" -conninfo "application_name=gopublish" -clients "$2" -seconds "$T_TPS" -prefix gopub- -data "$data" \
		>"$1" 2>&1 || fail "gopublish failed: $(tail -5 "$1")"
}

say "14/18 Go publish throughput against pgbench ($ROUNDS interleaved rounds of ${T_TPS} s per point)"
json14=()
for c in 1 8; do
	tps_rounds "gopub_$c" "$c" gopub_event.sql gopub_result.sql gopublish_point
	t_ev=${TPS[gopub_event.sql]} t_res=${TPS[gopub_result.sql]} t_go=${TPS[gopublish_point]}
	label="$c $(plural "$c" client), organization per client"
	# A target at 1 client, where a publish's time is the round trip a
	# controller waits for.  At 8 on 2 cores the client's CPU competes
	# with the server's, and Go's network I/O costs about three times
	# libpq's per publish (docs/performance.md): no target there.
	ratio_row "14. Go Publish/pgbench, the same statement, $label" "$t_go" "$t_ev" "$([ "$c" = 1 ] && echo 0.9)"
	r_go=$RATIO
	ratio_row "14. publish_event_result/publish_event (pgbench), $label" "$t_res" "$t_ev"
	json14+=("{\"clients\": $c, \"go_tps\": $t_go, \"pgbench_event_tps\": $t_ev, \"pgbench_result_tps\": $t_res, \"go_ratio\": $r_go, \"result_ratio\": $RATIO}")
done
jadd go_publish "$(jlist "${json14[@]}")"
