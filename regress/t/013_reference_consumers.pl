# 013_reference_consumers.pl: the example consumers.  The Python one
# (examples/python, psycopg 3) is written from docs/protocol.md alone; the Go
# one (examples/go) is the Go package's example (go/, pgx v4).  Both print
# the same lines, and run side by side through:
#
#   1. the kept history replayed from 0, then a stream woken by
#      notifications only (their poll interval is beyond the test);
#   2. their backends terminated (found by application_name);
#   3. a server restart;
#   4. forged notifications, and the zero token ("poll now");
#   5. a kill, then histories rewritten under their stored cursors: one
#      diverged past the cursor (ZE003), one diverged ending exactly at the
#      cursor's revision (ZE003: only the version tells), one cut below the
#      cursor (ZE002), one untouched that moved on; restarted from their
#      cursor files, each prints the resync, with the head to continue from,
#      before anything else of that organization, and then what follows,
#      including an event only a poll can find (two-phase commit announces
#      nothing);
#   6. events removed by a cleanup before a running consumer saw them
#      (ZE001), and the resync order: an event published while they reload
#      (after they read the head) arrives afterwards;
#   7. a hot standby, where LISTEN is refused: they poll, and listen once it
#      is promoted; with --snapshot, a failover to it from an old primary
#      they followed further is answered with a snapshot;
#   8. --snapshot (with eventhub.compaction on): a cold start from a
#      snapshot of an organization whose early history a cleanup removed, a
#      multi-event transaction applied as one (a TXN line), a resync from a
#      snapshot when a cleanup removed the events after their cursor (ZE001),
#      a restart that goes on from the entities stored with the cursor, a
#      transaction larger than their batch applied as one, a history
#      rewritten under their cursor (ZE003) answered with a snapshot of two
#      pages, and an incomplete snapshot (ZE004) that falls back to the
#      reload.  Each
#      DIGEST line must equal the digest of the application's own table,
#      written in the publishing transactions, and of the server's snapshot.
#
# Every EVENT line is checked against eventhub.events (revision, version,
# action, entity): per organization exactly the revisions after the cursor,
# in order, once.  Skipped only when Go, Debian's pgx v4 sources or
# psycopg 3 are missing (scripts/deps.sh installs them).

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use Digest::SHA qw(sha256_hex);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $pgx = '/usr/share/gocode/src/github.com/jackc/pgx/v4';
plan skip_all => 'go is not installed (golang-go)' unless IPC::Run::run([ 'sh', '-c', 'command -v go' ], '>', \my $go_path);
plan skip_all => "pgx v4 is not installed (golang-github-jackc-pgx-v4-dev): no $pgx" unless -d $pgx;
plan skip_all => 'psycopg 3 is not installed (python3-psycopg)'
  unless -x '/usr/bin/python3' && IPC::Run::run([ '/usr/bin/python3', '-c', 'import psycopg' ], '2>', \my $py_err);
my $dir = PostgreSQL::Test::Utils::tempdir();
# Bounds that only a failure reaches (a wait below: timeout_default): a
# consumer's own --timeout; IPC::Run's, which kills one that outlives all.
my $consumer_timeout = 2 * $PostgreSQL::Test::Utils::timeout_default;
my $backstop = 3 * $PostgreSQL::Test::Utils::timeout_default;

# Build the Go consumer offline (the package's example).
{
	my ($out, $err) = ('', '');
	ok(IPC::Run::run(go_example_build($dir), '>', \$out, '2>', \$err, IPC::Run::timeout(300)),
		'the Go consumer builds offline with Debian\'s pgx v4') or BAIL_OUT($err);
}

my %command = (go => ["$dir/consumer-go"], python => [ '/usr/bin/python3', "$work/examples/python/consumer.py" ]);
my @langs = sort keys %command;

my $node = eventhub_node('consumers', init => { allows_streaming => 1 }, conf => 'max_prepared_transactions = 2');
my @orgs = qw(acme globex hooli initech);

