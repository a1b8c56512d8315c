# 002_worker.pl: the background worker that enforces retention.
#
# Proves that the worker
#   - waits quietly (one log line) until CREATE EXTENSION, then works;
#   - shows itself in pg_stat_activity;
#   - deletes expired events and keeps fresh ones, per organization, and
#     keeps the resync contract (heads stay, old cursors get ZE001);
#   - uses a new eventhub.retention from the next cycle after a reload;
#   - comes back after SIGTERM and after SIGKILL, with no committed event lost;
#   - removes a 200,000-event backlog in batches while publishers keep
#     publishing, none of them waiting longer than $max_publish_wait_ms;
#   - does nothing on a hot standby.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The longest a publish may take while the backlog is being deleted.  A
# publish never waits on retention's locks; this bound only absorbs a busy
# machine's scheduling and I/O, so it is generous on purpose.
my $max_publish_wait_ms = 1000;

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
eventhub.maintenance_interval = '100ms'
# PostgreSQL::Test::Cluster turns this off; the SIGKILL test needs the
# postmaster's usual crash restart.
restart_after_crash = on
});
$node->start;

sub worker_pid
{
	my ($n) = @_;
	return $n->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'");
}

sub wait_for_new_worker
{
	my ($old_pid) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity"
		  . " WHERE backend_type = 'eventhub maintenance' AND pid <> $old_pid")
	  or die "the worker did not come back";
	return worker_pid($node);
}

#
# Before CREATE EXTENSION: present, quiet, waiting.
#
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity"
	  . " WHERE backend_type = 'eventhub maintenance'"
	  . " AND application_name = 'eventhub maintenance' AND datname = 'postgres'")
  or die "the worker did not start";
pass('the worker appears in pg_stat_activity, connected to eventhub.database');

$node->wait_for_log(qr/eventhub background worker is waiting for the extension in database "postgres"/);
# Ten cycles at 100ms: a worker that logged every cycle would show ten lines.
sleep(1);
my $log = slurp_file($node->logfile);
my @waiting = ($log =~ /is waiting for the extension/g);
is(scalar @waiting, 1, 'waiting is logged once, not once per cycle');
unlike($log, qr/(ERROR|FATAL).*eventhub/, 'no errors while waiting');

#
# CREATE EXTENSION: expired events go, fresh ones stay.
#
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	CREATE EXTENSION eventhub;
	-- hold the worker off while the test sets up its data
	CREATE TABLE hold AS SELECT 1;
});
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT eventhub.publish_event(o, 'API', 'UPDATE', 'api-' || r, NULL, '{}')
	  FROM unnest(ARRAY['acme', 'globex', 'initech']) o, generate_series(1, 5) r;
	-- revisions 1-3 of every organization are two hours old (a direct write:
	-- the guard is off for this transaction)
	SET LOCAL eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '2 hours'
	 WHERE revision <= 3;
	COMMIT;
});
$node->wait_for_log(qr/eventhub background worker found the extension in database "postgres"/, $offset);
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM eventhub.events WHERE revision <= 3")
  or die "expired events were not deleted";
is( $node->safe_psql('postgres',
		"SELECT string_agg(organization_id || ':' || revisions, ' ' ORDER BY organization_id)"
		  . " FROM (SELECT organization_id, string_agg(revision::text, ',' ORDER BY revision) AS revisions"
		  . "       FROM eventhub.events GROUP BY 1) s"),
	'acme:4,5 globex:4,5 initech:4,5',
	'expired events deleted, fresh ones kept, in every organization');
$node->wait_for_log(qr/eventhub retention deleted 9 expired events in 1 transactions/, $offset);
pass('the deletion is logged with its count');
is( $node->safe_psql('postgres',
		"SELECT string_agg(organization_id || ':' || revision, ' ' ORDER BY organization_id) FROM eventhub.organization_states"),
	'acme:5 globex:5 initech:5',
	'heads survive retention');
my ($ret, $out, $err) = $node->psql('postgres', "SELECT * FROM eventhub.events_since('acme', 2)");
like($err, qr/events of organization "acme" after revision 2 have been removed/,
	'a cursor older than the kept history gets the resync error');
is($node->safe_psql('postgres', "SELECT string_agg(revision::text, ',') FROM eventhub.events_since('acme', 3)"),
	'4,5', 'a current cursor keeps working');

#
# A reload changes the retention of the next cycle.
#
$node->safe_psql('postgres', q{
	SET eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '30 minutes' WHERE revision = 4;
	-- a marker that expires under any retention: once it is gone, a cycle
	-- with the current retention has run
	UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day'
	 WHERE revision = 5 AND organization_id = 'initech';
});
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM eventhub.events WHERE organization_id = 'initech' AND revision = 5")
  or die "the marker was not deleted";
is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE revision = 4"),
	'3', 'events 30 minutes old survive a one-hour retention');
$node->append_conf('postgresql.conf', "eventhub.retention = '10min'\n");
$node->reload;
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM eventhub.events WHERE revision = 4")
  or die "the new retention was not applied";
pass('after a reload, the next cycle uses the new retention');

#
# Killed, it comes back and keeps working; nothing committed is lost.
#
my $committed = $node->safe_psql('postgres',
	"SELECT count(*) || '/' || sum(revision) FROM eventhub.organization_states");
