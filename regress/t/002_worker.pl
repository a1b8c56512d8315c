# 002_worker.pl: the background worker that enforces retention.  It waits
# quietly (one log line) until CREATE EXTENSION and shows in pg_stat_activity;
# it deletes expired events per organization and keeps the resync contract;
# a reload's retention applies from the next cycle; it comes back after
# SIGTERM and SIGKILL with nothing committed lost; it removes a 200,000-event
# backlog in paced batches while publishers, never waiting on its locks, go
# on; it does nothing on a hot standby.  Every wait is on a condition.

use strict;
use warnings;

use EventhubTest;
use PostgreSQL::Test::Utils;
use Test::More;

# A publish never waits on retention's locks (log_lock_waits checks it); this
# bound on its latency only catches a stall: derived, and generous on purpose.
my $max_publish_wait_ms = 1000 * $PostgreSQL::Test::Utils::timeout_default / 18;

# No CREATE EXTENSION yet: the worker must wait for it.  restart_after_crash
# (off in PostgreSQL::Test::Cluster) for the SIGKILL test; any lock wait of a
# publisher is logged with the pids holding the lock.
my $node = eventhub_node('primary',
	init                 => { allows_streaming => 1 },
	extension            => 0,
	maintenance_interval => '100ms',
	conf => "restart_after_crash = on\nlog_lock_waits = on\ndeadlock_timeout = '50ms'");

#
# Before CREATE EXTENSION: present, quiet, waiting.
#
ok(wait_for(what => 'the worker', node => $node,
		sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'"
		  . " AND application_name = 'eventhub maintenance' AND datname = 'postgres'"),
	'the worker appears in pg_stat_activity, connected to eventhub.database');
$node->wait_for_log(qr/eventhub background worker is waiting for the extension in database "postgres"/);
# Ten cycles: a worker that logged every cycle would show ten lines.
wait_for(what => 'ten maintenance intervals', node => $node,
	sql => "SELECT now() - backend_start >= 10 * current_setting('eventhub.maintenance_interval')::interval"
	  . " FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'")
  or die 'the worker is gone';
my $log = slurp_file($node->logfile);
my @waiting = ($log =~ /is waiting for the extension/g);
is(scalar @waiting, 1, 'waiting is logged once, not once per cycle');
unlike($log, qr/(ERROR|FATAL).*eventhub/, 'no errors while waiting');

#
# CREATE EXTENSION: expired events go, fresh ones stay.
#
my $offset = -s $node->logfile;
# The table holds the worker off while the test sets up its data.
query($node, 'CREATE EXTENSION eventhub; CREATE TABLE hold AS SELECT 1;');
# Revisions 1-3 of every organization are two hours old (the guard is off for
# this transaction).  Each organization's events are one entity's, each
# superseded by the next: compaction (on by default) keeps only the last.
query($node, q{
	BEGIN;
	SELECT eventhub.publish_event(o, 'API', 'UPDATE', 'api', NULL, '{}')
	  FROM unnest(ARRAY['acme', 'globex', 'initech']) o, generate_series(1, 5) r;
	SET LOCAL eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '2 hours' WHERE revision <= 3;
	COMMIT;
});
$node->wait_for_log(qr/eventhub background worker found the extension in database "postgres"/, $offset);
wait_for(what => 'retention', node => $node, sql => "SELECT count(*) = 0 FROM eventhub.events WHERE revision <= 3")
  or die "expired events were not deleted";
is(query($node, "SELECT string_agg(organization_id || ':' || revisions, ' ' ORDER BY organization_id)"
		  . " FROM (SELECT organization_id, string_agg(revision::text, ',' ORDER BY revision) AS revisions"
		  . "       FROM eventhub.events GROUP BY 1) s"),
	'acme:4,5 globex:4,5 initech:4,5', 'expired events deleted, fresh ones kept, in every organization');
ok(logged($node, qr/eventhub retention deleted 9 expired events in 1 transactions/, $offset),
	'the deletion is logged with its count');
