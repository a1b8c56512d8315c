#!/usr/bin/env bash
# make test-under-load: runs `make test` (scripts/test.sh) RUNS times in a
# row, 1 by default, stopping at the first failure, while
# `stress-ng --cpu 2 --io 1` loads the machine beside it.  The suites must
# wait on conditions, never on the clock; a busy machine is where a test
# that races the product's timers fails.  stress-ng is installed when
# missing (scripts/deps.sh) and stopped at the end, on failure and on
# interrupt too.
#
# LOAD_CMD and TEST_CMD, shell commands, replace the load and the test (a
# dry run of this script's logic: LOAD_CMD='sleep 600' TEST_CMD=true).
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-1}
load=(stress-ng --cpu 2 --io 1)
[ -z "${LOAD_CMD:-}" ] || load=(bash -c "exec $LOAD_CMD")
test=(scripts/test.sh)
[ -z "${TEST_CMD:-}" ] || test=(bash -c "$TEST_CMD")
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "eventhub: RUNS must be a positive number, not '$runs'" >&2; exit 2; }

if [ "${load[0]}" = stress-ng ] && ! command -v stress-ng >/dev/null; then
	scripts/deps.sh stress-ng || exit 1
fi

# The load, stopped whatever happens: its pid is the one started here.
load_pid=
stop_load() {
	[ -n "$load_pid" ] || return 0
	kill -TERM "$load_pid" 2>/dev/null
	wait "$load_pid" 2>/dev/null
	load_pid=
}
trap stop_load EXIT
trap 'stop_load; exit 130' INT
trap 'stop_load; exit 143' TERM

"${load[@]}" >/dev/null 2>&1 &
load_pid=$!
echo "eventhub: load started (${load[*]}, pid $load_pid)"

passed=0
status=0
for ((run = 1; run <= runs; run++)); do
	echo "eventhub: run $run of $runs under load"
	started=$SECONDS
	"${test[@]}"
	result=$?
	if ! kill -0 "$load_pid" 2>/dev/null; then
		echo "eventhub: the load (${load[*]}) stopped during run $run" >&2
		load_pid=
		status=1
		break
	fi
	echo "eventhub: run $run of $runs: $([ $result -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - started)) s"
	if [ $result -ne 0 ]; then
		status=1
		break
	fi
	passed=$((passed + 1))
done
stop_load
echo "eventhub: $passed of $runs runs passed under load"
exit $status