my $pid = worker_pid($node);
kill 'TERM', $pid;
$pid = wait_for_new_worker($pid);
pass('the worker is back after SIGTERM');

kill 'KILL', $pid;
# A killed backend makes the postmaster reinitialize: every session goes.
$pid = wait_for_new_worker($pid);
pass('the worker is back after SIGKILL and the crash restart');
is( $node->safe_psql('postgres',
		"SELECT count(*) || '/' || sum(revision) FROM eventhub.organization_states"),
	$committed, 'no committed event was lost');

$node->safe_psql('postgres', q{
	SELECT eventhub.publish_event('acme', 'API', 'DELETE', 'api-1', NULL, '{}');
	SET eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day' WHERE organization_id = 'acme';
});
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM eventhub.events WHERE organization_id = 'acme'")
  or die "the restarted worker does not delete";
pass('the restarted worker keeps working');

#
# A 200,000-event backlog goes in batches while publishers publish.
#
# Park the worker (its next cycle is an hour away) and load the backlog
# directly, as a superuser with the write guard off.
$node->append_conf('postgresql.conf', "eventhub.maintenance_interval = '1h'\n");
$node->reload;
$node->safe_psql('postgres', q{
	SET eventhub.protect_tables = off;
	INSERT INTO eventhub.events
	SELECT 'bulk-' || (i % 10), i / 10 + 1, gen_random_uuid(),
	       now() - interval '1 day', now() - interval '1 day',
	       'API', 'UPDATE', 'e', 'bulk-' || i, '{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
	  FROM generate_series(0, 199999) i;
	INSERT INTO eventhub.organization_states
	SELECT 'bulk-' || o, gen_random_uuid(), 20000, now() FROM generate_series(0, 9) o;
});
is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE organization_id LIKE 'bulk-%'"),
	'200000', 'backlog loaded');

my $bench_dir = PostgreSQL::Test::Utils::tempdir();
my $script = "$bench_dir/publish.sql";
open my $fh, '>', $script or die;
print $fh "\\set org random(1, 4)\n"
  . "SELECT eventhub.publish_event('live-' || :org, 'API', 'UPDATE', 'e', NULL, '{}');\n";
close $fh;
my ($bench_out, $bench_err) = ('', '');
my $bench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '4', '-j', '2', '-T', '5', '-f', $script,
		'-l', "--log-prefix=$bench_dir/latency",
		'-h', $node->host, '-p', $node->port, 'postgres'
	],
	'>', \$bench_out, '2>', \$bench_err);
# Start retention only once publishers are publishing.
$node->poll_query_until('postgres', "SELECT count(*) > 0 FROM eventhub.events WHERE organization_id LIKE 'live-%'")
  or die "publishers did not start";
$offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "eventhub.maintenance_interval = '100ms'\n");
$node->reload;
$node->wait_for_log(qr/eventhub retention deleted 200000 expired events in (\d+) transactions/, $offset);
my ($batches, $elapsed_ms, $paused_ms) = (slurp_file($node->logfile, $offset)
	  =~ /deleted 200000 expired events in (\d+) transactions over (\d+) ms, (\d+) ms of them paused/);
cmp_ok($batches, '>=', 20, "the backlog went in batches of at most 10000 ($batches transactions)");
# By default the worker pauses three times as long as each batch took (the
# last batch is not followed by a pause; timer granularity gets some slack).
cmp_ok($paused_ms, '>=', 2 * ($elapsed_ms - $paused_ms),
	"the worker paced itself: $paused_ms of $elapsed_ms ms paused between batches");
ok($bench->pumpable, 'publishers were still publishing when the backlog was gone');
$bench->finish;
is($bench->result(0), 0, 'pgbench succeeded') or diag($bench_err);
my ($processed) = ($bench_out =~ /number of transactions actually processed: (\d+)/);
like($bench_out, qr/number of failed transactions: 0 /, 'no publish failed');
is( $node->safe_psql('postgres',
		"SELECT count(*) || ' ' || bool_and(n = maxrev) FROM (SELECT count(*) n, max(revision) maxrev"
		  . " FROM eventhub.events WHERE organization_id LIKE 'live-%' GROUP BY organization_id) s"),
	"4 true", 'every live organization has a gapless history');
is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE organization_id LIKE 'live-%'"),
	$processed, "every publish completed and is kept ($processed)");

my $max_us = 0;
my $samples = 0;
for my $f (glob("$bench_dir/latency*"))
{
	for my $line (split /\n/, slurp_file($f))
	{
		my @field = split / /, $line;
		$samples++;
		$max_us = $field[2] if $field[2] > $max_us;
	}
}
is($samples, $processed, 'a latency sample for every publish');
note(sprintf('longest publish during cleanup: %.1f ms over %d publishes', $max_us / 1000, $samples));
cmp_ok($max_us / 1000, '<', $max_publish_wait_ms,
	"no publish waited $max_publish_wait_ms ms or longer during cleanup");

#
# A hot standby: the worker does not run there.
#
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
$node->safe_psql('postgres', "SELECT eventhub.publish_event('after-backup', 'API', 'CREATE', 'x', NULL, '{}')");
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE organization_id = 'after-backup'"),
	'1', 'the standby replays events');
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'"),
	'0', 'no worker on the hot standby');
unlike(slurp_file($standby->logfile), qr/eventhub background worker started/,
	'the standby never started one');

$standby->stop;
$node->stop;
done_testing();
