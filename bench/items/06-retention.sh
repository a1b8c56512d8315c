# 6 retention: the maintenance worker deletes RETENTION expired events
# while publishers publish at a steady rate; rows deleted a second, and
# publish p99 during the cleanup against p99 just before it.  Points: the
# defaults, a gentle batch and delay, three runs with fsync on (where the
# disk is what publishers and the worker share), and the same with the
# worker on a CPU of its own.  Why: retention must not stall publishers.

#      variable     full   smoke
scaled RETENTION    500000 20000   # expired events
scaled RET_CLIENTS  2      2       # publishers
scaled RET_RATE     500    100     # publishes a second
scaled RET_BASE_S   20     2       # seconds of baseline before the cleanup

# cluster_pids: the postmaster and its children (from /proc: no procps).
cluster_pids() {
	local pm f st fields
	pm=$(head -1 "$PGDATA/postmaster.pid")
	echo "$pm"
	for f in /proc/[0-9]*/stat; do
		st=$(<"$f") 2>/dev/null || continue
		read -r -a fields <<<"${st##*) }"
		if [ "${fields[1]}" = "$pm" ]; then f=${f#/proc/} && echo "${f%/stat}"; fi
	done
	return 0
}
# pin_apart WORKER_PID: the worker on the last CPU, the rest of the cluster
# on the others (the postmaster too, so that a backend it forks later
# inherits its set; pgbench is started on them).
pin_apart() {
	local last=$(($(nproc) - 1)) p
	for p in $(cluster_pids); do
		# A process that ended meanwhile is no failure.
		[ "$p" = "$1" ] || taskset -a -p -c "0-$((last - 1))" "$p" >/dev/null 2>&1 || [ ! -d "/proc/$p" ] || return 1
	done
	taskset -p -c "$last" "$1" >/dev/null
}
# pin_restore: every cluster process back on every CPU.
pin_restore() {
	local p
	for p in $(cluster_pids); do
		taskset -a -p -c "0-$(($(nproc) - 1))" "$p" >/dev/null 2>&1 || true
	done
}
# retention_point NAME LABEL BATCH DELAY [pinned]: the worker deletes a
# backlog with eventhub.cleanup_batch_size BATCH and
# eventhub.cleanup_batch_delay DELAY while publishers publish at a steady
# rate; publish p99 during the cleanup against p99 just before it.  The
# publishers are one pgbench run whose sessions stay connected throughout,
# as a controller's do: a new session's first transactions (catalog caches,
# PREPARE) are not what a publish costs, and a pgbench restarted every few
# seconds would put them in both windows.  With "pinned", the worker runs
# on a CPU of its own for both windows (pin_apart).
retention_point() {
	local name=$1 label=$2 batch=$3 delay=$4 pinned=${5:-} logdir="$out/retlogs-$1" skip line t_base t_reload t_done deleted xacts secs rps b99 c99 pr ppid wpid
	say "6/18 retention of $RETENTION expired events ($label), publish p99 with and without it"
	# In force before the backlog goes in: the worker's cycle at this reload
	# keeps it (the previous point left retention at 1h).
	reload_conf "ALTER SYSTEM SET eventhub.retention = '30d'" "ALTER SYSTEM SET eventhub.cleanup_batch_size = $batch" \
		"ALTER SYSTEM SET eventhub.cleanup_batch_delay = $delay"
	load_backlog "retention-$name" "$RETENTION" '1 day'
	q -c "VACUUM ANALYZE eventhub.events" -c CHECKPOINT >/dev/null
	mkdir -p "$logdir"
	if [ -n "$pinned" ]; then
		wpid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'")
		[ -n "$wpid" ] || fail "no eventhub maintenance worker to pin"
		pin_apart "$wpid" || fail "could not pin the cluster's processes"
	fi
	# Runs until stopped below (its bound only ends a run that hangs).
	pgb -c "$RET_CLIENTS" -j "$(pgjobs "$RET_CLIENTS")" -R "$RET_RATE" -T $((WAIT_LIMIT * 2)) -l \
		--log-prefix="$logdir/pub" -f "$work/publish_own.sql" >"$logdir/pub.out" 2>&1 &
	ppid=$!
	bgpids+=("$ppid")
	[ -z "$pinned" ] || taskset -a -p -c "0-$(($(nproc) - 2))" "$ppid" >/dev/null || fail "could not pin pgbench"
	wait_until "the publishers of the retention point to connect" pgbench_connected "$RET_CLIENTS"
	# The baseline: RET_BASE_S seconds of the same sessions just before the
	# cleanup, from their second second on.
	sleep 1
	t_base=$(date +%s.%N)
	sleep "$RET_BASE_S"
	skip=$(retention_passes)
	t_reload=$(q -c "ALTER SYSTEM SET eventhub.retention = '1h'" -c "SELECT pg_reload_conf()" \
		-c "SELECT extract(epoch FROM clock_timestamp())" | tail -1)
	# Until the worker logs the pass, with the publishers running all along;
	# looking once a second (a look forks three processes: looking 20
	# times a second took a fifth of a core from the publishers).
	line=
	retention_logged() {
		line=$(grep 'eventhub retention deleted' "$work/cluster/server.log" | tail -n +$((skip + 1)) | head -1 || true)
		[ -n "$line" ] || ! kill -0 "$ppid" 2>/dev/null
	}
	WAIT_STEP=1 wait_until "the worker to log the retention pass" retention_logged
	[ -n "$line" ] || fail "pgbench ended during retention: $(tail -3 "$logdir/pub.out")"
	# pgbench ends on SIGTERM without writing what it buffered (under a
	# second of transactions, all after the cleanup); pctl skips a line cut short.
	sleep 3
	kill -TERM "$ppid" 2>/dev/null || true
	wait "$ppid" 2>/dev/null || true
	[ -n "$pinned" ] && pin_restore
	t_done=$(date -u -d "$(echo "$line" | awk '{ print $1, $2 }') UTC" +%s.%N)
	deleted=$(echo "$line" | sed -n 's/.*retention deleted \([0-9]*\) expired events in \([0-9]*\) trans.*/\1/p')
	xacts=$(echo "$line" | sed -n 's/.*retention deleted \([0-9]*\) expired events in \([0-9]*\) trans.*/\2/p')
	# Compaction (on by default) keeps each entity's latest event: one per entity.
	[ "$(q -c "SELECT count(*) = count(DISTINCT entity_id) FROM eventhub.events WHERE organization_id = 'retention-$name'")" = t ] ||
		fail "retention left superseded events of retention-$name behind"
	secs=$(calc "$t_done - $t_reload")
	rps=$(calc "$deleted / $secs")
	"$bin" pctl -f "$t_base" -u "$t_reload" "$logdir"/pub.*[0-9] >"$out/ret_base_$name.out" || fail "no baseline pgbench latencies"
	"$bin" pctl -f "$t_reload" -u "$t_done" "$logdir"/pub.*[0-9] >"$out/ret_clean_$name.out" ||
		fail "no pgbench latencies during cleanup"
	b99=$(kv "$out/ret_base_$name.out" p99)
	c99=$(kv "$out/ret_clean_$name.out" p99)
	pr=$(calc "$c99 / $b99")
	row "6. retention rows/s deleted, $label ($deleted in $xacts xacts, $secs s)" "$(printf %.0f "$rps")"
	if [ -n "$pinned" ]; then
		# A diagnosis, not the product as users run it: no target.
		row "6. publish p99 during cleanup / without, $label, ${RET_RATE}/s" "$pr ($c99/$b99 ms)"
	else
		row "6. publish p99 during cleanup / without, $label, ${RET_RATE}/s" "$pr ($c99/$b99 ms)" "<= 2" "$(at_most "$pr" 2)"
	fi
	jadd "retention_$name" "{\"backlog\": $RETENTION, \"batch_size\": $batch, \"batch_delay_ms\": $delay, \"worker_on_own_cpu\": $([ -n "$pinned" ] && echo true || echo false), \"deleted\": $deleted, \"transactions\": $xacts, \"seconds\": $secs, \"rows_per_s\": $rps, \"publish_rate_per_s\": $RET_RATE, \"clients\": $RET_CLIENTS, \"p99_ms_without\": $b99, \"p99_ms_during\": $c99, \"p99_ratio\": $pr, \"samples_without\": $(kv "$out/ret_base_$name.out" count), \"samples_during\": $(kv "$out/ret_clean_$name.out" count)}"
}

retention_point default "defaults (batch 10000, the worker paces itself)" 10000 -1
retention_point gentle "batch 2000, delay 50ms" 2000 50
# Where the disk is what publishers and the worker share: three runs.
reload_conf "ALTER SYSTEM SET fsync = on"
for k in 1 2 3; do
	retention_point "fsync_on_$k" "defaults, fsync on, run $k of 3" 10000 -1
done
# The same with the worker on a CPU of its own: what is left when the
# publishers never share a CPU with it (docs/performance.md).
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	retention_point fsync_on_pinned "defaults, fsync on, worker on a CPU of its own" 10000 -1 pinned
else
	say "6/18 skipping the pinned retention point: it needs taskset and 2 CPUs"
fi
reload_conf "ALTER SYSTEM RESET fsync"
reload_conf "ALTER SYSTEM RESET eventhub.cleanup_batch_size" "ALTER SYSTEM RESET eventhub.cleanup_batch_delay"
