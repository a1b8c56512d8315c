# 030_wait_for_events.pl: eventhub.wait_for_events(), waiting without LISTEN,
# with sessions that wait while others publish, on a primary and on a hot
# standby.
#
#   - on the primary: a waiter is woken by a commit, not before it, and not
#     by a rollback; it holds no snapshot (backend_xmin) and no lock while it
#     waits; a database the notifier does not serve wakes it from the
#     publishing transaction; an organization id too long for the slot still
#     wakes it; an organization the waiting role may not read never answers
#     it, nor shortens its wait;
#   - on a hot standby with max_standby_streaming_delay = 0 (any conflict
#     cancels at once): a waiter is woken by the replay of a publish; the
#     cleanup of organization_states replayed while it waits cancels a
#     session that holds a snapshot, and not the waiter; the standby waker
#     comes back after it is terminated and wakes waiters that began
#     before; a promotion ends the standby's waits at once, and commits on
#     the promoted server wake waiters.

use strict;
use warnings;

use EventhubTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = eventhub_node('primary', init => { allows_streaming => 1 }, conf => "autovacuum = off");
$node->safe_psql('postgres', "SELECT eventhub.register_organization('acme'), eventhub.register_organization('quiet')");
publish($node, 'acme', 1);

# The head revision of ORG on NODE.
sub head { return (org_head(@_))[0] }

