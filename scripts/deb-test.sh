#!/usr/bin/env bash
# Tests the Debian packages on this machine, as root: builds them (make deb),
# removes the source build that `make install` put here, installs the
# packages with dpkg -i, checks the CLI and a program built against
# libeventhub-dev, and runs the SQL and isolation suites with
# `make installcheck` against a throwaway cluster that loads the packaged
# extension.  Then it purges the packages and installs the source build
# again.  Prints "ok"/"not ok" lines and its tally (scripts/tally.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

if [ "$(id -u)" -ne 0 ]; then
	echo "eventhub: scripts/deb-test.sh installs packages: run it as root" >&2
	exit 1
fi

scripts/deps.sh gcc pkg-config postgresql-15 prometheus || exit 1
source scripts/cluster.sh
source scripts/tally.sh
work=$(mktemp -d /tmp/eventhub-deb-test.XXXXXX)

# check NAME COMMAND...: one test line; the command's output follows a failure.
check() {
	local name=$1
	shift
	if "$@" >"$work/check.log" 2>&1; then
		tally_ok "$name"
	else
		tally_not_ok "$name"
		sed 's/^/# /' "$work/check.log"
	fi
}

packages=(postgresql-15-eventhub libeventhub1 libeventhub-dev eventhub-client)
version=$(sed -n 's/^#define EVENTHUB_VERSION "\(.*\)"/\1/p' client/eventhub.h)

# Back to a source build, whatever happened: purge the packages, make install.
restored=
restore() {
	[ -n "$restored" ] && return
	restored=1
	check "purge the packages" dpkg --purge "${packages[@]}"
	check "install the source build again" bash -c 'make -s && make -s install >/dev/null'
}
trap 'restore; rm -rf "$work"' EXIT

finish() {
	restore
	tally_end packages && exit 0
	echo "eventhub: output kept in $work" >&2
	trap - EXIT
	exit 1
}

if scripts/deb.sh >"$work/deb.log" 2>&1; then
	tally_ok "make deb"
else
	tally_not_ok "make deb"
	sed 's/^/# /' "$work/deb.log"
	finish
fi

# The source build: the extension where PGXS installs it, the client under
# client/Makefile's PREFIX (/usr/local), every version of either.
remove_source_build() {
	local lib share
	lib=$("$PG_CONFIG" --pkglibdir)
	share=$("$PG_CONFIG" --sharedir)
	rm -rf "$lib/eventhub.so" "$lib/bitcode/eventhub" "$lib/bitcode/eventhub.index.bc" \
		"$share/extension/eventhub.control" "$share"/extension/eventhub--*.sql \
		/usr/local/lib/libeventhub.* /usr/local/lib/pkgconfig/eventhub.pc \
		/usr/local/include/eventhub.h /usr/local/bin/eventhub &&
		ldconfig
}
check "remove the source build" remove_source_build

debs=()
for p in "${packages[@]}"; do
	debs+=(build/deb/"${p}"_*.deb)
done
check "dpkg -i ${packages[*]}" dpkg -i "${debs[@]}"
check "the extension comes from postgresql-15-eventhub" \
	dpkg -S "$("$PG_CONFIG" --pkglibdir)/eventhub.so" "$("$PG_CONFIG" --sharedir)/extension/eventhub.control"

cli_version() {
	[ "$(command -v eventhub)" = /usr/bin/eventhub ] || { echo "eventhub is $(command -v eventhub)"; return 1; }
	local out
	out=$(eventhub --version) || return 1
	echo "$out"
	[ "$out" = "eventhub $version" ]
}
check "/usr/bin/eventhub --version prints eventhub $version" cli_version

# The monitoring files, where docs/operations.md (Monitoring) says, with
# their rule tests passing there.
prometheus_files() {
	local dir=/usr/share/eventhub/prometheus f
	for f in postgres-exporter-queries.yml eventhub-rules.yml eventhub-rules.test.yml grafana-dashboard.json; do
		dpkg -S "$dir/$f" | grep '^eventhub-client:' || return 1
	done
	(cd "$dir" && promtool test rules eventhub-rules.test.yml)
}
check "eventhub-client ships /usr/share/eventhub/prometheus and its rule tests pass" prometheus_files

# A program built with pkg-config against libeventhub-dev runs on libeventhub1.
build_against_dev() {
	cat >"$work/hello.c" <<-'EOF'
		#include <stdio.h>
		#include <string.h>
		#include <eventhub.h>

		int
		main(void)
		{
			printf("libeventhub %s\n", eh_version());
			return strcmp(eh_version(), EVENTHUB_VERSION) != 0;
		}
	EOF
	cc -Wall -Werror -o "$work/hello" "$work/hello.c" $(pkg-config --cflags --libs eventhub) || return 1
	local lib
	lib=$(ldd "$work/hello" | sed -n 's/.*libeventhub\.so\.[0-9]* => \([^ ]*\).*/\1/p')
	echo "libeventhub => $lib"
	dpkg -S "$(realpath "$lib")" | grep '^libeventhub1:' && "$work/hello"
}
check "a program built with pkg-config --cflags --libs eventhub" build_against_dev

# The suites, as the unprivileged user, from a copy of the files they need.
stage=$work/src
mkdir "$stage"
cp -r Makefile eventhub.control sql regress scripts "$stage/"
hand_over "$work"
"${AS_USER[@]}" bash -c '
	cd "$1" || exit 1
	source scripts/cluster.sh
	trap "cluster_stop \"$1/cluster\"" EXIT
	cluster_start "$1/cluster" regress/eventhub.conf || exit 1
	make installcheck' installcheck "$stage" >"$work/installcheck.log" 2>&1
status=$?
grep -E '\.\.\. (ok|FAILED)|^ok |^not ok ' "$work/installcheck.log"
tally_log "$work/installcheck.log"
if [ "$status" -eq 0 ] && grep -q pg_isolation_regress "$work/installcheck.log"; then
	tally_ok "make installcheck ran the SQL and isolation suites"
else
	tally_not_ok "make installcheck ran the SQL and isolation suites"
	[ "$tally_failures" -eq 0 ] && sed 's/^/# /' "$work/installcheck.log"
	for diffs in "$stage/regression.diffs" "$stage/output_iso/regression.diffs"; do
		[ -f "$diffs" ] && cat "$diffs"
	done
fi

finish
