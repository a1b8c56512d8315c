# 014_cli_safety.pl: what the CLI prints cannot be turned against the
# terminal that shows it, watch ends cleanly (deregistered) when its reader
# goes away, ids the server would refuse are refused at the start,
# `eventhub status` stays a usable probe with 100,000 organizations and ten
# replicas, for the operator role docs/operations.md grants, SIGTERM and
# SIGINT stop a watch whose reader (a pipe, a terminal) stalls at once,
# quietly, and a closed standard output is an error.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use Encode;
use Fcntl qw(O_WRONLY O_NONBLOCK);
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = eventhub_node('cli_safety');
my $connstr = $node->connstr('postgres');

# A publisher names an organization to rewrite an operator's screen.
my $evil = "evil\e[2J\e]0;pwned\a\nfake-row 999 \x{c2}\x{9b}31m\x{e2}\x{80}\x{ae}";
publish($node, Encode::decode('UTF-8', $evil), 1, action => 'CREATE', data => '{"k": "v\\u001b[0m"}');
my $long = 'w' x 600;
$node->safe_psql('postgres', "SELECT eventhub.register_organization('$long')");
$node->safe_psql('postgres', "SELECT eventhub.heartbeat('rep-hash', '{\"$long\": {\"revision\": 0, \"config_hash\": \"" . ('h' x 256) . "\"}}')");

my ($rc, $out, $err) = run_cli('-d', $connstr, 'status');
is($rc, 0, 'status exits 0');
unlike($out, qr/[\x00-\x09\x0b-\x1f\x7f]/, 'no control character but the newline reaches the terminal');
unlike($out, qr/\x{c2}[\x{80}-\x{9f}]|\x{e2}\x{80}[\x{a8}-\x{ae}]/, 'nor a C1 control or a bidirectional override');
like($out, qr/^evil\\x1b\[2J\\x1b\]0;pwned\\x07\\nfake-row 999 \x{e2}\x{80}\x{a6}/m,
	'the id is shown with its controls escaped, on its own row');
unlike($out, qr/^fake-row/m, 'and cannot fake a row');
my ($widest) = sort { $b <=> $a } map { length } split /\n/, $out;
cmp_ok($widest, '<', 250, "a 600-byte id and a 256-byte hash do not widen the tables (widest line $widest)");
like($out, qr/^w{47}\x{e2}\x{80}\x{a6}/m, 'an over-wide cell ends with an ellipsis');

($rc, $out) = run_cli('-d', $connstr, 'status', '--json');
my $doc = decode_json($out);
my ($org) = grep { $_->{organization_id} =~ /^evil/ } @{ $doc->{organizations} };
is($org->{organization_id}, Encode::decode('UTF-8', $evil), 'status --json gives the id exactly');
unlike($out, qr/[\x00-\x09\x0b-\x1f\x7f]|\x{c2}[\x{80}-\x{9f}]|\x{e2}\x{80}[\x{a8}-\x{ae}]/, 'as escapes, not raw');

($rc, $out) = run_cli('-d', $connstr, 'watch', '--org', Encode::decode('UTF-8', $evil), '--after', '0', '--count', '1');
is($rc, 0, 'watch of that organization exits 0');
my $line = decode_json($out);
is($line->{organization_id}, Encode::decode('UTF-8', $evil), 'watch prints the id exactly, as JSON');
is($line->{event_data}{k}, "v\e[0m", 'and the event data');
unlike($out, qr/[\x00-\x09\x0b-\x1f\x7f]|\x{c2}[\x{80}-\x{9f}]|\x{e2}\x{80}[\x{a8}-\x{ae}]/, 'escaped, not raw');

# Ids over 1024 bytes are refused when parsed: exit 2, nothing runs.
($rc, $out, $err) = run_cli('-d', $connstr, 'watch', '--org', 'o' x 1025, '--replica-id', 'r-long');
is($rc, 2, 'watch --org with 1025 bytes exits 2');
like($err, qr/--org is 1025 bytes long; the limit is 1024 bytes/, 'and says why');
is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'r-long'"),
	'0', 'no replica was registered');
