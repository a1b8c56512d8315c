# 011_transient.pl: `eventhub watch` rides out what passes by itself.
#
#   - an operator holds a lock on eventhub.events while the watcher's
#     session has lock_timeout = 100ms: its queries fail, it warns on
#     stderr, retries with backoff and, once the lock is gone, delivers what
#     follows;
#   - the extension is dropped and created again (history and all) while it
#     runs: the functions are missing for a while, then its cursor is ahead
#     of the new history, it resyncs, and delivers what follows;
#   - a missing privilege is not retried: exit 1.

use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $cli = "$ENV{EVENTHUB_WORK}/client/eventhub";
my $json = JSON::PP->new;

my $node = PostgreSQL::Test::Cluster->new('transient');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION eventhub');

sub publish
{
	my ($n) = @_;
	$node->safe_psql('postgres',
		"SELECT count(eventhub.publish_event('acme', 'API', 'UPDATE', 'e', NULL, '{}')) FROM generate_series(1, $n)");
}

sub lines
{
	my ($w) = @_;
	return map { $json->decode($_) } $w->{out} =~ /^(\{.*)\n/mg;
}

# Pumps watcher W until COND holds; false after the default timeout or if
# it exited.
sub wait_for
{
	my ($w, $cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (!$cond->() && time() < $deadline && $w->{h}->pumpable)
	{
		$w->{h}->pump_nb;
		usleep(20_000);
	}
	return $cond->();
}

publish(1);
my $w = { out => '', err => '' };
$w->{h} = IPC::Run::start(
	[
		$cli, '-d', $node->connstr('postgres') . " options='-c lock_timeout=100ms'", 'watch',
		'--org', 'acme', '--after', '0', '--count', '5', '--timeout', '120', '--poll-interval', '200'
	],
	'>', \$w->{out}, '2>', \$w->{err});
ok(wait_for($w, sub { scalar(lines($w)) >= 1 }), 'the watcher delivered revision 1');

# An operator holds ACCESS EXCLUSIVE on events until the watcher has tried
# twice.
my $op = $node->background_psql('postgres');
$op->query_safe('BEGIN');
$op->query_safe('LOCK TABLE eventhub.events IN ACCESS EXCLUSIVE MODE');
ok(wait_for($w, sub { (() = $w->{err} =~ /lock timeout/g) >= 2 }), 'lock: the watcher\'s queries time out');
$op->query_safe('COMMIT');
publish(2);
ok(wait_for($w, sub { scalar(lines($w)) >= 3 }), 'lock: once the lock is gone, the watcher delivers what follows');
like($w->{err}, qr/warning: .*lock timeout.*\(retrying\)/, 'lock: each refusal is a warning');

# The extension goes and comes back, with a new, shorter history.
$op->query_safe('DROP EXTENSION eventhub');
ok(wait_for($w, sub { (() = $w->{err} =~ /does not exist/g) >= 2 }),
	'reinstall: the watcher finds the extension missing, and tries again');
# Created with its first event in one transaction: the new history is never
# seen empty.
$op->query_safe("BEGIN; CREATE EXTENSION eventhub; SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'e', NULL, '{}'); COMMIT;");
$op->quit;
ok(wait_for($w, sub { $w->{out} =~ /"resync": true/ }), 'reinstall: the watcher resyncs to the new history');
publish(2);
$w->{h}->finish;
is($w->{h}->result(0), 0, 'the watcher rode it all out and exited after its five events') or diag($w->{err});
my @got = map { $_->{resync} ? "resync $_->{reason} $_->{head_revision}" : "event $_->{revision}" } lines($w);
is_deeply(\@got, [ 'event 1', 'event 2', 'event 3', 'resync cursor_ahead 1', 'event 2', 'event 3' ],
	'every event once, in order, and a resync where the history was replaced');

# What a retry cannot fix ends watch.
$node->safe_psql('postgres', q{
	CREATE ROLE regress_reader LOGIN;
	GRANT USAGE ON SCHEMA eventhub TO regress_reader;
	GRANT SELECT ON eventhub.organization_states, eventhub.events TO regress_reader;
	GRANT EXECUTE ON FUNCTION eventhub.notification_token(text) TO regress_reader;
});
my ($out, $err) = ('', '');
IPC::Run::run([ $cli, '-d', $node->connstr('postgres') . ' user=regress_reader', 'watch', '--org', 'acme',
		'--after', '0', '--timeout', '30' ], '>', \$out, '2>', \$err);
is($? >> 8, 1, 'permission denied: watch exits 1');
like($err, qr/permission denied for function events_since/, 'permission denied: and says why');

$node->stop;
done_testing();
