# 18 soak: SOAK_PROCS `eventhub watch --org fan-org` processes waiting on
# a hot standby (eventhub.wait_for_events(): no snapshot, no lock; the
# standby waker wakes them after replay) for SOAK_SECONDS while one pgbench
# client publishes to fan-org on the primary at SOAK_RATE a second, after
# (same run, same standby) the same publish with no consumer: (a) no
# consumer first, then (b) the watchers.  Each phase: pgbench's achieved
# rate and its latency average and p99 (the publish cost), the standby's
# replay lag sampled every 100 ms (as item 15), the standby's recovery
# conflicts (pg_stat_database_conflicts, every confl_* column) before and
# after, the sessions waiting in wait_for_events (wait_event 'Extension')
# sampled every 0.5 s, and the standby waker's CPU time per second.
#
# Conflicts are provoked, not hoped for: hot_standby_feedback stays off
# (the default), the standby's max_standby_streaming_delay is 1s (instead
# of 30s: a conflict shows within a second), and the script runs VACUUM
# eventhub.organization_states on the primary every 10 s in both phases
# (each publish updates fan-org's head: the cleanup of those rows, replayed,
# cancels any standby session whose snapshot still sees them after 1 s).
# A waiter that kept a snapshot or a transaction across its waits would be
# cancelled.  The run fails on any conflict counted on the standby during
# a phase, any "conflict with recovery" or error in the watchers' stderr or
# the standby's log, and any event missing, duplicated or reordered (every
# watcher's lines go through eh_bench stamp, as in item 15).  The figures'
# targets (throughput, publish latency, replay lag no worse than with no
# consumer) print MISS when missed.  Why: watchers moved to standbys must
# not hold replay back, cost the publishers, or be cancelled by it.

source fan.sh
#      variable      full                           smoke
scaled SOAK_SECONDS  "${BENCH_SOAK_SECONDS:-600}"  "${BENCH_SOAK_SECONDS:-20}"
SOAK_PROCS=64
SOAK_RATE=200
SOAK_EVENTS=$((SOAK_SECONDS * SOAK_RATE))
CONFL="confl_tablespace, confl_lock, confl_snapshot, confl_bufferpin, confl_deadlock"
declare -A SK=()