($rc, $out, $err) = run_cli('-d', $connstr, 'publish', '-xyz');
is($rc, 2, 'an unknown short option is a usage error');
like($err, qr/unknown option "-x" for publish/, 'named by its letter, not by the command');

# watch ... | head -1: the reader goes away; watch deregisters and exits 141.
publish($node, 'piped', 3);
my ($flag, $status_file, $first) = map { "$PostgreSQL::Test::Utils::tmp_check/$_" } qw(reader-done watch-status first-line);
my $pipeline = IPC::Run::start([
		'bash', '-c', qq{"\$0" -d "\$1" watch --org piped --after 0 --replica-id piped-r --heartbeat-interval 100 |
		   { head -1 > "$first"; while [ ! -e "$flag" ]; do sleep 0.05; done; };
		   echo "\${PIPESTATUS[0]}" > "$status_file"}, $cli, $connstr ]);
ok(wait_for(what => 'the piped watch', node => $node, sql => "SELECT count(*) = 1 FROM eventhub.replicas WHERE replica_id = 'piped-r'"),
	'the piped watch registered its replica') or die 'the piped watch did not register';
append_to_file($flag, '');
my $t0 = time;
$pipeline->finish;
my $took = time - $t0;
is(slurp_file($status_file), "141\n", 'watch exits 141 once its reader is gone (as a SIGPIPE would)');
# It may give the deregistration its close timeout (1 s): ten times that.
cmp_ok($took, '<', 10, sprintf('promptly (%.1f s)', $took));
is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'piped-r'"),
	'0', 'and deregistered its replica');
like(slurp_file($first), qr/"revision": 1,/, 'the reader got the first event');

# status with 100,000 organizations and ten replicas following all of them,
# as the operator role of docs/operations.md.
$node->safe_psql('postgres', q{
	SELECT eventhub.register_organization('org-' || i) FROM generate_series(1, 100000) i;
	SELECT eventhub.heartbeat('replica-' || r,
		(SELECT jsonb_object_agg('org-' || i, jsonb_build_object('revision', 0)) FROM generate_series(1, 100000) i))
	  FROM generate_series(1, 10) r;
	SELECT eventhub.publish_event('org-' || i, 'API', 'CREATE', 'e', NULL, '{}') FROM generate_series(1, 5) i;
	ANALYZE;
});
grant_bundle($node, 'postgres', operator => 'gateway_operator');
my $opconn = $node->connstr('postgres') . ' user=gateway_operator';
$t0 = time;
($rc, $out, $err) = run_cli('-d', $opconn, 'status', '--fail-if-lag', '0');
$took = time - $t0;
is($rc, 4, 'the operator role runs status --fail-if-lag 0: exit 4, replicas are behind') or diag($err);
like($err, qr/replica "replica-1" is 1 revisions behind on organization "org-\d" \(and more than 0 behind on 4 other organizations\)/,
	'each lagging replica is named once, with the organization it is most behind on');
is(scalar(() = $err =~ /^eventhub: replica /mg), 10, 'ten lines for ten replicas, not 50');
like($out, qr/^replica-1\s+live\s+100000\s+5\s+1\s+org-\d/m, 'one summary row per replica');
# Minutes before this summary; a generous bound keeps a slow machine green.
cmp_ok($took, '<', 15, sprintf('status over a million progress rows took %.1f s', $took));
note(sprintf('status --fail-if-lag with 100,000 organizations and 10 replicas: %.2f s', $took));

($rc, $out, $err) = run_cli('-d', $opconn, 'status', '--org', 'org-3');
is($rc, 0, 'status --org as the operator');
is(scalar(() = $out =~ /^replica-\d+\s+live\s+org-3\s+0\s+1\s+1\s/mg), 10, 'each replica\'s progress on that organization');

