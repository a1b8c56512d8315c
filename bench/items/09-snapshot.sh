# 9 snapshot: reading an organization's state whole.  Two organizations of
# SNAP_SMALL and SNAP_BIG entities (one event each, so that the snapshot
# and a plain SELECT of the organization's events return the same rows),
# published with publish_event in transactions of 1,000, in a database of
# their own.  Each round reads them once with each reader: the plain
# SELECT of the same rows and columns streamed to the client (the
# baseline), the same in the snapshot's order (ORDER BY event_type,
# entity_id), and the library's snapshot (eh_subscribe with
# EH_FROM_SNAPSHOT; when this build of eh_bench has none, the SQL functions
# called directly as the library calls them): with pages of 1,000 and of
# 10,000.  (snapshot_entities sets jit = off itself: a reader with jit off
# would measure the same thing.)
# Peak memory: the server backend's RssAnon (sampled every 10 ms by
# eh_bench) and the client's maxrss, the largest over the rounds.
# Then the retention pass over the kept entities: compaction on, every event
# expired, nothing removable.
# Why: a new consumer starts from a snapshot; it must read about as fast as
# a SELECT, in memory that does not grow with the organization.

#      variable    full    smoke
scaled SNAP_SMALL  100000  2000     # entities of the two organizations
scaled SNAP_BIG    1000000 20000
scaled SNAP_ROUNDS 3       1

# snap_build ORG N: N entities of ORG, 1,000 publishes per transaction.
# Not more: every publish updates the organization's head row, and the
# versions of that row one transaction leaves pile up in one HOT chain that
# each later publish in it walks, so a transaction's publishes to one
# organization cost O(n^2) (10,000 per transaction run at a third of the
# rate of 1,000).
snap_build() {
	local org=$1 n=$2 a
	for ((a = 1; a <= n; a += 1000)); do
		echo "SELECT count(eventhub.publish_event('$org', (ARRAY['API', 'Plugin', 'Route', 'Service'])[g % 4 + 1], 'CREATE', 'e-' || g, NULL, jsonb_build_object('context', '/weather', 'version', 'v2', 'upstream', 'http://weather.internal:8080', 'n', g))) FROM generate_series($a, $((a + 999 < n ? a + 999 : n))) g;"
	done | PGDATABASE=snapshots q >/dev/null
}
# snap_read SIZE N READER ROUND: one read of snap-SIZE (N entities) with
# READER; adds its rate and memory to SNAP.
snap_read() {
	local size=$1 n=$2 m=$3 r=$4 args rmode f
	args=(-o "snap-$size" -e "$n")
	case $m in
	select-ordered) args+=(-s) ;;
	*-10000) args+=(-P 10000) ;;
	esac
	rmode=${m%-10000}
	f=$out/snap_${size}_${m}_$r.out
	PGDATABASE=snapshots "$bin" "${rmode%-ordered}" "${args[@]}" >"$f" 2>&1 ||
		fail "eh_bench $m of snap-$size failed: $(cat "$f")"
	SNAP[$size.$m.rps]+=" $(kv "$f" rows_per_s)"
	SNAP[$size.$m.backend]+=" $(kv "$f" backend_rss_anon_kb)"
	SNAP[$size.$m.client]+=" $(kv "$f" maxrss_kb)"
}
# largest V...: the greatest of the values.
largest() { printf '%s\n' "$@" | sort -g | tail -1; }

say "9/18 snapshots of $SNAP_SMALL and $SNAP_BIG entities against a plain SELECT ($SNAP_ROUNDS rounds); retention over kept entities"
# Retention of 1 s with compaction on, in force before the build, so that
# the worker's pass at this reload (over the postgres database) overlaps
# the build and not the measurements.  Two events of one entity there
# make sure it has something to delete, so it logs the end of its pass.
skip=$(retention_passes)
q -c "SELECT eventhub.publish_event('bench-shared', 'API', 'UPDATE', 'superseded', NULL, '{}') FROM generate_series(1, 2)" >/dev/null
sleep 1.1
reload_conf "ALTER SYSTEM SET eventhub.compaction = on" "ALTER SYSTEM SET eventhub.retention = '1s'"
q -c "CREATE DATABASE snapshots" >/dev/null
PGDATABASE=snapshots q -c "CREATE EXTENSION eventhub" >/dev/null
t_build=$SECONDS
# The two side by side (each organization's publishes are serial anyway).
snap_build snap-small "$SNAP_SMALL" &
spid=$!
bgpids+=("$spid")
snap_build snap-big "$SNAP_BIG" || fail "publishing the entities of snap-big failed"
wait "$spid" || fail "publishing the entities of snap-small failed"
t_build=$((SECONDS - t_build))
PGDATABASE=snapshots q -c "VACUUM ANALYZE eventhub.events" -c CHECKPOINT >/dev/null
worker_pass_logged() { [ "$(retention_passes)" -gt "$skip" ]; }
wait_until "the worker's retention pass at the reload" worker_pass_logged
# The snapshot, with pages of 1,000 and of 10,000.
usage=$("$bin" 2>&1 || true)
if [[ $usage == *"eh_bench snapshot "* ]]; then
	lib=snapshot
