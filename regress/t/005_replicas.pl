# 005_replicas.pl: the replica registry end to end.
#
#   - the client's heartbeats reach eventhub.replicas and replica_progress,
#     and an orderly exit deregisters;
#   - with eh_ack, heartbeats report what the application acknowledged, and
#     eh_set_config_hash's hash;
#   - a replica that stops heartbeating turns stale, then the worker removes it;
#   - retention keeps an expired event for a live lagging replica, and
#     deletes it at eventhub.max_retention, after which that replica resyncs;
#   - `eventhub status --fail-if-lag N` and `--json` tell who lags.

use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $cli = "$ENV{EVENTHUB_WORK}/client/eventhub";
my $node = PostgreSQL::Test::Cluster->new('replicas');
$node->init;
$node->append_conf('postgresql.conf', qq{
eventhub.maintenance_interval = '100ms'
eventhub.replica_ttl = '2s'
eventhub.retention = '1s'
eventhub.max_retention = '4s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION eventhub');
my $connstr = $node->connstr('postgres');

sub publish
{
	my ($org, $n) = @_;
	$node->safe_psql('postgres',
		"SELECT count(eventhub.publish_event('$org', 'API', 'UPDATE', 'e' || i, NULL, '{}')) FROM generate_series(1, $n) i");
}

#
# Heartbeats from the client, and deregistration on exit.
#
publish('acme', 3);
my ($out, $err) = ('', '');
my $watch = IPC::Run::start(
	[
		$cli, '-d', $connstr, 'watch', '--org', 'acme', '--after', '0', '--count', '6',
		'--timeout', '60', '--replica-id', 'gw-1', '--labels', '{"zone": "z1"}',
		'--heartbeat-interval', '200'
	],
	'>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT applied_revision = 3 FROM eventhub.replica_progress WHERE replica_id = 'gw-1' AND organization_id = 'acme'")
  or die "no heartbeat arrived";
is( $node->safe_psql('postgres',
		"SELECT labels->>'zone' || ' ' || (version IS NOT NULL) FROM eventhub.replicas WHERE replica_id = 'gw-1'"),
	'z1 true', 'the heartbeat registered the replica with its labels and version');
is( $node->safe_psql('postgres',
		"SELECT p.applied_version_id = s.version_id FROM eventhub.replica_progress p"
		  . " JOIN eventhub.organization_states s ON s.organization_id = p.organization_id WHERE p.replica_id = 'gw-1'"),
	't', 'it reports the version_id of the revision it applied');
publish('acme', 2);
$node->poll_query_until('postgres',
	"SELECT applied_revision = 5 FROM eventhub.replica_progress WHERE replica_id = 'gw-1'")
  or die "progress did not advance";
pass('later heartbeats report new progress');
publish('acme', 1);
$watch->finish;
is($watch->result(0), 0, 'the watcher exited after its count') or diag($err);
is($node->safe_psql('postgres', "SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'gw-1'"),
	'0', 'an orderly exit deregisters the replica');

#
# An application that applies events later acknowledges them itself, and
# reports a configuration hash: heartbeats carry that, not the delivery.
#
my ($ack_out, $ack_err) = ('', '');
my $acker = IPC::Run::start(
	[ "$ENV{EVENTHUB_WORK}/client/test_ack", $connstr, 'acker', 'acme', '6', '2', 'sha-acme-2' ],
	'>', \$ack_out, '2>', \$ack_err, IPC::Run::timeout(60));
$acker->pump until $ack_out =~ /acked/ || !$acker->pumpable;
like($ack_out, qr/acked/, 'the application was handed all six events') or diag($ack_err);
$node->poll_query_until('postgres',
	"SELECT applied_revision = 2 AND config_hash = 'sha-acme-2' FROM eventhub.replica_progress"
	  . " WHERE replica_id = 'acker' AND organization_id = 'acme'")
  or die "the acknowledged revision did not arrive";
is( $node->safe_psql('postgres',
		"SELECT lag_revisions FROM eventhub.replica_status WHERE replica_id = 'acker'"),
	'4', 'the heartbeat reports the acknowledged revision (2 of 6) and the hash');
$acker->signal('TERM');
$acker->finish;
is($acker->result(0), 0, 'the acknowledging replica exits cleanly') or diag($ack_err);

#
# No more heartbeats: stale, then removed.
#
$watch = IPC::Run::start(
	[
		$cli, '-d', $connstr, 'watch', '--org', 'acme', '--timeout', '60',
		'--replica-id', 'gw-2', '--heartbeat-interval', '200'
	],
	'>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT state = 'live' FROM eventhub.replica_status WHERE replica_id = 'gw-2'")
  or die "gw-2 did not register";
$watch->signal("KILL");    # no orderly exit: no deregistration
$watch->finish;
$node->poll_query_until('postgres',
	"SELECT state = 'stale' FROM eventhub.replica_status WHERE replica_id = 'gw-2'")
  or die "gw-2 did not turn stale";
pass('a replica without heartbeats turns stale after eventhub.replica_ttl');
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM eventhub.replicas WHERE replica_id = 'gw-2'")
  or die "gw-2 was not removed";
pass('and the worker removes it');

#
# Retention waits for a live lagging replica, up to max_retention.
#
# The test itself plays the lagging replica: every poll is also a heartbeat
# at revision 1 of organization slow.
publish('slow', 4);
my $beat = "WITH hb AS (SELECT eventhub.heartbeat('lagger', '{\"slow\": {\"revision\": 1}}'))";
$node->safe_psql('postgres', "$beat SELECT 1 FROM hb");
# A marker nobody follows: once it is gone, retention has run after expiry.
publish('marker', 1);
$node->poll_query_until('postgres',
	"$beat SELECT count(*) = 0 FROM hb, eventhub.events WHERE organization_id = 'marker'")
  or die "the marker was not deleted";
is( $node->safe_psql('postgres',
		"$beat SELECT string_agg(revision::text, ',' ORDER BY revision) FROM hb, eventhub.events WHERE organization_id = 'slow'"),
	'1,2,3,4', 'expired events a live replica has not applied are kept, and the one it applied last');

# `eventhub status` names the laggard.
my ($ret, $status_out, $status_err) = (0, '', '');
IPC::Run::run([ $cli, '-d', $connstr, 'status', '--fail-if-lag', '2' ], '>', \$status_out, '2>', \$status_err);
is($? >> 8, 4, 'status --fail-if-lag 2 exits 4 with a replica 3 behind');
like($status_err, qr/replica "lagger" is 3 revisions behind on organization "slow"/, 'and names it');
like($status_out, qr/^lagger\s+live\s+1\s+1\s+3\s+slow\s/m,
	'the replica summary shows its organizations, how many it is behind on, by how much and where');
IPC::Run::run([ $cli, '-d', $connstr, 'status', '--fail-if-lag', '3' ], '>', \$status_out, '2>', \$status_err);
is($? >> 8, 0, 'status --fail-if-lag 3 exits 0');
IPC::Run::run([ $cli, '-d', $connstr, 'status', '--json', '--org', 'slow' ], '>', \$status_out, '2>', \$status_err);
my $doc = decode_json($status_out);
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
$node->poll_query_until('postgres',
	"$beat SELECT count(*) = 0 FROM hb, eventhub.events WHERE organization_id = 'slow'")
  or die "max_retention did not release the events";
pass('at eventhub.max_retention the events are deleted although the replica is live');
($ret, $out, $err) = $node->psql('postgres', "SELECT * FROM eventhub.events_since('slow', 1)");
like($err, qr/have been removed/, 'and the lagging replica gets the resync error');

$node->stop;
done_testing();
