# 003_client.pl: the client library, through the CLI's watch loop.  What
# `eventhub watch` prints is, per organization, exactly the committed sequence
# of eventhub.events after its cursor (contiguous, in order, each with the
# correlation id, entity and version of its row, none lost, none repeated):
#   1. woken by notifications only, with a rolled-back publish in the stream;
#   2. with LISTEN disabled, by polling only;
#   3. while its backend is killed twice in the middle of a stream;
#   4. while the server restarts in the middle of a stream;
#   5. for 40 organizations on one connection, events interleaved;
#   6. with resyncs: history removed, a cursor ahead of the head, a history
#      rewritten under an idle watcher;
#   7. under valgrind, through a stream, a killed backend and a resync;
#   8. a notification during one of its own queries, and a rewritten history
#      longer than what it has seen.
# Streams are fed to a psql process while the test kills, restarts and
# checks; what follows a kill is fed only after it.  Every wait is bounded.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use JSON::PP;
use Time::HiRes;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = eventhub_node('client');
my $connstr = $node->connstr('postgres');

# The watcher's backend: the library names its connection "eventhub".
my $watcher_backend = "application_name = 'eventhub' AND backend_type = 'client backend'";

# The --org arguments of watch for ORGS.
sub orgs { return map { ('--org', $_) } @_ }

# Cursors at 0 for ORGS.
sub from_zero { return { map { ($_ => 0) } @_ } }

