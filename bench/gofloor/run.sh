#!/usr/bin/env bash
# bench/gofloor/run.sh KIND N: the CPU per event of N watcher processes of
# KIND following organization floor-org, while pgbench publishes 1,000
# events to it at 200/s; each process's output drained by cat.  KIND: cli
# (eventhub watch), go (bench/gowatch, the Go package) or floor
# (bench/gofloor).  Run as a role that may read the data keys, against a
# database with eventhub where floor-org is registered:
#
#   PGHOST=... PGPORT=... PGDATABASE=... EVENTHUB=client/eventhub \
#   GOWATCH=/tmp/gowatch GOFLOOR=/tmp/gofloor bench/gofloor/run.sh floor 16
#
# (build the two with `go build` in GOPATH mode, as bench/run.sh does).
# Prints "KIND N: X us CPU per event per watcher" (the processes' own CPU,
# from /proc/PID/task/*/schedstat; their backends not counted).
set -euo pipefail
source "$(dirname "$0")/../lib.sh" # cpu_ns
kind=$1 n=$2
pids=()
for ((i = 0; i < n; i++)); do
	case $kind in
	cli) "${EVENTHUB:-eventhub}" watch --org floor-org > >(cat >/dev/null) 2>/dev/null & ;;
	go) "$GOWATCH" -conninfo "" -org floor-org > >(cat >/dev/null) 2>/dev/null & ;;
	floor) "$GOFLOOR" "" > >(cat >/dev/null) 2>/dev/null & ;;
	*) echo "run.sh: KIND is cli, go or floor" >&2; exit 2 ;;
	esac
	pids+=("$!")
done
sleep 3 # connected and listening
echo "SELECT eventhub.publish_event('floor-org', 'API', 'UPDATE', 'weather-api', NULL, '{\"context\": \"/weather\", \"version\": \"v2\", \"upstream\": \"http://weather.internal:8080\"}');" >"${TMPDIR:-/tmp}/floor-publish.$$.sql"
t0=$(cpu_ns "${pids[@]}")
pgbench -n -M prepared -c 1 -R 200 -t 1000 -f "${TMPDIR:-/tmp}/floor-publish.$$.sql" >/dev/null
sleep 1
t1=$(cpu_ns "${pids[@]}")
rm -f "${TMPDIR:-/tmp}/floor-publish.$$.sql"
kill "${pids[@]}"
wait 2>/dev/null || true
echo "$kind $n: $(((t1 - t0) / 1000 / (n * 1000))) us CPU per event per watcher"
