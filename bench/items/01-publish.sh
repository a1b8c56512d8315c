# 1 publish: publish throughput against a bare INSERT of the same row and
# against PgQ's insert_event, at 1 and 8 clients, an organization per client
# or one shared, fsync off and on.  Why: what eventhub's contract (a gapless
# revision per organization, the head row, the notification) costs over
# writing the row, and over the queue it is most often compared with.
# Sized by T_TPS and ROUNDS (bench/run.sh).

for v in own shared; do
	[ $v = own ] && org="'bench-' || :client_id" || org="'bench-shared'"
	publish_script "publish_$v.sql" "$org"
	echo "INSERT INTO bench.bare_events VALUES ($org, nextval('bench.bare_revision'), gen_random_uuid(), now(), now()," \
		"'API', 'UPDATE', 'weather-api', gen_random_uuid()::text, '$data');" >"$work/bare_$v.sql"
done
# The floor: publish_event's UPDATE and INSERT as one top-level statement,
# without the function (run with the write guard off).
echo "WITH adv AS (UPDATE eventhub.organization_states s SET revision = s.revision + 1, version_id = gen_random_uuid()," \
	"updated_at = clock_timestamp() WHERE s.organization_id = 'bench-' || :client_id" \
	"RETURNING s.revision, s.version_id, s.updated_at)" \
	"INSERT INTO eventhub.events SELECT 'bench-' || :client_id, adv.revision, adv.version_id, adv.updated_at, now()," \
	"'API', 'UPDATE', 'weather-api', adv.version_id::text, '$data' FROM adv;" >"$work/floor_own.sql"
echo "SELECT pgq.insert_event('bench', 'API', '$data');" >"$work/pgq.sql"

say "1/18 publish throughput vs bare INSERT and PgQ ($ROUNDS interleaved rounds of ${T_TPS} s per point)"
json1=()
for point in "1 own off" "8 own off" "8 shared off" "8 own on"; do
	read -r c v fsync <<<"$point"
	scripts=("bare_$v.sql" "publish_$v.sql" pgq.sql)
	[ "$v" = own ] && scripts+=(floor_own.sql)
	[ "$fsync" = on ] && reload_conf "ALTER SYSTEM SET fsync = on"
	tps_rounds "${c}_${v}_fsync_$fsync" "$c" "${scripts[@]}"
	[ "$fsync" = on ] && reload_conf "ALTER SYSTEM RESET fsync"
	label="$c $(plural "$c" client), $([ $v = own ] && echo "organization per client" || echo "one organization")"
	[ "$fsync" = on ] && label+=", fsync on"
	bare=${TPS[bare_$v.sql]} pub=${TPS[publish_$v.sql]} pgq=${TPS[pgq.sql]}
	tgt=
	[ $v = own ] && { [ "$c" = 1 ] && tgt=0.75 || tgt=0.8; }
	ratio_row "1. publish/bare INSERT, $label" "$pub" "$bare" "$tgt"
	r_bare=$RATIO
	tgt=
	[ "$c" = 8 ] && [ $v = own ] && tgt=0.9
	ratio_row "1. publish/PgQ insert_event, $label" "$pub" "$pgq" "$tgt"
	r_pgq=$RATIO
	floor=null r_floor=null
	if [ "${#scripts[@]}" = 4 ]; then
		floor=${TPS[floor_own.sql]}
		ratio_row "1. (floor) its UPDATE + INSERT as one plain statement/bare, $label" "$floor" "$bare"
		r_floor=$RATIO
		# What any publish that keeps the contract (a gapless revision per
		# organization, unique correlation ids) can reach against PgQ,
		# whose event tables have one index (on the transaction id) and
		# no per-queue row to update: two rows and four index entries a
		# publish, against one row and one entry.
		ratio_row "1. (ceiling) the floor/PgQ insert_event, $label" "$floor" "$pgq"
		ratio_row "1. (ceiling) bare INSERT/PgQ insert_event, $label" "$bare" "$pgq"
	fi
	json1+=("{\"clients\": $c, \"organizations\": \"$v\", \"fsync\": \"$fsync\", \"publish_tps\": $pub, \"bare_insert_tps\": $bare, \"pgq_tps\": $pgq, \"floor_tps\": $floor, \"ratio_bare\": $r_bare, \"ratio_pgq\": $r_pgq, \"ratio_floor\": $r_floor}")
done
jadd publish_throughput "$(jlist "${json1[@]}")"
