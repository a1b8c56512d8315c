#!/usr/bin/env bash
# make test: install what is missing, build (warnings are errors), install the
# extension into the local PostgreSQL 15, then run every suite against
# throwaway clusters.  PostgreSQL refuses to run as root, so when run as root
# the suites run as the unprivileged user "postgres" from a staged copy of
# the test files that this user can read.  Each part prints its own tally;
# the last line is the whole run's: "tests: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
make -s
[ -n "${EVENTHUB_INSTALLCHECK:-}" ] || make -s install >/dev/null

source scripts/cluster.sh
source scripts/tally.sh
# The earlier releases as released (version:commit), whose source the
# upgrade test builds and updates from (regress/t/017_upgrade.pl; it skips
# those not staged).
RELEASES="0.1.0:f2f756a80cb62b2c08d4a9e957ba23e8199d1003 0.2.0:cd757f053b3854d150faeaa611cb460fe567f6ea 0.3.0:2001343026a3d982223fa40831868df380c5a9b4 0.4.0:c56ff51b31b79e3583e400bac3ebee135737b81a"
work=$(mktemp -d /tmp/eventhub-test.XXXXXX)
cp -r regress scripts client extension demo bench examples docs go README.md "$work/"
# The Prometheus configuration (regress/t/023_prometheus.pl reads it).
[ ! -d prometheus ] || cp -r prometheus "$work/"
for release in $RELEASES; do
	version=${release%%:*} commit=${release#*:}
	if git rev-parse -q --verify "$commit^{commit}" >/dev/null 2>&1; then
		mkdir "$work/v$version"
		git archive "$commit" | tar -x -C "$work/v$version"
	else
		echo "eventhub: warning: commit $commit ($version) is not in this clone: the upgrade test will skip it" >&2
	fi
done
# Each part adds its tally to TALLY_FILE; a part that ends without one
# (it crashed) counts as one failure.
tallies=$(mktemp -d /tmp/eventhub-tally.XXXXXX)
: >"$tallies/tally"
hand_over "$tallies"
export TALLY_FILE=$tallies/tally
trap 'rm -rf "$tallies"' EXIT
# part NAME COMMAND...: runs one part; false if it failed.
part() {
	local name=$1
	shift
	"$@" && return 0
	grep -q " $name\$" "$TALLY_FILE" 2>/dev/null || echo "0 1 $name" >>"$TALLY_FILE"
	return 1
}
hand_over "$work"
status=0
if part suites "${AS_USER[@]}" bash "$work/scripts/run-suites.sh" "$work"; then
	rm -rf "$work"
else
	echo "eventhub: test output kept in $work" >&2
	status=1
fi

# Last, as it swaps the installed build: the Debian packages, built,
# installed in place of the source build, checked with make installcheck,
# then the source build is back.  It needs root (dpkg).
if [ -z "${EVENTHUB_INSTALLCHECK:-}" ]; then
	if [ "$(id -u)" -eq 0 ]; then
		part packages scripts/deb-test.sh || status=1
	else
		echo "eventhub: the Debian package test needs root: skipped" >&2
	fi
fi
tally_total "$TALLY_FILE" || status=1
exit $status
