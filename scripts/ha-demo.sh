#!/usr/bin/env bash
# make ha-demo: install what is missing, build and install the extension and
# the client, then run the Patroni demo (scripts/ha-demo-run.sh) in a
# throwaway directory as an unprivileged user, and clean up after it.  The
# nodes load eventhub from the installation; the demo runs the built CLI.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
make -s
make -s install >/dev/null

work=$(mktemp -d /tmp/eventhub-ha.XXXXXX)
# The demo stops its cluster itself; a cluster left by a demo that was
# killed is stopped here before its directory goes.
trap '[ -f "$work/ha/ha.env" ] && scripts/ha-cluster.sh down "$work/ha"; rm -rf "$work"' EXIT
cp -r scripts "$work/"
cp client/eventhub "$work/"
source scripts/cluster.sh
hand_over "$work"
"${AS_USER[@]}" bash "$work/scripts/ha-demo-run.sh" "$work"
