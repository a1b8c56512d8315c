#!/usr/bin/env bash
# The demo: three replicas of a gateway controller follow four organizations
# through eventhub while bursts of creates, updates and deletes are published, each
# together with a write to an application table (a transactional outbox),
# one replica's connection is killed and the server restarts.  Then
# retention removes the early history (compaction keeps each entity's
# latest event) and a fourth replica joins late, from a snapshot; replica-2
# (which runs with --snapshot) is stopped while events it has not seen are
# removed, and resyncs from a snapshot, never reading the application
# table.  It ends with what each replica applied, its publish-to-apply
# latency and whether its entity map equals the others' and the application
# table.  Exits 0 only when every replica converged.
#
#   demo-run.sh WORK   (WORK holds scripts/, regress/, client/ and demo/, built)
set -euo pipefail
work=$1
cd "$work"
source scripts/cluster.sh

orgs=(acme globex initech umbrella)
replicas=(replica-1 replica-2 replica-3)
declare -A replica_pid=()
pids=()
declare -A exists=()	# entities the bursts have created and not deleted

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	cluster_stop "$work/demo-cluster"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
sql() { "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
value() { "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"; }

# Every wait is on a condition and ends as soon as it holds; its bound only
# stops a demo that hangs, so it is generous: the replicas poll every
# second and reconnect within seconds, and a loaded machine may take many
# times that.
WAIT_LIMIT=${DEMO_WAIT_LIMIT:-300}

# wait_for SQL: until SQL returns t; 1 after WAIT_LIMIT seconds.
wait_for() {
	local deadline=$((SECONDS + WAIT_LIMIT))
	until [ "$(value "$1" 2>/dev/null)" = t ]; do
		[ $SECONDS -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

# burst PHASE N: N changes round-robin over the organizations.  Each one
# writes the application table and publishes its event in one transaction
# (a transactional outbox): both commit, or neither.
burst() {
	local phase=$1 n=$2 i org id action data
	for ((i = 1; i <= n; i++)); do
		org=${orgs[$(((i + phase) % ${#orgs[@]}))]}
		id="api-$(((i * 7 + phase) % 9))"
		data="{\"phase\": $phase, \"step\": $i}"
		if ((i % 5 == 0)); then
			action=DELETE
			unset "exists[$org/$id]"
		elif [ -n "${exists[$org/$id]:-}" ]; then
			action=UPDATE
		else
			action=CREATE
			exists[$org/$id]=1
		fi
		echo "BEGIN;"
		if [ "$action" = DELETE ]; then
			echo "DELETE FROM apis WHERE org = '$org' AND id = '$id';"
		else
			echo "INSERT INTO apis VALUES ('$org', '$id', '$data') ON CONFLICT (org, id) DO UPDATE SET spec = excluded.spec;"
		fi
		echo "SELECT eventhub.publish_event('$org', 'API', '$action', '$id', 'demo-$phase-$i', '$data') \\gset"
		echo "COMMIT;"
		echo "SELECT pg_sleep(0.01) \\gset"
	done >"$work/burst-$phase.sql"
	sql -f "$work/burst-$phase.sql" >/dev/null
}

step "a throwaway PostgreSQL with the eventhub background worker ($work/demo-cluster, socket only)"
cluster_start "$work/demo-cluster" regress/eventhub.conf
sql -c "CREATE EXTENSION eventhub" \
	-c "CREATE TABLE apis (org text, id text, spec jsonb NOT NULL, PRIMARY KEY (org, id))"
value "SELECT 'worker: ' || backend_type FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'"

# start_replica NAME [--snapshot]: a replica following every organization.
start_replica() {
	local r=$1
	shift
	demo/replica "$@" "host=$PGHOST port=$PGPORT dbname=postgres user=postgres application_name=$r" \
		"$r" "$work/$r.map" "${orgs[@]}" >"$work/$r.json" 2>"$work/$r.log" &
	pids+=($!)
	replica_pid[$r]=$!
}

# converge: waits until every replica has applied every organization's head
# and every replica's configuration hash (reported with its heartbeats)
# equals the others'; 1 after WAIT_LIMIT seconds.
converge() {
	wait_for "SELECT count(*) = ${#replicas[@]} * ${#orgs[@]}
	                 AND bool_and(lag_revisions = 0 AND state = 'live' AND hash_agrees)
	          FROM eventhub.replica_status"
}

step "three replicas start, each following ${orgs[*]} (replica-2 from a snapshot, --snapshot)"
start_replica replica-1
start_replica replica-2 --snapshot
start_replica replica-3
wait_for "SELECT count(*) = ${#replicas[@]} FROM eventhub.replicas" ||
	{ echo "demo: replicas did not register within $WAIT_LIMIT s" >&2; cat "$work"/replica-*.log >&2; exit 1; }
value "SELECT string_agg(replica_id, ', ' ORDER BY replica_id) || ' registered' FROM eventhub.replicas"

step "burst 1: 120 changes over four organizations"
burst 1 120
value "SELECT 'published so far: ' || string_agg(organization_id || ' ' || revision, ', ' ORDER BY organization_id) FROM eventhub.organization_states"

step "replica-2 loses its connection (pg_terminate_backend), and burst 2 goes on meanwhile"
value "SELECT 'terminated: ' || count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'replica-2'"
burst 2 120

step "the server restarts in the middle of it all, then burst 3"
"$PG_BINDIR/pg_ctl" -D "$work/demo-cluster/data" -m fast -w restart >/dev/null
burst 3 120

step "waiting until every replica has applied every organization's head"
converge || echo "demo: the replicas did not converge within $WAIT_LIMIT s" >&2

step "retention removes the early history: eventhub.retention = 1s, eventhub.compaction = on, run_maintenance()"
sql -c "ALTER SYSTEM SET eventhub.retention = '1s'" -c "ALTER SYSTEM SET eventhub.compaction = on" \
	-c "SELECT pg_reload_conf()" >/dev/null
wait_for "SELECT current_setting('eventhub.retention') = '1s' AND current_setting('eventhub.compaction') = 'on'" ||
	{ echo "demo: the settings were not reloaded" >&2; exit 1; }
# Every event is older than a second once the newest is.
wait_for "SELECT max(processed_timestamp) < clock_timestamp() - interval '1 second' FROM eventhub.events"
# (The worker may run a cycle first: count what is gone, not what this call
# removed.)
value "SELECT eventhub.run_maintenance()" >/dev/null
kept=$(value "SELECT count(*) FROM eventhub.events")
published=$(value "SELECT sum(revision) FROM eventhub.organization_states")
removed=$((published - kept))
echo "retention removed $removed of $published events; kept $kept, each live entity's latest"
[ "$removed" -gt 0 ] || { echo "demo: retention removed nothing" >&2; exit 1; }
# The worker keeps the history from here on: replicas that fall behind
# resync only where this demo makes them.
sql -c "ALTER SYSTEM RESET eventhub.retention" -c "SELECT pg_reload_conf()" >/dev/null

step "replica-4 joins late: its history from revision 1 is gone, it starts from a snapshot"
replicas+=(replica-4)
start_replica replica-4 --snapshot
converge || { echo "demo: replica-4 did not converge within $WAIT_LIMIT s" >&2; cat "$work/replica-4.log" >&2; exit 1; }
grep ': snapshot end' "$work/replica-4.log" | sed 's/^/  /'

step "replica-2 stops (SIGSTOP) and loses its connection; burst 4; cleanup_events(clock_timestamp()) removes what it missed; SIGCONT"
kill -STOP "${replica_pid[replica-2]}"
# Its connection goes before the burst: a stopped client whose connection
# stayed would find the burst's events in the notifications its socket
# holds (they carry small events) and need no resync, or else resync,
# depending on what it does first when it resumes.
value "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'replica-2'" >/dev/null
wait_for "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'replica-2'" ||
	{ echo "demo: replica-2's connection did not end within $WAIT_LIMIT s" >&2; exit 1; }
burst 4 120
value "SELECT 'cleanup removed ' || eventhub.cleanup_events(clock_timestamp()) || ' superseded events and tombstones'"
kill -CONT "${replica_pid[replica-2]}"
converge || { echo "demo: replica-2 did not resync within $WAIT_LIMIT s" >&2; cat "$work/replica-2.log" >&2; exit 1; }
grep 'snapshot .*history_removed\|snapshot end' "$work/replica-2.log" | tail -n 8 | sed 's/^/  /'
echo
"$work/client/eventhub" -d "host=$PGHOST port=$PGPORT dbname=postgres user=postgres" status

# Before the replicas stop (and deregister): do their hashes agree?
declare -A agree=()
for r in "${replicas[@]}"; do
	agree[$r]=$(value "SELECT bool_and(hash_agrees AND config_hash IS NOT NULL) FROM eventhub.replica_status WHERE replica_id = '$r'")
done

for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" || true; done
pids=()

# The application table, as the truth the replicas' maps must equal.
value "SELECT org || E'\t' || id || E'\t' || spec::text FROM apis ORDER BY org, id" >"$work/apis.map"

step "result"
heads=$(value "SELECT string_agg(organization_id || '=' || revision, ' ' ORDER BY organization_id) FROM eventhub.organization_states")
# The heads in the order of orgs, as the replicas print what they applied.
expected=$(for o in "${orgs[@]}"; do value "SELECT revision FROM eventhub.organization_states WHERE organization_id = '$o'"; done | tr '\n' ' ')
echo "heads: $heads"
printf '%-10s %-38s %7s %8s %8s %8s %10s  %s\n' replica "applied (acme globex initech umbrella)" events \
	"p50 ms" "p99 ms" "max ms" reconnects "entity map"
ok=1
for r in "${replicas[@]}"; do
	line=$(cat "$work/$r.json")
	applied=$(sed -n 's/.*"applied": {\([^}]*\)}.*/\1/p' <<<"$line" | sed 's/"[a-z]*": //g; s/,//g')
	field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$line"; }
	if cmp -s "$work/$r.map" "$work/apis.map"; then same="equals the others' and the apis table"; else
		same="DIFFERS"
		ok=0
	fi
	[ "$applied " = "$expected" ] || { ok=0; same="$same; NOT AT THE HEAD"; }
	[ "${agree[$r]}" = t ] || { ok=0; same="$same; CONFIG HASHES DISAGREE"; }
	printf '%-10s %-38s %7s %8s %8s %8s %10s  %s\n' "$r" "$applied" "$(field events)" "$(field p50_ms)" \
		"$(field p99_ms)" "$(field max_ms)" "$(field reconnects)" "$same (digest $(field digest))"
done
echo
echo "latency: publish (revision assigned) to applied in the replica's map, same host clock;"
echo "the maxima include the events published while a replica or the server was reconnecting."
echo
r4=$(grep -c ': snapshot end' "$work/replica-4.log" || true)
r4_entities=$(sed -n 's/.*"snapshot_entities": \([0-9]*\).*/\1/p' "$work/replica-4.json")
echo "replica-4 joined after retention removed $removed early events: $r4 snapshots ($r4_entities entities), then the stream"
r2=$(grep -c 'snapshot begin (reason history_removed)' "$work/replica-2.log" || true)
echo "replica-2 missed events that cleanup_events removed: $r2 organizations resynced from a snapshot (history_removed),"
echo "without reading the apis table"
[ "$r4" -ge ${#orgs[@]} ] || { ok=0; echo "demo: replica-4 did not start from a snapshot of each organization" >&2; }
[ "$r2" -ge 1 ] || { ok=0; echo "demo: replica-2 did not resync from a snapshot" >&2; }
if [ $ok -ne 1 ]; then
	echo "demo: FAILED: the replicas did not converge" >&2
	tail -n 5 "$work"/replica-*.log >&2
	exit 1
fi
echo "demo: OK: all replicas converged on the same $(wc -l <"$work/apis.map") entities"
