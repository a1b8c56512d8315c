# 016_follow_all.pl: `eventhub watch --all` follows every organization,
# present and future: each event once, in revision order per organization,
# a new organization picked up by its notification (the poll interval is
# ten minutes); and the client's memory is bounded by bytes: three 32 MB events
# fetched with the default byte bound peak at a small multiple of one
# event, not of all three.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use List::Util qw(sum);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = eventhub_node('follow_all');
my $connstr = $node->connstr('postgres');

# --all --after 0: the kept history of every organization, then what comes.
publish($node, 'acme', 3);
publish($node, 'globex', 2);
# Polls at most every 0.8 x 600 s: what arrives sooner was notified.
my $poll_s = 600;
my $w = start_watch($connstr, '--all', '--after', '0', '--poll-interval', 1000 * $poll_s);
ok(wait_for(watch => $w, lines => 5), 'watch --all --after 0 prints the kept history of every organization');

# Three publishers at once, one of them into an organization that did not
# exist when watch started: 200 events in one statement each, then 100
# commits of one event each, as publishers do.
for my $batch (1, 0)
{
	my @pub;
	for my $org ('acme', 'globex', 'initech')
	{
		my $sql = $batch
		  ? "SELECT eventhub.publish_event('$org', 'API', 'UPDATE', 'x', NULL, jsonb_build_object('n', i)) FROM generate_series(1, 200) i;\n"
		  : join('', map { publish_sql($org, entity => "y$_") } 1 .. 100);
		push @pub, IPC::Run::start([ 'psql', '-X', '-q', '-d', $connstr ], '<', \$sql, '>', \my $o, '2>', \my $e);
	}
	$_->finish for @pub;
}
my %head = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres', 'SELECT organization_id, revision FROM eventhub.organization_states');
my $total = sum(values %head);
ok(wait_for(watch => $w, lines => $total), "all $total events arrive");

my (%seen, %bad);
for my $ev (watch_lines($w))
{
	my $org = $ev->{organization_id};
	$bad{$org}++ if $ev->{revision} != ($seen{$org} // 0) + 1;
	$seen{$org} = $ev->{revision};
}
is_deeply(\%seen, \%head, 'each organization up to its head');
is_deeply(\%bad, {}, 'each event once, in revision order, per organization');

# A new organization, one event: its notification brings it, not the poll.
my $t0 = time;
publish($node, 'hooli', 1);
ok(wait_for(watch => $w, lines => $total + 1), 'an organization created while watching is followed');
my $took = time - $t0;
my $last = (watch_lines($w))[-1];
is("$last->{organization_id} $last->{revision}", 'hooli 1', 'from its first event');
cmp_ok($took, '<', 0.8 * $poll_s,
	sprintf('within a notification\'s latency (%.0f ms; the poll interval is %d s)', $took * 1000, $poll_s));
$w->{h}->signal('TERM');
finish_cli($w);

# --all without --after: only what is published after it starts.
#
# Once it has read the heads, asked for the tokens of what it found and sent
# LISTEN (its statements are logged), it follows.
my $offset = -s $node->logfile;
$w = start_watch($connstr, '--all', '--count', '2');
wait_for_listening($node, $offset);
publish($node, $_, 1) for qw(acme umbrella);
finish_cli($w);
is(join(' ', map { "$_->{organization_id}:$_->{revision}" } watch_lines($w)),
	'acme:' . ($head{acme} + 1) . ' umbrella:1', 'watch --all from the heads prints only new events');

# Memory: three 32 MB events, in three transactions (a batch ends only at a
# transaction's end) and of data that does not compress (the bound is on
# the stored size).
my $size = 32 * 1024 * 1024;
$node->safe_psql('postgres',
	"SELECT eventhub.publish_event('big', 'API', 'CREATE', 'e$_', NULL,
	   jsonb_build_object('blob', (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, $size / 32))))")
  for 1 .. 3;

# Peak resident memory (VmHWM, kB) of a watch that has printed all three.
sub peak_kb
{
	my @extra = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/big.out";
	my $w = IPC::Run::start([ $cli, '-d', $connstr, 'watch', '--org', 'big', '--after', '0', @extra ],
		'<', \'', '>', $file, '2>', \my $e);
	my $pid = $w->{KIDS}[0]{PID};
	wait_for(what => 'three big events', until => sub { -s $file && -s $file > 3 * $size && `wc -l < $file` >= 3 });
	my ($hwm) = slurp_file("/proc/$pid/status") =~ /^VmHWM:\s+(\d+) kB/m;
	$w->signal('TERM');
	$w->finish;
	is(`wc -l < $file` + 0, 3, 'all three events printed' . (@extra ? " (@extra)" : ''));
	unlink $file;
	return $hwm;
}
my ($bounded, $unbounded) = (peak_kb(), peak_kb('--batch-bytes', '1073741824'));
my $event_kb = $size / 1024;
note(sprintf('peak RSS: %.0f MB with the default byte bound, %.0f MB with 1 GiB; one event is %.0f MB',
		$bounded / 1024, $unbounded / 1024, $event_kb / 1024));
cmp_ok($bounded, '<', 4 * $event_kb,
	sprintf('peak memory with the default byte bound is under 4 events (%.1f events)', $bounded / $event_kb));
cmp_ok($unbounded - $bounded, '>', $event_kb,
	'and it is the bound that keeps it there: without it the three come in one batch, and the peak grows by more than an event');

$node->stop;
done_testing();