else
	lib=snapshot-sql
	say "this eh_bench has no library snapshot mode: the snapshot rows are the SQL functions called directly"
fi
readers="select select-ordered $lib $lib-10000"
declare -A SNAP
json9=()
for size in small big; do
	[ $size = small ] && n=$SNAP_SMALL || n=$SNAP_BIG
	for ((r = 0; r < SNAP_ROUNDS; r++)); do
		for m in $readers; do
			snap_read "$size" "$n" "$m" "$r"
		done
	done
	for m in $readers; do
		# shellcheck disable=SC2086
		SNAP[$size.$m.rps]=$(median ${SNAP[$size.$m.rps]})
		# shellcheck disable=SC2086
		SNAP[$size.$m.backend]=$(largest ${SNAP[$size.$m.backend]})
		# shellcheck disable=SC2086
		SNAP[$size.$m.client]=$(largest ${SNAP[$size.$m.client]})
	done
	sel=${SNAP[$size.select.rps]}
	for m in $readers; do
		[ $m = select ] && continue
		tgt=
		[ $m = "$lib" ] && tgt=0.9
		RATIO=$(calc "${SNAP[$size.$m.rps]} / $sel")
		row "9. $m/plain SELECT rows/s, $n entities" "$RATIO (${SNAP[$size.$m.rps]}/$sel rows/s)" "${tgt:+>= $tgt}" \
			"${tgt:+$(verdict "$RATIO" "$tgt")}"
	done
	members=()
	for m in $readers; do
		members+=("\"$m\": {\"rows_per_s\": ${SNAP[$size.$m.rps]}, \"backend_rss_anon_kb\": ${SNAP[$size.$m.backend]}, \"client_maxrss_kb\": ${SNAP[$size.$m.client]}}")
	done
	json9+=("\"$size\": {\"entities\": $n, $(IFS=,; echo "${members[*]}")}")
done
for m in $readers; do
	for w in backend client; do
		b=${SNAP[big.$m.$w]} s=${SNAP[small.$m.$w]}
		RATIO=$(calc "$b / $s")
		tgt="" ver=""
		if [ "$m" = select ] || [ "$m" = "$lib" ]; then
			tgt="flat (<= 1.25x)"
			ver=$(at_most "$RATIO" 1.25)
		fi
		row "9. $m peak $([ $w = backend ] && echo "server backend RssAnon" || echo "client RSS") kB, $SNAP_BIG / $SNAP_SMALL entities" \
			"$b / $s (x$RATIO)" "$tgt" "$ver"
	done
done
# One maintenance pass with nothing to delete, over every kept entity.
kept=$(PGDATABASE=snapshots q -c "SELECT count(*) FROM eventhub.events")
t0=$(date +%s.%N)
deleted=$(PGDATABASE=snapshots q -c "SELECT eventhub.run_maintenance()") || fail "run_maintenance failed"
secs=$(calc "$(date +%s.%N) - $t0")
[ "$(PGDATABASE=snapshots q -c "SELECT count(*) FROM eventhub.events")" = "$kept" ] ||
	fail "retention with compaction on deleted kept entities"
row "9. one retention pass over $kept kept entities, nothing to delete (compaction on), seconds" "$secs ($deleted deleted)"
reload_conf "ALTER SYSTEM RESET eventhub.compaction" "ALTER SYSTEM SET eventhub.retention = '30d'"
jadd snapshots "{\"library\": $([ "$lib" = snapshot ] && echo true || echo false), \"build_seconds\": $t_build, $(IFS=,; echo "${json9[*]}"), \"retention_pass\": {\"kept\": $kept, \"deleted\": $deleted, \"seconds\": $secs}}"
