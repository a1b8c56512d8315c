# The tally of passed and failed tests that the test drivers share (test.sh,
# run-suites.sh, deb-test.sh).  Source this file.
#
# Each driver counts its own tests and ends with tally_end.  Run alone, a
# driver prints "tests: N passed, N failed".  Under test.sh, TALLY_FILE names
# a file each driver adds its counts to, and its own line is labelled (e.g.
# "suites: N passed, N failed"); test.sh then prints the one line of the
# whole run, last, with tally_total.

passed=0
failed=0

# tally_ok NAME, tally_not_ok NAME: one test line, counted.
tally_ok() { echo "ok - $1"; passed=$((passed + 1)); }
tally_not_ok() { echo "not ok - $1"; failed=$((failed + 1)); }

# tally_log LOG: counts the result lines in LOG: pg_regress's "... ok" and
# "... FAILED", TAP's "ok" and "not ok".  Sets tally_failures to the failures it found.
tally_log() {
	local ok
	ok=$(grep -cE '\.\.\. ok|^ok ' "$1" || true)
	tally_failures=$(grep -ciE '\.\.\. failed|^not ok ' "$1" || true)
	passed=$((passed + ok))
	failed=$((failed + tally_failures))
}

# tally_end LABEL: prints this driver's tally (labelled LABEL under test.sh),
# adds it to TALLY_FILE if set, and returns non-zero if a test failed or
# none ran.
tally_end() {
	if [ -n "${TALLY_FILE:-}" ]; then
		echo "$1: $passed passed, $failed failed"
		echo "$passed $failed $1" >>"$TALLY_FILE"
	else
		echo "tests: $passed passed, $failed failed"
	fi
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

# tally_total FILE: prints the sum of the tallies in FILE, the whole run's
# "tests: N passed, N failed", and returns non-zero if a test failed or
# none ran.
tally_total() {
	local p f label
	passed=0
	failed=0
	while read -r p f label; do
		passed=$((passed + p))
		failed=$((failed + f))
	done <"$1"
	echo "tests: $passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
