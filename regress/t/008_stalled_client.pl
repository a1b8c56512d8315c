# 008_stalled_client.pl: a subscriber that stops reading does not slow
# publishers down.  An `eventhub watch` is stopped (SIGSTOP) while 100,000
# events of other organizations are published.  Its backend fills the socket
# with notifications and blocks writing (ClientWrite) inside the transaction
# that reads the notification queue (the test makes sure it is), holding back
# the xmin horizon: no dead version of organization_states can be removed and
# every publish gets slower (to a fifth and less within seconds).  The worker
# terminates such a session after eventhub.stalled_client_timeout and says
# which; publish throughput over the last 20,000 events is at least half that
# over the first 20,000 (half leaves room for a machine whose other load
# changes between the two); the resumed watcher reconnects and delivers every
# event of its organization published meanwhile exactly once, in order.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $events = 100_000;
my $chunk = 20_000;

# The worker finds the extension within half a second.
my $node = eventhub_node('stalled', stalled_client_timeout => '5s', maintenance_interval => '500ms',
	conf => "log_statement = 'none'");
publish($node, 'watched', 1, action => 'CREATE', entity => 'w', tag => 'watched');

my $w = start_watch($node->connstr('postgres'), '--org', 'watched', '--after', '0', '--count', '5', '--timeout', '300');
wait_for(what => 'revision 1', watch => $w, lines => 1);
like($w->{out}, qr/"revision": 1/, 'the watcher delivered revision 1');
my $watch_pid = $w->{h}{KIDS}[0]{PID};
kill 'STOP', $watch_pid;

# Events of the watched organization while it is stopped.
$node->safe_psql('postgres', join('', map { publish_sql('watched', entity => 'w', corr => "watched-$_") } 2 .. 4));

# Transactions that move 500 organizations at once send the stopped
# watcher's backend more notifications in one go than its output buffer
# holds: once the socket is full, it blocks in the middle of reading the
# queue, with the xmin horizon held.  (The log is read from here on: the
# worker's clock of the stall may start before this loop sees it.)
my $offset = -s $node->logfile;
my $stalled = '';
for my $batch (1 .. 40)
{
	$node->safe_psql('postgres',
		"SELECT count(eventhub.publish_event('fan-' || i, 'API', 'UPDATE', 'e', NULL, '{}')) FROM generate_series(1, 500) i");
	$stalled = $node->safe_psql('postgres',
		"SELECT backend_xmin FROM pg_stat_activity WHERE state = 'idle' AND wait_event = 'ClientWrite' AND backend_xmin IS NOT NULL");
	last if $stalled ne '';
}
isnt($stalled, '', 'the stopped watcher\'s backend is blocked in ClientWrite holding back the xmin horizon');

# 100,000 publishes of another organization, each its own transaction (and
# notification), with a log line per transaction.
my $dir = PostgreSQL::Test::Utils::tempdir();
append_to_file("$dir/publish.sql", "SELECT eventhub.publish_event('busy', 'API', 'UPDATE', 'e', NULL, '{}');\n");
my ($b_out, $b_err);
IPC::Run::run([ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', $events / 4, '-f', "$dir/publish.sql", '-l',
		"--log-prefix=$dir/tx", '-h', $node->host, '-p', $node->port, 'postgres' ], '>', \$b_out, '2>', \$b_err)
  or die "pgbench failed: $b_err";
like($b_out, qr/number of transactions actually processed: $events\//, "pgbench published $events events");

# Completion times of all transactions, in order.
my @done = sort { $a <=> $b }
  map { my @field = split / /; $field[4] + $field[5] / 1e6 } map { split /\n/, slurp_file($_) } glob("$dir/tx*");
is(scalar(@done), $events, 'a log line per publish');
my $start = $done[0];
my $first = $chunk / ($done[ $chunk - 1 ] - $start);
my $last = $chunk / ($done[-1] - $done[ $events - $chunk - 1 ]);
note(sprintf('publish throughput: first %d events %.0f/s, last %d events %.0f/s, ratio %.2f',
		$chunk, $first, $chunk, $last, $last / $first));
cmp_ok($last / $first, '>=', 0.5, 'throughput over the last 20,000 events is at least half of the first 20,000');

# The worker may terminate the session after pgbench has ended.
$node->wait_for_log(qr/eventhub terminated client session/, $offset);
my $log = slurp_file($node->logfile, $offset);
like($log, qr/eventhub terminated client session \d+, stalled for \d+ s/,
	'the worker terminated the stalled session');
like($log, qr/blocked sending notifications to a client that does not read them, holding back the xmin horizon/,
	'and said why');
is($node->safe_psql('postgres',
		"SELECT value FROM eventhub.metrics() WHERE name = 'eventhub_stalled_clients_terminated_total'"),
	'1', 'and counted it (eventhub.metrics())');

# Resumed, the watcher finds its connection gone, reconnects and catches up.
# (Events 2 to 4 may come in the notifications it had not read yet; the
# fifth, published now, only through a new connection.)
kill 'CONT', $watch_pid;
$node->safe_psql('postgres', publish_sql('watched', entity => 'w', corr => 'watched-5'));
is(finish_cli($w), 0, 'the resumed watcher exited after its five events') or diag($w->{err});
my @got = map { "$_->{organization_id}/$_->{revision}/$_->{correlation_id}" } watch_lines($w);
is_deeply(\@got, [ map { "watched/$_/watched-$_" } 1 .. 5 ],
	'it delivered every event of its organization once, in order');
like($w->{err}, qr/connection lost/, 'it noticed the lost connection');

$node->stop;
done_testing();