is(query($node, "SELECT string_agg(organization_id || ':' || revision, ' ' ORDER BY organization_id)"
		  . ' FROM eventhub.organization_states'),
	'acme:5 globex:5 initech:5', 'heads survive retention');
my ($ret, $out, $err) = $node->psql('postgres', "SELECT * FROM eventhub.events_since('acme', 2)");
like($err, qr/events of organization "acme" after revision 2 have been removed/,
	'a cursor older than the kept history gets the resync error');
is(query($node, "SELECT string_agg(revision::text, ',') FROM eventhub.events_since('acme', 3)"),
	'4,5', 'a current cursor keeps working');

#
# A reload changes the retention of the next cycle.
#
query($node, "SET eventhub.protect_tables = off;"
	  . " UPDATE eventhub.events SET processed_timestamp = now() - interval '30 minutes' WHERE revision = 4;");
wait_for_maintenance($node) or die 'no maintenance cycle';
is(query($node, 'SELECT count(*) FROM eventhub.events WHERE revision = 4'),
	'3', 'events 30 minutes old survive a one-hour retention');
reload_settings($node, "eventhub.retention = '10min'") or die 'the new retention was not applied';
is(query($node, 'SELECT count(*) FROM eventhub.events WHERE revision = 4'),
	'0', 'after a reload, the next cycle uses the new retention');

