# 009_failover.pl: delivery with a streaming standby, read from and then
# promoted after the primary died.
#
#   1. Readers on the hot standby: one that sends its heartbeats to the
#      primary gets every event once, appears in replica_status there, and
#      holds retention like any other replica; one without says once that
#      its heartbeats fail, not at every interval.
#   2. Failover: the standby stops receiving; the primary publishes more,
#      which consumers apply; the primary dies; the standby is promoted and
#      publishes different events, ending above, at, or below the cursor
#      the consumers stored (and above a kept-running consumer's).  A
#      consumer restarted with its stored cursor and version (plain SQL,
#      and `eventhub watch --after --after-version`, which is the library's
#      eh_subscribe_at) detects the rewrite in every case, and so does one
#      that kept running; a watcher that connected to the standby in recovery
#      starts listening once it is promoted.

use strict;
use warnings;

use EventhubTest;
use Test::More;

# Retention runs when the test runs it (run_maintenance()), never in the
# middle of a read: the worker's next cycle is an hour away.
my $primary = eventhub_node('primary', init => { allows_streaming => 1 }, maintenance_interval => '1h',
	retention => '1s', replica_ttl => '1min');
my $standby = eventhub_standby($primary, 'standby');
# From its restart below, it keeps the histories the test reads back.
$standby->append_conf('postgresql.conf', "eventhub.retention = '1h'");

sub wait_lines
{
	my ($w, $n, $label) = @_;
	ok(wait_for(what => $label, watch => $w, lines => $n), "$label: $n lines");
}

