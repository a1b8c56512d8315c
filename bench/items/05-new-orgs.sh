# 5 new-orgs: one session that started while organization_states was small
# creates NEW_ORGS organizations (a first publish each); then, after
# ANALYZE, a fresh session creates as many more.  Why: a plan a session
# kept from the small table must not slow it down as the table grows.

#      variable  full   smoke
scaled NEW_ORGS  100000 2000

echo "SELECT eventhub.publish_event('new-' || nextval('bench.new_org'), 'API', 'CREATE', 'weather-api', NULL, '$data');" \
	>"$work/publish_new.sql"
say "5/18 creating $NEW_ORGS organizations: a session started on a small table, then a fresh one after ANALYZE"
tps_point "$out/new_orgs_old.log" -c 1 -t "$NEW_ORGS" -f "$work/publish_new.sql"
q -c "ANALYZE eventhub.organization_states" -c "ANALYZE eventhub.events" >/dev/null
tps_point "$out/new_orgs_fresh.log" -c 1 -t "$NEW_ORGS" -f "$work/publish_new.sql"
ratio_row "5. creating organizations: session from a small table/fresh session after ANALYZE" \
	"$(tps_of "$out/new_orgs_old.log")" "$(tps_of "$out/new_orgs_fresh.log")" 0.8
jadd organization_creation "{\"organizations\": $NEW_ORGS, \"old_session_per_s\": $(tps_of "$out/new_orgs_old.log"), \"fresh_session_per_s\": $(tps_of "$out/new_orgs_fresh.log"), \"ratio\": $RATIO}"
