# 028_retention_passes.pl: how a retention pass runs:
#   - a long pass is cut into steps between which the worker reloads its
#     configuration: a pass paused for a minute between batches speeds up
#     as soon as eventhub.cleanup_batch_delay is lowered;
#   - with eventhub.compaction off, retention that removes an entity's
#     latest event marks its organization incomplete, without waiting for
#     the organization's publishers.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('retention', maintenance_interval => '100ms');

# A retention pass paused for a minute between batches of one event (of an
# organization no replica follows, so nothing holds them): the worker
# reloads between two steps, so a lower delay applies to the pass under way
# (else the four pauses left would take four minutes, longer than the wait
# below).  The six events are one entity's, each superseded by the next:
# compaction (on by default) removes five and keeps the last.
reload_settings($node, "eventhub.cleanup_batch_size = 1\neventhub.cleanup_batch_delay = '1min'", worker => 0)
  or die 'the reload did not take';
my $offset = -s $node->logfile;
publish($node, 'z-1', 6);
$node->safe_psql('postgres', q{
	SET eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '2 hours';
});
ok(wait_for(what => 'the first batch', node => $node, sql => 'SELECT count(*) BETWEEN 2 AND 5 FROM eventhub.events'),
	'the pass deleted its first batch and pauses');
reload_settings($node, 'eventhub.cleanup_batch_delay = 0', worker => 0) or die 'the reload did not take';
ok(wait_for(what => 'the pass', node => $node, sql => "SELECT string_agg(revision::text, ',') = '6' FROM eventhub.events"),
	'the reload reached the pass under way');
is_deeply([ map { /(deleted \d+ expired events in \d+ transactions)/ } logged($node, qr/eventhub retention deleted .*/, $offset) ],
	['deleted 5 expired events in 6 transactions'], 'the pass is logged once, with all its batches');

$node->stop;

# Compaction off: retention that removes an entity's latest event marks the
# organization incomplete (complete_after NULL: snapshots raise ZE004) in
# the transaction that deletes it, and never waits for a publisher to do
# so.  An organization whose row a publisher holds keeps such events until
# a later run; the others go at once.  No worker cycle runs in between
# (eventhub_node_quiet).
my $off = eventhub_node_quiet('compaction_off', conf => 'eventhub.compaction = off');
$off->safe_psql('postgres', q{
	SELECT eventhub.publish_event('held', 'API', 'CREATE', 'a', NULL, '{}');
	SELECT eventhub.publish_event('held', 'API', 'CREATE', 'b', NULL, '{}');
	SELECT eventhub.publish_event('held', 'API', 'UPDATE', 'b', NULL, '{"v": 2}');
	SELECT eventhub.publish_event('free', 'API', 'CREATE', 'a', NULL, '{}');
	SET eventhub.protect_tables = off;
	UPDATE eventhub.events SET processed_timestamp = now() - interval '1 day';
});
sub completeness
{
	return $off->safe_psql('postgres', q{
		SELECT string_agg(s.organization_id || ':' || coalesce(s.complete_after::text, 'null') || ':'
		                  || coalesce((SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events e
		                               WHERE e.organization_id = s.organization_id), ''), ' ' ORDER BY s.organization_id)
		  FROM eventhub.organization_states s});
}
sub snapshot_sqlstate
{
	my ($ret, $out, $err) = $off->psql('postgres', "\\set VERBOSITY sqlstate\nSELECT eventhub.snapshot_head('$_[0]')");
	return $ret == 0 ? 'ok' : ($err =~ /ERROR:\s+(\w+)/)[0];
}
is(completeness(), 'free:0:1 held:0:1,2,3', 'compaction off: four expired events, both organizations complete');
# A publisher of held holds its organization's row until it commits.
my $publisher = $off->background_psql('postgres');
$publisher->query_safe(q{BEGIN; SELECT eventhub.publish_event('held', 'API', 'CREATE', 'c', NULL, '{}');});
# Any lock wait of retention would end in an error here.
is($off->safe_psql('postgres', "SET lock_timeout = '10ms'; SELECT eventhub.run_maintenance()"), '2',
	'compaction off: retention with a publisher in flight deletes what it may, without waiting');
is(completeness(), 'free:null: held:0:1,3',
	'compaction off: free lost its only entity and is marked incomplete; held keeps its entities\' latest events');
is(snapshot_sqlstate('free'), 'ZE004', 'compaction off: a snapshot of the incomplete organization is refused');
is(snapshot_sqlstate('held'), 'ok', 'compaction off: held is still complete');
$publisher->query_safe('COMMIT');
$publisher->quit;
is($off->safe_psql('postgres', 'SELECT eventhub.run_maintenance()'), '2',
	'compaction off: the next run deletes held\'s latest events');
is(completeness(), 'free:null: held:null:4', 'compaction off: and marks held incomplete with them');
is(snapshot_sqlstate('held'), 'ZE004', 'compaction off: its snapshot is refused too');
$off->stop;
done_testing();
