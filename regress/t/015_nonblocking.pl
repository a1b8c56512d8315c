# 015_nonblocking.pl: the client never keeps its caller waiting on the
# network (client/test_nonblock.c drives it like an event loop and times
# every eh_process() and eh_client_free()).
#
#   - a server that accepts TCP connections and never answers: each
#     eh_process() returns at once, the attempt is given up after the
#     connect timeout and made again, and eh_client_free() returns at once;
#   - a backend stopped with SIGSTOP: the query out on it times out, the
#     client reconnects and delivers what was published meanwhile, every
#     eh_process() staying short; freed while its new backend is stopped
#     too, the client gives the deregistration the close timeout and no
#     more.

use strict;
use warnings;

use EventhubTest;
use IO::Select;
use IO::Socket::INET;
use IPC::Run;
use Test::More;
use Time::HiRes qw(time);

my $driver = "$libdir/test_nonblock";
# The driver's connect and query timeout, and its close timeout: a call that
# waited for the server would take the one or the other.  The bounds below
# are fractions or multiples of them, so that a loaded machine stays green.
my $query_timeout_ms = 1000;
my $close_timeout_ms = 500;

# The value of KEY in the driver's key=value output OUT.
sub kv { my ($out, $key) = @_; return ($out =~ /\b$key=([\d.]+)/)[0]; }

# A black hole: listens, accepts, never says a word.
my $hole = IO::Socket::INET->new(Listen => 16, LocalAddr => '127.0.0.1', LocalPort => 0, ReuseAddr => 1)
  or die "cannot listen: $!";
my $port = $hole->sockport;
my ($out, $err) = ('', '');
my $h = IPC::Run::start([ $driver, "host=127.0.0.1 port=$port dbname=nowhere user=nobody", '3.5', 'acme' ],
	'>', \$out, '2>', \$err);
my @held;
my $select = IO::Select->new($hole);
wait_for(what => 'the driver', timeout => 30, until => sub {
	push @held, scalar $hole->accept if $select->can_read(0.05);
	$h->pump_nb if $h->pumpable;
	!$h->pumpable });
$h->finish;
note("black hole: $out");
cmp_ok(kv($out, 'longest_process_ms'), '<', $query_timeout_ms / 4,
	'black hole: no eh_process() call waits for the server (longest ' . kv($out, 'longest_process_ms') . ' ms)');
cmp_ok(scalar(@held), '>=', 2, 'black hole: the attempt timed out and was made again (' . scalar(@held) . ' connections)');
cmp_ok(kv($out, 'free_ms'), '<', $close_timeout_ms / 2, 'black hole: eh_client_free() returns at once');
close $_ for @held;

# A stopped backend.
my $node = eventhub_node('nonblocking');
$node->safe_psql('postgres', "SELECT eventhub.register_organization('acme')");

my $nb = { out => '', err => '', in => '' };
$nb->{h} = IPC::Run::start([ $driver, $node->connstr('postgres') . ' application_name=nbtest', '60', 'acme', 'nb-replica' ],
	'<', \$nb->{in}, '>', \$nb->{out}, '2>', \$nb->{err});
wait_for(what => 'ready', watch => $nb, matches => qr/^ready$/m);
like($nb->{out}, qr/^ready$/m, 'stopped backend: the client is at the head and listening');

my ($first) = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'nbtest' AND backend_type = 'client backend'") =~ /^(\d+)$/;
ok($first, 'stopped backend: found the client\'s backend');
kill 'STOP', $first;
my $stopped_at = time();
publish($node, 'acme', 3);
wait_for(what => 'event 3', watch => $nb, matches => qr/^event 3$/m);
like($nb->{out}, qr/^event 1\nevent 2\nevent 3$/m, 'stopped backend: events published meanwhile are delivered, in order');
my $took = time() - $stopped_at;
cmp_ok($took, '<', 10 * $query_timeout_ms / 1000,
	sprintf('stopped backend: delivered after a query timeout and a reconnect (%.1f s)', $took));

# Stop the new backend too, then free the client.
wait_for(what => 'a second backend', node => $node,
	sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'nbtest' AND pid <> $first AND state = 'idle'")
  or die 'no second backend';
my $second = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'nbtest' AND pid <> $first");
kill 'STOP', $second;
$nb->{in} .= "stop\n";
wait_for(what => 'the end', until => sub { !$nb->{h}->pumpable }, pump => [$nb], timeout => 10 * $close_timeout_ms / 1000);
kill 'CONT', $second, $first;
$nb->{h}->finish;
$out = $nb->{out};
note("stopped backend: $out");
cmp_ok(kv($out, 'longest_process_ms'), '<', $query_timeout_ms / 4,
	'stopped backend: no eh_process() call waited (longest ' . (kv($out, 'longest_process_ms') // '?') . ' ms)');
ok(defined kv($out, 'free_ms') && kv($out, 'free_ms') < 2 * $close_timeout_ms,
	'stopped backend: eh_client_free() gave the deregistration its close timeout of 500 ms, no more ('
	  . (kv($out, 'free_ms') // 'did not return') . ' ms)');
is(kv($out, 'events'), 3, 'stopped backend: each event delivered once');

$node->stop;
done_testing();