# Starts consumer LANG with ARGS, following @orgs on $node with cursor file
# cursor-LANG.json unless OPT says otherwise; returns a handle with its
# output.
sub start_consumer
{
	my ($lang, $opt, @args) = @_;
	my $c = { lang => $lang, out => '', err => '' };
	my $conninfo = ($opt->{server} // $node)->connstr('postgres') . " application_name=ref-$lang";
	$c->{h} = IPC::Run::start(
		[ @{ $command{$lang} }, '--conninfo', $conninfo, (map { ('--org', $_) } @{ $opt->{orgs} // \@orgs }),
			'--cursor-file', "$dir/" . ($opt->{cursor} // 'cursor') . "-$lang.json", '--timeout', $consumer_timeout, @args ],
		'<', \'', '>', \$c->{out}, '2>', \$c->{err}, IPC::Run::timeout($backstop));
	return $c;
}

# kill_consumer(C): kills consumer C (no orderly exit) and notes its stderr.
sub kill_consumer
{
	my ($c) = @_;
	$c->{h}->signal('KILL');
	$c->{h}->finish;
	note("$c->{lang} stderr:\n$c->{err}");
}

# Complete lines a consumer printed, per organization.
sub lines_by_org
{
	my ($c) = @_;
	my %by_org;
	for my $line ($c->{out} =~ /^(.*)\n/mg)
	{
		my ($org) = $line =~ /^(?:EVENT|RESYNC|SNAPSHOT|TXN|DIGEST) (\S+) / or die "unexpected line from $c->{lang}: $line";
		push @{ $by_org{$org} }, $line;
	}
	return \%by_org;
}

sub line_count { my ($c) = @_; return scalar(() = $c->{out} =~ /\n/g); }

# Pumps every consumer until COND holds for each; false after the deadline
# or if one exited.
sub wait_all
{
	my ($consumers, $cond, $what) = @_;
	return wait_for(what => $what, pump => $consumers, until => sub { !grep { !$cond->($_) } @$consumers });
}

# What a consumer must have printed for ORG's revisions FROM..TO: read from
# eventhub.events.
sub expected_events
{
	my ($org, $from, $to, $server) = @_;
	my $rows = ($server // $node)->safe_psql('postgres',
		"SELECT format('EVENT %s %s %s %s %s', organization_id, revision, version_id, action, entity_id)"
		  . " FROM eventhub.events WHERE organization_id = '$org' AND revision BETWEEN $from AND $to ORDER BY revision");
	return [ split /\n/, $rows ];
}

# 1. The kept history from 0, then a stream woken by notifications only.
publish($node, $_, 5) for @orgs;
my @consumers = map { start_consumer($_, {}, '--poll-interval-ms', 600_000) } @langs;
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 20 }, 'history'), 'both replay the kept history');
publish($node, $_, 3) for qw(acme globex);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 26 }, 'notified'), 'both are woken by notifications');

# 2. Their backends terminated.
my $ours = "application_name IN ('ref-go', 'ref-python') AND backend_type = 'client backend'";
# (The Go consumer has two connections: one listens, one fetches.)
wait_for(what => 'the consumers', node => $node,
	sql => "SELECT count(DISTINCT application_name) = 2 FROM pg_stat_activity WHERE $ours")
  or die "the consumers are not connected";
cmp_ok($node->safe_psql('postgres', "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE $ours"),
	'>=', 2, 'kill: both consumers\' backends terminated');
publish($node, $_, 3) for qw(acme hooli);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 32 }, 'kill'), 'kill: both deliver what followed');
like($_->{err}, qr/reconnecting/, "kill: $_->{lang} reconnected") for @consumers;

# 3. A server restart.
$node->restart;
publish($node, $_, 3) for qw(globex initech);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 38 }, 'restart'), 'restart: both deliver what followed');

# 4. Forged notifications (acme's token with a version never seen, garbage)
# and the zero token: wake-ups only, nothing is repeated.
$node->safe_psql('postgres', q{
	SELECT pg_notify('eventhub', '{"notification_token": "' || eventhub.notification_token('acme')
	  || '", "version_id": "00000000-0000-0000-0000-000000000001"}');
	SELECT pg_notify('eventhub', 'not json');
	SELECT pg_notify('eventhub', '{"notification_token": "00000000000000000000000000000000", "version_id": "00000000-0000-0000-0000-000000000000"}');
});
publish($node, 'hooli', 2);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 40 }, 'forged'), 'forged notifications: both go on');

