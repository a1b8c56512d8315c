# 8 compaction: what compaction costs a publish.  eventhub.compaction
# changes only what retention deletes; what it costs a publish is the index
# it needs, events_entity_idx (one more btree insert).  So: publish with
# the index as installed against publish with it dropped, in the same
# database (the one the notifier worker serves), in COMPACTION_ROUNDS
# rounds of alternating order (with, without; without, with; ...), the
# index built again between rounds; the median of each counts.  Points of
# T_TPS seconds.

#      variable           full smoke
scaled COMPACTION_ROUNDS  7    1

entity_index_on() {
	q -c "SET client_min_messages = warning" -c "CREATE INDEX IF NOT EXISTS events_entity_idx ON eventhub.events (organization_id, event_type, entity_id, revision)" \
		-c CHECKPOINT >/dev/null || fail "creating events_entity_idx failed"
}
entity_index_off() {
	q -c "SET client_min_messages = warning" -c "DROP INDEX IF EXISTS eventhub.events_entity_idx" -c CHECKPOINT >/dev/null || fail "dropping events_entity_idx failed"
}

say "8/18 publish throughput with and without events_entity_idx, the publish-time cost of compaction ($COMPACTION_ROUNDS rounds of ${T_TPS} s per point)"
printf '%s\n' "\\set e random(1, 100000)" \
	"SELECT eventhub.publish_event('bench-' || :client_id, 'API', 'UPDATE', 'api-' || :e, NULL, '$data');" \
	>"$work/publish_many.sql"
json8=()
for point in "1 publish_own.sql" "8 publish_own.sql" "8 publish_many.sql"; do
	read -r c f <<<"$point"
	on=() off=() pairs=()
	for ((r = 0; r < COMPACTION_ROUNDS; r++)); do
		for idx in $( ((r % 2 == 0)) && echo "on off" || echo "off on"); do
			"entity_index_$idx"
			tps_point "$out/compaction_${c}_${f%.sql}_${idx}_$r.log" -c "$c" -j "$(pgjobs "$c")" -T "$T_TPS" -f "$work/$f"
			v=$(tps_of "$out/compaction_${c}_${f%.sql}_${idx}_$r.log")
			[ "$idx" = on ] && on+=("$v") || off+=("$v")
		done
		pairs+=("$(calc "${on[r]} / ${off[r]}")")
	done
	entity_index_on
	t_on=$(median "${on[@]}")
	t_off=$(median "${off[@]}")
	# The median of each round's ratio: the two points of a round ran
	# back to back, so the load the machine's other users add cancels
	# better than between the medians of each.
	RATIO=$(median "${pairs[@]}")
	label="$c $(plural "$c" client), organization per client, $([ "$f" = publish_own.sql ] && echo "one entity" || echo "100000 entities") each"
	row "8. publish with events_entity_idx (compaction)/without, $label" \
		"$RATIO ($(printf %.0f "$t_on")/$(printf %.0f "$t_off") tps; rounds $(spread "${pairs[@]}"))" ">= 0.95" "$(verdict "$RATIO" 0.95)"
	json8+=("{\"clients\": $c, \"entities_per_organization\": $([ "$f" = publish_own.sql ] && echo 1 || echo 100000), \"tps_with_index\": $t_on, \"tps_without_index\": $t_off, \"ratio\": $RATIO, \"round_ratios\": $(jlist "${pairs[@]}"), \"rounds_with\": $(jlist "${on[@]}"), \"rounds_without\": $(jlist "${off[@]}")}")
done
jadd compaction_publish "$(jlist "${json8[@]}")"