# A reader that stalls: watch waits to write to a pipe or a terminal that
# nobody reads.  SIGTERM (what a process manager sends first) and SIGINT
# still end it within a second, quietly, with the documented status, and
# it deregisters its replica.  Its stdout is a pipe or a pty of the
# harness, which reads them only when pumped: nothing pumps them until
# watch exited.  That watch waits for its reader is read from the kernel,
# not guessed from time: for the pipe, the pipe is full (a writer opened on
# it through /proc polls unwritable) while watch sleeps in a write (wait
# channel pipe_write, or anon_pipe_write on recent kernels) or a poll; for
# the terminal, which can call itself writable and then block a write,
# watch sleeps in a write to its stdout, or the terminal is full.  That it
# exited is read there too (a zombie until reaped), so that nothing reads
# its output meanwhile.
sub stdout_full
{
	my ($pid) = @_;
	sysopen(my $pipe, "/proc/$pid/fd/1", O_WRONLY | O_NONBLOCK) or return 0;
	my $writable = '';
	vec($writable, fileno($pipe), 1) = 1;
	return select(undef, $writable, undef, 0) == 0;
}
sub tty_stalled
{
	my ($pid) = @_;
	# x86-64: write(2) is 1, then its first argument, the descriptor.
	return (eval { slurp_file("/proc/$pid/syscall") } // '') =~ /^1 0x1 / || stdout_full($pid);
}
my $pad = 'p' x 4000;
for my $case ([ 'TERM', 'pipe' ], [ 'INT', 'pipe' ], [ 'TERM', 'terminal' ])
{
	my ($sig, $reader) = @$case;
	my $replica = "stalled-$sig-$reader";
	my @cmd = ($cli, '-d', $connstr, 'watch', '--org', $replica, '--replica-id', $replica, '--poll-interval', '200');
	my $w = { out => '', err => '' };
	$w->{h} = IPC::Run::start(\@cmd, '<', \'', ($reader eq 'pipe' ? '>' : '>pty>'), \$w->{out}, '2>', \$w->{err},
		IPC::Run::timeout(2 * $PostgreSQL::Test::Utils::timeout_default));
	my $pid = $w->{h}{KIDS}[0]{PID};
	wait_for(what => "the $sig watcher's replica", node => $node,
		sql => "SELECT count(*) = 1 FROM eventhub.replicas WHERE replica_id = '$replica'")
	  or die "the $sig watcher did not register";
	# 100 events of 4 kB: 400 kB, six times what a pipe holds.
	publish($node, $replica, 100, data => qq({"pad": "$pad"}));
	my $wchan = '';
	ok(wait_for(what => "the $sig watcher waiting for its $reader",
			until => sub {
				$wchan = eval { slurp_file("/proc/$pid/wchan") } // '';
				return $reader eq 'pipe' ? $wchan =~ /pipe_write|poll/ && stdout_full($pid) : tty_stalled($pid);
			}),
		"watch waits to write to a $reader that nobody reads ($wchan)");
	my $exited = sub {
		my $stat = eval { slurp_file("/proc/$pid/stat") };
		return !defined $stat || $stat =~ /\) Z /;
	};
	$t0 = time;
	kill $sig, $pid;
	my $gone = wait_for(what => "the $sig watcher exiting", until => $exited, timeout => 10);
	$took = time - $t0;
	ok($gone, "SIG$sig ends it ($reader)");
	cmp_ok($took, '<', 1, sprintf('within a second (%.3f s)', $took));
	kill 'KILL', $pid unless $gone;
	$w->{h}->finish;
	is($w->{h}->full_result(0) >> 8, 130, "with status 130 for SIG$sig");
	is($w->{err}, '', 'and nothing on stderr');
	is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.replicas WHERE replica_id = '$replica'"),
		'0', 'its replica is deregistered');
}

# A closed standard output is an error at once: no descriptor the command
# opens takes its number (libpq's socket would get the table status
# prints).
for my $cmd ([ 'status' ], [ 'watch', '--org', 'closed-stdout' ])
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'sh', '-c', 'exec "$@" >&-', 'sh', $cli, '-d', $connstr, @$cmd ], '<', \'', '2>', \$err,
		IPC::Run::timeout(30));
	is($? >> 8, 1, "$cmd->[0] with its standard output closed exits 1");
	like($err, qr/^eventhub: could not write to standard output: Bad file descriptor$/, 'and says why');
}

$node->stop;
done_testing();