# Every organization: revisions 1..head exactly once, in order, with the
# version, action and entity of the row.
my %head_before = map { ($_ => (org_head($node, $_))[0]) } @orgs;
for my $c (@consumers)
{
	is_deeply(lines_by_org($c)->{$_}, expected_events($_, 1, $head_before{$_}),
		"$c->{lang}: $_ revisions 1-$head_before{$_}, each once, in order") for @orgs;
}

# 5. Killed, histories rewritten under the stored cursors, restarted.  Once
# a consumer is idle at the heads its cursor file holds them: killing
# it then loses nothing and repeats nothing.
for my $c (@consumers)
{
	my $file = "$dir/cursor-$c->{lang}.json";
	my $stored = sub {
		my $cursors = -e $file ? decode_json(slurp_file($file)) : {};
		return join ',', map { "$_=" . ($cursors->{$_}{revision} // 0) } @orgs;
	};
	my $want = join ',', map { "$_=$head_before{$_}" } @orgs;
	ok(wait_all([$c], sub { $stored->() eq $want }, 'cursor file'), "$c->{lang}: its cursor file holds the heads");
	kill_consumer($c);
	my $cursors = decode_json(slurp_file($file));
	my $last_printed = { map { ($_ => lines_by_org($c)->{$_}[-1]) } @orgs };
	is_deeply(
		{ map { ($_ => "$cursors->{$_}{revision} $cursors->{$_}{version_id}") } @orgs },
		{ map { ($_ => join(' ', (split / /, $last_printed->{$_})[ 2, 3 ])) } @orgs },
		"$c->{lang}: the cursor file holds the revision and version of the last event printed");
}
is_deeply(\%head_before, { acme => 11, globex => 11, hooli => 10, initech => 8 },
	'the stored cursors are at the heads');

# rewrite ORG: keep revisions up to KEEP, then publish N different events.
sub rewrite
{
	my ($org, $keep, $n) = @_;
	$node->safe_psql('postgres', qq{
		SET eventhub.protect_tables = off;
		DELETE FROM eventhub.events WHERE organization_id = '$org' AND revision > $keep;
		UPDATE eventhub.organization_states s SET revision = e.revision, version_id = e.version_id
		  FROM eventhub.events e
		 WHERE e.organization_id = '$org' AND e.revision = $keep AND s.organization_id = '$org';
	});
	publish($node, $org, $n) if $n;
}
rewrite('acme', 8, 6);      # diverged at 9: head 14 above the cursor (11)
rewrite('hooli', 7, 3);     # diverged at 8: head 10, the cursor's revision
rewrite('globex', 6, 0);    # cut: head 6, below the cursor
publish($node, 'initech', 2);      # untouched: 9, 10 while the consumers are down
my %head = map { ($_ => [ org_head($node, $_) ]) } @orgs;

# Six events to deliver after the resyncs: they exit 0 then.
@consumers = map { start_consumer($_, {}, '--poll-interval-ms', 200, '--count', 6) } @langs;
my $resynced = sub { my $l = lines_by_org($_[0]); (grep { $l->{$_} } qw(acme hooli globex)) == 3 && @{ $l->{initech} // [] } >= 2 };
ok(wait_all(\@consumers, $resynced, 'resync'), 'restarted: both resync the rewritten organizations');
# What follows the resyncs, and an event announced by nobody: a
# prepared transaction's commit sends no notification, a poll finds it.
publish($node, $_, 1) for qw(acme hooli globex);
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT eventhub.publish_event('initech', 'API', 'DELETE', 'prepared', NULL, '{}');
	PREPARE TRANSACTION 'p1';
	COMMIT PREPARED 'p1';
});
for my $c (@consumers)
{
	is(finish_cli($c), 0, "$c->{lang}: exits 0 after its --count events");
	note("$c->{lang} stderr:\n$c->{err}");
	my %want = (
		acme => [ "RESYNC acme ZE003 @{$head{acme}}", @{ expected_events('acme', 15, 15) } ],
		hooli => [ "RESYNC hooli ZE003 @{$head{hooli}}", @{ expected_events('hooli', 11, 11) } ],
		globex => [ "RESYNC globex ZE002 @{$head{globex}}", @{ expected_events('globex', 7, 7) } ],
		initech => expected_events('initech', 9, 11));
	is_deeply(lines_by_org($c)->{$_}, $want{$_}, "$c->{lang}: $_ after the rewrite") for @orgs;
}
is((split / /, expected_events('initech', 11, 11)->[0])[4], 'DELETE', 'initech/11 is the prepared transaction\'s');

# 6. Running consumers woken to a gap (ZE001), and the resync order: the
# head first, then the reload, then on from that head.  An event published
# during the reload, after they read the head, must arrive afterwards; a
# consumer that read the head after reloading would jump past it.
publish($node, 'wayne', 3);
@consumers = map {
	start_consumer($_, { orgs => ['wayne'], cursor => 'order' }, '--poll-interval-ms', 600_000, '--reload-ms', 2000, '--count', 4)
} @langs;
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 3 }, 'wayne'), 'ZE001: both deliver wayne 1-3');
my $wayne_kept = expected_events('wayne', 1, 3);
# Two more, deleted in the transaction that publishes them (but for 5 with
# eventhub.compaction on, the latest event of their entity): its
# notification wakes the consumers to a history with a hole at 4.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT eventhub.publish_event('wayne', 'API', 'UPDATE', 'e', NULL, '{}') FROM generate_series(1, 2);
	SELECT eventhub.cleanup_events('wayne', '-infinity', 'infinity');
	COMMIT;
});
my @wayne_head = org_head($node, 'wayne');
is($wayne_head[0], 5, 'ZE001: wayne is at 5');
is($node->safe_psql('postgres', q{SELECT count(*) FROM eventhub.events WHERE organization_id = 'wayne' AND revision = 4}),
	'0', 'ZE001: wayne 4 is removed');
