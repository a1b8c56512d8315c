#!/usr/bin/env bash
# The Patroni demo: three PostgreSQL nodes under Patroni and one etcd
# (scripts/ha-cluster.sh).  A publisher (a loop of `eventhub publish`) and a
# consumer (`eventhub watch --all --after 0`) both connect through the
# multi-host conninfo, which picks the writable node.  A switchover moves the
# leader to a replica; the demo shows how long publishing stopped, when the
# consumer caught up, where eventhub's background workers run before and
# after, and that the consumer got every published event once, in order.
# Exits 0 only then.
#
#   ha-demo-run.sh WORK   (WORK holds scripts/ and the built CLI, eventhub)
set -euo pipefail
work=$1
cd "$work"
source scripts/ha-cluster.sh

cli=$work/eventhub
dir=$work/ha
publisher_pid='' watcher_pid=''

cleanup() {
	for p in $publisher_pid $watcher_pid; do kill "$p" 2>/dev/null || true; done
	[ -f "$dir/ha.env" ] && ha_down "$dir"
	return 0
}
trap cleanup EXIT
# Ctrl-C and kill end the demo through its EXIT trap.
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
now() { echo "$EPOCHREALTIME"; }
# since T0 T1: seconds from T0 to T1, to the millisecond.
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# Every wait is on a condition; its bound only stops a demo that hangs.
WAIT_LIMIT=${DEMO_WAIT_LIMIT:-60}
wait_until() {
	local what=$1 deadline=$((SECONDS + WAIT_LIMIT))
	shift
	until "$@"; do
		[ $SECONDS -lt $deadline ] || { echo "demo: $what: not within $WAIT_LIMIT s" >&2; return 1; }
		sleep 0.1
	done
}

# The revisions the watcher printed, one a line, in its order.
watched() { sed -n 's/.*"revision": \([0-9]*\).*/\1/p' "$work/watch.log"; }
# watched_at REV: when the watcher printed revision REV or a later one.
watched_at() { awk -v r="$1" 'match($0, /"revision": [0-9]+/) && substr($0, RSTART + 12, RLENGTH - 12) + 0 >= r { print $1; exit }' "$work/watch.log"; }
published_ok() { grep -c ' ok ' "$work/publish.log" || true; }
has_watched() { [ "$(watched | wc -l)" -ge "$1" ]; }

# workers: for each node, its role and the eventhub background workers
# that run there.
workers() {
	local node role="SELECT CASE WHEN pg_is_in_recovery() THEN 'replica' ELSE 'primary' END"
	local types="SELECT coalesce(string_agg(backend_type, ', ' ORDER BY backend_type), 'no eventhub worker')
	             FROM pg_stat_activity WHERE backend_type LIKE 'eventhub%'"
	for node in "${HA_NODES[@]}"; do
		printf '  %-6s %-8s %s\n' "$node" "$(ha_sql "$(ha_pg_port "$node")" "$role")" \
			"$(ha_sql "$(ha_pg_port "$node")" "$types")"
	done
}

# publisher: one `eventhub publish` after another, each on a new
# connection, logging "START END ok N REVISION" or "START END fail N", until
# WORK/stop exists.
publisher() {
	local i=0 start rev
	while [ ! -e "$work/stop" ]; do
		i=$((i + 1))
		start=$(now)
		if rev=$("$cli" -d "$conninfo" publish --org ha-demo --type API --action UPDATE \
			--entity "api-$((i % 10))" --correlation-id "p-$i" --data "{\"i\": $i}" 2>>"$work/publish.err"); then
			echo "$start $(now) ok $i $rev"
		else
			echo "$start $(now) fail $i"
		fi
		sleep 0.05
	done >"$work/publish.log"
}

t_begin=$(now)
step "one etcd and three PostgreSQL nodes under Patroni, eventhub preloaded ($dir)"
ha_up "$dir"
patronictl -c "$dir/node1/patroni.yml" list
conninfo=$(ha_conninfo "$dir")
echo "setup took $(since "$t_begin" "$(now)") s"

step "eventhub watch --all --after 0 and a publisher, both over the conninfo above"
# Each line stamped with the time the demo read it.
"$cli" -d "$conninfo" watch --all --after 0 2>"$work/watch.err" \
	> >(while IFS= read -r line; do echo "$EPOCHREALTIME $line"; done >"$work/watch.log") &
