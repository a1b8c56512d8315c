#!/usr/bin/env bash
# make deb: build the Debian packages (debian/) from a clean copy of this tree,
# so that the tree itself is never built in, and put them in build/deb/.
# Installs the build dependencies when they are missing (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

scripts/deps.sh make gcc dpkg-dev debhelper fakeroot postgresql-server-dev-all libpq-dev uuid-dev

# The copy: the files git knows or would add (edits not yet committed
# included, build products left out), or the whole tree outside git.
work=$(mktemp -d /tmp/eventhub-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$work/eventhub
mkdir "$src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -C "$repo" ls-files -z --cached --others --exclude-standard |
		tar -C "$repo" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$src" -xf -
else
	tar -C "$repo" --exclude=./build -cf - . | tar -C "$src" -xf -
fi

start=$SECONDS
if ! (cd "$src" && dpkg-buildpackage -us -uc -b -j"$(nproc)") >"$work/build.log" 2>&1; then
	tail -60 "$work/build.log" >&2
	echo "eventhub: the Debian build failed (the last lines of its log are above)" >&2
	exit 1
fi

mkdir -p build/deb
rm -f build/deb/*.deb build/deb/*.buildinfo build/deb/*.changes
cp "$work"/*.deb "$work"/*.buildinfo "$work"/*.changes build/deb/
echo "eventhub: built in $((SECONDS - start)) s, in build/deb/:"
(cd build/deb && ls -1 *.deb)