# Each is stopped in its reload as soon as it prints the resync, so that the
# event is published before the reload ends, however long publishing takes.
my $stop_at_resync = sub { $_[0]{out} =~ /^RESYNC wayne /m and $_[0]{stopped} ||= kill('STOP', $_[0]{h}{KIDS}[0]{PID}) };
ok(wait_all(\@consumers, $stop_at_resync, 'ZE001'), 'ZE001: both resync');
publish($node, 'wayne', 1);    # while they reload
for my $c (@consumers)
{
	my $cursor = decode_json(slurp_file("$dir/order-$c->{lang}.json"))->{wayne};
	is($cursor->{revision}, 3, "ZE001: $c->{lang} was still reloading (cursor not moved yet) when 6 was published");
	kill 'CONT', $c->{h}{KIDS}[0]{PID};
}
for my $c (@consumers)
{
	is(finish_cli($c), 0, "ZE001: $c->{lang} exits 0 after its --count events");
	note("$c->{lang} stderr:\n$c->{err}");
	is_deeply(lines_by_org($c)->{wayne},
		[ @$wayne_kept, "RESYNC wayne ZE001 @wayne_head", @{ expected_events('wayne', 6, 6) } ],
		"ZE001: $c->{lang} resynced to the head it read first, then delivered 6 published during its reload");
}

# 8. --snapshot.  The application's own state, app_entities, is written in
# the transactions that publish: the source of truth for the digests.
ok(reload_settings($node, 'eventhub.compaction = on', worker => 0), 'snapshot: compaction on');
$node->safe_psql('postgres', q{
	CREATE TABLE app_entities (organization_id text, event_type text, entity_id text, data jsonb NOT NULL,
	  PRIMARY KEY (organization_id, event_type, entity_id))});

# publish_app(ORG, [TYPE, ACTION, ID, DATA]...): publishes the events in one
# transaction, which applies them to app_entities too.
sub publish_app
{
	my ($org, @events) = @_;
	my $sql = "BEGIN;\n";
	for my $e (@events)
	{
		my ($type, $action, $id, $data) = @$e;
		$data //= '{}';
		my $key = join ', ', map { sql_literal($_) } $org, $type, $id;
		$sql .= publish_sql($org, event_type => $type, action => $action, entity => $id, data => $data);
		$sql .= $action eq 'DELETE'
		  ? "DELETE FROM app_entities WHERE (organization_id, event_type, entity_id) = ($key);\n"
		  : "INSERT INTO app_entities VALUES ($key, " . sql_literal($data) . '::jsonb)'
		  . " ON CONFLICT (organization_id, event_type, entity_id) DO UPDATE SET data = excluded.data;\n";
	}
	$node->safe_psql('postgres', "${sql}COMMIT;");
}