sub revisions
{
	my ($org, @lines) = @_;
	return join ',', map { $_->{revision} } grep { ($_->{organization_id} // '') eq $org && !$_->{resync} } @lines;
}

# 1. Readers on the hot standby.
my ($reader, $silent) = map {
	start_watch($standby->connstr('postgres'), '--org', 'reader-org', '--after', '0', '--heartbeat-interval', '200',
		'--timeout', '120', @$_)
} [ '--replica-id', 'r1', '--heartbeat-conninfo', $primary->connstr('postgres') ], [ '--replica-id', 'r2' ];
publish($primary, 'reader-org', 20, tag => 'rd');
wait_lines($reader, 20, 'standby reader');
wait_lines($silent, 20, 'standby reader without a heartbeat connection');
is(revisions('reader-org', watch_lines($reader)), join(',', 1 .. 20), 'standby reader: every event once, in order');
ok(wait_for(what => 'r1 in replica_status', node => $primary,
		sql => "SELECT applied_revision = 20 FROM eventhub.replica_status WHERE replica_id = 'r1' AND organization_id = 'reader-org'"),
	'standby reader: it appears in replica_status on the primary, at revision 20');
is($primary->safe_psql('postgres', "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'r2'"),
	'0', 'standby reader without a heartbeat connection: not registered (the standby is read-only)');

# r1 stops (its heartbeats too, but it stays live for replica_ttl): events
# it has not applied, and the one it applied last, stay past retention.
kill 'STOP', $reader->{h}{KIDS}[0]{PID};
publish($primary, 'reader-org', 10, tag => 'rd2');
# The marker is an entity's CREATE and DELETE: compaction (on by default)
# removes them, the tombstone once its CREATE is gone.  reader-org's events
# are one entity's (publish's default), each superseded by the next: only
# r1's hold keeps 20 to 29.
publish($primary, 'marker', 1, tag => 'mk', action => 'CREATE');
publish($primary, 'marker', 1, tag => 'mk2', action => 'DELETE');
# Retention, run until the marker, published last, has gone.
wait_for(what => 'retention', until => sub {
	run_maintenance($primary);
	$primary->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE organization_id = 'marker'") eq '0' })
  or die 'retention did not run';
is( $primary->safe_psql('postgres',
		"SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events WHERE organization_id = 'reader-org'"),
	join(',', 20 .. 30), 'standby reader: retention keeps what r1 has not applied, and its cursor\'s event');
kill 'CONT', $reader->{h}{KIDS}[0]{PID};
wait_lines($reader, 30, 'standby reader, resumed');
is(revisions('reader-org', watch_lines($reader)), join(',', 1 .. 30), 'standby reader: caught up once, in order');
$_->{h}->signal('TERM') for $reader, $silent;
$_->{h}->finish for $reader, $silent;
is(scalar(() = $silent->{err} =~ /heartbeat failed/g), 1, 'standby reader without a heartbeat connection: the failure is logged once')
  or diag($silent->{err});
is(scalar(() = $reader->{err} =~ /the server is a standby/g), 1, 'standby reader: says once that LISTEN is not available');
unlike($reader->{err}, qr/heartbeat failed/, 'standby reader: its heartbeats never failed');
is($primary->safe_psql('postgres', "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'r1'"),
	'0', 'standby reader: deregistered on the primary when it exits');

# 2. Failover.
my @orgs = qw(above equal below longer);
publish($primary, $_, 50, tag => "old-$_") for @orgs;
$primary->wait_for_catchup($standby);
$standby->stop;
publish($primary, $_, 50, tag => "lost-$_") for @orgs;

# A consumer that keeps running through the failover, connected to whichever
# server accepts writes.
my $multi = sprintf('host=%s,%s port=%s,%s dbname=postgres target_session_attrs=read-write',
	$primary->host, $standby->host, $primary->port, $standby->port);
my $kept = start_watch($multi, (map { ('--org', $_) } @orgs), '--after', '0', '--count', 404, '--timeout', '120');
wait_lines($kept, 400, 'kept-running consumer');
# Stopped through the failover, so that it sees the new histories whole
# when it reconnects.
kill 'STOP', $kept->{h}{KIDS}[0]{PID};

# The cursor consumers store: revision 80 and its version, as printed.
my %v80 = map { ($_->{organization_id} => $_->{version_id}) } grep { $_->{revision} == 80 } watch_lines($kept);
is(scalar(keys %v80), 4, 'the stored cursors: revision 80 of each organization, with its version');

$primary->stop('immediate');
$standby->start;
my $promoted = start_watch($standby->connstr('postgres'), '--org', 'above', '--after', '0',
	'--count', 90, '--fallback-poll-interval', '200', '--timeout', '120');
wait_lines($promoted, 50, 'watcher on the standby in recovery');
$standby->promote;
my %new_head = (above => 90, equal => 80, below => 60, longer => 120);
publish($standby, $_, $new_head{$_} - 50, tag => "new-$_") for @orgs;
my %head_version = map { split /\|/ } split /\n/,
  $standby->safe_psql('postgres', 'SELECT organization_id, version_id FROM eventhub.organization_states');
kill 'CONT', $kept->{h}{KIDS}[0]{PID};

# Plain SQL, from the stored cursor.
my %sql_state = map {
	my (undef, undef, $err) = $standby->psql('postgres',
		"\\set VERBOSITY sqlstate\nSELECT count(*) FROM eventhub.events_since('$_', 80, 1000, '$v80{$_}')");
	($_ => ($err =~ /ERROR:\s+(\w+)/)[0])
} @orgs;
is_deeply(\%sql_state, { above => 'ZE003', equal => 'ZE003', below => 'ZE002', longer => 'ZE003' },
	'SQL: events_since with the stored cursor and version detects every rewrite');

# The CLI (the library's eh_subscribe_at), from the stored cursor.
my %restarted = map {
	($_ => start_watch($standby->connstr('postgres'), '--org', $_, '--after', '80', '--after-version', $v80{$_},
			'--count', '1', '--timeout', '60'))
} @orgs;
wait_lines($restarted{$_}, 1, "restarted consumer of $_") for @orgs;
# The consumer that kept running has reconnected and resynced to the new
# heads before they move on.
wait_for(what => 'the kept-running consumer\'s resyncs', pump => [$kept],
	until => sub { (grep { $_->{resync} } watch_lines($kept)) == 4 });
# One more event each: the restarted consumers deliver it after the new head.
publish($standby, $_, 1, tag => "after-$_") for @orgs;
my %expected_reason = ((map { ($_ => 'version_mismatch') } @orgs), below => 'cursor_ahead');
for my $org (@orgs)
{
	my $w = $restarted{$org};
	is(finish_cli($w), 0, "restarted $org: exits after its event") or diag($w->{err});
	is_deeply(
		[ map { $_->{resync} ? "resync $_->{reason} $_->{head_revision} $_->{head_version_id}" : "event $_->{revision}" }
			  watch_lines($w) ],
		[ "resync $expected_reason{$org} $new_head{$org} $head_version{$org}", 'event ' . ($new_head{$org} + 1) ],
		"restarted $org: a resync to the new head (with its version to store), then what follows");
}

is(finish_cli($kept), 0, 'kept-running consumer: exits after its 404 events') or diag($kept->{err});
my @k = watch_lines($kept);
is_deeply({ map { ($_->{organization_id} => "$_->{reason} $_->{head_revision}") } grep { $_->{resync} } @k },
	{ above => 'cursor_ahead 90', equal => 'cursor_ahead 80', below => 'cursor_ahead 60', longer => 'version_mismatch 120' },
	'kept-running consumer: every organization resynced, the longer new history included');
is(revisions($_, @k), join(',', 1 .. 100, $new_head{$_} + 1),
	"kept-running consumer: $_ delivered 1-100 from the old primary, then $_/" . ($new_head{$_} + 1))
  for @orgs;

is(finish_cli($promoted), 0, 'promoted: the watcher exits after its 90 events') or diag($promoted->{err});
is(revisions('above', watch_lines($promoted)), join(',', 1 .. 90), 'promoted: every event of the new history once, in order');
like($promoted->{err}, qr/the server is a standby.*the server is no longer a standby.*notifications arrive again: listening/s,
	'promoted: it noticed the promotion and listens');

$standby->stop;
done_testing();
