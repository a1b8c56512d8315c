# 10 metrics: eventhub.metrics() in a database of its own with METRICS_ORGS
# organizations (three events each) and METRICS_REPLICAS replicas in groups
# of ten: the ten replicas of a group follow the same organizations (so
# their configuration hashes are compared), first F = 1,000 organizations
# each (each organization followed by one group: 100,000 progress rows at
# full scale), then 10,000 (a million rows).  The replicas report their
# progress as replicas do, with one eventhub.heartbeat() each, which
# records each row's head and the pairs where hashes differ.  One progress
# row in a hundred is behind, one replica is stale and one reports another
# hash here and there.  The time is pgbench's average latency over
# METRICS_CALLS calls, after a warm-up call, each reading the tables (no
# reading kept between them).
# Then publish throughput (8 clients, an organization each, in database
# postgres) with a scrape of the first data set every second (on one
# connection, three calls as the exporter makes them, with the default
# eventhub.metrics_cache_time: the first call reads the tables, the next two
# reuse its reading) against without, in blocks of METRICS_BLOCK seconds.
# Why: a Prometheus scrape must stay fast at scale and cost publishers
# next to nothing.

#      variable          full         smoke
scaled METRICS_ORGS      100000       2000        # organizations of the data set
scaled METRICS_REPLICAS  100          10          # replicas
scaled METRICS_FOLLOW    "1000 10000" "200 2000"  # organizations each replica follows
scaled METRICS_CALLS     10           3
scaled METRICS_BLOCK     5            2           # publish with and without scrapes: blocks of seconds
scaled METRICS_BLOCKS    16           4

# metrics_load F: replicas following F organizations each, in place of those
# of the previous data set (removed, and maintenance run).
metrics_load() {
	PGDATABASE=metrics q >/dev/null <<SQL || fail "loading the metrics data set failed"
SELECT count(eventhub.remove_replica(replica_id)) FROM eventhub.replicas;
SELECT eventhub.run_maintenance();
-- Replica r is in group (r - 1) / 10; group g follows organizations
-- g * F + 1 .. (g + 1) * F, wrapping around.
SELECT count(eventhub.heartbeat('replica-' || r, (
         SELECT jsonb_object_agg('org-' || (((r - 1) / 10 * $1 + i - 1) % $METRICS_ORGS + 1),
                  jsonb_build_object(
                    'revision', CASE WHEN i % 100 = 0 THEN 1 ELSE 3 END,
                    'config_hash', CASE WHEN r = 3 AND i % 1000 = 1 THEN 'other' ELSE 'h' || i % 7 END))
           FROM generate_series(1, $1) i), '{}', '1.0'))
  FROM generate_series(1, $METRICS_REPLICAS) r;
-- Replica 2 stopped an hour ago (the only way to age a heartbeat).
SET eventhub.protect_tables = off;
UPDATE eventhub.replicas SET last_heartbeat = now() - interval '1 hour' WHERE replica_id = 'replica-2';
RESET eventhub.protect_tables;
ANALYZE eventhub.replica_progress;
ANALYZE eventhub.config_splits;
SQL
}
# metrics_time F: times METRICS_CALLS calls that each read the tables (the
# session keeps no reading: eventhub.metrics_cache_time 0); sets MS.
metrics_time() {
	echo "SELECT count(*) FROM eventhub.metrics();" >"$work/metrics.sql"
	PGDATABASE=metrics q -c "SELECT count(*) FROM eventhub.metrics()" >/dev/null || fail "eventhub.metrics() failed"
	PGOPTIONS='-c eventhub.metrics_cache_time=0' PGDATABASE=metrics pgb -c 1 -t "$METRICS_CALLS" -f "$work/metrics.sql" >"$out/metrics_$1.log" 2>&1 ||
		fail "pgbench of eventhub.metrics() failed: $(tail -5 "$out/metrics_$1.log")"
	MS=$(latency_of "$out/metrics_$1.log")
}
# scrape_blocks STOPFILE B0: a scrape every second, three eventhub.metrics()
# calls on one connection as prometheus/postgres-exporter-queries.yml makes
# them (prometheus-postgres-exporter keeps one connection; a new psql and
# backend every second alone cost publishers about 9%: docs/performance.md),
# in the "with" blocks only.  Blocks are METRICS_BLOCK seconds of the clock;
# block b is the (b - B0)th of the run, "with" when that is 2 or 3 modulo 4:
# without, with, with, without, ... (ABBA: a steady drift of throughput
# weighs the same on both).  Each scrape starts on a whole second.
scrape_blocks() {
	local stop=$1 b0=$2 now rb
	while [ ! -f "$stop" ]; do
		now=$(date +%s.%N)
		rb=$((${now%.*} / METRICS_BLOCK - b0))
		if ((rb % 4 == 2 || rb % 4 == 3)); then
			echo "SELECT count(*) FROM eventhub.metrics(); SELECT count(*) FROM eventhub.metrics(); SELECT count(*) FROM eventhub.metrics();"
		fi
		sleep "$(awk -v n="$now" 'BEGIN { printf "%.3f", 1 - (n - int(n)) }')"
	done | PGDATABASE=metrics q >/dev/null
}
# scrape_ratio LOG B0: from pgbench's per-second progress lines (with
# --progress-timestamp), publish throughput in the "with" seconds against
# the "without" ones, over blocks 1..METRICS_BLOCKS of the run.  A second
# (t - 1, t] belongs to the block of the whole second in it (the one
# scrape it may hold); the first second of each block is left out (a scrape
# of the block before may spill into it).  Prints "ratio with without min
# max": the ratio of the mean tps, its tps, and the least and greatest ratio
# of a "with" block against the mean of the "without" blocks beside it.
scrape_ratio() {
	awk -v b0="$2" -v bs="$METRICS_BLOCK" -v nb="$METRICS_BLOCKS" '
	/^progress: / {
		t = $2 + 0; s = int(t); rb = int(s / bs) - b0
		if (rb < 1 || rb > nb || int((s - 1) / bs) - b0 != rb) next
		with = (rb % 4 == 2 || rb % 4 == 3)
		sum[with] += $4; n[with]++
		bsum[rb] += $4; bn[rb]++
	}
	END {
		if (!n[0] || !n[1]) exit 1
		w = sum[1] / n[1]; wo = sum[0] / n[0]
		min = 1e9; max = 0
		for (rb = 1; rb <= nb; rb++) {
			if (!(rb % 4 == 2 || rb % 4 == 3) || !bn[rb]) continue
			k = 0; o = 0
			for (d = -1; d <= 1; d += 2) {
				x = rb + d
				while (x >= 1 && x <= nb && (x % 4 == 2 || x % 4 == 3)) x += d
				if (x >= 1 && x <= nb && bn[x]) { o += bsum[x] / bn[x]; k++ }
			}
			if (!k) continue
			r = (bsum[rb] / bn[rb]) / (o / k)
			if (r < min) min = r; if (r > max) max = r
		}
		printf "%.3f %.1f %.1f %.3f %.3f\n", w / wo, w, wo, min, max
	}' "$1"
}
# scrape_point F: publish throughput while the data set of F organizations
# a replica is scraped, in blocks with and without; a row, and SCRAPE_JSON.
scrape_point() {
	local f=$1 b0 stop scraper t t_with t_without r_min r_max
	b0=$(($(date +%s) / METRICS_BLOCK))
	stop=$out/scrape_stop
	scrape_blocks "$stop" "$b0" &
	scraper=$!
	bgpids+=("$scraper")
	# To the end of block METRICS_BLOCKS, from within block 0.
	t=$(((b0 + METRICS_BLOCKS + 1) * METRICS_BLOCK - $(date +%s) + 1))
	tps_point "$out/scrape_blocks.log" -c 8 -j 2 -T "$t" --progress=1 --progress-timestamp -f "$work/publish_own.sql"
	touch "$stop"
	wait "$scraper" || fail "the scrapes failed"
	read -r RATIO t_with t_without r_min r_max < <(scrape_ratio "$out/scrape_blocks.log" "$b0") ||
		fail "no seconds with and without scrapes in $out/scrape_blocks.log"
	row "10. publish with a metrics scrape every second ($f per replica)/without, 8 clients, blocks of ${METRICS_BLOCK} s" \
		"$RATIO ($(printf %.0f "$t_with")/$(printf %.0f "$t_without") tps; blocks $r_min-$r_max)" ">= 0.98" "$(verdict "$RATIO" 0.98)"
	SCRAPE_JSON="{\"followed_per_replica\": $f, \"tps_with\": $t_with, \"tps_without\": $t_without, \"ratio\": $RATIO, \"block_seconds\": $METRICS_BLOCK, \"blocks\": $METRICS_BLOCKS, \"block_ratio_min\": $r_min, \"block_ratio_max\": $r_max}"
}

