# 029_back_within_a_second.pl: after the server is down for 5 s, a watcher
# delivers the first event published once the server is back within about a
# second of its commit, directly and behind transaction-pooling pgbouncer,
# and does not hammer the server meanwhile; and a watcher whose multi-host
# conninfo wants the primary retries promptly while a standby answers.
#
# libeventhub's reconnect backoff doubles from 100 ms to a cap of 1 s (the
# default), each wait drawn from between half the backoff and the whole of
# it: a watcher whose server is down tries at least once a second.  The
# test checks that mechanism from the watcher's own log (every "reconnecting
# in N ms" is at most the cap, and a 5 s outage costs a handful of attempts,
# not a tight loop) and measures the commit-to-print latency of the first
# event after the restart.  Directly, the watcher's next attempt comes at
# most a second after the server accepts connections; the bound, 2.5 s,
# leaves room for a loaded machine.  A backoff grown towards 30 s, as the
# cap was before, left the watcher away for several seconds after a 5 s
# outage.
#
# Behind pgbouncer the pooler's own retry adds to the client's.  Once a
# connection to the server failed, pgbouncer refuses every login at once
# ("server login has been failing, try again later") until a connection to
# the server succeeds, and it tries one only when a client logs in, at
# least server_login_retry after the last (15 s by default; 1 s here).  So
# the login that finds the server back is refused too (pgbouncer starts
# its connection to the server then), and the watcher's next attempt, at
# most the cap later, gets in: about a second and a half on average, up to
# about three when pgbouncer's last attempt was just before the server came
# back (its retry then waits for the login after the next), hence a bound
# of 3.5 s there: the client is back within its cap of pgbouncer serving
# again.

use strict;
use warnings;

use EventhubTest;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $pgbouncer = -x '/usr/sbin/pgbouncer' ? '/usr/sbin/pgbouncer' : 'pgbouncer';
my $cap_ms = 1000;       # libeventhub's default cap

my $node = eventhub_node('back', init => { allows_streaming => 1 }, conf => "log_statement = 'none'");
my $user = $node->safe_psql('postgres', 'SELECT current_user');

# revision_seen(WATCH, REV): whether the watcher printed revision REV.
sub revision_seen
{
	my ($w, $rev) = @_;
	return scalar grep { $_->{revision} == $rev } watch_lines($w);
}

# pump_for(SECONDS, HANDLES...): reads the processes' output meanwhile.
sub pump_for
{
	my ($s, @h) = @_;
	my $until = time() + $s;
	while (time() < $until)
	{
		$_->{h}->pump_nb for grep { $_->{h}->pumpable } @h;
		usleep(20_000);
	}
}

