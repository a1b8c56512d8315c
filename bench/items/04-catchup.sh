# 4 catchup: a library client catching up from CATCHUP and CATCHUP / 10
# events behind (events a second, peak memory), then pages of events read
# from random cursors with events_since against the plain SELECT it
# answers (same rows, same order, same columns), each row sent to pgbench,
# which receives it through libpq as any client does.  Why: a consumer
# that was away must catch up fast and in flat memory, and the function
# must cost next to nothing over the query.  1000 is max_events' default
# (a catch-up); 1 the common case of a consumer at the head.

#      variable  full   smoke
scaled CATCHUP   100000 5000   # events behind
scaled T_READ    4      1      # seconds per read point

small=$((CATCHUP / 10))
say "4/18 catch-up from $CATCHUP and $small events behind; events_since against a plain SELECT"
load_backlog catchup-big "$CATCHUP" '0 s'
load_backlog catchup-small "$small" '0 s'
q -c "VACUUM ANALYZE eventhub.events" >/dev/null
"$bin" catchup -o catchup-small -e "$small" >"$out/catchup_small.out" 2>&1 || fail "catch-up failed: $(cat "$out/catchup_small.out")"
"$bin" catchup -o catchup-big -e "$CATCHUP" >"$out/catchup_big.out" 2>&1 || fail "catch-up failed: $(cat "$out/catchup_big.out")"
eps=$(kv "$out/catchup_big.out" events_per_s)
eps_small=$(kv "$out/catchup_small.out" events_per_s)
rss_big=$(kv "$out/catchup_big.out" maxrss_kb)
rss_small=$(kv "$out/catchup_small.out" maxrss_kb)
rss_ratio=$(calc "$rss_big / $rss_small")
row "4. catch-up events/s, $CATCHUP behind" "$eps" ">= 50000" "$(verdict "$eps" 50000)"
row "4. peak RSS kB, $CATCHUP / $small behind" "$rss_big / $rss_small (x$rss_ratio)" "flat (<= 1.25x)" \
	"$(at_most "$rss_ratio" 1.25)"
read_json=()
for page in 1000 100 1; do
	printf '%s\n' "\\set r random(0, $((CATCHUP - page)))" \
		"SELECT * FROM eventhub.events_since('catchup-big', :r, $page);" >"$work/read_events_since_$page.sql"
	printf '%s\n' "\\set r random(0, $((CATCHUP - page)))" \
		"SELECT * FROM eventhub.events WHERE organization_id = 'catchup-big' AND revision > :r ORDER BY revision LIMIT $page;" \
		>"$work/read_select_$page.sql"
	T_TPS=$T_READ tps_rounds "read_$page" 1 "read_select_$page.sql" "read_events_since_$page.sql"
	tgt=
	[ "$page" = 1000 ] && tgt=0.95
	ratio_row "4. events_since/plain SELECT, pages of $page $(plural "$page" event), 1 client" \
		"${TPS[read_events_since_$page.sql]}" "${TPS[read_select_$page.sql]}" "$tgt"
	read_json+=("{\"page\": $page, \"events_since_pages_per_s\": ${TPS[read_events_since_$page.sql]}, \"select_pages_per_s\": ${TPS[read_select_$page.sql]}, \"ratio\": $RATIO}")
	[ "$page" = 1000 ] && read_ratio=$RATIO
done
jadd catch_up "{\"backlog\": $CATCHUP, \"events_per_s\": $eps, \"maxrss_kb\": $rss_big, \"small_backlog\": $small, \"small_events_per_s\": $eps_small, \"small_maxrss_kb\": $rss_small, \"rss_ratio\": $rss_ratio, \"read_ratio\": $read_ratio, \"reads\": $(jlist "${read_json[@]}")}"
