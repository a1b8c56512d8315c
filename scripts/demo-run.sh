#!/usr/bin/env bash
# The demo itself: a throwaway cluster, the extension, a listener on channel
# eventhub, and a publisher.  Exits non-zero unless the listener heard
# exactly the committed events.
set -euo pipefail
work=$1
cd "$work"
source scripts/cluster.sh
trap 'cluster_stop "$work/cluster"' EXIT

step() { printf '\n== %s\n' "$*"; }
sql() { "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }

step "starting a throwaway PostgreSQL in $work/cluster (socket only, no TCP)"
cluster_start "$work/cluster" regress/eventhub.conf
sql -c "CREATE EXTENSION eventhub" -c "\dx eventhub"

step "a replica listens on channel eventhub"
{
	echo "LISTEN eventhub;"
	# psql prints notifications after each command; sleep in short steps
	# so that they show up as they arrive.
	for _ in $(seq 40); do echo "SELECT pg_sleep(0.1) \\gset"; done
} | sql >"$work/listener.out" &
listener=$!
sleep 0.5

step "another replica publishes"
sql <<'SQL'
\echo '-- two changes to organization acme'
SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'weather-api', 'req-1', '{"context": "/weather", "version": "v1"}') AS revision;
SELECT eventhub.publish_event('acme', 'CERTIFICATE', 'CREATE', 'acme-tls', 'req-2', '{"cn": "api.acme.test"}') AS revision;
\echo '-- a transactional outbox: the application row and the event commit together'
CREATE TABLE apis (id text PRIMARY KEY, spec jsonb);
BEGIN;
INSERT INTO apis VALUES ('weather-api', '{"context": "/weather", "version": "v2"}');
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'weather-api', 'req-3', '{"context": "/weather", "version": "v2"}') AS revision;
COMMIT;
\echo '-- a rolled-back publish: no event, no notification'
BEGIN;
SELECT eventhub.publish_event('acme', 'API', 'DELETE', 'weather-api', 'req-4', '{}') AS revision;
ROLLBACK;
\echo '-- a retried request (same correlation id, same content): same revision, no new event'
SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'weather-api', 'req-3', '{"context": "/weather", "version": "v2"}') AS revision;
\echo '-- another organization has its own revisions'
SELECT eventhub.publish_event('globex', 'LLM_TEMPLATE', 'CREATE', 'summarize', 'req-5', '{"model": "small"}') AS revision;
SQL

wait "$listener"
step "what the listener heard (one wake-up per committed event; data stays in the table)"
grep 'Asynchronous notification' "$work/listener.out" | sed 's/ received from server process with PID [0-9]*\././'

step "a reader catches up by revision cursor"
sql -c "SELECT organization_id, revision, event_type, action, entity_id, event_data FROM eventhub.events_since('acme', 0)" \
	-c "SELECT organization, revision, version_id FROM eventhub.organization_states ORDER BY 1"

heard=$(grep -c 'Asynchronous notification' "$work/listener.out" || true)
if [ "$heard" -ne 4 ]; then
	echo "demo: FAILED: the listener heard $heard notifications, expected 4" >&2
	exit 1
fi
echo
echo "demo: OK: 4 events committed, 4 notifications heard, none for the rollback or the retry"
