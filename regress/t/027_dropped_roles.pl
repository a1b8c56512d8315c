# 027_dropped_roles.pl: what becomes of a role's organization grants and
# replicas when the role goes:
#   - DROP ROLE takes them with it, in its own transaction (a DROP that
#     fails keeps them), and logs it;
#   - grants and replicas of roles that are gone by other ways (dropped
#     while the library was not loaded, or in another database) are removed
#     by the worker's maintenance cycle and by run_maintenance(), logged,
#     while replicas registered before 0.2.0 (owner 0) stay.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('dropped_roles', maintenance_interval => '100ms');
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
ok(logged($node, qr/eventhub removed 2 organization grants and 1 replicas of dropped role $gone_oid\b/, $offset),
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
ok( logged($node, qr/eventhub removed 2 organization grants of dropped role $no_role\b/, $offset)
	  && logged($node, qr/eventhub removed replica "replica-orphan" of dropped role $no_role\b/, $offset),
	'the worker logged what it removed');
is($node->safe_psql('postgres', "SELECT string_agg(replica_id, ' ' ORDER BY replica_id) FROM eventhub.replicas"),
	'replica-kept replica-legacy', 'a replica registered before 0.2.0 (owner 0) stays');
is($node->safe_psql('postgres', "SELECT string_agg(organization_id, ' ' ORDER BY organization_id) FROM eventhub.organization_grants"),
	'k-1 k-2', 'grants of existing roles stay');

is(rows_of('other', $no_role), '2/1', 'in the other database, the rows wait for maintenance');
$node->safe_psql('other', 'SELECT eventhub.run_maintenance()');
is(rows_of('other', $no_role), '0/0', 'run_maintenance() removed them');

$node->stop;
done_testing();
