# 024_client_metrics.pl: the client's metrics as a textfile collector reads
# them (eventhub watch --metrics-file) and the server's as `eventhub metrics`
# prints them: the file appears at start and is replaced atomically, shows
# readiness after the catch-up, the applied revision at the head, a wakeup
# by notification, connected 0 and a growing freshness while the server is
# down, and is written once more at exit; a path that cannot be written
# stops watch before it watches.  promtool check metrics accepts both
# expositions (docs/client.md "Metrics", docs/cli.md).

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = eventhub_node('client_metrics');
my $connstr = $node->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir();
my $file = "$dir/eventhub.prom";
my $promtool = `sh -c 'command -v promtool'`;
chomp $promtool;

# The samples of an exposition: { 'name{labels}' => value }.
sub samples
{
	my ($text) = @_;
	return { map { /^([^#].*) (\S+)$/ ? ($1 => $2) : () } split /\n/, $text };
}

# The metrics file as it is now: its text and samples (an empty hash before it exists).
sub file_now
{
	my ($path) = @_;
	my $text = -e $path ? slurp_file($path) : '';
	return ($text, samples($text));
}

# promtool check metrics of TEXT: (exit status, what it said).
sub promtool_check
{
	my ($text) = @_;
	my $said = '';
	IPC::Run::run([ $promtool, 'check', 'metrics' ], '<', \$text, '>&', \$said);
	return ($? >> 8, $said);
}

# Families grouped: each sample's family was the last # TYPE line, and no
# family has two # TYPE lines.
sub families_grouped
{
	my ($text) = @_;
	my ($family, %typed) = ('');
	for (split /\n/, $text)
	{
		if (/^# TYPE (\S+) /)
		{
			return 0 if $typed{$1}++;
			$family = $1;
		}
		elsif (/^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/)
		{
			return 0 if $1 ne $family;
		}
	}
	return 1;
}

#
# A path that cannot be written: a clear error before watching.
#
my ($rc, $out, $err) = run_cli('-d', $connstr, 'watch', '--org', 'acme', '--metrics-file', "$dir/missing/m.prom");
is($rc, 1, 'bad --metrics-file: exit status 1');
like($err, qr/--metrics-file: could not create "\Q$dir\E\/missing\/m\.prom\.tmp": No such file or directory/,
	'bad --metrics-file: says which file and why');
is($out, '', 'bad --metrics-file: nothing watched');

#
# A watch that writes its metrics every 0.2 s, its replica id with a quote
# and a backslash (escaped in `eventhub metrics`).
#
publish($node, 'acme', 3);
my $replica = 'gw"1\\a';
my $offset = -s $node->logfile;
my $watch = start_watch("$connstr options='-c log_statement=all'",
	'--org', 'acme', '--after', '0', '--poll-interval', '600000', '--replica-id', $replica,
	'--heartbeat-interval', '200', '--metrics-file', $file, '--metrics-interval', '0.2');
my ($text, $m);
my $complete = 1;
my $sub = 'subscription="acme"';

# Reads the file until CODE says yes; every read must be a complete file.
sub file_until
{
	my ($what, $code) = @_;
	return wait_for(
		watch => $watch,
		what => $what,
		until => sub {
			($text, $m) = file_now($file);
			$complete = 0 if $text ne '' && $text !~ /\neventhub_client_events_delivered_total \d+\n\z/;
			return $code->();
		});
}

ok(file_until('the metrics file', sub { $text ne '' }), 'the metrics file appears');
ok(file_until('ready after the catch-up', sub { ($m->{"eventhub_client_ready{$sub}"} // '') eq '1' }),
	'ready once caught up');
is($m->{"eventhub_client_applied_revision{$sub}"}, 3, 'applied revision: the head');
is($m->{eventhub_client_connected}, 1, 'connected');
cmp_ok($m->{"eventhub_client_freshness_seconds{$sub}"}, '<', 5, 'fresh');
is($m->{"eventhub_client_resyncs_total{$sub,reason=\"history_removed\"}"}, 0, 'no resync, each reason shown');
my @inode = (stat $file)[ 0, 1 ];
ok(file_until('a newer file', sub { my @now = (stat $file)[ 0, 1 ]; @now && "@now" ne "@inode" }),
	'the file is replaced (renamed over), not rewritten in place');

# Published while it listens: a notification wakes it (polls are 10 minutes apart).
wait_for_listening($node, $offset);
my $head = publish($node, 'acme', 2);
is($head, 5, 'two more published');
ok( file_until(
		'the applied revision at the head',
		sub { ($m->{"eventhub_client_applied_revision{$sub}"} // -1) == $head }),
	'applied revision: the new head');
ok(file_until('a notification', sub { ($m->{'eventhub_client_wakeups_total{source="notification"}'} // 0) >= 1 }),
	'a wakeup by notification counted');
# The catch-up fetched; the two events came in their notifications.
cmp_ok($m->{'eventhub_client_fetches_total'}, '>=', 1, 'fetches counted');
is($m->{'eventhub_client_events_delivered_total'}, 5, 'events delivered counted');
ok($complete, 'every read of the file found it complete');

($rc, my $exposition, $err) = run_cli('-d', $connstr, 'metrics');
is($rc, 0, 'eventhub metrics: exit status 0') or diag($err);
ok(families_grouped($exposition), 'eventhub metrics: # TYPE once per family, its series together')
  or diag($exposition);
SKIP:
{
	skip 'promtool is not installed (scripts/deps.sh installs prometheus)', 2 unless $promtool;
	my ($status, $said) = promtool_check($text);
	is($status, 0, 'promtool check metrics accepts the client metrics') or diag($said);
	($status, $said) = promtool_check($exposition);
	is($status, 0, 'promtool check metrics accepts eventhub metrics') or diag($said);
}
my $server = samples($exposition);
cmp_ok($server->{eventhub_events_published_total} // -1, '>=', 5, 'eventhub metrics: events published');
ok( wait_for(
		until => sub {
			(undef, $out) = run_cli('-d', $connstr, 'metrics');
			defined samples($out)->{'eventhub_replica_lag_events{replica="gw\\"1\\\\a"}'};
		},
		what => 'the replica in eventhub metrics'),
	'eventhub metrics: a replica id escaped in its label') or diag($out);
like($out, qr/^eventhub_replicas\{state="live"\} \d/m, 'eventhub metrics: labels as name="value"');
my ($rc2, $again) = run_cli('-d', $connstr, 'metrics');
is(join(' ', map { /^(\S+) / } split /\n/, $again), join(' ', map { /^(\S+) / } split /\n/, $out),
	'eventhub metrics: the same series in the same order every time');
($rc, $out, $err) = run_cli('metrics', '--org', 'acme');
is($rc, 2, 'eventhub metrics takes no --org: a usage error');

#
# Written once more at exit: with an interval of an hour, only the first
# write (before connecting) and the last happen, and only the last saw the
# first transaction (the 3 events published together).
#
my $file2 = "$dir/all.prom";
($rc, $out, $err) = run_cli('-d', $connstr, 'watch', '--all', '--after', '0', '--count', '1',
	'--metrics-file', $file2, '--metrics-interval', '3600');
is($rc, 0, 'watch --all --count 1 with a metrics file') or diag($err);
my (undef, $m2) = file_now($file2);
is($m2->{eventhub_client_events_delivered_total}, 3, 'the file is written at exit');
ok(defined $m2->{'eventhub_client_ready{subscription="*"}'}, 'eh_subscribe_all: one subscription "*"');
ok(!-e "$file2.tmp", 'no temporary file left');

#
# The server stops: connected 0, and freshness grows; the subscription stays ready.
#
$node->stop('fast');
ok(file_until('connected 0', sub { ($m->{eventhub_client_connected} // '') eq '0' }), 'server down: connected 0');
my $fresh = $m->{"eventhub_client_freshness_seconds{$sub}"};
ok( file_until(
		'freshness growing',
		sub { ($m->{"eventhub_client_freshness_seconds{$sub}"} // 0) >= $fresh + 1 }),
	'server down: freshness grows');
is($m->{"eventhub_client_ready{$sub}"}, 1, 'server down: still ready (it serves what it has)');
is($m->{"eventhub_client_applied_revision{$sub}"}, $head, 'server down: the applied revision stays');
ok($complete, 'every read of the file found it complete');

$watch->{h}->signal('TERM');
is(finish_cli($watch), 130, 'watch ends on SIGTERM');
($text, $m) = file_now($file);
is($m->{eventhub_client_connected}, 0, 'the last write, at exit, is complete');
ok(!-e "$file.tmp", 'no temporary file left');
done_testing();