sbq() { q -h "$SB_HOST" -p "$SB_PORT" "$@"; }
# soak_conflicts: the standby's conflicts in database postgres, "tablespace/lock/snapshot/bufferpin/deadlock".
soak_conflicts() { sbq -F/ -c "SELECT $CONFL FROM pg_stat_database_conflicts WHERE datname = 'postgres'"; }
soak_conflict_sum() { echo "$1" | tr / '\n' | awk '{ s += $1 } END { print s }'; }
# soak_vacuums LOG: VACUUM eventhub.organization_states every 10 s, a line in LOG each.
soak_vacuums() {
	while :; do
		q -c "VACUUM eventhub.organization_states" && date -u +%T >>"$1"
		sleep 10
	done
}
# soak_waits FILE: every 0.5 s, the watchers' sessions on the standby
# waiting in wait_for_events and all of them, "waiting|all".
soak_waits() {
	"$PG_BINDIR/psql" -X -q -At -h "$SB_HOST" -p "$SB_PORT" >"$1" 2>&1 <<<"SELECT count(*) FILTER (WHERE wait_event_type = 'Extension' AND wait_event = 'Extension'), count(*) FROM pg_stat_activity WHERE application_name = 'fan-watch' \watch 0.5"
}
# soak_begin TAG: the counters before phase TAG, and its samplers started.
soak_begin() {
	local tag=$1
	SK[${tag}_confl0]=$(soak_conflicts)
	SK[${tag}_waker]=$(sbq -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'eventhub standby waker'")
	[ -n "${SK[${tag}_waker]}" ] || fail "soak: no standby waker on the standby"
	SK[${tag}_cpu0]=$(cpu_ns "${SK[${tag}_waker]}")
	SK[${tag}_t0]=$(date +%s.%N)
	lag_start "$out/lag_soak_$tag.txt"
	rm -f "$out/soak_vacuum_$tag.log"
	soak_vacuums "$out/soak_vacuum_$tag.log" &
	SK[${tag}_vpid]=$!
	soak_waits "$out/soak_waits_$tag.txt" &
	SK[${tag}_wpid]=$!
	bgpids+=("${SK[${tag}_vpid]}" "${SK[${tag}_wpid]}")
}
# soak_end TAG: the samplers stopped; the figures of phase TAG into SK.
soak_end() {
	local tag=$1 p secs
	for p in "${SK[${tag}_vpid]}" "${SK[${tag}_wpid]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${SK[${tag}_vpid]}" "${SK[${tag}_wpid]}"; do wait "$p" 2>/dev/null || true; done
	lag_stop "$out/lag_soak_$tag.txt"
	SK[${tag}_lag]="$LAG_MAX/$LAG_P99" SK[${tag}_lagmax]=$LAG_MAX SK[${tag}_lagp99]=$LAG_P99 SK[${tag}_lagn]=$LAG_N
	secs=$(calc "$(date +%s.%N) - ${SK[${tag}_t0]}")
	SK[${tag}_waker_ms_s]=$(calc "($(cpu_ns "${SK[${tag}_waker]}") - ${SK[${tag}_cpu0]}) / 1000000 / $secs")
	SK[${tag}_confl1]=$(soak_conflicts)
	SK[${tag}_vacuums]=$(wc -l <"$out/soak_vacuum_$tag.log" 2>/dev/null || echo 0)
	SK[${tag}_waits]=$(awk -F'|' '/^[0-9]+\|[0-9]+$/ { n++; w += $1; a += $2; if (min == "" || $1 < min) min = $1; if ($1 > max) max = $1 }
		END { if (n) printf "%.1f/%d/%d of %.1f, %d samples", w / n, min, max, a / n, n; else print "no samples" }' "$out/soak_waits_$tag.txt")
}
# soak_publish TAG LOG: pgbench's achieved rate, latency average and p99 (ms) of phase TAG.
soak_publish() {
	local tag=$1 log=$2
	"$bin" pctl "$out"/soak_pgb_"$tag".*[0-9] >"$out/soak_pctl_$tag.out" || fail "soak: no pgbench latencies for phase $tag"
	SK[${tag}_tps]=$(tps_of "$log") SK[${tag}_lat]=$(latency_of "$log") SK[${tag}_p99]=$(kv "$out/soak_pctl_$tag.out" p99)
}
# soak_check TAG: fails on a conflict counted during phase TAG.
soak_check() {
	local tag=$1 before=${SK[${1}_confl0]} after=${SK[${1}_confl1]}
	[ "$(soak_conflict_sum "$after")" = "$(soak_conflict_sum "$before")" ] ||
		fail "soak: recovery conflicts on the standby during phase $tag ($CONFL): $before before, $after after"
}
# soak_stderr: the watchers' stderr and the standby's log, lines of a
# recovery conflict or an error; fails on any.
soak_stderr() {
	local conf errs
	conf=$(cat "$out"/fan_"${SOAK_PROCS}"_soak_*.err "$work/standby/server.log" | grep -ci 'conflict with recovery') || true
	errs=$(cat "$out"/fan_"${SOAK_PROCS}"_soak_*.err | grep -Eci 'error|fatal|cancel') || true
	SK[stderr]="$conf/$errs"
	if [ "$conf" != 0 ] || [ "$errs" != 0 ]; then
		fail "soak: $conf lines of a conflict with recovery, $errs of an error: $(grep -hEi 'conflict with recovery|error|fatal|cancel' "$out"/fan_"${SOAK_PROCS}"_soak_*.err "$work/standby/server.log" | head -5)"
	fi
}

say "18/18 soak: $SOAK_PROCS eventhub watch processes waiting on a hot standby for $SOAK_SECONDS s at ${SOAK_RATE}/s published, after the same with none; VACUUM every 10 s"
fan_setup
standby_start "max_standby_streaming_delay = 1s" "hot_standby_feedback = off"
# (a) no consumer.
soak_begin a
pgb -c 1 -R "$SOAK_RATE" -t "$SOAK_EVENTS" -l --log-prefix="$out/soak_pgb_a" -f "$work/publish_fan-org.sql" >"$out/pub_soak_a.log" 2>&1 ||
	fail "pgbench failed: $(tail -5 "$out/pub_soak_a.log")"
soak_end a
soak_publish a "$out/pub_soak_a.log"
# (b) the watchers on the standby.
soak_begin b
FAN_RATE=$SOAK_RATE FAN_EVENTS=$SOAK_EVENTS FAN_PGB_ARGS="-l --log-prefix=$out/soak_pgb_b" \
	FAN_DSN="host=$SB_HOST port=$SB_PORT" FAN_BACKENDS=standby_backends fan_run "$SOAK_PROCS" soak
soak_end b
soak_publish b "$out/pub_fan_${SOAK_PROCS}_soak.log"
cluster_stop "$work/standby"
cp "$work/standby/server.log" "$out/soak_standby.log"
f=$out/fan_${SOAK_PROCS}_soak.out
for tag in a b; do
	what=$([ $tag = a ] && echo "(a) no consumer" || echo "(b) $SOAK_PROCS watch processes on the standby")
	row "18. soak $SOAK_SECONDS s, $what: publish tps; latency ms avg/p99" "$(printf %.1f "${SK[${tag}_tps]}"); ${SK[${tag}_lat]}/${SK[${tag}_p99]}"
	row "18. soak, $what: replay lag ms max/p99 of ${SK[${tag}_lagn]} samples (100 ms)" "${SK[${tag}_lag]}"
	row "18. soak, $what: standby conflicts ($(echo "$CONFL" | sed 's/confl_//g; s/, /\//g')) before -> after; VACUUMs" \
		"${SK[${tag}_confl0]} -> ${SK[${tag}_confl1]}; ${SK[${tag}_vacuums]}" "no new conflict" PASS
	row "18. soak, $what: watcher sessions in wait_for_events (wait_event Extension) mean/min/max of all" "${SK[${tag}_waits]}"
	row "18. soak, $what: standby waker CPU ms per second" "${SK[${tag}_waker_ms_s]}"
done
soak_check a
soak_check b
soak_stderr
order_check "$f" "soak: $SOAK_PROCS watchers on the standby"
row "18. soak, (b): publish-to-printed-line ms p50/p99/max; lines; missing/dup/reordered; conflict/error lines in stderr" \
	"$(kv "$f" p50)/$(kv "$f" p99)/$(kv "$f" max); $(kv "$f" count); $(kv "$f" missing)/$(kv "$f" duplicated)/$(kv "$f" reordered); ${SK[stderr]}" "0 missing, 0 conflicts" PASS
row "18. soak, (b): CPU us per delivered event (standby backend + watcher); cores at ${SOAK_RATE}/s to $SOAK_PROCS" \
	"$(calc "$FAN_CPU_S + $FAN_CPU_C") ($FAN_CPU_S + $FAN_CPU_C); $(calc "($FAN_CPU_S + $FAN_CPU_C) * $SOAK_PROCS * $SOAK_RATE / 1000000")"
ratio_row "18. soak: publish throughput, (b) $SOAK_PROCS watchers on the standby / (a) none" "${SK[b_tps]}" "${SK[a_tps]}" 0.99
row "18. soak: publish latency p99 ms, (b) / (a)" "${SK[b_p99]} / ${SK[a_p99]}" "<= 1.5 x (a)" "$(at_most "${SK[b_p99]}" "$(calc "${SK[a_p99]} * 1.5")")"
row "18. soak: replay lag p99 ms, (b) / (a)" "${SK[b_lagp99]} / ${SK[a_lagp99]}" "<= (a) + 10 ms" "$(at_most "${SK[b_lagp99]}" "$(calc "${SK[a_lagp99]} + 10")")"
soak_json() { # soak_json TAG
	echo "{\"phase\": \"$1\", \"watchers\": $([ "$1" = a ] && echo 0 || echo "$SOAK_PROCS"), \"seconds\": $SOAK_SECONDS, \"rate_per_s\": $SOAK_RATE, \"publish_tps\": ${SK[${1}_tps]}, \"publish_latency_avg_ms\": ${SK[${1}_lat]}, \"publish_latency_p99_ms\": ${SK[${1}_p99]}, \"replay_lag_max_ms\": ${SK[${1}_lagmax]}, \"replay_lag_p99_ms\": ${SK[${1}_lagp99]}, \"conflicts_before\": \"${SK[${1}_confl0]}\", \"conflicts_after\": \"${SK[${1}_confl1]}\", \"vacuums\": ${SK[${1}_vacuums]}, \"waker_cpu_ms_per_s\": ${SK[${1}_waker_ms_s]}$([ "$1" = b ] && soak_json_b)}"
}
soak_json_b() {
	local f=$out/fan_${SOAK_PROCS}_soak.out
	echo ", \"lines\": $(kv "$f" count), \"p50_ms\": $(kv "$f" p50), \"p99_ms\": $(kv "$f" p99), \"max_ms\": $(kv "$f" max), \"missing\": $(kv "$f" missing), \"duplicated\": $(kv "$f" duplicated), \"reordered\": $(kv "$f" reordered), \"cpu_us_per_event_server\": $FAN_CPU_S, \"cpu_us_per_event_client\": $FAN_CPU_C"
}
jadd soak "$(jlist "$(soak_json a)" "$(soak_json b)")"
