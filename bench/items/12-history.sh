# 12 history: the cost of a long history.  In a database of its own,
# HIST_ORGS organizations with each size of HIST_SIZES kept events in all,
# and one more, "reader", with HIST_READER events spread evenly among them
# (loaded directly: what publish_event writes, a generated correlation id
# being the event's version id); beside them bench.bare_events with the
# same rows, columns and indexes.  Each round: publish throughput (4
# clients, a random organization of the HIST_ORGS each time, correlation id
# NULL) and a bare INSERT of the same row (a random correlation id), HIST_T
# seconds each after a second of warm-up (the other's pages leave
# shared_buffers), alternating which goes first.  Then pages of 100 of
# reader's events with events_since, the same organization and pages at
# both sizes: from random cursors among its last 1,000 events (a consumer
# near the head) and among all (catching up).  Why: retention keeps
# history for days; publishing and reading near the head must not slow
# down as it grows.  It runs last.

#      variable     full            smoke
scaled HIST_ORGS    1000            100
scaled HIST_SIZES   "10000 2000000" "2000 20000"   # kept events
scaled HIST_READER  10000           1000           # events of organization reader
scaled HIST_T       5               1              # seconds per point
scaled HIST_ROUNDS  3               1

# hist_load N: N kept events and reader's in place of the previous ones.
hist_load() {
	local n=$1
	PGDATABASE=history q >/dev/null <<SQL || fail "loading $n events failed"
SET eventhub.protect_tables = off;
TRUNCATE eventhub.events, eventhub.organization_states, bench.bare_events;
INSERT INTO eventhub.events
SELECT CASE WHEN g % k = 0 THEN 'reader' ELSE 'h-' || (g % $HIST_ORGS) END,
       row_number() OVER (PARTITION BY CASE WHEN g % k = 0 THEN 'reader' ELSE 'h-' || (g % $HIST_ORGS) END ORDER BY g),
       v, now(), now(), 'API', 'UPDATE', 'api-' || (g % 50), v::text, '$data', NULL
  FROM (SELECT g, gen_random_uuid() AS v, ($n + $HIST_READER) / $HIST_READER AS k
          FROM generate_series(0, $n + $HIST_READER - 1) g) s;
UPDATE eventhub.events SET transaction_first_revision = revision;
INSERT INTO eventhub.organization_states (organization_id, version_id, revision, updated_at)
SELECT DISTINCT ON (organization_id) organization_id, version_id, revision, now()
  FROM eventhub.events ORDER BY organization_id, revision DESC;
INSERT INTO bench.bare_events SELECT * FROM eventhub.events;
SELECT setval('bench.hist_revision', $n + $HIST_READER);
VACUUM ANALYZE eventhub.events;
VACUUM ANALYZE eventhub.organization_states;
VACUUM ANALYZE bench.bare_events;
CHECKPOINT;
SQL
}
# hist_rounds N: HIST_ROUNDS rounds of publish and bare INSERT with N kept
# events; sets PUBS, BARES and PAIRS (their ratio) per round.
hist_rounds() {
	local n=$1 r f t
	PUBS=() BARES=() PAIRS=()
	for ((r = 0; r < HIST_ROUNDS; r++)); do
		for f in $( ((r % 2 == 0)) && echo "publish bare" || echo "bare publish"); do
			for t in warm "$r"; do
				PGDATABASE=history PGOPTIONS="$([ $f = bare ] && echo "-c eventhub.protect_tables=off")" \
					tps_point "$out/hist_${n}_${f}_$t.log" -c 4 -j 2 -T "$([ $t = warm ] && echo 1 || echo "$HIST_T")" \
					-f "$work/hist_$f.sql"
			done
		done
		PUBS+=("$(tps_of "$out/hist_${n}_publish_$r.log")")
		BARES+=("$(tps_of "$out/hist_${n}_bare_$r.log")")
		PAIRS+=("$(calc "${PUBS[r]} / ${BARES[r]}")")
	done
}