watcher_pid=$!
publisher &
publisher_pid=$!
wait_until "30 events watched" has_watched 30
echo "the watcher has printed $(watched | wc -l) events"
echo "eventhub's background workers, on the leader only (pg_stat_activity.backend_type):"
workers

step "patronictl switchover --force, to the replica Patroni picks"
old=$HA_LEADER
t_switch=$(now)
ha_switchover "$dir"
t_switched=$(now)
new=$HA_LEADER
echo "ha_switchover returned after $(since "$t_switch" "$t_switched") s"
# A publish that starts now can only reach the new leader.
after_switch() { awk -v t="$t_switched" '$3 == "ok" && $1 > t { found = 1 } END { exit !found }' "$work/publish.log"; }
wait_until "a publish after the switchover" after_switch

# The publishes that began after the switchover command: the failures, and
# the first that succeeded after the last failure.
read -r fails first_fail last_fail < <(awk -v t="$t_switch" '$1 > t && $3 == "fail" {
	n++; if (n == 1) first = $1; last = $2 } END { print n + 0, first, last }' "$work/publish.log")
if [ "$fails" -gt 0 ]; then
	read -r resumed resumed_rev < <(awk -v t="$last_fail" '$1 >= t && $3 == "ok" { print $2, $5; exit }' "$work/publish.log") || true
	echo "publishing failed from +$(since "$t_switch" "$first_fail") s to +$(since "$t_switch" "$last_fail") s ($fails attempts)"
else
	read -r resumed resumed_rev < <(awk -v t="$t_switched" '$1 > t && $3 == "ok" { print $2, $5; exit }' "$work/publish.log") || true
	echo "no publish failed"
fi
[ -n "${resumed:-}" ] || { echo "demo: publishing failed again after the switchover" >&2; exit 1; }
echo "first successful publish after it: +$(since "$t_switch" "$resumed") s (revision $resumed_rev)"
caught_up() { [ -n "$(watched_at "$resumed_rev")" ]; }
wait_until "the watcher at revision $resumed_rev" caught_up
echo "the watcher printed revision $resumed_rev at +$(since "$t_switch" "$(watched_at "$resumed_rev")") s"
echo "what the failed publishes said, and the watcher's log:"
# What libpq said of each host, on one line.
sed -n 's/^eventhub: //p' "$work/publish.err" |
	sed 's/\\n\\tIs the server running[^\\]*//g; s/\\nLOCATION: [^\\]*//g; s/connection to server at "127.0.0.1", //g; s/\\n/; /g' |
	sort | uniq -c | sed 's/^ */  publish: /'
sed 's/^/  watch: /' "$work/watch.err"

step "eventhub's background workers after the switchover ($old -> $new)"
workers

step "the publisher stops; did the watcher print every event once, in order?"
target=$(($(published_ok) + 30))
published_enough() { [ "$(published_ok)" -ge "$target" ]; }
wait_until "30 more publishes" published_enough
# Stopped between two publishes, so that none is left half-way.
touch "$work/stop"
wait "$publisher_pid"
publisher_pid=''
head=$(ha_sql "$HA_LEADER_PORT" "SELECT revision FROM eventhub.organization_states WHERE organization_id = 'ha-demo'")
caught_up_head() { [ -n "$(watched_at "$head")" ]; }
wait_until "the watcher at revision $head" caught_up_head
kill "$watcher_pid"
wait "$watcher_pid" || true
watcher_pid=''

fails=$(grep -c ' fail ' "$work/publish.log" || true)
resyncs=$(grep -c '"resync": true' "$work/watch.log" || true)
echo "published: $(published_ok) ok, $fails failed (the head revision is $head)"
echo "watched: $(watched | wc -l) events, $resyncs resync lines"
ok=1
if [ "$(watched | tr '\n' ' ')" != "$(seq 1 "$head" | tr '\n' ' ')" ]; then
	ok=0
	echo "demo: the watcher did not print revisions 1 to $head once each, in order" >&2
fi
if [ "$resyncs" -ne 0 ]; then
	ok=0
	echo "demo: a switchover loses nothing, yet the watcher resynced" >&2
fi

step "ha-cluster.sh down: Patroni stops the replicas' PostgreSQL, then the leader's; then etcd"
t_down=$(now)
ha_down "$dir"
echo "down took $(since "$t_down" "$(now)") s; the demo $(since "$t_begin" "$(now)") s"
if [ $ok -ne 1 ]; then
	echo "demo: FAILED" >&2
	exit 1
fi
echo "demo: OK: revisions 1 to $head, each once and in order, across the switchover from $old to $new"
