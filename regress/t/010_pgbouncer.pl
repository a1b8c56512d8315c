# 010_pgbouncer.pl: the client behind a real pgbouncer (Debian's package),
# started by the test on 127.0.0.1.
#
#   - transaction pooling: the watcher finds out that notifications cannot
#     reach it and does not LISTEN, so that no eventhub notification reaches
#     another client of the pool (a neighbour that publishes through the same
#     pool hears nothing, and pgbouncer logs no stray notification); it
#     delivers every event once, in order, polling at the fallback interval
#     (250 ms by default), not the regular one (5 s);
#   - session pooling: notifications work, and the watcher uses them;
#   - with the server down, the reconnect backoff grows although pgbouncer
#     accepts every login (its query_wait_timeout is set to a second, so
#     that a query waiting for a server fails quickly): the backoff starts
#     over only once a connection has answered a query.  It grows up to its
#     cap (1 s by default), which bounds every wait.

use strict;
use warnings;

use EventhubTest;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);

my $pgbouncer = -x '/usr/sbin/pgbouncer' ? '/usr/sbin/pgbouncer' : 'pgbouncer';

my $node = eventhub_node('pooled', conf => "log_statement = 'none'");
my $user = $node->safe_psql('postgres', 'SELECT current_user');

my $dir = PostgreSQL::Test::Utils::tempdir();
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $via_pool = "host=127.0.0.1 port=$port dbname=postgres user=$user";
my $bouncer;
append_to_file("$dir/users.txt", "\"$user\" \"\"\n");

# Starts pgbouncer in pool mode MODE (in the foreground, as a child).
sub start_pgbouncer
{
	my ($mode) = @_;
	unlink "$dir/pgbouncer.ini", "$dir/pgbouncer.log";
	append_to_file("$dir/pgbouncer.ini", "[databases]\n"
	  . "postgres = host=" . $node->host . " port=" . $node->port . " dbname=postgres\n"
	  . "[pgbouncer]\n"
	  . "listen_addr = 127.0.0.1\nlisten_port = $port\nunix_socket_dir =\n"
	  . "auth_type = trust\nauth_file = $dir/users.txt\n"
	  . "pool_mode = $mode\ndefault_pool_size = 4\nmax_client_conn = 100\n"
	  . "server_login_retry = 1\nquery_wait_timeout = 1\n"
	  . "logfile = $dir/pgbouncer.log\npidfile = $dir/pgbouncer.pid\n");
	$bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', '/dev/null', '2>', "$dir/pgbouncer.err");
	wait_for(what => 'pgbouncer', until => sub { IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) })
	  or die "pgbouncer did not start: " . slurp_file("$dir/pgbouncer.err");
}

# A test that dies leaves no pgbouncer behind (it would hold what the test
# held: its files, a lock of the caller's).
END { $bouncer->kill_kill if $bouncer && $bouncer->pumpable; }

sub stop_pgbouncer { $bouncer->signal('INT'); $bouncer->finish; }

sub watch { return start_watch($via_pool, @_); }