# The digest of docs/protocol.md's reference consumers over the lines
# "type\tid\tdata\n" that SQL (columns event_type, entity_id, data) returns.
sub digest_sql
{
	my ($lines) = @_;
	return "SELECT encode(sha256(convert_to(coalesce(string_agg(line, '' ORDER BY line COLLATE \"C\"), ''), 'UTF8')), 'hex')"
	  . " FROM (SELECT event_type || E'\\t' || entity_id || E'\\t' || data::text || E'\\n' AS line FROM ($lines) l) l";
}

# The digest of ORG's snapshot on SERVER (default $node).
sub snapshot_digest
{
	my ($org, $server) = @_;
	my $lit = sql_literal($org);
	return ($server // $node)->safe_psql('postgres', digest_sql("SELECT s.event_type, s.entity_id, s.event_data AS data"
		. " FROM eventhub.snapshot_head($lit) h, eventhub.snapshot_entities($lit, h.revision, max_entities => 100000) s"));
}

# ORG's digest from app_entities; checked against the server's snapshot.
sub checked_app_digest
{
	my ($org) = @_;
	my $app = $node->safe_psql('postgres', digest_sql(
		'SELECT event_type, entity_id, data FROM app_entities WHERE organization_id = ' . sql_literal($org)));
	is(snapshot_digest($org), $app, "snapshot: the server's snapshot of $org has the application's digest");
	return $app;
}

