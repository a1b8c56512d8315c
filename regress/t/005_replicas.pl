# 005_replicas.pl: the replica registry end to end.  The client's heartbeats
# reach eventhub.replicas and replica_progress and an orderly exit
# deregisters; with eh_ack they report what the application acknowledged and
# eh_set_config_hash's hash; a replica without heartbeats turns stale, then
# maintenance removes it; retention keeps an expired event for a live lagging
# replica up to eventhub.max_retention, then that replica resyncs; `eventhub
# status --fail-if-lag N` and `--json` tell who lags.  The worker runs no
# cycle of its own (eventhub_node_quiet): with a retention of a second, one
# could remove what a watcher is about to read; the test runs maintenance
# once what it must remove has expired.

use strict;
use warnings;

use EventhubTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = eventhub_node_quiet('replicas', replica_ttl => '2s', retention => '1s',
	conf => "eventhub.max_retention = '4s'");
my $connstr = $node->connstr('postgres');


#
# Heartbeats from the client, and deregistration on exit.
#
publish($node, 'acme', 3);
my $w = start_watch($connstr, '--org', 'acme', '--after', '0', '--count', '6', '--timeout', '60',
	'--replica-id', 'gw-1', '--labels', '{"zone": "z1"}', '--heartbeat-interval', '200');
wait_or_die(what => 'a heartbeat', node => $node, sql =>
	"SELECT applied_revision = 3 FROM eventhub.replica_progress WHERE replica_id = 'gw-1' AND organization_id = 'acme'");
is( query($node, "SELECT labels->>'zone' || ' ' || (version IS NOT NULL) FROM eventhub.replicas WHERE replica_id = 'gw-1'"),
	'z1 true', 'the heartbeat registered the replica with its labels and version');
is( query($node, "SELECT p.applied_version_id = s.version_id FROM eventhub.replica_progress p"
		  . " JOIN eventhub.organization_states s ON s.organization_id = p.organization_id WHERE p.replica_id = 'gw-1'"),
	't', 'it reports the version_id of the revision it applied');
publish($node, 'acme', 2);
ok( wait_for(what => 'new progress', node => $node,
		sql => "SELECT applied_revision = 5 FROM eventhub.replica_progress WHERE replica_id = 'gw-1'"),
	'later heartbeats report new progress');
publish($node, 'acme', 1);
is(finish_cli($w), 0, 'the watcher exited after its count') or diag($w->{err});
is(query($node, "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'gw-1'"),
	'0', 'an orderly exit deregisters the replica');

#
# An application that applies events later acknowledges them itself, and
# reports a configuration hash: heartbeats carry that, not the delivery.
#
# start_ack(REPLICA, ORG, COUNT, ACK, HASH): client/test_ack, a replica that
# heartbeats every 100 ms and, once handed COUNT events, acknowledges ACK.
sub start_ack { return start_process([ "$work/client/test_ack", $connstr, @_ ], { appname => 1 }) }

my $acker = start_ack('acker', 'acme', '6', '2', 'sha-acme-2');
wait_for(what => 'the acknowledgement', watch => $acker, matches => qr/acked/);
like($acker->{out}, qr/acked/, 'the application was handed all six events') or diag($acker->{err});
wait_or_die(what => 'the acknowledged revision', node => $node, sql =>
	"SELECT applied_revision = 2 AND config_hash = 'sha-acme-2' FROM eventhub.replica_progress"
	  . " WHERE replica_id = 'acker' AND organization_id = 'acme'");
is(query($node, "SELECT lag_revisions FROM eventhub.replica_status WHERE replica_id = 'acker'"),
	'4', 'the heartbeat reports the acknowledged revision (2 of 6) and the hash');
$acker->{h}->signal('TERM');
is(finish_cli($acker), 0, 'the acknowledging replica exits cleanly') or diag($acker->{err});

#
# No more heartbeats: stale, then removed.
#
$w = start_watch($connstr, '--org', 'acme', '--timeout', '60', '--replica-id', 'gw-2', '--heartbeat-interval', '200');
wait_or_die(what => 'gw-2 registering', node => $node, sql => "SELECT state = 'live' FROM eventhub.replica_status WHERE replica_id = 'gw-2'");
$w->{h}->signal('KILL');    # no orderly exit: no deregistration
$w->{h}->finish;
ok( wait_for(what => 'gw-2 stale', node => $node,
		sql => "SELECT state = 'stale' FROM eventhub.replica_status WHERE replica_id = 'gw-2'"),
	'a replica without heartbeats turns stale after eventhub.replica_ttl');
