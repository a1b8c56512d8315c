# 013_reference_consumers.pl: docs/protocol.md is enough to write a
# consumer.  Builds the Go reference consumer (examples/go, pgx v4) and runs
# it side by side with the Python one (examples/python, psycopg 3), both
# written from docs/protocol.md alone, through:
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
#      is promoted.
#
# Every EVENT line is checked against eventhub.events (revision, version,
# action, entity): per organization exactly the revisions after the cursor,
# in order, once.  Skipped only when Go, Debian's pgx v4 sources or
# psycopg 3 are missing (scripts/deps.sh installs them).

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
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

# Build the Go consumer offline, in GOPATH mode, against Debian's pgx
# sources under /usr/share/gocode.
{
	local @ENV{qw(GO111MODULE GOPATH GOCACHE GOFLAGS)} = ('off', '/usr/share/gocode', "$dir/gocache", '');
	my ($out, $err) = ('', '');
	ok( IPC::Run::run([ 'go', 'build', '-o', "$dir/consumer-go", '.' ], '>', \$out, '2>', \$err,
			init => sub { chdir "$work/examples/go" or die $! }, IPC::Run::timeout(300)),
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

# Complete lines a consumer printed, per organization.
sub lines_by_org
{
	my ($c) = @_;
	my %by_org;
	for my $line ($c->{out} =~ /^(.*)\n/mg)
	{
		my ($org) = $line =~ /^(?:EVENT|RESYNC) (\S+) / or die "unexpected line from $c->{lang}: $line";
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

# ORG's head: (revision, version).
sub head
{
	return split /\|/,
	  $node->safe_psql('postgres', "SELECT revision, version_id FROM eventhub.organization_states WHERE organization_id = '$_[0]'");
}

# 1. The kept history from 0, then a stream woken by notifications only.
publish($node, $_, 5) for @orgs;
my @consumers = map { start_consumer($_, {}, '--poll-interval-ms', 600_000) } @langs;
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 20 }, 'history'), 'both replay the kept history');
publish($node, $_, 3) for qw(acme globex);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 26 }, 'notified'), 'both are woken by notifications');

# 2. Their backends terminated.
my $ours = "application_name IN ('ref-go', 'ref-python') AND backend_type = 'client backend'";
wait_for(what => 'the consumers', node => $node, sql => "SELECT count(*) = 2 FROM pg_stat_activity WHERE $ours")
  or die "the consumers are not connected";
is($node->safe_psql('postgres', "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE $ours"),
	'2', 'kill: both consumers\' backends terminated');
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
my %head_before = map { ($_ => (head($_))[0]) } @orgs;
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
	$c->{h}->signal('KILL');
	$c->{h}->finish;
	note("$c->{lang} stderr:\n$c->{err}");
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
my %head = map { ($_ => [ head($_) ]) } @orgs;

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
# Two more, deleted in the transaction that publishes them: its
# notification wakes the consumers to events that are no longer kept.
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT eventhub.publish_event('wayne', 'API', 'UPDATE', 'e', NULL, '{}') FROM generate_series(1, 2);
	SELECT eventhub.cleanup_events('wayne', '-infinity', 'infinity');
	COMMIT;
});
my @wayne_head = head('wayne');
is($wayne_head[0], 5, 'ZE001: wayne is at 5, with no event kept');
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

# 7. A hot standby: LISTEN is refused there, so they poll; once it is
# promoted they listen.
publish($node, 'umbrella', 3);
my $standby = eventhub_standby($node, 'standby');
@consumers = map {
	start_consumer($_, { server => $standby, orgs => ['umbrella'], cursor => 'standby' }, '--poll-interval-ms', 200, '--count', 6)
} @langs;
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 3 }, 'standby'), 'standby: both replay the history');
like($_->{err}, qr/standby: LISTEN is refused, polling only/, "standby: $_->{lang} polls") for @consumers;
publish($node, 'umbrella', 2);
ok(wait_all(\@consumers, sub { line_count($_[0]) >= 5 }, 'standby poll'), 'standby: both deliver by polling');
$standby->promote;
ok(wait_all(\@consumers, sub { $_[0]{err} =~ /no longer a standby: listening/ }, 'promotion'),
	'promoted: both listen');
publish($standby, 'umbrella', 1);
for my $c (@consumers)
{
	is(finish_cli($c), 0, "standby: $c->{lang} exits 0 after its --count events");
	note("$c->{lang} stderr:\n$c->{err}");
	is_deeply(lines_by_org($c)->{umbrella}, expected_events('umbrella', 1, 6, $standby),
		"standby: $c->{lang} delivered umbrella 1-6, each once, in order");
}

$standby->stop;
$node->stop;
done_testing();
