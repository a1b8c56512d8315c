# 022_snapshot.pl: the differential test of snapshots, compaction and
# transaction boundaries (docs/protocol.md, "Bootstrap from a snapshot").
#
# An application publishes its changes in the transactions that change its
# own table of entities (app.entities) and keeps every event aside
# (app.history); an aborted transaction rolls all three back.  Each of RUNS
# runs (EVENTHUB_SNAPSHOT_RUNS, 50) has its own organization run-N:
#
#   1. 4 pgbench publishers create, update and delete entities of 3 types x
#      200 ids, 1-3 events per transaction, about 10% rolled back;
#   2. they go on while cold consumers bootstrap from a snapshot and follow:
#      `eventhub watch --snapshot` (the library), a plain SQL consumer (one
#      REPEATABLE READ transaction of snapshot_head and snapshot_entities
#      pages, then events_since from its head) and, every 5th run, the Go
#      and Python reference consumers; at the quiescent point each one's
#      entity map equals app.entities (digests), and eventhub's events are
#      exactly app.history;
#   3. retention (cleanup_events up to clock_timestamp(), compaction on):
#      every live entity's latest event is kept, no superseded event older
#      than the cutoff remains, and a second pass leaves exactly the live
#      entities' latest events;
#   4. publishing goes on with another cold consumer and a retention pass
#      while it runs; at the quiescent point every map equals app.entities
#      again, and every event line of the CLI carries its transaction's
#      first revision and end as app.history's transactions say.
#
# Then: a transaction of 3 events among concurrent publishers is one group in
# the CLI's output; a snapshot page's plan is the ordered index scan; a
# consumer whose cursor retention removed, and one whose history a failover
# rewrote (a promoted standby), resync from a snapshot and converge, with the
# CLI and both reference consumers.  The seed (EVENTHUB_SEED, default the
# time; it drives the publishers' pgbench --random-seed) is printed first,
# and again after a failure: rerun with it (docs/testing.md).

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $seed = length($ENV{EVENTHUB_SEED} // '') ? $ENV{EVENTHUB_SEED} : time();
note("seed $seed: rerun with EVENTHUB_SEED=$seed");
my $runs = $ENV{EVENTHUB_SNAPSHOT_RUNS} || 50;
my $dir = PostgreSQL::Test::Utils::tempdir();

# The reference consumers, when their toolchains are there (as in 013).
my $pgx = '/usr/share/gocode/src/github.com/jackc/pgx/v4';
my $have_go = IPC::Run::run([ 'sh', '-c', 'command -v go' ], '>', \my $go_path) && -d $pgx;
my $have_python = -x '/usr/bin/python3' && IPC::Run::run([ '/usr/bin/python3', '-c', 'import psycopg' ], '2>', \my $py_err);
my $ref_skip = !$have_go ? "go or pgx v4 is not installed (golang-go, golang-github-jackc-pgx-v4-dev)"
  : !$have_python ? 'psycopg 3 is not installed (python3-psycopg)' : '';
note("reference consumers skipped: $ref_skip") if $ref_skip;
# The Go consumer builds while the first runs go on.
my $go_build;
unless ($ref_skip)
{
	$go_build = start_process(go_example_build($dir));
}
my %command = (go => ["$dir/consumer-go"], python => [ '/usr/bin/python3', "$work/examples/python/consumer.py" ]);

# Retention runs only when the test runs it.
my $node = eventhub_node('snapshot', init => { allows_streaming => 1 }, maintenance_interval => '1h',
	retention => '1h', conf => "eventhub.compaction = on\nmax_connections = 40");

# The application: its table, the history kept aside, and one change of an
# entity that publishes its event in the same transaction.  The entity's
# state is read without a lock, as a careless application would: another
# transaction may change it meanwhile, and then this one publishes a CREATE
# of a live entity or a DELETE of a gone one.  Everything after publish_event
# runs under the organization's lock, in revision order, so the table always
# equals what folding the events gives.
$node->safe_psql('postgres', q{
CREATE SCHEMA app;
CREATE TABLE app.entities (
    organization_id text COLLATE "C", event_type text COLLATE "C", entity_id text COLLATE "C",
    event_data jsonb NOT NULL, revision bigint NOT NULL,
    PRIMARY KEY (organization_id, event_type, entity_id));
CREATE TABLE app.history (
    organization_id text COLLATE "C", revision bigint, xact xid8 NOT NULL,
    event_type text COLLATE "C" NOT NULL, entity_id text COLLATE "C" NOT NULL, action text NOT NULL,
    event_data jsonb NOT NULL,
    PRIMARY KEY (organization_id, revision));
CREATE FUNCTION app.change(org text, t integer, i integer, w integer, v integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    typ text := (ARRAY['API', 'CERTIFICATE', 'LLM_TEMPLATE'])[t];
    id text := 'e-' || i;
    act text;
    data jsonb := '{}';
    rev bigint;
BEGIN
    IF EXISTS (SELECT FROM app.entities e WHERE e.organization_id = org AND e.event_type = typ AND e.entity_id = id) THEN
        act := CASE WHEN w <= 3 THEN 'DELETE' ELSE 'UPDATE' END;
    ELSE
        act := CASE WHEN w <= 1 THEN 'DELETE' ELSE 'CREATE' END;
    END IF;
    IF act <> 'DELETE' THEN
        data := jsonb_build_object('name', id, 'v', v, 'tags', jsonb_build_array(t, w, 'q"b\s'),
                                   'spec', jsonb_build_object('z', v % 7 = 0, 'a', NULL, 'm', v * 3, 'k', 'x-' || v));
    END IF;
    rev := eventhub.publish_event(org, typ, act, id, NULL, data);
    IF act = 'DELETE' THEN
        DELETE FROM app.entities e WHERE e.organization_id = org AND e.event_type = typ AND e.entity_id = id;
    ELSE
        INSERT INTO app.entities VALUES (org, typ, id, data, rev)
            ON CONFLICT (organization_id, event_type, entity_id)
            DO UPDATE SET event_data = excluded.event_data, revision = excluded.revision;
    END IF;
    INSERT INTO app.history VALUES (org, rev, pg_current_xact_id(), typ, id, act, data);
    RETURN rev;
END $$;
-- A consumer in plain SQL, as docs/protocol.md describes it: call in a
-- REPEATABLE READ transaction.  A first row with the head, then the
-- entities, read in keyset pages of page rows.
CREATE FUNCTION app.read_snapshot(org text, page integer)
RETURNS TABLE (r_type text, r_id text, r_data jsonb, r_head bigint, r_version uuid)
LANGUAGE plpgsql AS $$
DECLARE
    h record;
    n integer;
BEGIN
    SELECT * INTO h FROM eventhub.snapshot_head(org);
    r_head := h.revision;
    r_version := h.version_id;
    RETURN NEXT;
    LOOP
        n := 0;
        FOR r_type, r_id, r_data IN
            SELECT s.event_type, s.entity_id, s.event_data
              FROM eventhub.snapshot_entities(org, h.revision, r_type, r_id, page, NULL, h.version_id) s
        LOOP
            n := n + 1;
            RETURN NEXT;
        END LOOP;
        EXIT WHEN n < page;
    END LOOP;
END $$;
});

# The test's own queries on the node go through one session (psql started
# once), until the failover.
my $session = $node->background_psql('postgres');
$session->set_query_timer_restart;

# via(NODE?): query's options for NODE (the node by default): the session
# while there is one and NODE is the node.
sub via
{
	my ($server) = @_;
	return $session && (!$server || $server == $node) ? (session => $session) : ();
}

# The publishers' transaction: 1-3 changes, one in ten rolled back.
my $script = "$dir/publish.sql";
PostgreSQL::Test::Utils::append_to_file($script, join '',
	"\\set n random(1, 3)\n\\set rollback random(1, 10)\n",
	(map { "\\set t$_ random(1, 3)\n\\set i$_ random_zipfian(1, 200, 1.1)\n\\set w$_ random(1, 10)\n\\set v$_ random(1, 1000000)\n" } 1 .. 3),
	"BEGIN;\n",
	(map { ($_ > 1 ? "\\if :n >= $_\n" : '') . "SELECT app.change(':org', :t$_, :i$_, :w$_, :v$_);\n" . ($_ > 1 ? "\\endif\n" : '') } 1 .. 3),
	"\\if :rollback = 1\nROLLBACK;\n\\else\nCOMMIT;\n\\endif\n");

# publishers(ORG, TRANSACTIONS, NODE?): 4 pgbench clients publishing to ORG,
# TRANSACTIONS each, in the background.
my $pgbench_seq = 0;

sub publishers
{
	my ($org, $transactions, $server) = @_;
	return start_pgbench_publishers($server // $node, $script, transactions => $transactions,
		seed => $seed + $pgbench_seq++, define => { org => $org });
}

sub finish_publishers
{
	my ($p, $what) = @_;
	is(finish_cli($p), 0, "$what: the publishers succeed") or diag($p->{err});
}

# Consumers.  Each is a handle with kind (cli, sql, go, python), org, out,
# err and h; done(C, HEAD) says whether it is caught up at HEAD, map(C) or
# digest(C) is what it holds.
my $connstr = $node->connstr('postgres');

sub start_watch_snapshot
{
	my ($org, $conn, @args) = @_;
	my $c = start_watch($conn // $connstr, '--org', $org, '--snapshot', '--timeout', 600, @args);
	@$c{qw(kind org)} = ('cli', $org);
	return $c;
}

sub start_reference
{
	my ($lang, $org, %opt) = @_;
	my $c = { kind => $lang, org => $org, out => '', err => '' };
	$c->{h} = IPC::Run::start(
		[ @{ $command{$lang} }, '--conninfo', ($opt{server} // $node)->connstr('postgres') . " application_name=ref-$lang",
			'--org', $org, '--cursor-file', "$dir/cursor-$org-$lang.json", '--snapshot',
			'--poll-interval-ms', 200, '--timeout', 600 ],
		'<', \'', '>', \$c->{out}, '2>', \$c->{err}, IPC::Run::timeout(3 * $PostgreSQL::Test::Utils::timeout_default));
	return $c;
}

# The SQL consumer's snapshot: read now, in the background.
sub start_sql_snapshot
{
	my ($org) = @_;
	my $c = start_process([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $connstr,
		'-c', 'BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY',
		'-c', "SELECT json_build_array(r_type, r_id, r_data, r_head, r_version) FROM app.read_snapshot('$org', 7)",
		'-c', 'COMMIT' ]);
	@$c{qw(kind org)} = ('sql', $org);
	return $c;
}

# The SQL consumer's map: its snapshot, then events_since from its head.
sub sql_consumer_map
{
	my ($c) = @_;
	$c->{h}->finish;
	is($c->{h}->result(0), 0, "the SQL consumer's snapshot of $c->{org} is read") or diag($c->{err});
	my ($first, @rows) = map { decode_json($_) } split /\n/, $c->{out};
	my %map = map { ("$_->[0]\t$_->[1]" => $_->[2]) } @rows;
	my $events = query($node,
		"SELECT json_agg(json_build_array(event_type, entity_id, action, event_data) ORDER BY revision)"
		  . " FROM eventhub.events_since('$c->{org}', $first->[3], 1000000, "
		  . (defined $first->[4] ? "'$first->[4]'" : 'NULL') . ')', via());
	for my $e (@{ $events eq '' ? [] : decode_json($events) })
	{
		if ($e->[2] eq 'DELETE') { delete $map{"$e->[0]\t$e->[1]"} }
		else { $map{"$e->[0]\t$e->[1]"} = $e->[3] }
	}
	return \%map;
}

# The last DIGEST line of a reference consumer: (revision, digest).
sub last_digest
{
	my ($c) = @_;
	my @d = $c->{out} =~ /^DIGEST \Q$c->{org}\E (\d+) ([0-9a-f]{64})$/mg;
	return @d ? @d[ -2, -1 ] : (-1, '');
}

# caught_up(C, HEAD): C applied everything up to HEAD.
sub caught_up
{
	my ($c, $head) = @_;
	return $c->{kind} eq 'cli' ? (fold_watch_lines(watch_lines($c))->{ $c->{org} }{revision} // -1) == $head
	  : $c->{kind} eq 'sql' ? !$c->{h}->pumpable
	  :                       (last_digest($c))[0] == $head;
}

# converged(WHAT, NODE, ORG, CONSUMERS): waits until each consumer is at ORG's
# head, then checks that its map equals app.entities.
sub converged
{
	my ($what, $server, $org, @cs) = @_;
	my ($head) = org_head($server, $org, via($server));
	wait_for(what => "$what: consumers at $head", pump => \@cs,
		until => sub { !grep { !caught_up($_, $head) } @cs })
	  or return fail("$what: every consumer reaches the head $head");
	my $app = map_digest(app_map($server, $org, via($server)));
	my $app_text = app_digest($server, $org, via($server));
	for my $c (@cs)
	{
		if ($c->{kind} eq 'cli' || $c->{kind} eq 'sql')
		{
			my $map = $c->{kind} eq 'cli' ? fold_watch_lines(watch_lines($c))->{$org}{map} : sql_consumer_map($c);
			is(map_digest($map), $app, "$what: " . ($c->{name} // $c->{kind}) . "'s map equals app.entities at $head")
			  or diag(explain({ consumer => $map, app => app_map($server, $org) }));
		}
		else
		{
			is((last_digest($c))[1], $app_text, "$what: $c->{kind}'s DIGEST at $head equals app.entities'")
			  or diag("$c->{kind} stdout:\n$c->{out}\nstderr:\n$c->{err}");
		}
	}
	return 1;
}

sub stop_consumer
{
	my ($c) = @_;
	return unless $c->{h}->pumpable;
	$c->{h}->signal('TERM');
	$c->{h}->finish;
}

# The history kept aside and the events: equal (before any retention), or
# each kept event equal to its history row.
sub history_check
{
	my ($org, $kept_only, $server) = @_;
	my $join = $kept_only ? 'LEFT JOIN' : 'FULL JOIN';
	return query($server // $node, qq{
		SELECT count(*) FROM (SELECT * FROM eventhub.events WHERE organization_id = '$org') e
		  $join (SELECT * FROM app.history WHERE organization_id = '$org') h USING (organization_id, revision)
		 WHERE h.revision IS NULL OR e.revision IS NULL OR e.event_type <> h.event_type OR e.entity_id <> h.entity_id
		    OR e.action <> h.action OR e.event_data <> h.event_data
		    OR coalesce(e.transaction_first_revision, -1)
		       <> (SELECT min(x.revision) FROM app.history x WHERE x.organization_id = '$org' AND x.xact = h.xact)}, via($server));
}

# Each entity's latest event, from the history: the live ones' revisions.
sub live_latest_sql
{
	my ($org) = @_;
	return qq{SELECT revision FROM (SELECT DISTINCT ON (event_type, entity_id) revision, action FROM app.history
		 WHERE organization_id = '$org' ORDER BY event_type, entity_id, revision DESC) l WHERE action <> 'DELETE'};
}

# The CLI's event lines against the transactions of app.history.
sub transactions_check
{
	my ($what, $c) = @_;
	my %want = map { my ($r, $f, $e) = split /\|/; ($r => "$f $e") } split /\n/, query($node, qq{
		SELECT revision, min(revision) OVER w, revision = max(revision) OVER w
		  FROM app.history WHERE organization_id = '$c->{org}' WINDOW w AS (PARTITION BY xact)}, via());
	my @events = @{ fold_watch_lines(watch_lines($c))->{ $c->{org} }{events} // [] };
	my @bad = grep {
		my $t = "$_->{transaction_first_revision} " . ($_->{transaction_end} ? 't' : 'f');
		$t ne ($want{ $_->{revision} } // 'none')
	} @events;
	is(scalar(@bad), 0, "$what: each of the " . ($c->{name} // 'cli') . "'s " . scalar(@events) . ' events names its transaction\'s first revision and end')
	  or diag(explain([ map { "$_->{revision}: $_->{transaction_first_revision} $_->{transaction_end}, want "
			  . ($want{ $_->{revision} } // 'none') } @bad[ 0 .. ($#bad < 5 ? $#bad : 5) ] ]));
}

# The reference consumers' TXN lines against app.history's transactions.
sub txn_lines_check
{
	my ($what, $c) = @_;
	my %want = map { ($_ => 1) } split /\n/, query($node, qq{
		SELECT format('%s %s %s', min(revision), max(revision), count(*)) FROM app.history
		 WHERE organization_id = '$c->{org}' GROUP BY xact}, via());
	my @txn = $c->{out} =~ /^TXN \Q$c->{org}\E (\d+ \d+ \d+)$/mg;
	my @bad = grep { !$want{$_} } @txn;
	is(scalar(@bad), 0, "$what: each of $c->{kind}'s " . scalar(@txn) . ' TXN lines is one whole transaction')
	  or diag("not transactions: @bad");
}

# The runs.
for my $run (1 .. $runs)
{
	my $org = "run-$run";
	my $what = "run $run";
	my $refs = !$ref_skip && $run % 5 == 0;
	if ($refs && $go_build)
	{
		is(finish_cli($go_build), 0, 'the Go consumer builds offline with Debian\'s pgx v4')
		  or BAIL_OUT($go_build->{err});
		undef $go_build;
	}

	# 1. History before the consumers.
	finish_publishers(publishers($org, 5), "$what, before the consumers");
	my ($h0) = org_head($node, $org, via());

	# 2. Cold consumers start while publishing goes on.
	my $p = publishers($org, 10);
	wait_for(what => "$what: publishing", pump => [$p], until => sub { (org_head($node, $org, via()))[0] > $h0 || !$p->{h}->pumpable });
	my @consumers = (start_sql_snapshot($org));
	push @consumers, start_watch_snapshot($org, undef, $run % 2 ? ('--batch-bytes', 2000) : ());
	push @consumers, map { start_reference($_, $org) } qw(go python) if $refs;
	finish_publishers($p, "$what, with cold consumers");
	is(history_check($org), 0, "$what: the events are exactly the history kept aside");
	converged("$what, quiescent", $node, $org, @consumers);
	my ($sql) = grep { $_->{kind} eq 'sql' } @consumers;
	@consumers = grep { $_ != $sql } @consumers;

	# 3. Retention at a quiescent point.
	my $superseded = query($node,
		"SELECT count(*) FROM app.history WHERE organization_id = '$org' AND revision NOT IN (" . live_latest_sql($org) . ')', via());
	my $cutoff = query($node, 'SELECT clock_timestamp()', via());
	query($node, "SELECT eventhub.cleanup_events('$cutoff')", via());
	is( query($node, qq{
			SELECT count(*) FROM (} . live_latest_sql($org) . qq{) l
			 WHERE NOT EXISTS (SELECT FROM eventhub.events e WHERE e.organization_id = '$org' AND e.revision = l.revision)}, via()),
		0, "$what: retention kept every live entity's latest event");
	is( query($node, qq{
			SELECT count(*) FROM eventhub.events e WHERE e.organization_id = '$org' AND e.processed_timestamp < '$cutoff'
			   AND EXISTS (SELECT FROM app.history h WHERE h.organization_id = e.organization_id
			                  AND h.event_type = e.event_type AND h.entity_id = e.entity_id AND h.revision > e.revision)}, via()),
		0, "$what: no superseded event older than the cutoff remains");
	# Tombstones whose older events went in that pass go in the next.
	query($node, "SELECT eventhub.cleanup_events(clock_timestamp())", via());
	is( query($node,
			"SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events WHERE organization_id = '$org'", via()),
		query($node, 'SELECT string_agg(revision::text, \',\' ORDER BY revision) FROM (' . live_latest_sql($org) . ') l', via()),
		"$what: a second pass leaves exactly the live entities' latest events ($superseded superseded or deleted removed)");

	# 4. Publishing again, with a late cold consumer (a compacted history)
	# and retention while it runs.
	my ($h1) = org_head($node, $org, via());
	$p = publishers($org, 10);
	wait_for(what => "$what: publishing again", pump => [$p], until => sub { (org_head($node, $org, via()))[0] > $h1 || !$p->{h}->pumpable });
	push @consumers, start_watch_snapshot($org);
	$consumers[-1]{name} = 'late cli';
	query($node, 'SELECT eventhub.cleanup_events(clock_timestamp())', via());
	finish_publishers($p, "$what, with retention");
	is(history_check($org, 1), 0, "$what: each kept event is its history row");
	is( query($node, qq{
			SELECT count(*) FROM (} . live_latest_sql($org) . qq{) l
			 WHERE NOT EXISTS (SELECT FROM eventhub.events e WHERE e.organization_id = '$org' AND e.revision = l.revision)}, via()),
		0, "$what: retention during publishing kept every live entity's latest event");
	converged("$what, after retention", $node, $org, @consumers);
	for my $c (@consumers)
	{
		if ($c->{kind} eq 'cli') { transactions_check($what, $c) }
		else { txn_lines_check($what, $c) }
		stop_consumer($c);
	}
}

# pid(C): the process of a consumer's handle.
sub pid { return $_[0]{h}{KIDS}[0]{PID} }

# snapshots(C): the reasons of C's completed snapshots, in order ("initial",
# "history_removed", "version_mismatch", "cursor_ahead"); a reference
# consumer's SNAPSHOT line has the reason of the RESYNC line before it.
my %reason = (ZE001 => 'history_removed', ZE002 => 'cursor_ahead', ZE003 => 'version_mismatch');

sub snapshots
{
	my ($c) = @_;
	return map { $_->{reason} } @{ fold_watch_lines(watch_lines($c))->{ $c->{org} }{snapshots} }
	  if $c->{kind} eq 'cli';
	my @reasons;
	my $resync = 'initial';
	for my $line ($c->{out} =~ /^((?:RESYNC|SNAPSHOT) \Q$c->{org}\E .*)$/mg)
	{
		if ($line =~ /^RESYNC \S+ (\w+)/) { $resync = $reason{$1} // $1 }
		else { push @reasons, $resync; $resync = 'initial' }
	}
	return @reasons;
}

# A transaction of 3 events among concurrent publishers: one group in the
# CLI's output, with a --batch-bytes above its size and below two of them.
{
	my $org = 'three';
	finish_publishers(publishers($org, 3), 'three: history');
	my $w = start_watch_snapshot($org, undef, '--batch-bytes', 1500);
	converged('three: bootstrapped', $node, $org, $w);
	my $p = publishers($org, 10);
	my $first = query($node, qq{
		BEGIN;
		SELECT min(app.change('$org', 1, 1000 + i, 10, i)) FROM generate_series(1, 3) i;
		COMMIT;}, via());
	finish_publishers($p, 'three: concurrent publishers');
	converged('three', $node, $org, $w);
	is( join(' ', map { "$_->{revision}:$_->{transaction_first_revision}:" . ($_->{transaction_end} ? 'end' : '') }
			  grep { $_->{revision} >= $first && $_->{revision} < $first + 3 } @{ fold_watch_lines(watch_lines($w))->{$org}{events} }),
		join(' ', "$first:$first:", ($first + 1) . ":$first:", ($first + 2) . ":$first:end"),
		'three: the CLI marks the 3 events as one transaction, ended by the last');
	transactions_check('three', $w);
	stop_consumer($w);
}

# The snapshot's pages are an ordered scan of events_entity_idx, which
# stops at the page's end (design: the generic plan with a fast start).
{
	my ($ret, $out, $err) = $node->psql('postgres', q{
		LOAD 'auto_explain';
		SET auto_explain.log_min_duration = 0;
		SET auto_explain.log_nested_statements = on;
		SET auto_explain.log_level = notice;
		BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;
		SELECT count(*) FROM eventhub.snapshot_entities('run-1', (SELECT revision FROM eventhub.snapshot_head('run-1')),
		                                                'API', 'e-5', 10);
		COMMIT;});
	like($err, qr/Index Scan using events_entity_idx on events/, 'the snapshot page is an index scan of events_entity_idx')
	  or diag($err);
}

# Consumers whose cursor retention removed: stopped at the head, then
# events they have not seen are superseded and removed.
{
	my $org = 'removed';
	finish_publishers(publishers($org, 5), 'removed: history');
	my @cs = (start_watch_snapshot($org), ($ref_skip ? () : map { start_reference($_, $org) } qw(go python)));
	converged('removed: bootstrapped', $node, $org, @cs);
	my ($cursor) = org_head($node, $org, via());
	# Notifications without their events while they are stopped: the
	# library would otherwise find the events in the notifications its
	# connection received meanwhile, with no need to fetch what retention
	# removes (026 tests that path).
	reload_settings($node, 'eventhub.notification_events = off', worker => 0) or die 'the reload did not happen';
	kill 'STOP', pid($_) for @cs;
	# Two changes of one entity in two transactions: the first is superseded.
	query($node, "SELECT app.change('$org', 1, 1, 10, $_)", via()) for 1, 2;
	finish_publishers(publishers($org, 5), 'removed: while they are stopped');
	query($node, 'SELECT eventhub.cleanup_events(clock_timestamp())', via());
	my (undef, undef, $err) =
	  $node->psql('postgres', "\\set VERBOSITY sqlstate\nSELECT count(*) FROM eventhub.events_since('$org', $cursor)");
	like($err, qr/ZE001/, 'removed: events after their cursor are gone (ZE001)');
	kill 'CONT', pid($_) for @cs;
	converged('removed: resynced', $node, $org, @cs);
	reload_settings($node, 'eventhub.notification_events = on', worker => 0) or die 'the reload did not happen';
	for my $c (@cs)
	{
		is_deeply([ snapshots($c) ], [ 'initial', 'history_removed' ],
			"removed: $c->{kind} bootstrapped, then resynced from a snapshot")
		  or diag("stdout:\n$c->{out}\nstderr:\n$c->{err}");
		stop_consumer($c);
	}
}

# Consumers whose history a failover rewrote: the standby stops receiving,
# the primary publishes more, which they apply, the primary dies and the
# promoted standby publishes a longer, different history.  The CLI keeps
# running through it (on both servers' addresses); the reference consumers
# restart from their cursor files.
{
	my $org = 'failover';
	finish_publishers(publishers($org, 5), 'failover: history');
	my $standby = eventhub_standby($node, 'standby');
	my $multi = sprintf('host=%s,%s port=%s,%s dbname=postgres target_session_attrs=read-write',
		$node->host, $standby->host, $node->port, $standby->port);
	my @cs = (start_watch_snapshot($org, $multi),
		($ref_skip ? () : map { start_reference($_, $org) } qw(go python)));
	converged('failover: bootstrapped', $node, $org, @cs);
	$node->wait_for_catchup($standby);
	$standby->stop;
	finish_publishers(publishers($org, 5), 'failover: the history the standby never receives');
	converged('failover: the lost history applied', $node, $org, @cs);
	my ($lost_head) = org_head($node, $org, via());
	my @refs = grep { $_->{kind} ne 'cli' } @cs;
	for my $c (@refs)
	{
		my $file = "$dir/cursor-$org-$c->{kind}.json";
		ok( wait_for(what => "$c->{kind}'s cursor file", pump => [$c],
				until => sub { -e $file && (decode_json(slurp_file($file))->{$org}{revision} // 0) == $lost_head }),
			"failover: $c->{kind}'s cursor file holds $lost_head");
		$c->{h}->signal('KILL');
		$c->{h}->finish;
	}
	my @kept = grep { $_->{kind} eq 'cli' } @cs;
	kill 'STOP', pid($_) for @kept;
	$session->quit;
	undef $session;
	$node->stop('immediate');
	$standby->start;
	$standby->promote;
	finish_publishers(publishers($org, 5, $standby), 'failover: the new history')
	  while (org_head($standby, $org, via($standby)))[0] <= $lost_head;
	kill 'CONT', pid($_) for @kept;
	@cs = (@kept, map { start_reference($_->{kind}, $org, server => $standby) } @refs);
	converged('failover: resynced', $standby, $org, @cs);
	for my $c (@cs)
	{
		is_deeply([ snapshots($c) ], $c->{kind} eq 'cli' ? [ 'initial', 'version_mismatch' ] : ['version_mismatch'],
			"failover: $c->{kind} resynced from a snapshot")
		  or diag("stdout:\n$c->{out}\nstderr:\n$c->{err}");
		stop_consumer($c);
	}
	$standby->stop;
}

diag("seed $seed: rerun with EVENTHUB_SEED=$seed") unless Test::More->builder->is_passing;
done_testing();