wait_or_die(what => 'twice the ttl since gw-2\'s last heartbeat', node => $node, sql =>
	"SELECT last_heartbeat < now() - 2 * current_setting('eventhub.replica_ttl')::interval"
	  . " FROM eventhub.replicas WHERE replica_id = 'gw-2'");
run_maintenance($node);
is(query($node, "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'gw-2'"),
	'0', 'and maintenance removes it after twice that');

#
# Retention waits for a live lagging replica, up to max_retention.
#
# The laggard has applied only revision 1 of organization slow: handed its
# four events, it acknowledges one, and heartbeats that every 100 ms, far
# inside eventhub.replica_ttl, so that it stays live.  slow's events are one
# entity's, the last its DELETE, and the marker is a lone DELETE: compaction
# (on by default) removes them all once nothing holds them.
publish($node, 'slow', 3);
publish($node, 'slow', 1, action => 'DELETE');
my $lagger = start_ack('lagger', 'slow', '4', '1', 'sha-slow');
wait_or_die(what => 'the laggard at revision 1', node => $node, sql =>
	"SELECT applied_revision = 1 FROM eventhub.replica_progress WHERE replica_id = 'lagger' AND organization_id = 'slow'");
# A marker nobody follows: once it has expired, so have slow's events.
publish($node, 'marker', 1, action => 'DELETE');
wait_or_die(what => 'the marker expiring', node => $node, sql =>
	"SELECT clock_timestamp() - processed_timestamp > current_setting('eventhub.retention')::interval"
	  . " FROM eventhub.events WHERE organization_id = 'marker'");
run_maintenance($node);
is( query($node, "SELECT string_agg(organization_id || '/' || revision, ',' ORDER BY revision) FROM eventhub.events"
		  . " WHERE organization_id IN ('slow', 'marker')"),
	'slow/1,slow/2,slow/3,slow/4', 'expired events a live replica has not applied are kept, and the one it applied last');

# `eventhub status` names the laggard.
my ($rc, $out, $err) = run_cli('-d', $connstr, 'status', '--fail-if-lag', '2');
is($rc, 4, 'status --fail-if-lag 2 exits 4 with a replica 3 behind');
like($err, qr/replica "lagger" is 3 revisions behind on organization "slow"/, 'and names it');
like($out, qr/^lagger\s+live\s+1\s+1\s+3\s+slow\s/m,
	'the replica summary shows its organizations, how many it is behind on, by how much and where');
($rc) = run_cli('-d', $connstr, 'status', '--fail-if-lag', '3');
is($rc, 0, 'status --fail-if-lag 3 exits 0');
($rc, $out) = run_cli('-d', $connstr, 'status', '--json', '--org', 'slow');
my $doc = decode_json($out);
is_deeply(
	[ map { [ $_->{replica_id}, $_->{state}, $_->{applied_revision}, $_->{head_revision}, $_->{lag_revisions} ] }
		  @{ $doc->{progress} } ],
	[ [ 'lagger', 'live', 1, 4, 3 ] ],
	'status --json --org lists each replica\'s progress on it');
is_deeply(
	[ map { [ $_->{replica_id}, $_->{organizations}, $_->{organizations_behind}, $_->{max_lag_revisions},
				$_->{most_behind_organization} ] } @{ $doc->{replicas} } ],
	[ [ 'lagger', 1, 1, 3, 'slow' ] ],
	'and summarizes the replica');
is($doc->{organizations}[0]{kept_events}, 4, 'status --json counts the kept events');

# Past max_retention the events go anyway, and the laggard must resync.
wait_or_die(what => 'slow\'s events reaching max_retention', node => $node, sql =>
	"SELECT clock_timestamp() - max(processed_timestamp) > current_setting('eventhub.max_retention')::interval"
	  . " FROM eventhub.events WHERE organization_id = 'slow'");
run_maintenance($node);
run_maintenance($node);	# the tombstone, once nothing older of its entity is left
is( query($node, "SELECT state || ' ' || (SELECT count(*) FROM eventhub.events WHERE organization_id = 'slow')"
		  . " FROM eventhub.replica_status WHERE replica_id = 'lagger'"),
	'live 0', 'at eventhub.max_retention the events are deleted although the replica is live');
($rc, $out, $err) = $node->psql('postgres', "SELECT * FROM eventhub.events_since('slow', 1)");
like($err, qr/have been removed/, 'and the lagging replica gets the resync error');
$lagger->{h}->signal('TERM');
$lagger->{h}->finish;

$node->stop;
done_testing();
