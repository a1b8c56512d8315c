#!/bin/sh
# count-checks.sh: counts the checks of each test suite, statically, so that
# a change to the tests can show it kept them: Test::More assertions in the
# TAP files (and EventhubTest.pm), check() calls in the client's C test
# programs, SQL statements in regress/sql, and isolation permutations.
# Run from the top of the tree; prints "SUITE COUNT" lines.
set -eu

# Test::More calls that assert something.
tap=$(cat regress/t/*.pl regress/t/*.pm |
	grep -v '^[[:space:]]*#' |
	grep -oE '(^|[^[:alnum:]_>$:])(ok|is|isnt|like|unlike|cmp_ok|is_deeply|pass|fail)[[:space:]]*\(' |
	wc -l)
echo "tap_assertions $tap"
for f in regress/t/*.pl; do
	n=$(grep -v '^[[:space:]]*#' "$f" |
		grep -oE '(^|[^[:alnum:]_>$:])(ok|is|isnt|like|unlike|cmp_ok|is_deeply|pass|fail)[[:space:]]*\(' |
		wc -l)
	echo "  $(basename "$f") $n"
done

# The client's C tests: check( calls (the definition excluded).
c=$(cat client/test_*.c | grep -v '^check(' | grep -oE '(^|[^[:alnum:]_])check[[:space:]]*\(' | wc -l)
echo "client_checks $c"

# regress/sql: statements (lines ending a statement with ';') and psql
# meta-commands that run something (\gset, \g, \c ... count as statements
# only when they end one).
sql=$(cat regress/sql/*.sql | grep -v '^[[:space:]]*--' | grep -cE ';[[:space:]]*(--.*)?$|\\g(set|x)?[[:space:]]*$' || true)
echo "regress_statements $sql"
out=$(cat regress/expected/*.out | wc -l)
echo "regress_expected_lines $out"

# Isolation: permutation lines of the specs.
perm=$(cat regress/specs/*.spec | grep -c '^permutation' || true)
echo "isolation_permutations $perm"