say "10/18 eventhub.metrics() with $METRICS_ORGS organizations and $METRICS_REPLICAS replicas; publish throughput with a scrape every second ($METRICS_BLOCKS alternating blocks of ${METRICS_BLOCK} s)"
q -c "CREATE DATABASE metrics" >/dev/null || fail "creating database metrics failed"
PGDATABASE=metrics q >/dev/null <<SQL || fail "setting up the metrics data set failed"
CREATE EXTENSION eventhub;
SET eventhub.protect_tables = off;
INSERT INTO eventhub.organization_states
SELECT 'org-' || i, gen_random_uuid(), 3, now() - interval '10 minutes', 0 FROM generate_series(1, $METRICS_ORGS) i;
INSERT INTO eventhub.events
SELECT 'org-' || i, r, gen_random_uuid(), now() - interval '10 minutes' + r * interval '1 minute', now(),
       'API', 'UPDATE', 'api', gen_random_uuid()::text, '{}', r
  FROM generate_series(1, $METRICS_ORGS) i, generate_series(1, 3) r;
ANALYZE;
SQL
json10=()
SCRAPE_JSON=null
for f in $METRICS_FOLLOW; do
	metrics_load "$f"
	metrics_time "$f"
	n=$((f * METRICS_REPLICAS))
	row "10. eventhub.metrics(), $METRICS_ORGS organizations, $METRICS_REPLICAS replicas following $f each ($n progress rows), ms" \
		"$MS" "< 50" "$(awk "BEGIN { print ($MS < 50) ? \"PASS\" : \"MISS\" }")"
	json10+=("{\"organizations\": $METRICS_ORGS, \"replicas\": $METRICS_REPLICAS, \"followed_per_replica\": $f, \"progress_rows\": $n, \"ms\": $MS}")
	# Publishing while the first data set is scraped, in blocks.
	if [ "$SCRAPE_JSON" = null ]; then scrape_point "$f"; fi
done
jadd metrics "{\"calls\": $(jlist "${json10[@]}"), \"publish_with_scrapes\": $SCRAPE_JSON}"
q -c "DROP DATABASE metrics" >/dev/null || fail "dropping database metrics failed"