#
# Killed, it comes back and keeps working; nothing committed is lost.
#
my $heads = "SELECT count(*) || '/' || sum(revision) FROM eventhub.organization_states";
my $committed = query($node, $heads);
# worker_back(PID): true once a maintenance worker other than PID is connected.
sub worker_back
{
	my ($gone) = @_;
	return wait_for(what => "a maintenance worker other than $gone", node => $node,
		sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance' AND pid <> $gone");
}

my $pid = worker_pid($node);
kill 'TERM', $pid;
ok(worker_back($pid), 'the worker is back after SIGTERM');
$pid = worker_pid($node);
kill 'KILL', $pid;
# A killed backend makes the postmaster reinitialize: every session goes.
ok(worker_back($pid), 'the worker is back after SIGKILL and the crash restart');
is(query($node, $heads), $committed, 'no committed event was lost');

query($node, q{
	SELECT eventhub.publish_event('acme', 'API', 'DELETE', 'api', NULL, '{}');
	SET eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day' WHERE organization_id = 'acme';
});
ok(wait_for(what => 'retention by the restarted worker', node => $node,
		sql => "SELECT count(*) = 0 FROM eventhub.events WHERE organization_id = 'acme'"),
	'the restarted worker keeps working');

#
# A 200,000-event backlog goes in batches while publishers publish.
#
# The backlog is a day old: kept under a two-day retention, expired under
# one hour.  Loaded directly, as a superuser with the write guard off.  Each
# organization's state is declared full at its head (complete_after, as
# eventhub.declare_full_state() sets it): compaction lets every event go.
reload_settings($node, "eventhub.retention = '2d'") or die 'the retention was not applied';
query($node, q{
	SET eventhub.protect_tables = off;
	INSERT INTO eventhub.events
	SELECT 'bulk-' || (i % 10), i / 10 + 1, gen_random_uuid(),
	       now() - interval '1 day', now() - interval '1 day',
	       'API', 'UPDATE', 'e', 'bulk-' || i, '{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
	  FROM generate_series(0, 199999) i;
	INSERT INTO eventhub.organization_states
	SELECT 'bulk-' || o, gen_random_uuid(), 20000, now(), 20000 FROM generate_series(0, 9) o;
});
my $bulk = "SELECT count(*) FROM eventhub.events WHERE organization_id LIKE 'bulk-%'";
is(query($node, $bulk), '200000', 'backlog loaded');

# Publishers run in rounds of one second, one after the other, until a
# round ends with the backlog gone: they publish through the whole cleanup
# however long it takes, and every round ends cleanly with its summary.
my $bench_dir = PostgreSQL::Test::Utils::tempdir();
append_to_file("$bench_dir/publish.sql", "\\set org random(1, 4)\n"
	  . "SELECT eventhub.publish_event('live-' || :org, 'API', 'UPDATE', 'e', NULL, '{}');\n");
my @rounds;
sub start_round
{
	push @rounds, start_process([ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '1', '-f', "$bench_dir/publish.sql",
			'-l', "--log-prefix=$bench_dir/latency" . @rounds, '-h', $node->host, '-p', $node->port, 'postgres' ]);
}
start_round();
# Start retention only once publishers are publishing.
wait_for(what => 'publishers', node => $node,
	sql => "SELECT count(*) > 0 FROM eventhub.events WHERE organization_id LIKE 'live-%'")
  or die "publishers did not start";
my $worker = worker_pid($node);
$offset = -s $node->logfile;
reload_settings($node, "eventhub.retention = '1h'", worker => 0) or die 'no reload';
my $remaining;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
for (;;)
{
	$rounds[-1]{h}->finish;
	$remaining = query($node, $bulk);
	last if $remaining == 0 || time() > $deadline;
	start_round();
}
$node->wait_for_log(qr/eventhub retention deleted 200000 expired events in (\d+) transactions/, $offset);
$log = slurp_file($node->logfile, $offset);
my ($batches, $elapsed_ms, $paused_ms) =
  ($log =~ /deleted 200000 expired events in (\d+) transactions over (\d+) ms, (\d+) ms of them paused/);
cmp_ok($batches, '>=', 20, "the backlog went in batches of at most 10000 ($batches transactions)");
# By default the worker pauses three times as long as each batch took, but
# not after the last batch; on a loaded machine that one may take long, so
# only at least as long as it worked is required.
cmp_ok($paused_ms, '>=', $elapsed_ms - $paused_ms,
	"the worker paced itself: $paused_ms of $elapsed_ms ms paused between batches");
is($remaining, 0, "publishers were still publishing when the backlog was gone (" . scalar(@rounds) . " rounds)");
is(scalar(grep { $_->{h}->result(0) != 0 } @rounds), 0, 'pgbench succeeded')
  or diag(join '', map { $_->{err} } @rounds);
my $processed = 0;
$processed += $_ for map { $_->{out} =~ /number of transactions actually processed: (\d+)/ } @rounds;
is(scalar(grep { $_->{out} =~ /number of failed transactions: 0 / } @rounds),
	scalar(@rounds), 'no publish failed');
is(query($node, "SELECT count(*) || ' ' || bool_and(n = maxrev) FROM (SELECT count(*) n, max(revision) maxrev"
		  . " FROM eventhub.events WHERE organization_id LIKE 'live-%' GROUP BY organization_id) s"),
	"4 true", 'every live organization has a gapless history');
is(query($node, "SELECT count(*) FROM eventhub.events WHERE organization_id LIKE 'live-%'"),
	$processed, "every publish completed and is kept ($processed)");

my @latency_us = map { (split / /)[2] } map { split /\n/, slurp_file($_) } glob("$bench_dir/latency*");
my ($max_us) = sort { $b <=> $a } @latency_us, 0;
is(scalar(@latency_us), $processed, 'a latency sample for every publish');
note(sprintf('longest publish during cleanup: %.1f ms over %d publishes', $max_us / 1000, scalar(@latency_us)));
cmp_ok($max_us / 1000, '<', $max_publish_wait_ms, "no publish waited $max_publish_wait_ms ms or longer during cleanup");
my @holders = map { split /, / } ($log =~ /Process(?:es)? holding the lock: ([\d, ]+)\./g);
is(scalar(grep { $_ == $worker } @holders), 0, 'no publish waited on a lock the worker held');

#
# A hot standby: the worker does not run there.
#
my $standby = eventhub_standby($node, 'standby');
query($node, "SELECT eventhub.publish_event('after-backup', 'API', 'CREATE', 'x', NULL, '{}')");
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE organization_id = 'after-backup'"),
	'1', 'the standby replays events');
is($standby->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'eventhub maintenance'"),
	'0', 'no worker on the hot standby');
unlike(slurp_file($standby->logfile), qr/eventhub background worker started/, 'the standby never started one');

$standby->stop;
$node->stop;
done_testing();