# A consumer's lines of ORG, with a DIGEST repeated by a catch-up that found
# nothing new (a notification of an event already applied) left out.
sub snapshot_lines
{
	my ($c, $org) = @_;
	my @lines;
	for my $line (@{ lines_by_org($c)->{$org} // [] })
	{
		push @lines, $line unless $line =~ /^DIGEST / && @lines && $lines[-1] eq $line;
	}
	return \@lines;
}

# stark: entities of two types (ids 'a' < 'B' bytewise only, and non-ASCII),
# updated, one created and deleted; the cleanup leaves each live entity's
# latest event only.
publish_app('stark', [ 'API', 'CREATE', 'a', '{"v": 1}' ], [ 'API', 'CREATE', 'B', '{"v": 1}' ],
	[ 'Plan', 'CREATE', "\x{e9}t\x{e9}", qq({"v": "caf\x{e9}", "w": [1, 2]}) ]);
publish_app('stark', [ 'API', 'UPDATE', 'a', '{"v": 2}' ]);
publish_app('stark', [ 'API', 'CREATE', 'gone', '{}' ]);
publish_app('stark', [ 'API', 'DELETE', 'gone' ]);
publish_app('stark', [ 'Plan', 'UPDATE', "\x{e9}t\x{e9}", qq({"w": null, "v": "\x{fc}"}) ]);
$node->safe_psql('postgres', q{SELECT eventhub.cleanup_events('stark', '-infinity', 'infinity')});
is($node->safe_psql('postgres', q{SELECT min(revision) > 1 FROM eventhub.events WHERE organization_id = 'stark'}),
	't', 'snapshot: the cleanup removed stark\'s early history');
# wonka: its snapshot is refused (ZE004), as after a removal before 0.4.0.
publish_app('wonka', [ 'API', 'CREATE', 'x', '{}' ]);
$node->safe_psql('postgres', q{
	SET eventhub.protect_tables = off;
	UPDATE eventhub.organization_states SET complete_after = NULL WHERE organization_id = 'wonka'});

my @stark = org_head($node, 'stark');
my @wonka = org_head($node, 'wonka');
my $stark_digest = checked_app_digest('stark');
@consumers = map {
	start_consumer($_, { orgs => [qw(stark wonka nobody)], cursor => 'snap' }, '--snapshot', '--poll-interval-ms', 600_000)
} @langs;
my $digest_at = sub { my ($org, $rev) = @_; sub { $_[0]{out} =~ /^DIGEST \Q$org\E $rev /m } };
ok(wait_all(\@consumers, sub { !grep { !$digest_at->(@$_)->($_[0]) } [ 'stark', $stark[0] ], [ 'wonka', $wonka[0] ], [ 'nobody', 0 ] },
		'snapshot bootstrap'), 'snapshot: both bootstrap');
for my $c (@consumers)
{
	is_deeply(snapshot_lines($c, 'stark'), [ "SNAPSHOT stark @stark 3", "DIGEST stark $stark[0] $stark_digest" ],
		"snapshot: $c->{lang} starts from stark's snapshot, with the application's digest");
	is_deeply(snapshot_lines($c, 'wonka'),
		[ "RESYNC wonka ZE004 @wonka", "DIGEST wonka $wonka[0] " . sha256_hex('') ],
		"snapshot: $c->{lang} falls back to the reload when wonka's snapshot is incomplete");
	is_deeply(snapshot_lines($c, 'nobody'), [ 'SNAPSHOT nobody 0 - 0', 'DIGEST nobody 0 ' . sha256_hex('') ],
		"snapshot: $c->{lang} starts an organization never registered from its empty snapshot");
}

# One transaction of three events: one TXN line, after its events.
publish_app('stark', [ 'API', 'UPDATE', 'B', '{"v": 2}' ], [ 'API', 'DELETE', 'a' ], [ 'Plan', 'CREATE', 'c', '{"v": 3}' ]);
my @txn = org_head($node, 'stark');
my $txn_digest = checked_app_digest('stark');
ok(wait_all(\@consumers, $digest_at->('stark', $txn[0]), 'snapshot transaction'), 'snapshot: both apply the transaction');
my @stark_lines = (
	"SNAPSHOT stark @stark 3", "DIGEST stark $stark[0] $stark_digest",
	@{ expected_events('stark', $stark[0] + 1, $txn[0]) }, sprintf('TXN stark %d %d 3', $stark[0] + 1, $txn[0]),
	"DIGEST stark $txn[0] $txn_digest");
is_deeply(snapshot_lines($_, 'stark'), \@stark_lines, "snapshot: $_->{lang} applies the three events as one transaction")
  for @consumers;

# Stopped, the events after their cursor removed by a cleanup: woken, they
# resync from a snapshot.
kill 'STOP', $_->{h}{KIDS}[0]{PID} for @consumers;
publish_app('stark', [ 'Plan', 'UPDATE', 'c', '{"v": 4}' ]);
publish_app('stark', [ 'Plan', 'UPDATE', 'c', '{"v": 5}' ]);
publish_app('stark', [ 'API', 'CREATE', 'd', '{"v": 6}' ]);
$node->safe_psql('postgres', q{SELECT eventhub.cleanup_events('stark', '-infinity', 'infinity')});
is($node->safe_psql('postgres',
		"SELECT count(*) FROM eventhub.events WHERE organization_id = 'stark' AND revision = $txn[0] + 1"),
	'0', 'snapshot: the event after their cursor is removed');
my @resync = org_head($node, 'stark');
my $resync_digest = checked_app_digest('stark');
kill 'CONT', $_->{h}{KIDS}[0]{PID} for @consumers;
ok(wait_all(\@consumers, $digest_at->('stark', $resync[0]), 'snapshot resync'), 'snapshot: both resync');
for my $c (@consumers)
{
	my $lines = snapshot_lines($c, 'stark');
	my @after = @$lines[ @stark_lines .. $#$lines ];
	is_deeply([ @$lines[ 0 .. $#stark_lines ] ], \@stark_lines, "snapshot: $c->{lang} had applied the same before");
	if ($c->{lang} eq 'go' && @after && $after[0] =~ /^EVENT /)
	{
		# The Go package delivers events from the notifications that carry
		# them (eventhub_events): those queued while it was stopped reach it
		# before any fetch, so it has the events the cleanup removed from the
		# table, in order, one transaction each, and no gap to resync.
		is_deeply([ map { /^EVENT stark (\d+) / ? $1 : () } @after ], [ $txn[0] + 1 .. $resync[0] ],
			'snapshot: go delivered the removed events from their notifications, in order');
		is_deeply([ map { /^TXN stark (\d+) (\d+) 1$/ ? "$1-$2" : () } @after ], [ map { "$_-$_" } $txn[0] + 1 .. $resync[0] ],
			'snapshot: go applied them as the transactions they were');
		is($after[-1], "DIGEST stark $resync[0] $resync_digest", 'snapshot: go converges');
	}
	else
	{
		is_deeply(\@after, [ "RESYNC stark ZE001 @resync", "SNAPSHOT stark @resync 4", "DIGEST stark $resync[0] $resync_digest" ],
			"snapshot: $c->{lang} resyncs from a snapshot after ZE001 and converges");
	}
}

# Killed and restarted: they go on from the entities stored with the
# cursor, without a snapshot.
kill_consumer($_) for @consumers;
publish_app('stark', [ 'API', 'UPDATE', 'B', '{"v": 7}' ], [ 'Plan', 'DELETE', "\x{e9}t\x{e9}" ]);
my @restart = org_head($node, 'stark');
my $restart_digest = checked_app_digest('stark');
# check_snapshot_lines(ORG, LINES, WHAT): checks that each consumer printed
# LINES (snapshot_lines) for ORG, WHAT naming the check ("%s" its
# language), then kills it.
sub check_snapshot_lines
{
	my ($org, $lines, $what) = @_;
	for my $c (@consumers)
	{
		is_deeply(snapshot_lines($c, $org), $lines, sprintf($what, $c->{lang}));
		kill_consumer($c);
	}
}

@consumers = map {
	start_consumer($_, { orgs => ['stark'], cursor => 'snap' }, '--snapshot', '--poll-interval-ms', 600_000)
} @langs;
ok(wait_all(\@consumers, $digest_at->('stark', $restart[0]), 'snapshot restart'), 'snapshot: both restart');
for my $c (@consumers)
{
	is_deeply(snapshot_lines($c, 'stark'),
		[ @{ expected_events('stark', $resync[0] + 1, $restart[0]) },
		  sprintf('TXN stark %d %d 2', $resync[0] + 1, $restart[0]), "DIGEST stark $restart[0] $restart_digest" ],
		"snapshot: $c->{lang} goes on from its stored entities");
}

# A transaction larger than their batch (1000 events): read in two parts,
# applied as one.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT count(eventhub.publish_event('stark', 'Bulk', 'CREATE', i::text, NULL, jsonb_build_object('i', i)))
	  FROM generate_series(1, 1001) i;
	INSERT INTO app_entities SELECT 'stark', 'Bulk', i::text, jsonb_build_object('i', i) FROM generate_series(1, 1001) i;
	COMMIT;
});
my @bulk = org_head($node, 'stark');
my $bulk_digest = checked_app_digest('stark');
ok(wait_all(\@consumers, $digest_at->('stark', $bulk[0]), 'snapshot bulk'), 'snapshot: both apply the large transaction');
for my $c (@consumers)
{
	my $lines = snapshot_lines($c, 'stark');
	is_deeply([ @$lines[ 4 .. $#$lines ] ],
		[ @{ expected_events('stark', $restart[0] + 1, $bulk[0]) },
		  sprintf('TXN stark %d %d 1001', $restart[0] + 1, $bulk[0]), "DIGEST stark $bulk[0] $bulk_digest" ],
		"snapshot: $c->{lang} applies a transaction of 1001 events as one");
}

# A history rewritten under their cursor, as by a failover: one more event
# applied, then lost and replaced by two others.  Restarted, they resync
# from a snapshot of two pages.
publish_app('stark', [ 'API', 'CREATE', 'x', '{"lost": true}' ]);
ok(wait_all(\@consumers, $digest_at->('stark', $bulk[0] + 1), 'snapshot lost'), 'snapshot: both apply the event to lose');
kill_consumer($_) for @consumers;
rewrite('stark', $bulk[0], 0);
$node->safe_psql('postgres', q{DELETE FROM app_entities WHERE organization_id = 'stark' AND entity_id = 'x'});
publish_app('stark', [ 'API', 'UPDATE', 'B', '{"v": 9}' ]);
publish_app('stark', [ 'API', 'CREATE', 'y', '{}' ]);
my @rewritten = org_head($node, 'stark');
my $rewritten_digest = checked_app_digest('stark');
my $entities = $node->safe_psql('postgres', q{SELECT count(*) FROM app_entities WHERE organization_id = 'stark'});
cmp_ok($entities, '>', 1000, 'snapshot: stark\'s snapshot takes two pages');
@consumers = map {
	start_consumer($_, { orgs => ['stark'], cursor => 'snap' }, '--snapshot', '--poll-interval-ms', 600_000)
} @langs;
ok(wait_all(\@consumers, $digest_at->('stark', $rewritten[0]), 'snapshot rewritten'), 'snapshot: both resync after the rewrite');
check_snapshot_lines('stark',
	[ "RESYNC stark ZE003 @rewritten", "SNAPSHOT stark @rewritten $entities", "DIGEST stark $rewritten[0] $rewritten_digest" ],
	'snapshot: %s resyncs from a snapshot after ZE003 and converges');

# 7. A hot standby: LISTEN is refused there, so Go waits for events with
# wait_for_events and Python polls; once it is promoted they listen.
publish($node, 'umbrella', 3);
my $standby = eventhub_standby($node, 'standby');
@consumers = map {
	start_consumer($_, { server => $standby, orgs => ['umbrella'], cursor => 'standby' }, '--poll-interval-ms', 200, '--count', 6)
} @langs;
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 3 }, 'standby'), 'standby: both replay the history');
# What each says when it waits or polls, and when it listens again.
my %polls = (go => qr/waiting for events with eventhub\.wait_for_events\(\)/, python => qr/standby: LISTEN is refused, polling only/);
my %listens = (go => qr/the standby was promoted: listening/, python => qr/no longer a standby: listening/);
publish($node, 'umbrella', 2);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 5 }, 'standby poll'), 'standby: both deliver');
ok(wait_all(\@consumers, sub { $_[0]{err} =~ $polls{ $_[0]{lang} } }, 'standby wait'),
	'standby: go waits with wait_for_events, python polls');
