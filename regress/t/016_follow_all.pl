# 016_follow_all.pl: `eventhub watch --all` follows every organization,
# present and future: each event once, in revision order per organization,
# a new organization picked up by its notification (the poll interval is
# ten minutes); and the client's memory is bounded by bytes: three 32 MB events
# fetched with the default byte bound peak at a small multiple of one
# event, not of all three.

use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $work = $ENV{EVENTHUB_WORK} or die "EVENTHUB_WORK is not set";
my $cli = "$work/client/eventhub";
my $node = PostgreSQL::Test::Cluster->new('follow_all');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'eventhub'\neventhub.database = 'postgres'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION eventhub');
my $connstr = $node->connstr('postgres');

sub publish
{
	my ($org, $n) = @_;
	$node->safe_psql('postgres',
		"SELECT eventhub.publish_event('$org', 'API', 'CREATE', 'e' || i, NULL, jsonb_build_object('i', i))
		   FROM generate_series(1, $n) i");
}

# Lines printed so far by a watch writing into $$out.
sub lines { return grep { length } split /\n/, ${ $_[0] }; }

sub wait_for_lines
{
	my ($h, $out, $n, $what) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (scalar(lines($out)) < $n && time < $deadline)
	{
		$h->pump_nb;
		usleep(10_000);
	}
	return scalar(lines($out)) >= $n;
}

#
# --all --after 0: the kept history of every organization, then what comes.
#
publish('acme', 3);
publish('globex', 2);
my ($out, $err) = ('', '');
# Polls at most every 0.8 x 600 s: what arrives sooner was notified.
my $poll_s = 600;
my $h = IPC::Run::start([ $cli, '-d', $connstr, 'watch', '--all', '--after', '0', '--poll-interval', 1000 * $poll_s ],
	'<', \'', '>', \$out, '2>', \$err);
ok(wait_for_lines($h, \$out, 5), 'watch --all --after 0 prints the kept history of every organization');

# Three publishers at once, one of them into an organization that did not
# exist when watch started.
my @pub;
for my $org ('acme', 'globex', 'initech')
{
	push @pub, IPC::Run::start([ 'psql', '-X', '-q', '-d', $connstr, '-c',
		"SELECT eventhub.publish_event('$org', 'API', 'UPDATE', 'x', NULL, jsonb_build_object('n', i))
		   FROM generate_series(1, 200) i" ], '>', \my $o, '2>', \my $e);
}
# One transaction per event, as publishers do: 200 commits each.
$_->finish for @pub;
for my $org ('acme', 'globex', 'initech')
{
	my $script = join('', map { "SELECT eventhub.publish_event('$org', 'API', 'UPDATE', 'y$_', NULL, '{}');\n" } 1 .. 100);
	push @pub, IPC::Run::start([ 'psql', '-X', '-q', '-d', $connstr ], '<', \$script, '>', \my $o, '2>', \my $e);
}
$_->finish for @pub;
my %head = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres', 'SELECT organization_id, revision FROM eventhub.organization_states');
my $total = 0;
$total += $_ for values %head;
ok(wait_for_lines($h, \$out, $total), "all $total events arrive");

my (%seen, %bad);
for my $line (lines(\$out))
{
	my $ev = decode_json($line);
	my $org = $ev->{organization_id};
	$bad{$org}++ if $ev->{revision} != ($seen{$org} // 0) + 1;
	$seen{$org} = $ev->{revision};
}
is_deeply(\%seen, \%head, 'each organization up to its head');
is_deeply(\%bad, {}, 'each event once, in revision order, per organization');

# A new organization, one event: its notification brings it, not the poll.
my $t0 = time;
publish('hooli', 1);
ok(wait_for_lines($h, \$out, $total + 1), 'an organization created while watching is followed');
my $took = time - $t0;
my $last = decode_json((lines(\$out))[-1]);
is("$last->{organization_id} $last->{revision}", 'hooli 1', 'from its first event');
cmp_ok($took, '<', 0.8 * $poll_s,
	sprintf('within a notification\'s latency (%.0f ms; the poll interval is %d s)', $took * 1000, $poll_s));
$h->signal('TERM');
$h->finish;

#
# --all without --after: only what is published after it starts.
#
($out, $err) = ('', '');
# Once it has read the heads, asked for the tokens of what it found and sent
# LISTEN (its statements are logged), it follows.
my $offset = -s $node->logfile;
$h = IPC::Run::start([ $cli, '-d', $connstr, 'watch', '--all', '--count', '2' ], '<', \'', '>', \$out, '2>', \$err);
$node->wait_for_log(qr/LISTEN eventhub\n.*notification_token/s, $offset);
publish('acme', 1);
publish('umbrella', 1);
$h->finish;
is(join(' ', map { my $e = decode_json($_); "$e->{organization_id}:$e->{revision}" } lines(\$out)),
	'acme:' . ($head{acme} + 1) . ' umbrella:1',
	'watch --all from the heads prints only new events');

#
# Memory: three 32 MB events.
#
my $size = 32 * 1024 * 1024;
$node->safe_psql('postgres',
	"SELECT eventhub.publish_event('big', 'API', 'CREATE', 'e' || i, NULL,
	   jsonb_build_object('blob', repeat(chr(97 + i), $size))) FROM generate_series(1, 3) i");

# Peak resident memory (VmHWM, kB) of a watch that has printed all three.
sub peak_kb
{
	my @extra = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/big.out";
	my $w = IPC::Run::start([ $cli, '-d', $connstr, 'watch', '--org', 'big', '--after', '0', @extra ],
		'<', \'', '>', $file, '2>', \my $e);
	my $pid = $w->{KIDS}[0]{PID};
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		last if -s $file && -s $file > 3 * $size && `wc -l < $file` >= 3;
		usleep(50_000);
	}
	my ($hwm) = slurp_file("/proc/$pid/status") =~ /^VmHWM:\s+(\d+) kB/m;
	$w->signal('TERM');
	$w->finish;
	is(`wc -l < $file` + 0, 3, 'all three events printed' . (@extra ? " (@extra)" : ''));
	unlink $file;
	return $hwm;
}
my $bounded = peak_kb();
my $unbounded = peak_kb('--batch-bytes', '1073741824');
my $event_kb = $size / 1024;
note(sprintf('peak RSS: %.0f MB with the default byte bound, %.0f MB with 1 GiB; one event is %.0f MB',
		$bounded / 1024, $unbounded / 1024, $event_kb / 1024));
cmp_ok($bounded, '<', 4 * $event_kb,
	sprintf('peak memory with the default byte bound is under 4 events (%.1f events)', $bounded / $event_kb));
cmp_ok($unbounded - $bounded, '>', $event_kb,
	'and it is the bound that keeps it there: without it the three come in one batch, and the peak grows by more than an event');

$node->stop;
done_testing();