# start_wait(NODE, ORGS, REVISIONS, TIMEOUT_MS, %opt): a psql session that
# CALLs wait_for_events (with the versions NULL) and prints what moved; the
# start_process handle, with the time it started.  Options: db, user.
sub start_wait
{
	my ($n, $orgs, $revs, $timeout, %opt) = @_;
	my $sql = sprintf("CALL eventhub.wait_for_events(ARRAY[%s]::text[], ARRAY[%s]::bigint[], NULL, %d, NULL)",
		join(',', map { "'$_'" } @$orgs), join(',', @$revs), $timeout);
	my $w = start_process([ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
			'-d', $n->connstr($opt{db} // 'postgres') . ' application_name=waiter', defined $opt{user} ? ('-U', $opt{user}) : (), '-c', $sql ]);
	$w->{started} = time();
	$w->{node} = $n;
	$w->{db} = $opt{db} // 'postgres';
	return $w;
}

# waiting(WAITER): waits until its session sleeps in the wait.
sub waiting
{
	my ($w) = @_;
	return wait_for(node => $w->{node}, db => $w->{db}, what => 'a session to wait',
		sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event = 'Extension'");
}

# answer(WAITER): what its CALL returned (moved), once it ended; and the
# seconds it took.
sub answer
{
	my ($w) = @_;
	finish_cli($w);
	chomp(my $out = $w->{out});
	return ($out, time() - $w->{started});
}

# --- the primary

my $w = start_wait($node, ['acme'], [ head($node, 'acme') ], 60000);
ok(waiting($w), 'a waiter whose cursor is at the head sleeps');
is($node->safe_psql('postgres', q{
	SELECT backend_xmin IS NULL AND NOT EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'relation')
	FROM pg_stat_activity a WHERE application_name = 'waiter'}), 't',
	'while it sleeps it holds no snapshot (backend_xmin) and no relation lock');

# A transaction that published and has not committed yet.
my $tx = start_process([ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres') ]);
$tx->{in} .= "BEGIN;\n" . publish_sql('acme') . "\\echo published\n";
wait_or_die(watch => $tx, matches => qr/published/, what => 'the open transaction to publish');
ok(waiting($w), 'a publish that has not committed does not wake it');
$tx->{in} .= "COMMIT;\n";
finish_cli($tx);
my ($moved, $took) = answer($w);
is($moved, '{acme}', 'the commit wakes it, naming the organization');
note(sprintf('woken %.1f ms after it started waiting, the commit included', 1000 * $took));

$w = start_wait($node, ['acme'], [ head($node, 'acme') ], 3000);
waiting($w);
$node->safe_psql('postgres', 'BEGIN; ' . publish_sql('acme') . 'ROLLBACK');
($moved, $took) = answer($w);
is($moved, '{}', 'a rolled-back publish does not answer it: the wait ends empty at its timeout');
cmp_ok($took, '>=', 2.9, 'and not before the timeout');

# A database the notifier does not serve: the publishing transaction wakes.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', "CREATE EXTENSION eventhub; SELECT eventhub.register_organization('acme')");
is($node->safe_psql('other', 'SELECT eventhub.notification_mode()'), 'transaction',
	'in another database than eventhub.database publishers notify by themselves');
$w = start_wait($node, ['acme'], [0], 60000, db => 'other');
waiting($w);
publish($node, 'acme', 1, db => 'other');
is((answer($w))[0], '{acme}', 'there the publishing transaction wakes the waiter at commit');

# An id longer than a slot keeps (64 bytes): the waiter is told to look.
my $long = 'long-' . ('x' x 95);
$node->safe_psql('postgres', "SELECT eventhub.register_organization('$long')");
$w = start_wait($node, [ 'acme', $long ], [ head($node, 'acme'), 0 ], 60000);
waiting($w);
publish($node, $long, 1);
is((answer($w))[0], "{$long}", 'an organization id of 100 bytes wakes its waiter');

# A role that reads acme only: another organization's moves are not its.
grant_bundle($node, 'postgres', reader => 'acme_reader');
$node->safe_psql('postgres', q{
	SELECT eventhub.register_organization('secret');
	SELECT eventhub.grant_organization('acme_reader', 'acme', 'read')});
is($node->safe_psql('postgres', q{SET ROLE acme_reader; SELECT count(*) FROM eventhub.organization_states WHERE organization_id = 'secret'}),
	'0', 'the reader cannot see secret\'s head');
$w = start_wait($node, [ 'secret', 'acme' ], [ 0, head($node, 'acme') ], 3000, user => 'acme_reader');
waiting($w);
publish($node, 'secret', 1);
($moved, $took) = answer($w);
is($moved, '{}', 'a publish to an organization the waiter may not read does not answer it');
cmp_ok($took, '>=', 2.9, 'nor shorten its wait');
$w = start_wait($node, [ 'secret', 'acme' ], [ 0, head($node, 'acme') ], 60000, user => 'acme_reader');
waiting($w);
publish($node, 'acme', 1);
is((answer($w))[0], '{acme}', 'a publish to the one it reads does');

# --- a hot standby

my $standby = eventhub_standby($node, 'standby');
$standby->append_conf('postgresql.conf', "max_standby_streaming_delay = 0\nhot_standby_feedback = off");
$standby->reload;
$node->wait_for_catchup($standby);
wait_or_die(node => $standby, what => 'the standby waker',
	sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'eventhub standby waker'");

$w = start_wait($standby, ['acme'], [ head($standby, 'acme') ], 60000);
waiting($w);
publish($node, 'acme', 1);
is((answer($w))[0], '{acme}', 'on the standby the replay of a publish wakes the waiter');

# A session holding a snapshot, and a waiter, while cleanup is replayed.
my $holder = start_process([ 'psql', '-X', '-A', '-t', '-d', $standby->connstr('postgres') ]);
$holder->{in} .= "BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT count(*) FROM eventhub.organization_states;\n\\echo holding\nSELECT pg_sleep(600);\n";
wait_or_die(watch => $holder, matches => qr/holding/, what => 'a standby session to hold a snapshot');
$w = start_wait($standby, ['quiet'], [ head($standby, 'quiet') ], 600000);
waiting($w);
my $conflicts = $standby->safe_psql('postgres', "SELECT confl_snapshot FROM pg_stat_database_conflicts WHERE datname = 'postgres'");
publish($node, 'acme', 1) for 1 .. 20;
$node->safe_psql('postgres', 'VACUUM (FREEZE) eventhub.organization_states');
$node->wait_for_catchup($standby);
ok(wait_for(watch => $holder, stderr => qr/conflict with recovery/, what => 'the snapshot holder to be cancelled'),
	'the replayed cleanup cancels a session that holds a snapshot');
finish_cli($holder);
cmp_ok($standby->safe_psql('postgres', "SELECT confl_snapshot FROM pg_stat_database_conflicts WHERE datname = 'postgres'"),
	'>', $conflicts, 'as a snapshot conflict');
ok(waiting($w), 'the waiter goes on waiting through it');
publish($node, 'quiet', 1);
is((answer($w))[0], '{quiet}', 'and is woken by the next publish to its organization');
is($w->{err}, '', 'with no error');

# The waker comes back, and wakes a waiter that began while it was away.
$w = start_wait($standby, ['acme'], [ head($standby, 'acme') ], 60000);
waiting($w);
my $offset = -s $standby->logfile;
$standby->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'eventhub standby waker'");
ok(scalar logged($standby, qr/eventhub standby waker started/, $offset), 'a terminated standby waker starts again');
publish($node, 'acme', 1);
is((answer($w))[0], '{acme}', 'and wakes a waiter that began before');

# A promotion ends the standby's waits at once (the caller may LISTEN
# now), and on the promoted server commits wake waiters.
$w = start_wait($standby, ['acme'], [ head($standby, 'acme') ], 600000);
waiting($w);
$node->stop;
$offset = -s $standby->logfile;
$standby->promote;
ok(scalar logged($standby, qr/eventhub standby waker stopped: the server was promoted/, $offset),
	'the standby waker stops at the promotion');
($moved, $took) = answer($w);
is($moved, '{}', 'a wait that began on the standby ends at the promotion, with nothing moved');
cmp_ok($took, '<', 300, 'long before its timeout');
$w = start_wait($standby, ['acme'], [ head($standby, 'acme') ], 600000);
waiting($w);
publish($standby, 'acme', 1);
is((answer($w))[0], '{acme}', 'on the promoted server a commit wakes a waiter');

done_testing();
