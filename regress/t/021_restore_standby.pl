# 021_restore_standby.pl: what a consumer written from docs/protocol.md meets
# outside the happy path, and a backup restored the way backups restore.
#
#   1. A plain pg_restore by a superuser, without turning the write guard
#      off, restores every event, head and grant; publishing goes on from the
#      restored head, and a consumer at its stored cursor reads on.
#      A non-superuser's restore as docs/upgrading.md prescribes does too.
#   2. On a hot standby, reading works; LISTEN fails with 25006 and leaves
#      the session usable; a heartbeat is refused up front with 25006 and a
#      message of its own, not from inside eventhub's INSERT.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = eventhub_node('primary', init => { allows_streaming => 1 });
publish($primary, 'acme', 3, tag => 'c');
$primary->safe_psql('postgres', q{
	CREATE ROLE reader;
	SELECT eventhub.grant_organization('reader', 'acme', 'read');
	SELECT eventhub.register_organization('empty');
});
my $head_sql = "SELECT string_agg(organization_id || ' ' || revision || ' ' || version_id, ', ' ORDER BY organization_id)
	FROM eventhub.organization_states";
my $events_sql = "SELECT count(*) || ' ' || md5(string_agg(organization_id || revision || version_id || correlation_id,
	',' ORDER BY organization_id, revision)) FROM eventhub.events";
my ($heads, $events) = map { $primary->safe_psql('postgres', $_) } $head_sql, $events_sql;
my $cursor = $primary->safe_psql('postgres', "SELECT version_id FROM eventhub.events WHERE organization_id = 'acme' AND revision = 3");

# 1. Dump, and restore into a new database as the superuser, plainly.
my $dump = "$PostgreSQL::Test::Utils::tmp_check/postgres.dump";
$primary->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $primary->connstr('postgres') ], 'pg_dump');
$primary->safe_psql('postgres', 'CREATE DATABASE restored');
my ($rc, $stdout, $stderr);
ok(IPC::Run::run([ 'pg_restore', '-d', $primary->connstr('restored'), $dump ], '>', \$stdout, '2>', \$stderr),
	'a plain pg_restore by a superuser succeeds') or diag($stderr);
is($primary->safe_psql('restored', $head_sql), $heads, 'every head is restored, revision and version');
is($primary->safe_psql('restored', $events_sql), $events, 'every event is restored');
is($primary->safe_psql('restored', "SELECT grantee || ' ' || organization_id || ' ' || privilege FROM eventhub.organization_grants"),
	'reader acme read', 'the grants are restored');
is($primary->safe_psql('restored', "SELECT string_agg(revision::text, ',') FROM eventhub.events_since('acme', 3, 10, '$cursor')"),
	'', 'a consumer at its stored cursor finds its history');
is(publish($primary, 'acme', 1, db => 'restored'), '4', 'publishing goes on from the restored head');
($rc, $stdout, $stderr) = $primary->psql('restored',
	"INSERT INTO eventhub.events SELECT organization_id, 9, version_id, processed_timestamp, originated_timestamp,
	        event_type, action, entity_id, 'c9', event_data FROM eventhub.events WHERE revision = 1");
like($stderr, qr/cannot insert into table eventhub\.events directly/,
	'outside the restore, the superuser\'s direct write is still refused');

# 1b. A restore by the database's owner, who is no superuser: the two runs of
# pg_restore that docs/upgrading.md prescribes, read from the page and run
# as written, but for the names of the dump and the database.
$primary->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE DATABASE gateway OWNER app;
	CREATE DATABASE gateway2 OWNER app;
});
$primary->safe_psql('gateway', q{
	CREATE EXTENSION eventhub;
	SELECT eventhub.grant_organization('reader', 'acme', 'read');
	GRANT EXECUTE ON FUNCTION eventhub.events_since(text, bigint, integer, uuid) TO reader;
	SET ROLE app;
	CREATE TABLE apis (id text PRIMARY KEY, spec jsonb);
	INSERT INTO apis VALUES ('a1', '{"v": 1}'), ('a2', '{"v": 2}');
});
publish($primary, 'acme', 2, db => 'gateway');
my $gateway_sql = "SELECT (SELECT string_agg(id || spec::text, ',' ORDER BY id) FROM apis) || ' | '
	|| (SELECT string_agg(organization_id || revision || version_id, ',') FROM eventhub.organization_states) || ' | '
	|| (SELECT string_agg(organization_id || revision || version_id || correlation_id, ',' ORDER BY revision) FROM eventhub.events) || ' | '
	|| (SELECT string_agg(grantee || organization_id || privilege, ',') FROM eventhub.organization_grants) || ' | '
	|| has_function_privilege('reader', 'eventhub.events_since(text, bigint, integer, uuid)', 'EXECUTE')";
my $gateway = $primary->safe_psql('gateway', $gateway_sql);
my ($steps) = slurp_file("$work/docs/upgrading.md") =~ /\*\*A role that is not a superuser\*\*.*?```sh\n(.*?)```/s
  or BAIL_OUT('docs/upgrading.md: no non-superuser restore');
$steps =~ s/-d gateway /-d gateway2 /g;
my $superuser = $primary->safe_psql('postgres', 'SELECT current_user');
$steps =~ s/-U postgres /-U $superuser /g;
$primary->command_ok([ 'pg_dump', '-Fc', '-f', "$PostgreSQL::Test::Utils::tmp_check/gateway.dump", '-d', $primary->connstr('gateway') ],
	'pg_dump of a database owned by app');
{
	local $ENV{PGHOST} = $primary->host;
	local $ENV{PGPORT} = $primary->port;
	ok(IPC::Run::run([ 'bash', '-e', '-c', "cd $PostgreSQL::Test::Utils::tmp_check && $steps" ], '>', \$stdout, '2>', \$stderr),
		'the non-superuser restore of docs/upgrading.md succeeds as written') or diag($stderr);
}
is($primary->safe_psql('gateway2', $gateway_sql), $gateway,
	'it restores the application\'s tables, heads, events, organization grants and grants on eventhub\'s functions');
is(publish($primary, 'acme', 1, db => 'gateway2'), '3', 'and publishing goes on there');

# 2. A hot standby.
my $standby = eventhub_standby($primary, 'standby');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', "SELECT count(*) FROM eventhub.events_since('acme', 0, 10, NULL)"),
	'3', 'the standby serves events_since');

my @verbose = (on_error_stop => 0, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
($rc, $stdout, $stderr) = $standby->psql('postgres', "LISTEN eventhub; SELECT 'still usable'", @verbose);
like($stderr, qr/ERROR:  25006: cannot execute LISTEN during recovery/, 'LISTEN on a standby fails with 25006');
is($stdout, 'still usable', 'and the session goes on');

($rc, $stdout, $stderr) = $standby->psql('postgres', q{SELECT eventhub.heartbeat('r1', '{"acme": {"revision": "3"}}')}, @verbose);
like($stderr, qr/ERROR:  25006: cannot send a heartbeat to a hot standby/, 'a heartbeat on a standby is refused with 25006');
like($stderr, qr/HINT:  Send heartbeats to the primary/, 'with what to do');
unlike($stderr, qr/INSERT|CONTEXT/, 'and not from inside eventhub\'s own INSERT');

$standby->stop;
$primary->stop;
done_testing();