say "12/18 publish and read with $HIST_SIZES kept events of $HIST_ORGS organizations, against a bare INSERT ($HIST_ROUNDS rounds of ${HIST_T} s)"
q -c "CREATE DATABASE history" >/dev/null || fail "creating database history failed"
PGDATABASE=history q >/dev/null <<SQL || fail "setting up database history failed"
CREATE EXTENSION eventhub;
CREATE SCHEMA bench;
CREATE TABLE bench.bare_events (LIKE eventhub.events INCLUDING ALL);
CREATE SEQUENCE bench.hist_revision;
SQL
printf '%s\n' "\\set o random(0, $((HIST_ORGS - 1)))" \
	"SELECT eventhub.publish_event('h-' || :o, 'API', 'UPDATE', 'weather-api', NULL, '$data');" >"$work/hist_publish.sql"
printf '%s\n' "\\set o random(0, $((HIST_ORGS - 1)))" \
	"INSERT INTO bench.bare_events VALUES ('h-' || :o, nextval('bench.hist_revision'), gen_random_uuid(), now(), now(), 'API', 'UPDATE', 'weather-api', gen_random_uuid()::text, '$data', NULL);" \
	>"$work/hist_bare.sql"
declare -A HPUB=() HBARE=() HHEAD=() HALL=()
json12=()
for n in $HIST_SIZES; do
	hist_load "$n"
	rr=$(PGDATABASE=history q -c "SELECT revision FROM eventhub.organization_states WHERE organization_id = 'reader'")
	for where in head all; do
		lo=$([ $where = head ] && echo $((rr > 1100 ? rr - 1100 : 0)) || echo 0)
		printf '%s\n' "\\set r random($lo, $((rr - 100)))" \
			"SELECT count(*) FROM eventhub.events_since('reader', :r, 100);" >"$work/hist_read_$where.sql"
	done
	hist_rounds "$n"
	for where in head all; do
		PGDATABASE=history tps_point "$out/hist_${n}_read_$where.log" -c 1 -T "$HIST_T" -f "$work/hist_read_$where.sql"
	done
	HPUB[$n]=$(median "${PUBS[@]}") HBARE[$n]=$(median "${BARES[@]}")
	HHEAD[$n]=$(latency_of "$out/hist_${n}_read_head.log")
	HALL[$n]=$(latency_of "$out/hist_${n}_read_all.log")
	ratio_row "12. publish/bare INSERT, $n kept events, 4 clients (rounds $(spread "${PAIRS[@]}"))" "${HPUB[$n]}" "${HBARE[$n]}" 0.9
	row "12. events_since page of 100, $n kept events, ms: near the head / anywhere" "${HHEAD[$n]} / ${HALL[$n]}"
	json12+=("{\"kept_events\": $n, \"organizations\": $HIST_ORGS, \"reader_events\": $HIST_READER, \"publish_tps\": ${HPUB[$n]}, \"bare_insert_tps\": ${HBARE[$n]}, \"round_ratios\": $(jlist "${PAIRS[@]}"), \"page_ms_near_head\": ${HHEAD[$n]}, \"page_ms_anywhere\": ${HALL[$n]}}")
done
read -r small big <<<"$HIST_SIZES"
ratio_row "12. publish with $big kept events/with $small" "${HPUB[$big]}" "${HPUB[$small]}" 0.8
pr=$(calc "${HHEAD[$big]} / ${HHEAD[$small]}")
row "12. events_since page near the head with $big kept events/with $small (time)" "$pr (${HHEAD[$big]}/${HHEAD[$small]} ms)" "<= 1.5" \
	"$(at_most "$pr" 1.5)"
row "12. events_since page anywhere with $big kept events/with $small (time)" "$(calc "${HALL[$big]} / ${HALL[$small]}") (${HALL[$big]}/${HALL[$small]} ms)"
jadd history "$(jlist "${json12[@]}")"
q -c "DROP DATABASE history" >/dev/null || fail "dropping database history failed"