sub epoch_of
{
	my ($iso) = @_;
	my ($y, $mo, $d, $h, $mi, $s, $frac) = $iso =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(\.\d+)?Z$/ or die $iso;
	return timegm($s, $mi, $h, $d, $mo - 1, $y) + ($frac // 0);
}

# Transaction pooling.
start_pgbouncer('transaction');
my $w = watch('--org', 'acme', '--after', '0', '--count', '100', '--timeout', '120');
ok(wait_for(watch => $w, stderr => qr/notifications do not reach this connection/),
	'transaction pooling: the watcher finds out that notifications cannot reach it');

# A neighbour publishes through the same pool, one transaction per event,
# and prints whatever notification reaches it.
my $script = join('', map { "SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'e', 'tx-$_', '{}');\nSELECT pg_sleep(0.02);\n" } 1 .. 100);
my ($n_out, $n_err) = ('', '');
my $neighbour = IPC::Run::start([ 'psql', '-X', '-d', $via_pool, '-f', '-' ], '<', \$script, '>', \$n_out, '2>', \$n_err);
my %arrived;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while ($w->{h}->pumpable && time() < $deadline)
{
	$w->{h}->pump_nb;
	$neighbour->pump_nb if $neighbour->pumpable;
	my $now = time();
	$arrived{ $_->{revision} } //= [ $now, epoch_of($_->{processed_timestamp}) ] for watch_lines($w);
	usleep(2_000);
}
$neighbour->finish;
is(finish_cli($w), 0, 'transaction pooling: the watcher exits after 100 events') or diag($w->{err});
is_deeply([ map { $_->{revision} } watch_lines($w) ], [ 1 .. 100 ], 'transaction pooling: every event once, in order');
my @lat = sort { $a <=> $b } map { 1000 * ($_->[0] - $_->[1]) } values %arrived;
my $p50 = $lat[ int(0.5 * $#lat) ];
note(sprintf('transaction pooling: publish-to-print latency p50 %.0f ms, p99 %.0f ms', $p50, $lat[ int(0.99 * $#lat) ]));
# Polling every 250 ms (the fallback interval) the median is about 150 ms;
# every 5 s (the regular poll interval), about 2.5 s.  A quarter of the
# regular interval tells them apart on a loaded machine.
cmp_ok($p50, '<', 5000 / 4, 'transaction pooling: median latency of the fallback interval, not of the poll interval');
unlike($n_out, qr/Asynchronous notification "eventhub"/, 'transaction pooling: no eventhub notification reached the neighbour');
# The probe's one notification may go astray (that is how the watcher finds
# out); a LISTEN eventhub on a pooled connection would send a hundred.
cmp_ok(scalar(() = slurp_file("$dir/pgbouncer.log") =~ /got packet 'A' from server when not linked/g), '<=', 1,
	 'transaction pooling: pgbouncer saw no stray eventhub notification');
is(scalar(() = $w->{err} =~ /notifications do not reach this connection/g), 1, 'transaction pooling: said once');
stop_pgbouncer();

# Session pooling: notifications work.
start_pgbouncer('session');
# Its statements are logged: once it has sent LISTEN eventhub, and then read
# the head (EH_FROM_HEAD) with the notification token, it follows.
reload_settings($node, "log_statement = 'all'", worker => 0) or die 'the reload did not take';
my $offset = -s $node->logfile;
my $s = watch('--org', 'acme', '--count', '20', '--timeout', '60', '--poll-interval', '600000',
	'--fallback-poll-interval', '600000');
wait_for_listening($node, $offset);
publish($node, 'acme', 20);
is(finish_cli($s), 0, 'session pooling: 20 events arrive without a single poll (notifications)') or diag($s->{err});
is_deeply([ map { $_->{revision} } watch_lines($s) ], [ 101 .. 120 ], 'session pooling: once, in order');
unlike($s->{err}, qr/do not reach/, 'session pooling: it listens');
stop_pgbouncer();

# The server down behind the pooler: the backoff grows.  pgbouncer has
# served a login before (it keeps the server's parameters and accepts logins
# without a server from then on); then the server goes.
start_pgbouncer('transaction');
is(`psql -XAtq -d '$via_pool' -c 'SELECT 1'`, "1\n", 'pgbouncer served a login');
$node->stop;
# From 100 ms, doubling, each wait between half the backoff and the whole
# of it: reset at every login, the waits would stay at 100 ms at most.
# With the default cap (1 s) they reach half a second within five
# reconnects and stay between half a second and a second.
my $down = watch('--org', 'acme');
wait_for(watch => $down, stderr => qr/(?:reconnecting in [5-9]\d\d ms.*){3}/s);
$down->{h}->signal('TERM');
$down->{h}->finish;
my @waits = $down->{err} =~ /reconnecting in (\d+) ms/g;
note('reconnect waits: ' . join(', ', @waits));
cmp_ok(scalar(@waits), '<=', 12, 'server down: a handful of reconnects until the wait reaches half a second, not a hundred');
cmp_ok((sort { $b <=> $a } @waits)[0], '<=', 1000, 'server down: no wait beyond the cap, 1 s');
cmp_ok(scalar(grep { $_ >= 500 } @waits[-3 .. -1]), '==', 3, 'server down: the wait grows to the cap and stays there');

# With a larger cap (--reconnect-backoff), the growth goes on past a second.
$down = watch('--org', 'acme', '--reconnect-backoff', '30000');
wait_for(watch => $down, stderr => qr/reconnecting in \d{4,} ms/);
$down->{h}->signal('TERM');
$down->{h}->finish;
@waits = $down->{err} =~ /reconnecting in (\d+) ms/g;
note('reconnect waits with a cap of 30 s: ' . join(', ', @waits));
cmp_ok(scalar(@waits), '<=', 12, 'server down, cap 30 s: a handful of reconnects until the wait reaches a second');
cmp_ok((sort { $b <=> $a } @waits)[0], '>=', 1000, 'server down, cap 30 s: the wait grows past a second');
stop_pgbouncer();

done_testing();
