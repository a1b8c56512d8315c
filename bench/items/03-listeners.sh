# 3 listeners: publish throughput (8 clients) beside LISTENERS connections
# that LISTEN eventhub, against beside none, and apart from that beside as
# many idle connections that do not listen.  Why: every NOTIFY is queued
# for every listener of the database, so idle listeners must not slow
# publishers down; the idle connections tell the cost of the connections
# from the cost of listening.  Rounds: ROUNDS, points of T_TPS seconds.

#      variable  full smoke
scaled LISTENERS 64   8

# conns_point LOG LISTEN: a publish point beside LISTENERS connections that
# LISTEN eventhub (LISTEN=1) or sit idle (0); adds the notifications they
# consumed to CONSUMED.
conns_point() {
	local lpid
	rm -f "$work/ctl" "$work/ready"
	mkfifo "$work/ctl"
	"$bin" listen -n "$LISTENERS" -l "$2" -r "$work/ready" <"$work/ctl" >"$1.out" 2>"$1.err" &
	lpid=$!
	bgpids+=("$lpid")
	exec 3>"$work/ctl"
	wait_file "$work/ready" "$lpid" || fail "listeners did not get ready: $(cat "$1.err")"
	tps_point "$1.log" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
	exec 3>&-
	wait "$lpid" || fail "eh_bench listen failed: $(cat "$1.err")"
	CONSUMED=$((CONSUMED + $(kv "$1.out" notifications)))
}

say "3/18 publish throughput with 0 and $LISTENERS listening or idle connections ($ROUNDS interleaved rounds)"
without=() with=() idle=() r_with=() r_idle=() CONSUMED=0
for ((r = 0; r < ROUNDS; r++)); do
	# Which goes first alternates: a later point runs on a larger table.
	if ((r % 2 == 0)); then
		tps_point "$out/notify_0_$r.log" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
		conns_point "$out/notify_idle_$r" 0
		conns_point "$out/notify_n_$r" 1
	else
		conns_point "$out/notify_n_$r" 1
		conns_point "$out/notify_idle_$r" 0
		tps_point "$out/notify_0_$r.log" -c 8 -j 2 -T "$T_TPS" -f "$work/publish_own.sql"
	fi
	without+=("$(tps_of "$out/notify_0_$r.log")")
	idle+=("$(tps_of "$out/notify_idle_$r.log")")
	with+=("$(tps_of "$out/notify_n_$r.log")")
	# Paired within the round: the machine's drift from round to round
	# (15% here between 3 s points) cancels.
	r_with+=("$(calc "${with[r]} / ${without[r]}")")
	r_idle+=("$(calc "${idle[r]} / ${without[r]}")")
done
t0=$(median "${without[@]}")
ti=$(median "${idle[@]}")
tn=$(median "${with[@]}")
rw=$(median "${r_with[@]}")
ri=$(median "${r_idle[@]}")
row "3. publish tps with $LISTENERS idle listeners / with none, 8 clients (median of paired rounds; range)" \
	"$rw ($(spread "${r_with[@]}"); $(printf %.0f "$tn")/$(printf %.0f "$t0") tps)" ">= 0.9" "$(verdict "$rw" 0.9)"
row "3. (apart) publish tps with $LISTENERS idle connections that do not listen / with none" \
	"$ri ($(spread "${r_idle[@]}"); $(printf %.0f "$ti")/$(printf %.0f "$t0") tps)"
jadd notify_cost "{\"clients\": 8, \"listeners\": $LISTENERS, \"tps_without\": $t0, \"tps_with\": $tn, \"tps_with_idle_connections\": $ti, \"ratio\": $rw, \"ratio_idle_connections\": $ri, \"paired_ratios\": $(jlist "${r_with[@]}"), \"notifications_consumed\": $CONSUMED}"