# outage(WHAT, WATCH, REV, BOUND): stops the server for 5 s (fast shutdown), starts
# it, publishes one event (revision REV) directly as soon as it accepts
# connections, and waits for the watcher to print it.  Checks the waits the
# watcher logged while the server was away and the latency (below BOUND
# seconds); returns it.
sub outage
{
	my ($what, $w, $rev, $bound_s) = @_;
	my $err_from = length $w->{err};
	$node->stop('fast');
	pump_for(5, $w);
	$node->start;
	my $published = time();
	publish($node, 'acme', 1);
	my $committed = time();
	my $deadline = $committed + $PostgreSQL::Test::Utils::timeout_default;
	my $seen;
	while (!$seen && time() < $deadline && $w->{h}->pumpable)
	{
		$w->{h}->pump_nb;
		$seen = time() if revision_seen($w, $rev);
		usleep(2_000);
	}
	ok($seen, "$what: the event published after the restart arrives") or diag($w->{err});
	my $latency = ($seen // $deadline) - $committed;
	my @waits = substr($w->{err}, $err_from) =~ /reconnecting in (\d+) ms/g;
	diag(sprintf('%s: commit-to-print %.0f ms (publish took %.0f ms); reconnect waits: %s',
		$what, 1000 * $latency, 1000 * ($committed - $published), join(', ', @waits)));
	cmp_ok(scalar(@waits), '>=', 1, "$what: the watcher lost its connection and reconnected");
	cmp_ok((sort { $b <=> $a } @waits)[0] // 0, '<=', $cap_ms, "$what: no wait longer than the cap, 1 s");
	# 5 s down: from 100 ms doubling to 1 s, about a dozen attempts.
	cmp_ok(scalar(@waits), '<=', 25, "$what: a handful of attempts while the server is down, not a tight loop");
	cmp_ok($latency, '<', $bound_s, "$what: delivered within ${bound_s} s of its commit");
	return $latency;
}

# Directly.
my $w = start_watch($node->connstr('postgres'), '--org', 'acme', '--after', '0');
publish($node, 'acme', 1);
wait_or_die(watch => $w, lines => 1, what => 'the first event');
outage('directly', $w, 2, 2.5);

# Behind transaction-pooling pgbouncer.
my $dir = PostgreSQL::Test::Utils::tempdir();
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $via_pool = "host=127.0.0.1 port=$port dbname=postgres user=$user";
append_to_file("$dir/users.txt", "\"$user\" \"\"\n");
append_to_file("$dir/pgbouncer.ini", "[databases]\n"
	  . "postgres = host=" . $node->host . " port=" . $node->port . " dbname=postgres\n"
	  . "[pgbouncer]\n"
	  . "listen_addr = 127.0.0.1\nlisten_port = $port\nunix_socket_dir =\n"
	  . "auth_type = trust\nauth_file = $dir/users.txt\n"
	  . "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 100\n"
	  . "server_login_retry = 1\nquery_wait_timeout = 1\n"
	  . "logfile = $dir/pgbouncer.log\npidfile = $dir/pgbouncer.pid\n");
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', '/dev/null', '2>', "$dir/pgbouncer.err");
END { $bouncer->kill_kill if $bouncer && $bouncer->pumpable; }
wait_for(what => 'pgbouncer', until => sub { IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) })
  or die "pgbouncer did not start: " . slurp_file("$dir/pgbouncer.err");

my $p = start_watch($via_pool, '--org', 'acme', '--after', '2');
wait_or_die(watch => $p, stderr => qr/notifications do not reach this connection/, what => 'the pooled watcher polls');
publish($node, 'acme', 1);
wait_or_die(watch => $p, lines => 1, what => 'the pooled watcher follows');
outage('behind pgbouncer', $p, 4, 3.5);
# The direct watcher lived through that outage too: it prints revision 4
# once its own reconnect comes.
wait_or_die(watch => $w, lines => 4, what => 'the direct watcher to print revision 4');

$_->{h}->signal('TERM') for $w, $p;
$_->{h}->finish for $w, $p;
is_deeply([ map { $_->{revision} } watch_lines($w) ], [ 1 .. 4 ], 'directly: every event once, in order');
is_deeply([ map { $_->{revision} } watch_lines($p) ], [ 3, 4 ], 'behind pgbouncer: every event once, in order');
$bouncer->signal('INT');
$bouncer->finish;

# A standby that answers while the primary is wanted (target_session_attrs
# =read-write), as during a failover: the watcher tries again within 250 ms
# each time (a backoff grown to the cap would wait half a second to a
# second), and once the standby is promoted it is back at once.
my $standby = eventhub_standby($node, 'standby');
wait_or_die(what => 'the standby replays revision 4', node => $standby,
	sql => "SELECT revision = 4 FROM eventhub.organization_states WHERE organization_id = 'acme'");
my $s = start_watch($standby->connstr('postgres') . ' target_session_attrs=read-write', '--org', 'acme', '--after', '4');
wait_or_die(watch => $s, stderr => qr/(?:reconnecting in \d+ ms.*){8}/s, what => 'eight attempts on the standby');
my @prompt = $s->{err} =~ /reconnecting in (\d+) ms/g;
note('reconnect waits while only a standby answers: ' . join(', ', @prompt));
like($s->{err}, qr/session is read-only|server is in hot standby mode/, 'standby: libpq says the host is not the primary');
cmp_ok((sort { $b <=> $a } @prompt)[0], '<=', 250, 'standby: every wait at most 250 ms while a standby answers');
$standby->promote;
my $promoted = time();
publish($standby, 'acme', 1);
my $committed = time();
wait_for(watch => $s, lines => 1, what => 'the event on the promoted standby');
my $latency = time() - $committed;
diag(sprintf('promoted standby: promote-to-commit %.0f ms, commit-to-print about %.0f ms', 1000 * ($committed - $promoted),
	1000 * $latency));
is_deeply([ map { $_->{revision} } watch_lines($s) ], [5], 'promoted standby: the event arrives');
cmp_ok($latency, '<', 2.5, 'promoted standby: delivered within 2.5 s of its commit');
$s->{h}->signal('TERM');
$s->{h}->finish;

done_testing();
