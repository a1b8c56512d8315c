#!/usr/bin/env bash
# make demo: install what is missing, build (the demo replica too) and install
# the extension and the client, then run the demo (scripts/demo-run.sh) on a
# throwaway cluster as an unprivileged user, and clean up after it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
make -s
make -s install >/dev/null

work=$(mktemp -d /tmp/eventhub-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r scripts regress client demo "$work/"
source scripts/cluster.sh
hand_over "$work"
"${AS_USER[@]}" bash "$work/scripts/demo-run.sh" "$work"