$standby->promote;
ok(wait_all(\@consumers, sub { $_[0]{err} =~ $listens{ $_[0]{lang} } }, 'promotion'),
	'promoted: both listen');
publish($standby, 'umbrella', 1);
for my $c (@consumers)
{
	is(finish_cli($c), 0, "standby: $c->{lang} exits 0 after its --count events");
	note("$c->{lang} stderr:\n$c->{err}");
	is_deeply(lines_by_org($c)->{umbrella}, expected_events('umbrella', 1, 6, $standby),
		"standby: $c->{lang} delivered umbrella 1-6, each once, in order");
}

# A failover with --snapshot: consumers that followed the old primary past
# what the promoted standby has (an entity only the old primary got),
# pointed at the new primary, resync from a snapshot there and drop that
# entity.
publish($node, 'umbrella', 2, action => 'CREATE', entity => 'old-only', data => '{"old": true}');
my @old = org_head($node, 'umbrella');
@consumers = map {
	start_consumer($_, { orgs => ['umbrella'], cursor => 'failover' }, '--snapshot', '--poll-interval-ms', 600_000)
} @langs;
ok(wait_all(\@consumers, $digest_at->('umbrella', $old[0]), 'failover old'), 'failover: both follow the old primary');
check_snapshot_lines('umbrella', [ "SNAPSHOT umbrella @old 2", "DIGEST umbrella $old[0] " . snapshot_digest('umbrella') ],
	'failover: %s starts from the old primary\'s snapshot');
my @new = org_head($standby, 'umbrella');
my $new_digest = snapshot_digest('umbrella', $standby);
isnt($new_digest, snapshot_digest('umbrella'), 'failover: the new primary\'s state differs');
@consumers = map {
	start_consumer($_, { server => $standby, orgs => ['umbrella'], cursor => 'failover' }, '--snapshot',
		'--poll-interval-ms', 600_000)
} @langs;
ok(wait_all(\@consumers, $digest_at->('umbrella', $new[0]), 'failover new'), 'failover: both resync on the new primary');
check_snapshot_lines('umbrella', [ "RESYNC umbrella ZE002 @new", "SNAPSHOT umbrella @new 1", "DIGEST umbrella $new[0] $new_digest" ],
	'failover: %s resyncs from the new primary\'s snapshot and converges');

$standby->stop;
$node->stop;
done_testing();