# The pid of the (one) watcher backend, once connected; with EXCLUDE, one
# other than that pid (a reconnected one).
sub watcher_pid
{
	my ($exclude) = @_;
	my $cond = $watcher_backend . (defined $exclude ? " AND pid <> $exclude" : '');
	wait_or_die(what => 'no watcher backend appeared', node => $node, sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE $cond");
	return query($node, "SELECT pid FROM pg_stat_activity WHERE $cond");
}

sub terminate { return query($node, "SELECT pg_terminate_backend($_[0])") }


# A psql process reading SQL from a pipe: publishes are fed while it runs.
sub start_publisher
{
	return start_process([ $node->installed_command('psql'), '-X', '-q', '-A', '-t',
		'-v', 'ON_ERROR_STOP=1', '-d', $connstr ], { appname => 1 });
}

sub feed
{
	my ($p, $sql) = @_;
	$p->{in} .= $sql;
	$p->{h}->pump while length $p->{in} && $p->{h}->pumpable;
}

sub finish_publisher
{
	feed($_[0], "\\q\n");
	return finish_cli($_[0]);
}

# One publish of ORG; correlation ids are unique across the whole test.
my $seq = 0;

# Each of its own entity, unless ENTITY names one.
sub next_sql
{
	my ($org, $entity) = @_;
	$seq++;
	return publish_sql($org, entity => $entity // "entity-$seq", corr => "corr-$seq", data => qq({"n": $seq}));
}

# publish_n(ORG, N, ENTITY?): N events in one transaction.
sub publish_n { query($node, join('', map { next_sql($_[0], $_[2]) } 1 .. $_[1])) }

# COUNT publishes round-robin over ORGS, each its own transaction, PACE
# seconds apart (the pace only makes the stream last; no result depends on it).
sub stream_sql
{
	my ($orgs, $count, $pace) = @_;
	return join '', map { next_sql($orgs->[ $_ % @$orgs ]) . "SELECT pg_sleep($pace);\n" } 0 .. $count - 1;
}

# Replaces ORG's history by N new events (the guard off for the transaction).
sub rewrite_history
{
	my ($org, $n) = @_;
	query($node, "BEGIN;\nSET LOCAL eventhub.protect_tables = off;\n"
		  . "DELETE FROM eventhub.events WHERE organization_id = '$org';\n"
		  . "DELETE FROM eventhub.organization_states WHERE organization_id = '$org';\n"
		  . join('', map { next_sql($org) } 1 .. $n) . "COMMIT;\n");
}

sub committed_count
{
	my $list = join ',', map { "'$_'" } @{ $_[0] };
	return query($node, "SELECT count(*) FROM eventhub.events WHERE organization_id IN ($list)");
}

# The resync line expected for ORG, REASON, at head HEAD (the version an
# organization had there, from its event or, where that is removed, its head).
sub resync_line
{
	my ($org, $reason, $head) = @_;
	return { resync => JSON::PP::true, organization_id => $org, reason => $reason, head_revision => $head,
		head_version_id => query($node, "SELECT COALESCE("
			  . "(SELECT version_id FROM eventhub.events WHERE organization_id = '$org' AND revision = $head),"
			  . " (SELECT version_id FROM eventhub.organization_states"
			  . "   WHERE organization_id = '$org' AND revision = $head))") };
}

# Asserts that EVENTS (decoded watch lines, resync lines excluded) are, per
# organization, exactly the committed events after AFTER->{org}, and that the
# committed revisions are AFTER+1 .. head, contiguous.
sub check_delivery
{
	my ($name, $events, $after) = @_;
	my (%got, %want, %want_revs, %contiguous);
	push @{ $got{ $_->{organization_id} } }, join(' ', @$_{qw(revision correlation_id entity_id version_id)})
	  for @$events;
	for my $org (keys %$after)
	{
		$want{$org} = [ split /\n/, query($node, 
			"SELECT revision || ' ' || correlation_id || ' ' || entity_id || ' ' || version_id"
			  . " FROM eventhub.events WHERE organization_id = '$org' AND revision > $after->{$org}"
			  . ' ORDER BY revision') ];
		$want_revs{$org} = [ map { (split / /)[0] } @{ $want{$org} } ];
		$contiguous{$org} = [ $after->{$org} + 1
			  .. query($node, "SELECT revision FROM eventhub.organization_states WHERE organization_id = '$org'") ];
	}
	is_deeply(\%want_revs, \%contiguous, "$name: the committed revisions are contiguous up to each head");
	is_deeply(\%got, \%want,
		"$name: the watcher printed exactly the committed sequence of every organization"
		  . ' (revision, correlation id, entity, version; none lost, none repeated)');
}

sub count_matches
{
	my ($text, $re) = @_;
	my @m = ($text =~ /$re/g);
	return scalar @m;
}

# Watch lines split into resync lines and events.
sub split_resync
{
	return ([ grep { $_->{resync} } @_ ], [ grep { !$_->{resync} } @_ ]);
}

# The event lines of a resync test's watcher W, once it exited 0 after
# COUNT events with exactly one resync line (both checked).
sub events_after_one_resync
{
	my ($w, $count) = @_;
	is(finish_cli($w), 0, "resync: watcher exited 0 after --count $count events") or diag($w->{err});
	my ($resyncs, $events) = split_resync(watch_lines($w));
	is(scalar @$resyncs, 1, 'resync: exactly one resync line');
	return $events;
}

#
# 1. Notifications only.
#
# A poll interval of 600 s (drawn between 480 and 720 s) cannot pass while
# the watcher runs (--timeout 30): after its first check of
# organization_states, only a notification can wake it.  The watcher's
# session logs its statements, to show that it LISTENs and polls only once.
my $log_statements = "$connstr options='-c log_statement=all'";

# Statements the watcher's backend PID logged since OFFSET.
sub logged_statements
{
	my ($pid, $offset) = @_;
	return join "\n", grep { /\[$pid\] eventhub (?:LOG|ERROR):  (?:statement|execute)/ }
	  split /\n/, slurp_file($node->logfile, $offset);
}

{
	my @orgs = ('notify-a', 'notify-b');
	my $offset = -s $node->logfile;
	my $w = start_watch($log_statements, orgs(@orgs),
		'--after', '0', '--poll-interval', '600000', '--count', '30', '--timeout', '30');
	my $pid = watcher_pid();
	# Its first (and, in this test, last) poll is done: it is idle after
	# reading organization_states and then the data keys (eventhub.notifier_pid()).
	wait_or_die(what => 'the watcher did not finish its first poll', node => $node, sql =>
		"SELECT state = 'idle' AND query LIKE '%notifier_pid%' FROM pg_stat_activity WHERE pid = $pid");
	my $p = start_publisher();
	# a rolled-back publish in the middle of the stream
	feed($p, stream_sql(\@orgs, 15, 0.005)
		  . "BEGIN;\nSELECT eventhub.publish_event('notify-a', 'API', 'DELETE', 'ghost', 'rolled-back-1', '{}');\n"
		  . "ROLLBACK;\n" . stream_sql(\@orgs, 15, 0.005));
	is(finish_publisher($p), 0, 'notify: publisher succeeded') or diag($p->{err});
	is(finish_cli($w), 0, 'notify: watcher exited 0 after --count 30 events') or diag($w->{err});
	my @events = watch_lines($w);
	is(scalar @events, 30, 'notify: 30 lines');
	check_delivery('notify', \@events, from_zero(@orgs));
	is(scalar(grep { $_->{correlation_id} eq 'rolled-back-1' || $_->{entity_id} eq 'ghost' } @events),
		0, 'notify: the rolled-back publish was not delivered');
	is(query($node, "SELECT count(*) FROM eventhub.events WHERE correlation_id = 'rolled-back-1'"),
		'0', 'notify: the rolled-back publish was not committed');
	ok(ref $events[0]{event_data} eq 'HASH' && $events[0]{event_data}{n} =~ /^\d+$/,
		'notify: event_data is printed as a JSON value');
	unlike($w->{err}, qr/reconnect|connection lost/, 'notify: one connection throughout');
	my $statements = logged_statements($pid, $offset);
	like($statements, qr/statement: LISTEN eventhub/, 'notify: the watcher LISTENed');
	is(count_matches($statements, qr/execute [^:]*: SELECT s\.revision/), 1,
		'notify: it checked organization_states once, at connection: every event came through NOTIFY')
	  or diag($statements);
}

#
# 2. LISTEN disabled: polling every 100 ms.
#
{
	my @orgs = ('poll-a', 'poll-b');
	my $offset = -s $node->logfile;
	my $w = start_watch($log_statements, orgs(@orgs),
		'--after', '0', '--no-listen', '--poll-interval', '100', '--count', '20', '--timeout', '30');
	my $pid = watcher_pid();
	my $p = start_publisher();
	feed($p, stream_sql(\@orgs, 20, 0.01));
	is(finish_publisher($p), 0, 'no-listen: publisher succeeded') or diag($p->{err});
	is(finish_cli($w), 0, 'no-listen: watcher exited 0 after --count 20 events') or diag($w->{err});
	my @events = watch_lines($w);
	is(scalar @events, 20, 'no-listen: 20 lines');
	check_delivery('no-listen', \@events, from_zero(@orgs));
	my $statements = logged_statements($pid, $offset);
	like($statements, qr/execute [^:]*: SELECT s\.revision/, 'no-listen: the watcher polled');
	unlike($statements, qr/LISTEN/, 'no-listen: the watcher never LISTENed');
}

#
# 3. The watcher's backend terminated twice in the middle of a stream: once
# it is under way, and again after the second third (fed after the first
# kill: published while it is gone or reconnecting).
#
{
	my @orgs = ('kill-a', 'kill-b');
	my $w = start_watch($connstr, orgs(@orgs), '--after', '0', '--count', '90', '--timeout', '40');
	my $pid1 = watcher_pid();
	my $p = start_publisher();
	feed($p, stream_sql(\@orgs, 30, 0.01));
	wait_or_die(what => 'publishing did not start', node => $node, sql =>
		"SELECT count(*) >= 10 FROM eventhub.events WHERE organization_id LIKE 'kill-%'");
	is(terminate($pid1), 't', 'kill: first watcher backend terminated');
	feed($p, stream_sql(\@orgs, 30, 0.01));
	my $pid2 = watcher_pid($pid1);
	wait_or_die(what => 'publishing stalled', node => $node, sql => "SELECT count(*) >= 40 FROM eventhub.events WHERE organization_id LIKE 'kill-%'");
	is(terminate($pid2), 't', 'kill: reconnected watcher backend terminated');
	feed($p, stream_sql(\@orgs, 30, 0.01));
	is(finish_publisher($p), 0, 'kill: publisher succeeded') or diag($p->{err});
	is(finish_cli($w), 0, 'kill: watcher exited 0 after --count 90 events') or diag($w->{err});
	cmp_ok(count_matches($w->{err}, qr/^eventhub: info: reconnected$/m), '>=', 2,
		'kill: stderr shows it reconnected after each kill');
	like($w->{err}, qr/^eventhub: warning: connection lost/m, 'kill: stderr shows the losses');
	my @events = watch_lines($w);
	is(scalar @events, 90, 'kill: 90 lines');
	check_delivery('kill', \@events, from_zero(@orgs));
}

#
# 4. The server restarted in the middle of a stream.
#
{
	my @orgs = ('restart-a', 'restart-b');
	my $w = start_watch($connstr, orgs(@orgs), '--after', '0', '--timeout', '40');
	watcher_pid();
	my $p = start_publisher();
	feed($p, stream_sql(\@orgs, 60, 0.01));
	wait_or_die(what => 'publishing did not start', node => $node, sql =>
		"SELECT count(*) >= 10 FROM eventhub.events WHERE organization_id LIKE 'restart-%'");
	$node->restart;
	# The restart ended the publisher's session, probably mid-stream: the
	# events it committed are whatever eventhub.events holds.
	$p->{h}->finish;
	my $before = committed_count(\@orgs);
	note("restart: $before events committed before the restart");
	$p = start_publisher();
	feed($p, stream_sql(\@orgs, 30, 0.01));
	is(finish_publisher($p), 0, 'restart: publisher after the restart succeeded') or diag($p->{err});
	my $total = committed_count(\@orgs);
	cmp_ok($total, '>', $before, 'restart: events were published after the restart');
	wait_for(what => 'restart', watch => $w, lines => $total);
	$w->{h}->signal('TERM');
	is(finish_cli($w), 130, 'restart: watcher was still running (it stops with 130 on SIGTERM)')
	  or diag($w->{err});
	like($w->{err}, qr/^eventhub: info: reconnected$/m, 'restart: stderr shows it reconnected');
	my @events = watch_lines($w);
	is(scalar @events, $total, "restart: $total lines");
	check_delivery('restart', \@events, from_zero(@orgs));
}

#
# 5. Forty organizations on one connection, events interleaved: 10 rounds,
# each visiting the organizations in a different order; every fourth step
# publishes to two organizations in one transaction.
#
{
	my @orgs = map { sprintf('multi-%02d', $_) } 0 .. 39;
	my $w = start_watch($connstr, orgs(@orgs), '--after', '0', '--count', '400', '--timeout', '40');
	watcher_pid();
	my $p = start_publisher();
	my $sql = '';
	for my $round (0 .. 9)
	{
		my @order = map { $orgs[ ($_ * 7 + $round * 13) % 40 ] } 0 .. 39;
		while (@order)
		{
			$sql .= (@order >= 2 && @order % 4 == 0)
			  ? "BEGIN;\n" . next_sql(shift @order) . next_sql(shift @order) . "COMMIT;\n"
			  : next_sql(shift @order);
		}
	}
	feed($p, $sql);
	is(finish_publisher($p), 0, 'multi: publisher succeeded') or diag($p->{err});
	is(query($node, "SELECT count(*) FROM pg_stat_activity WHERE $watcher_backend"),
		'1', 'multi: the watcher follows the 40 organizations over one connection');
	is(finish_cli($w), 0, 'multi: watcher exited 0 after --count 400 events') or diag($w->{err});
	my @events = watch_lines($w);
	is(scalar @events, 400, 'multi: 400 lines');
	check_delivery('multi', \@events, from_zero(@orgs));
}

#
# 6. Resync.
#
# 6a. History removed by a cleanup: a watcher from revision 0 is told to
# resync at the head, then gets only the events published after it.
{
	my $org = 'rs-removed';
	# One entity's events, each superseded by the next: compaction (on by
	# default) lets the cleanup remove them.
	publish_n($org, 10, 'one');
	is(query($node, "SELECT eventhub.cleanup_events('$org', '-infinity', (SELECT processed_timestamp"
			  . " FROM eventhub.events WHERE organization_id = '$org' AND revision = 6))"),
		'5', 'resync: cleanup removed revisions 1-5 of 10');
	my $w = start_watch($connstr, orgs($org), '--after', '0', '--count', '5', '--timeout', '30');
	wait_for(what => 'history_removed', watch => $w, lines => 1);
	is_deeply([ watch_lines($w) ]->[0], resync_line($org, 'history_removed', 10),
		'resync: history_removed at head 10 is the first line');
	# Published only once the watcher is at the head.
	publish_n($org, 5);
	my $events = events_after_one_resync($w, 5);
	check_delivery('history_removed', $events, { $org => 10 });
}

# 6b. A cursor above the head.
{
	my $org = 'rs-removed';    # head 15
	my $w = start_watch($connstr, orgs($org), '--after', '100', '--count', '2', '--timeout', '30');
	wait_for(what => 'cursor_ahead', watch => $w, lines => 1);
	is_deeply([ watch_lines($w) ]->[0], resync_line($org, 'cursor_ahead', 15),
		'resync: --after 100 above head 15 gives cursor_ahead at 15');
	publish_n($org, 2);
	my $events = events_after_one_resync($w, 2);
	check_delivery('cursor_ahead', $events, { $org => 15 });
}

# 6c. History rewritten under an idle watcher: same head revision, another
# version.
{
	my $org = 'rs-rewrite';
	publish_n($org, 4);
	my $w = start_watch($connstr, orgs($org),
		'--after', '0', '--poll-interval', '100', '--count', '6', '--timeout', '30');
	my $pid = watcher_pid();
	wait_for(what => 'version_mismatch', watch => $w, lines => 4);
	check_delivery('before the rewrite', [ watch_lines($w) ], { $org => 0 });
	wait_or_die(what => 'the watcher is not idle', node => $node, sql => "SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $pid");
	my $old_version =
	  query($node, "SELECT version_id FROM eventhub.organization_states WHERE organization_id = '$org'");
	rewrite_history($org, 4);
	is(query($node, "SELECT revision || ' ' || (version_id <> '$old_version')"
			  . " FROM eventhub.organization_states WHERE organization_id = '$org'"),
		'4 true', 'resync: the rewritten history has the same head revision and another version');
	wait_for(what => 'version_mismatch', watch => $w, lines => 5);
	is_deeply([ watch_lines($w) ]->[4], resync_line($org, 'version_mismatch', 4),
		'resync: version_mismatch at head 4 after the four original events');
	publish_n($org, 2);
	my $events = events_after_one_resync($w, 6);
	is(scalar @$events, 6, 'resync: 6 events, 4 old and 2 new');
	check_delivery('after the rewrite', [ @$events[ 4 .. 5 ] ], { $org => 4 });
}

#
# 7. The watch loop under valgrind: a stream, a killed backend, a resync
# (vg-b's history is gone: the watcher starts with one).
#
SKIP:
{
	skip 'valgrind is not installed (/usr/bin/valgrind)', 1 unless -x '/usr/bin/valgrind';
	my @orgs = ('vg-a', 'vg-b');
	publish_n('vg-b', 3, 'one');	# compaction removes 1 and 2, superseded
	query($node, "SELECT eventhub.cleanup_events('vg-b', '-infinity', 'infinity')");
	my $w = start_watch($connstr, orgs(@orgs), '--after', '0', '--count', '45', '--timeout', '50',
		{ prefix => [ '/usr/bin/valgrind', '--quiet', '--leak-check=full',
				'--errors-for-leak-kinds=definite,indirect', '--error-exitcode=99' ] });
	my $pid1 = watcher_pid();
	wait_for(what => 'valgrind', watch => $w, lines => 1);
	is_deeply([ watch_lines($w) ]->[0], resync_line('vg-b', 'history_removed', 3),
		'valgrind: resync line for the removed history');
	my $p = start_publisher();
	feed($p, stream_sql(\@orgs, 20, 0.01));
	wait_or_die(what => 'publishing did not start', node => $node, sql => "SELECT count(*) >= 5 FROM eventhub.events WHERE organization_id LIKE 'vg-%'");
	is(terminate($pid1), 't', 'valgrind: watcher backend terminated');
	feed($p, stream_sql(\@orgs, 25, 0.01));
	is(finish_publisher($p), 0, 'valgrind: publisher succeeded') or diag($p->{err});
	is(finish_cli($w), 0, 'valgrind: exit 0 after --count 45 events: no memory error, no definite or indirect leak')
	  or diag($w->{err});
	like($w->{err}, qr/^eventhub: info: reconnected$/m, 'valgrind: stderr shows it reconnected');
	my ($resyncs, $events) = split_resync(watch_lines($w));
	is(scalar @$resyncs, 1, 'valgrind: exactly one resync line');
	check_delivery('valgrind', $events, { 'vg-a' => 0, 'vg-b' => 3 });
}

#
# 8. Two races the loop must not lose.
#
{
	# A notification that arrives while one of the client's own queries
	# runs is taken in by libpq with that query's answer, not left on the
	# socket.  Here the watcher's first heartbeat is held on a lock while an
	# event commits.  With the poll and heartbeat intervals at 10 minutes,
	# only reading that queue after the query delivers the event at once;
	# otherwise it waits for the end of eh_wait (--timeout).  The bound of
	# half that is not a performance claim: it only tells "at once" from
	# "at the timeout".
	my $org = 'late-notify';
	my $wait = 60;
	my $locker = $node->background_psql('postgres');
	$locker->query_safe('BEGIN; LOCK TABLE eventhub.replicas IN ACCESS EXCLUSIVE MODE;');
	my $w = start_watch($connstr, orgs($org), '--count', '1', '--timeout', $wait, '--poll-interval', '600000',
		'--replica-id', 'late', '--heartbeat-interval', '600000');
	my $pid = watcher_pid();
	wait_or_die(what => 'the heartbeat did not block', node => $node, sql => "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $pid");
	publish_n($org, 1);
	$locker->query_safe('COMMIT;');
	my $released = Time::HiRes::time();
	$locker->quit;
	is(finish_cli($w), 0, 'race: an event notified during a query is delivered') or diag($w->{err});
	my $took = Time::HiRes::time() - $released;
	cmp_ok($took, '<', $wait / 2, sprintf('race: at once (%.2f s), not at the end of the wait', $took));
	check_delivery('race: notified during a query', [ watch_lines($w) ], { $org => 0 });
}
{
	# A history rewritten with more events than the watcher has seen: the
	# notification of the new head must not make it deliver the new
	# history's next event after the old history's last one.
	my $org = 'rewrite-longer';
	publish_n($org, 3);
	my $w = start_watch($connstr, orgs($org), '--after', '0', '--count', '5', '--timeout', '20',
		'--poll-interval', '600000');
	my $pid = watcher_pid();
	wait_for(what => 'rewrite-longer', watch => $w, lines => 3);
	wait_or_die(what => 'the watcher is not idle', node => $node, sql => "SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $pid");
	rewrite_history($org, 4);
	wait_for(what => 'rewrite-longer', watch => $w, lines => 4);
	is_deeply([ watch_lines($w) ]->[3], resync_line($org, 'version_mismatch', 4),
		'race: a longer rewritten history is a version_mismatch resync, even when a notification wakes the watcher');
	publish_n($org, 2);
	is(finish_cli($w), 0, 'race: the watcher goes on after the resync') or diag($w->{err});
	my ($resyncs, $events) = split_resync(watch_lines($w));
	check_delivery('race: after the longer rewrite', [ @$events[ 3 .. 4 ] ], { $org => 4 });
}

$node->stop;
done_testing();
