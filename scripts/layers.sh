# layers.sh: what the two layer checks (client/check_layers.sh,
# extension/check_layers.sh) share; each sources it from the directory it
# checks.  The files' order, bottom first, is the list of "layer:" lines of
# one file; no object file may use a function or variable that a file
# higher in the order defines (read with nm).

# layer_order FILE: sets order (the files, bottom first) and ranks ("file
# rank" lines) from FILE's "layer:" lines; exits when there are none or a
# file of the order is missing or not built.
layer_order() {
	order=$(sed -n 's/^ \*[[:space:]]*layer:[[:space:]]*\([a-z_]*\)\.c.*/\1/p' "$1")
	[ -n "$order" ] || { echo "check_layers: no \"layer:\" lines in $1" >&2; exit 1; }
	rank=0
	ranks=""
	for f in $order; do
		[ -f "$f.c" ] || { echo "check_layers: $f.c is missing" >&2; exit 1; }
		[ -f "$f.o" ] || { echo "check_layers: $f.o is missing (build first; is $f.c in the Makefile's objects?)" >&2; exit 1; }
		rank=$((rank + 1))
		ranks="$ranks$f $rank
"
	done
}

# rank_of FILE: FILE's place in the order (nothing when it has none).
rank_of() { printf '%s' "$ranks" | awk -v f="$1" '$1 == f { print $2 }'; }

# check_calls WHOSE: counts in calls the uses of one file's symbols by
# another and, for each of a file above the user, prints a "not ok" line
# naming WHOSE order and sets status to 1.
check_calls() {
	# What each object defines: "symbol file".
	defs=$(for f in $order; do nm --defined-only "$f.o" | awk -v f="$f" '$2 ~ /^[TDBR]$/ { print $3, f }'; done)
	calls=0
	for f in $order; do
		mine=$(rank_of "$f")
		for sym in $(nm --undefined-only "$f.o" | awk '{ print $2 }'); do
			to=$(printf '%s\n' "$defs" | awk -v s="$sym" '$1 == s { print $2; exit }')
			[ -n "$to" ] || continue
			calls=$((calls + 1))
			if [ "$(rank_of "$to")" -ge "$mine" ]; then
				echo "not ok: $f.c uses $sym of $to.c, a file above it ($1 layer order)"
				status=1
			fi
		done
	done
}
