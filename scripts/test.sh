#!/usr/bin/env bash
# make test: install what is missing, build (warnings are errors), install the
# extension into the local PostgreSQL 15, then run every suite against
# throwaway clusters.  PostgreSQL refuses to run as root, so when run as root
# the suites run as the unprivileged user "postgres" from a staged copy of
# the test files that this user can read.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
make -s
[ -n "${EVENTHUB_INSTALLCHECK:-}" ] || make -s install >/dev/null

source scripts/cluster.sh
V010_COMMIT=f2f756a80cb62b2c08d4a9e957ba23e8199d1003	# eventhub 0.1.0 as released
work=$(mktemp -d /tmp/eventhub-test.XXXXXX)
cp -r regress scripts client demo bench examples docs README.md "$work/"
# The source of the released 0.1.0, which the upgrade test builds and
# updates from (regress/t/017_upgrade.pl; it skips without it).
if git rev-parse -q --verify "$V010_COMMIT^{commit}" >/dev/null 2>&1; then
	mkdir "$work/v0.1.0"
	git archive "$V010_COMMIT" | tar -x -C "$work/v0.1.0"
else
	echo "eventhub: warning: commit $V010_COMMIT (0.1.0) is not in this clone: the upgrade test will skip" >&2
fi
hand_over "$work"
status=0
if "${AS_USER[@]}" bash "$work/scripts/run-suites.sh" "$work"; then
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
		scripts/deb-test.sh || status=1
	else
		echo "eventhub: the Debian package test needs root: skipped" >&2
	fi
fi
exit $status
