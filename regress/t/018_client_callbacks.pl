# 018_client_callbacks.pl: what the client library's delivery callbacks
# get, through client/test_callbacks (see its header for what each mode
# does).
#
#   1. stop: a callback that stops after every event gets the rest of its
#      batch at the next call, from the batch already fetched (one fetch
#      for all of them) and without waiting for a poll (the poll interval
#      is 60 s; each eh_wait may take 40 s, and the whole run must stay
#      far below one interval);
#   2. txn: a transaction's events reach the transaction callback in one
#      call, a batch ends at a transaction's end (the batch bytes cut
#      between two transactions, not inside the second), and only a
#      transaction over the batch bytes comes in parts, all but the last
#      with ends_transaction 0;
#   3. snapshot: EH_FROM_SNAPSHOT gives BEGIN, pages of at most the batch
#      size, END at the head, the server's live entities exactly, and the
#      cursor at the head; a cursor whose next events retention removed
#      is answered by a snapshot (reason history_removed); a connection
#      lost in the middle gives ABORT, then a whole new snapshot.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('callbacks');

# 1. A callback that stops.
publish($node, 'stopper', 5);
my %r = run_driver($node, 'test_callbacks', 'stop', 'stopper', 5);
is($r{delivered}, 5, 'stop: every event delivered');
is($r{most_per_call}, 1, 'stop: one event per call, as the callback asked');
is($r{fetches}, 1, 'stop: the rest of the batch was not fetched again');
cmp_ok($r{elapsed_ms} // 1e9, '<', 30000,
	'stop: the rest came without waiting for a poll (' . ($r{elapsed_ms} // '?') . ' ms, the poll interval is 60000)');

# 2. Transactions.  Three events in one transaction, one alone, two together.
publish($node, 'txn', 3);
publish($node, 'txn', 1);
publish($node, 'txn', 2);
%r = run_driver($node, 'test_callbacks', 'txn', 'txn', 6);
is($r{calls}, '1-3:1,4-4:1,5-6:1', 'txn: one callback per transaction, each marked as ending it');
is($r{shared}, 1, 'txn: the events of a call share their transaction_first_revision');
# Events of about 1000 bytes stored: two transactions of three are over
# 4096 bytes together, one is not; the batch ends after the first.
my $pad = '{"pad": "' . ('x' x 1000) . '"}';
publish($node, 'txnbytes', 3, data => $pad);
publish($node, 'txnbytes', 3, data => $pad);
%r = run_driver($node, 'test_callbacks', 'txn', 'txnbytes', 6, 4096);
is($r{calls}, '1-3:1,4-6:1', 'txn: the batch bytes cut between transactions, never inside one that fits');
# One transaction of three over 1024 bytes: in parts.
publish($node, 'txnbig', 3, data => $pad);
%r = run_driver($node, 'test_callbacks', 'txn', 'txnbig', 3, 1024);
my @parts = split /,/, $r{calls} // '';
cmp_ok(scalar @parts, '>', 1, "txn: a transaction over the batch bytes comes in parts ($r{calls})");
is(join(',', map { (split /:/)[1] } @parts), join(',', (0) x $#parts, 1),
	'txn: ends_transaction is 0 on all parts but the last');
my $next = 1;
my $contiguous = 1;
for (@parts)
{
	my ($first, $last) = /^(\d+)-(\d+):/;
	$contiguous = 0 unless $first == $next;
	$next = $last + 1;
}
ok($contiguous && $next == 4, 'txn: the parts are the transaction, in order');

# 3. Snapshots.  The live entities: the latest event of each (type, id)
# that is not a DELETE, in byte order.
my $live_sql = sub {
	my ($org) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(event_type || '/' || entity_id || '\@' || revision, ',' ORDER BY event_type COLLATE "C", entity_id COLLATE "C")
		  FROM (SELECT DISTINCT ON (event_type, entity_id) event_type, entity_id, revision, action
		          FROM eventhub.events WHERE organization_id = '$org'
		         ORDER BY event_type, entity_id, revision DESC) e
		 WHERE action <> 'DELETE'});
};
$node->safe_psql('postgres', join('',
	publish_sql('snap', event_type => 'API', action => 'CREATE', entity => 'a1'),
	publish_sql('snap', event_type => 'API', action => 'CREATE', entity => 'a2'),
	publish_sql('snap', event_type => 'API', action => 'UPDATE', entity => 'a1'),
	publish_sql('snap', event_type => 'API', action => 'DELETE', entity => 'a2'),
	publish_sql('snap', event_type => 'CERT', action => 'CREATE', entity => 'c1'),
	publish_sql('snap', event_type => 'API', action => 'CREATE', entity => 'B'),
	publish_sql('snap', event_type => 'API', action => 'CREATE', entity => 'a3')));
my $head = $node->safe_psql('postgres', "SELECT revision FROM eventhub.organization_states WHERE organization_id = 'snap'");
%r = run_driver($node, 'test_callbacks', 'snapshot', 'snap', -2, 2);
is($r{phases}, "begin:initial:$head,entities:2,entities:2,end:$head:4",
	'snapshot: BEGIN at the head, pages of the batch size, END at the head');
is($r{entities}, $live_sql->('snap'), 'snapshot: exactly the live entities, in byte order, at their latest revision');
is($r{cursor}, $head, 'snapshot: the cursor is at the head');
%r = run_driver($node, 'test_callbacks', 'snapshot', 'snap-nobody', -2);
is($r{phases}, 'begin:initial:0:noversion,end:0:0', 'snapshot: an organization without events is empty, at 0');

# A resync answered by a snapshot: with compaction on, cleanup_events
# removes the superseded events after revision 1 but keeps each entity's
# latest, so a cursor at 1 cannot go on.
reload_settings($node, 'eventhub.compaction = on', worker => 0) or die 'the reload did not happen';
$node->safe_psql('postgres', join('',
	map { publish_sql('snapre', action => 'UPDATE', entity => $_) } qw(e1 e2 e2 e2 e3)));
$node->safe_psql('postgres', 'SELECT eventhub.cleanup_events(clock_timestamp())');
is($node->safe_psql('postgres', "SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events WHERE organization_id = 'snapre'"),
	'1,4,5', 'snapshot: the cleanup removed the superseded events');
%r = run_driver($node, 'test_callbacks', 'snapshot', 'snapre', 1);
is($r{phases}, 'begin:history_removed:5,entities:3,end:5:3', 'snapshot: a removed history is answered by a snapshot');
is($r{entities}, 'API/e1@1,API/e2@4,API/e3@5', 'snapshot: with the kept latest events');
is($r{cursor}, 5, 'snapshot: and the cursor at its head');

# A connection lost during a snapshot: ABORT, then the whole snapshot again.
$node->safe_psql('postgres', join('', map { publish_sql('snapkill', action => 'CREATE', entity => $_) } qw(k1 k2 k3)));
%r = run_driver($node, 'test_callbacks', 'snapshot', 'snapkill', -2, 1, 1);
is($r{phases}, 'begin:initial:3,entities:1,abort,begin:initial:3,entities:1,entities:1,entities:1,end:3:4',
	'snapshot: a lost connection aborts it, and a new one starts over');
is($r{entities}, 'API/k1@1,API/k2@2,API/k3@3', 'snapshot: the new one has every entity');
is($r{reconnects}, 1, 'snapshot: after a reconnect');

$node->stop;
done_testing();
