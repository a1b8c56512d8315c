# 027_dropped_roles.pl: what the extension's internals promise:
#   - DROP ROLE takes the role's organization grants and replicas with it,
#     in its own transaction (a DROP that fails keeps them), and logs it;
#   - grants and replicas of roles that are gone by other ways (dropped
#     while the library was not loaded, or in another database) are removed
#     by the worker's maintenance cycle and by run_maintenance(), logged,
#     while replicas registered before 0.2.0 (owner 0) stay;
#   - a long retention pass is cut into steps between which the worker
#     reloads its configuration: a pass paused for a minute between
#     batches speeds up as soon as eventhub.cleanup_batch_delay is lowered;
#   - with eventhub.compaction off, retention that removes an entity's
#     latest event marks its organization incomplete, without waiting for
#     the organization's publishers.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('internals', maintenance_interval => '100ms');
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION eventhub');
$node->safe_psql($_, q{
	GRANT USAGE ON SCHEMA eventhub TO PUBLIC;
	GRANT EXECUTE ON FUNCTION eventhub.heartbeat(text, jsonb, jsonb, text) TO PUBLIC;
}) for qw(postgres other);
$node->safe_psql('postgres', q{
	CREATE ROLE regress_tenant_gone;
	CREATE ROLE regress_tenant_kept;
	SELECT eventhub.register_organization(o) FROM unnest(ARRAY['g-1', 'k-1']) o;
	SELECT eventhub.grant_organization('regress_tenant_gone', 'g-1', 'read');
	SELECT eventhub.grant_organization('regress_tenant_gone', 'g-', 'publish', prefix => true);
	SELECT eventhub.grant_organization('regress_tenant_kept', 'k-1', 'read');
	SET ROLE regress_tenant_gone;
	SELECT eventhub.heartbeat('replica-gone', '{"g-1": {"revision": 0}}');
	RESET ROLE;
	SET ROLE regress_tenant_kept;
	SELECT eventhub.heartbeat('replica-kept', '{"k-1": {"revision": 0}}');
});
my $gone_oid = $node->safe_psql('postgres', "SELECT oid FROM pg_roles WHERE rolname = 'regress_tenant_gone'");

sub rows_of
{
	my ($db, $oid) = @_;
	return $node->safe_psql($db,
		"SELECT (SELECT count(*) FROM eventhub.organization_grants WHERE grantee::oid = $oid)"
		  . " || '/' || (SELECT count(*) FROM eventhub.replicas WHERE owner::oid = $oid)");
}

# DROP ROLE: the grants and the replica go with the role, at once.
is(rows_of('postgres', $gone_oid), '2/1', 'the role has two grants and a replica');
# A DROP ROLE that fails (the role still holds a privilege) keeps them.
$node->safe_psql('postgres', 'GRANT SELECT ON eventhub.organization_states TO regress_tenant_gone');
my ($ret, $out, $err) = $node->psql('postgres', 'DROP ROLE regress_tenant_gone');
like($err, qr/cannot be dropped because some objects depend on it/, 'a DROP ROLE that fails');
is(rows_of('postgres', $gone_oid), '2/1', '... keeps the grants and the replica');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	REVOKE ALL ON eventhub.organization_states FROM regress_tenant_gone;
	DROP ROLE regress_tenant_gone;
});
is(rows_of('postgres', $gone_oid), '0/0', 'DROP ROLE removed its grants and its replica');
ok($node->wait_for_log(qr/eventhub removed 2 organization grants and 1 replicas of dropped role $gone_oid/, $offset),
	'the removal is logged');
is($node->safe_psql('postgres', "SELECT string_agg(grantee::text || ':' || organization_id, ' ') FROM eventhub.organization_grants"),
	'regress_tenant_kept:k-1', 'the other role keeps its grant');
is($node->safe_psql('postgres', 'SELECT string_agg(replica_id, \' \') FROM eventhub.replicas'),
	'replica-kept', 'the other role keeps its replica');

# Rows left by roles that are gone by other ways (an OID no role has): the
# worker removes them in postgres, run_maintenance() in a database the
# worker does not serve.  A replica registered before 0.2.0 (owner 0) is
# claimed by its next heartbeat, not removed.
my $no_role = $node->safe_psql('postgres', "SELECT max(oid)::bigint + 100000 FROM pg_authid");
my $leftovers = qq{
	SET eventhub.protect_tables = off;
	INSERT INTO eventhub.organization_grants (grantee, organization_id, prefix, privilege, granted_by, granted_at)
	VALUES ('$no_role', 'x-1', false, 'read', 'regress_tenant_kept', now()),
	       ('$no_role', 'x-', true, 'publish', 'regress_tenant_kept', now()),
	       ('regress_tenant_kept', 'k-2', false, 'read', 'regress_tenant_kept', now());
	INSERT INTO eventhub.replicas (replica_id, labels, owner, started_at, last_heartbeat)
	VALUES ('replica-orphan', '{}', '$no_role', now(), now()),
	       ('replica-legacy', '{}', 0, now(), now());
};
$offset = -s $node->logfile;
$node->safe_psql($_, $leftovers) for qw(other postgres);
ok(wait_for(what => 'the worker\'s removal', until => sub { rows_of('postgres', $no_role) eq '0/0' }),
	'the worker removed the grants and the replica of a role that does not exist');
ok( $node->wait_for_log(qr/eventhub removed 2 organization grants of dropped role $no_role/, $offset)
	  && $node->wait_for_log(qr/eventhub removed replica "replica-orphan" of dropped role $no_role/, $offset),
	'the worker logged what it removed');
is($node->safe_psql('postgres', "SELECT string_agg(replica_id, ' ' ORDER BY replica_id) FROM eventhub.replicas"),
	'replica-kept replica-legacy', 'a replica registered before 0.2.0 (owner 0) stays');
is($node->safe_psql('postgres', "SELECT string_agg(organization_id, ' ' ORDER BY organization_id) FROM eventhub.organization_grants"),
	'k-1 k-2', 'grants of existing roles stay');

is(rows_of('other', $no_role), '2/1', 'in the other database, the rows wait for maintenance');
$node->safe_psql('other', 'SELECT eventhub.run_maintenance()');
is(rows_of('other', $no_role), '0/0', 'run_maintenance() removed them');

# A retention pass paused for a minute between batches of one event (of an
# organization no replica follows, so nothing holds them): the worker
# reloads between two steps, so a lower delay applies to the pass under way
# (else the four pauses left would take four minutes, longer than the wait
# below).  The six events are one entity's, each superseded by the next:
# compaction (on by default) removes five and keeps the last.
reload_settings($node, "eventhub.cleanup_batch_size = 1\neventhub.cleanup_batch_delay = '1min'", worker => 0)
  or die 'the reload did not take';
$offset = -s $node->logfile;
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
ok($node->wait_for_log(qr/eventhub retention deleted 5 expired events in 6 transactions/, $offset),
	'the pass is logged once, with all its batches');

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
