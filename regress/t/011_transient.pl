# 011_transient.pl: `eventhub watch` rides out what passes by itself.
#
#   - an operator holds a lock on eventhub.events while the watcher's
#     session has lock_timeout = 100ms: its queries fail, it warns on
#     stderr, retries with backoff and, once the lock is gone, delivers what
#     follows;
#   - the extension is dropped and created again (history and all) while it
#     runs: the functions are missing for a while, then its cursor is ahead
#     of the new history, it resyncs, and delivers what follows;
#   - a missing privilege is not retried: exit 1.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('transient');

publish($node, 'acme', 1);
my $w = start_watch($node->connstr('postgres') . " options='-c lock_timeout=100ms'",
	'--org', 'acme', '--after', '0', '--count', '5', '--timeout', '120', '--poll-interval', '200');
ok(wait_for(watch => $w, lines => 1), 'the watcher delivered revision 1');

# An operator holds ACCESS EXCLUSIVE on events until the watcher has tried twice.
my $op = $node->background_psql('postgres');
$op->query_safe('BEGIN; LOCK TABLE eventhub.events IN ACCESS EXCLUSIVE MODE');
ok(wait_for(watch => $w, stderr => qr/lock timeout.*lock timeout/s), 'lock: the watcher\'s queries time out');
$op->query_safe('COMMIT');
publish($node, 'acme', 2);
ok(wait_for(watch => $w, lines => 3), 'lock: once the lock is gone, the watcher delivers what follows');
like($w->{err}, qr/warning: .*lock timeout.*\(retrying\)/, 'lock: each refusal is a warning');

# The extension goes and comes back, with a new, shorter history.
$op->query_safe('DROP EXTENSION eventhub');
ok(wait_for(watch => $w, stderr => qr/does not exist.*does not exist/s),
	'reinstall: the watcher finds the extension missing, and tries again');
# Created with its first event in one transaction: the new history is never
# seen empty.
$op->query_safe("BEGIN; CREATE EXTENSION eventhub; SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'e', NULL, '{}'); COMMIT;");
$op->quit;
ok(wait_for(watch => $w, matches => qr/"resync": true/), 'reinstall: the watcher resyncs to the new history');
publish($node, 'acme', 2);
is(finish_cli($w), 0, 'the watcher rode it all out and exited after its five events') or diag($w->{err});
my @got = map { $_->{resync} ? "resync $_->{reason} $_->{head_revision}" : "event $_->{revision}" } watch_lines($w);
is_deeply(\@got, [ 'event 1', 'event 2', 'event 3', 'resync cursor_ahead 1', 'event 2', 'event 3' ],
	'every event once, in order, and a resync where the history was replaced');

# What a retry cannot fix ends watch.
$node->safe_psql('postgres', q{
	CREATE ROLE regress_reader LOGIN;
	GRANT USAGE ON SCHEMA eventhub TO regress_reader;
	GRANT SELECT ON eventhub.organization_states, eventhub.events TO regress_reader;
	GRANT EXECUTE ON FUNCTION eventhub.notification_token(text) TO regress_reader;
});
my ($rc, $out, $err) = run_cli('-d', $node->connstr('postgres') . ' user=regress_reader', 'watch', '--org', 'acme',
	'--after', '0', '--timeout', '30');
is($rc, 1, 'permission denied: watch exits 1');
like($err, qr/permission denied for function events_since/, 'permission denied: and says why');

$node->stop;
done_testing();
