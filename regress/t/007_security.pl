# 007_security.pl: eventhub against the roles a shared database really has.
# Every attack here worked against 0.1; each runs the same way, with real
# login roles and sessions:
#   1. a non-superuser database owner arms operators and ALTER DATABASE ... SET
#      search_path (and role) for the superuser background worker: its queries
#      never reach them, the role stays, retention keeps working;
#   2. a role granted ALL on every table forges events, rewrites heads,
#      deletes, truncates, fills the replica registry, adds a trigger that
#      would run inside publish_event as its owner: all refused, also where
#      the library is not loaded yet and the role set the guard's switch first;
#   3. two tenants share the database: neither publishes into, reads, replays
#      a correlation id of, or learns the other's organizations, through the
#      functions, the tables, the status view or the CLI;
#   4. one tenant tries to heartbeat as, or deregister, the other's replica;
#   5. a role with no privilege LISTENs: it learns no organization id and no
#      revision; replaying what it heard only wakes a subscriber, which
#      delivers nothing twice.
# The worker runs a cycle only when the test makes it (eventhub_node_quiet):
# part 1 restarts and reloads it and waits for what those cycles remove; the
# rest runs with a retention of an hour.

use strict;
use warnings;

use EventhubTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = eventhub_node_quiet('security', database => 'appdb', db_owner => 'app',
	retention => '1s', replica_ttl => '1s', stalled_client_timeout => '1s');

# SQL in appdb as a superuser shielded from the settings the database owner
# plants (ALTER DATABASE ... SET role, search_path); su_wait: until it gives t.
sub su { return $node->safe_psql('appdb', "SET ROLE NONE; SET search_path = pg_catalog, public;\n$_[0]") }
sub su_wait { my ($what, $sql) = @_; return wait_for(what => $what, until => sub { su($sql) eq 't' }) }

# as_role(ROLE, SQL): (exit code, stdout, stderr) of SQL run in appdb as ROLE.
sub as_role { return $node->psql('appdb', $_[1], extra_params => [ '-U', $_[0] ]) }

sub as_role_ok
{
	my ($role, $sql, $label) = @_;
	my ($ret, $out, $err) = as_role($role, $sql);
	is($ret, 0, $label) or diag($err);
	return $out;
}

# as_role_refused(ROLE, SQL, PATTERN, LABEL): SQL fails with an error matching
# PATTERN; returns the error.
sub as_role_refused
{
	my ($role, $sql, $pattern, $label) = @_;
	my ($ret, $out, $err) = as_role($role, $sql);
	isnt($ret, 0, "$label: refused");
	like($err, $pattern, "$label: with the expected error");
	return $err;
}

#
# 1. The database owner arms the background worker's session.
#
as_role_ok('app', q{
CREATE SCHEMA s;
CREATE TABLE s.trap_log (who text);
GRANT USAGE ON SCHEMA s TO PUBLIC;
GRANT INSERT ON s.trap_log TO PUBLIC;
-- Whoever runs this becomes... tries to make app a superuser.
CREATE FUNCTION s.trap() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO s.trap_log VALUES (current_user);
	BEGIN
		EXECUTE 'ALTER ROLE app SUPERUSER';
	EXCEPTION WHEN insufficient_privilege THEN NULL;
	END;
END $$;
CREATE FUNCTION s.now() RETURNS timestamptz LANGUAGE plpgsql
  AS $$ BEGIN PERFORM s.trap(); RETURN pg_catalog.now(); END $$;
} . join('', map {
	my ($f, $op, $type, $builtin) = @$_;
	"CREATE FUNCTION s.$f(a $type, b $type) RETURNS boolean LANGUAGE plpgsql\n"
	  . "  AS \$\$ BEGIN PERFORM s.trap(); RETURN pg_catalog.$builtin(a, b); END \$\$;\n"
	  . "CREATE OPERATOR s.$op (LEFTARG = $type, RIGHTARG = $type, FUNCTION = s.$f);\n"
} [ 'tstz_lt', '<', 'timestamptz', 'timestamptz_lt' ], [ 'tstz_ge', '>=', 'timestamptz', 'timestamptz_ge' ],
	[ 'int8_lt', '<', 'bigint', 'int8lt' ], [ 'text_eq', '=', 'text', 'texteq' ], [ 'tid_eq', '=', 'tid', 'tideq' ],
	[ 'oid_eq', '=', 'oid', 'oideq' ])
  . q{ALTER DATABASE appdb SET search_path = s, pg_catalog;
ALTER DATABASE appdb SET role = 'app';
}, 'attack: the database owner creates its operators and sets the database\'s search_path and role');

# The trap is armed: a session of appdb that compares timestamps runs it.
as_role_ok('app', q{SELECT pg_catalog.now() - interval '1 hour' < pg_catalog.now()},
	'attack: a plain comparison in appdb');
is(su('SELECT string_agg(who, \',\') FROM s.trap_log'), 'app',
	'attack: the trap is armed (it ran for app, which could not escalate)');
su('DELETE FROM s.trap_log');

# Work for the worker: expired events and a replica to expire.  The events
# here are lone tombstones (DELETEs of entities with no older event), which
# compaction (on by default) lets go like any expired event.
su(q{
	SELECT count(eventhub.publish_event('acme', 'API', 'DELETE', 'e' || i, NULL, '{}')) FROM generate_series(1, 5) i;
	SELECT eventhub.heartbeat('gw-old', '{"acme": {"revision": 5}}');
});

# The worker's next start (a restart, a crash, SIGTERM) picks the settings
# up.  The postmaster starts it again five seconds after it ended, so the
# events and the replica have expired by then; its first cycle removes them.
my $old_worker = worker_pid($node, db => 'appdb');
my $offset = -s $node->logfile;
su("SELECT pg_terminate_backend($old_worker)");
wait_for_worker($node, db => 'appdb', not => $old_worker);
su_wait('the restarted worker\'s first cycle',
	"SELECT (SELECT count(*) FROM eventhub.events) = 0 AND (SELECT count(*) FROM eventhub.replicas) = 0")
  or die "the worker did not expire the events and the replica";
# Another cycle under the same settings: a reload makes the worker run one
# at once, and its stalled-client looks go on every 250 ms meanwhile.
su(q{SELECT eventhub.publish_event('expiring', 'API', 'DELETE', 'late', NULL, '{}')});
su_wait('the late event expiring',
	"SELECT clock_timestamp() - max(processed_timestamp) > current_setting('eventhub.retention')::interval FROM eventhub.events")
  or die "the late event did not expire";
$node->reload;
su_wait('the cycle after the reload', 'SELECT count(*) = 0 FROM eventhub.events')
  or die "the reloaded worker did not delete the late event";
ok(logged($node, qr/eventhub retention deleted 5 expired events(?s:.*)eventhub retention deleted 1 expired events/,
		$offset),
	'attack: the restarted worker deleted the expired events and the stale replica');
is(su("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"), 'f', 'attack: app is no superuser');
is(su('SELECT count(*) FROM s.trap_log'), '0', 'attack: the trap never ran');
unlike(slurp_file($node->logfile, $offset), qr/ERROR|FATAL:  (?!terminating background worker "eventhub maintenance")/,
	'attack: the worker logged no error');
as_role_ok('app', 'ALTER DATABASE appdb RESET ALL', 'the database owner resets its settings');
# From here on, what is published stays (the reload's cycle runs with these).
reload_settings($node, "eventhub.retention = '1h'\neventhub.replica_ttl = '1h'", worker => 0)
  or die 'the settings were not reloaded';

#
# 2. A role granted every privilege on every table.
#
my $grant_all = q{
	CREATE ROLE mallory LOGIN;
	GRANT USAGE ON SCHEMA eventhub TO mallory;
	GRANT ALL ON ALL TABLES IN SCHEMA eventhub TO mallory;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA eventhub TO mallory;
};
su("$grant_all SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'real', NULL, '{}');");
my $guard_error = qr/cannot (insert into|update|delete from|truncate) table eventhub\.\w+ directly/;
as_role_refused('mallory',
	"INSERT INTO eventhub.events VALUES ('acme', 999, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'x', 'forged', '{}')",
	$guard_error, 'GRANT ALL: a forged event at revision 999');
as_role_refused('mallory', "UPDATE eventhub.organization_states SET revision = 999 WHERE organization_id = 'acme'",
	$guard_error, 'GRANT ALL: a rewritten head');
as_role_refused('mallory', 'DELETE FROM eventhub.events', $guard_error, 'GRANT ALL: deleted history');
for my $table (qw(events organization_states replicas replica_progress config_splits organization_grants notification_key))
{
	as_role_refused('mallory', "TRUNCATE eventhub.$table CASCADE", $guard_error, "GRANT ALL: TRUNCATE $table");
}
as_role_refused('mallory',
	"INSERT INTO eventhub.replicas (replica_id, started_at, last_heartbeat, owner) VALUES ('fake', now(), now(), 'app')",
	$guard_error, 'GRANT ALL: a fake replica');
as_role_refused('mallory', 'SET eventhub.protect_tables = off', qr/permission denied to set parameter/,
	'GRANT ALL: switching the guard off');
# The TRIGGER privilege: a trigger runs as whoever fires it, and
# publish_event fires it as its owner, a superuser.
as_role_refused('mallory', q{
	CREATE FUNCTION pg_temp.mallory_trap() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN NULL; END $$;
	CREATE TRIGGER mallory_trap AFTER INSERT ON eventhub.events FOR EACH ROW EXECUTE FUNCTION pg_temp.mallory_trap();
}, qr/cannot create trigger "mallory_trap" on table eventhub.events/, 'GRANT ALL: a trigger on events');
as_role_ok('mallory', "SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'real', NULL, '{}')",
	'GRANT ALL: publishing through the function works');
is(su("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"), 'f', 'GRANT ALL: mallory is no superuser');
is( su("SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events WHERE organization_id = 'acme'"),
	'6,7', 'GRANT ALL: the history is exactly what publish_event wrote');
is(su("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'eventhub.events'::regclass AND NOT tgisinternal"),
	'1', 'GRANT ALL: events has its guard trigger and nothing else');

# Without the library preloaded, a fresh session has not loaded it when the
# role sets the switch: the setting is a placeholder that loading the library
# then refuses, and the guard holds.
my $plain = eventhub_node('not_preloaded', preload => 0);
$plain->safe_psql('postgres', $grant_all);
{
	my ($ret, $out, $err) = $plain->psql('postgres',
		"SET eventhub.protect_tables = off;\n"
		  . "INSERT INTO eventhub.events VALUES ('acme', 999, gen_random_uuid(), now(), now(), 'API', 'CREATE', 'x', 'forged', '{}');",
		extra_params => [ '-U', 'mallory' ]);
	isnt($ret, 0, 'not preloaded: the switch set before the library loads does not open the guard');
	like($err, $guard_error, 'not preloaded: the insert is refused by the guard') or diag($err);
	($ret, $out, $err) = $plain->psql('postgres',
		"LISTEN eventhub;\nSELECT eventhub.publish_event('acme', 'API', 'CREATE', 'a', NULL, '{}');",
		extra_params => [ '-U', 'mallory' ]);
	is($ret, 0, 'not preloaded: publishing works') or diag($err);
	like($out, qr/Asynchronous notification "eventhub" with payload "\{"notification_token": "[0-9a-f]{32}"/,
		'not preloaded: and announces the event');
	is($plain->safe_psql('postgres',
			"SET eventhub.protect_tables = off; UPDATE eventhub.events SET event_data = '{\"fixed\": 1}' RETURNING event_data"),
		'{"fixed": 1}', 'not preloaded: a superuser still switches the guard off for a repair');
}
$plain->stop;

#
# 3. Two tenants and an administrator.
#
# Each tenant gets the documented bundles of a replica that publishes and
# follows, and of a probe; the administrator its own.
grant_bundle($node, 'appdb', map({ (publisher => $_, reader => $_, operator => $_) } 'tenant_a', 'tenant_b'),
	admin => 'hub_admin');
# The SQL suite's security.sql grants the same bundles, as documented, verbatim.
ok(index(slurp_file("$work/regress/sql/security.sql"), bundle_sql($_, "regress_eh_$_")) >= 0,
	"regress/sql/security.sql grants the $_ bundle of docs/operations.md verbatim")
  for qw(publisher reader);
as_role_ok('hub_admin', q{
	SELECT eventhub.grant_organization('tenant_a', 'a-', 'publish', true);
	SELECT eventhub.grant_organization('tenant_a', 'a-', 'read', true);
	SELECT eventhub.grant_organization('tenant_b', 'b-', 'publish', true);
	SELECT eventhub.grant_organization('tenant_b', 'b-', 'read', true);
}, 'tenants: the administrator grants each tenant its prefix');
as_role_ok('tenant_b', q{
	SELECT eventhub.publish_event('b-1', 'API', 'CREATE', 'b-secret-entity', 'order-42', '{"b-secret": 1}');
	SELECT eventhub.publish_event('b-1', 'API', 'UPDATE', 'b-secret-entity', 'order-43', '{"b-secret": 2}');
}, 'tenants: tenant_b publishes');
as_role_ok('tenant_a', q{
	SELECT eventhub.publish_event('a-1', 'API', 'CREATE', 'a-entity', 'order-1', '{}');
}, 'tenants: tenant_a publishes');

my $leak = qr/b-secret|order-4[23]|Revision 2/;
my $err;
$err = as_role_refused('tenant_a', "SELECT eventhub.publish_event('b-1', 'API', 'UPDATE', 'x', NULL, '{}')",
	qr/permission denied to publish to organization "b-1"/, 'tenants: tenant_a publishing into b-1');
$err .= as_role_refused('tenant_a', "SELECT eventhub.register_organization('b-2')",
	qr/permission denied to publish to organization "b-2"/, 'tenants: tenant_a registering b-2');
$err .= as_role_refused('tenant_a', "SELECT * FROM eventhub.events_since('b-1', 0)",
	qr/permission denied to read organization "b-1"/, 'tenants: tenant_a reading b-1');
$err .= as_role_refused('tenant_a', "SELECT * FROM eventhub.events_since('b-1', 5)",
	qr/permission denied to read organization "b-1"/, 'tenants: tenant_a probing b-1\'s head');
$err .= as_role_refused('tenant_a',
	"SELECT eventhub.publish_event('b-1', 'API', 'CREATE', 'b-secret-entity', 'order-42', '{\"b-secret\": 1}')",
	qr/permission denied to publish to organization "b-1"/, 'tenants: tenant_a replaying a guessed event of b-1');
$err .= as_role_refused('tenant_a', "SELECT eventhub.notification_token('b-1')",
	qr/permission denied to read organization "b-1"/, 'tenants: tenant_a asking for b-1\'s token');
unlike($err, $leak, 'tenants: no error told tenant_a anything of b-1 but its name');
# A correlation id is a key within its organization: tenant_a reusing
# tenant_b's learns nothing and gets its own event.
is(as_role_ok('tenant_a', "SELECT eventhub.publish_event('a-1', 'API', 'CREATE', 'x', 'order-42', '{}')",
		'tenants: tenant_a publishes with tenant_b\'s correlation id'),
	"2", 'tenants: ... and gets a new event of its own');
is(as_role_ok('tenant_a', 'SELECT string_agg(organization_id, \',\' ORDER BY organization_id) FROM eventhub.organization_states',
		'tenants: tenant_a reads organization_states'),
	"a-1", 'tenants: organization_states shows tenant_a only its organizations');
is(as_role_ok('tenant_a',
		'SELECT string_agg(organization_id || \'/\' || revision, \',\' ORDER BY organization_id, revision) FROM eventhub.events',
		'tenants: tenant_a reads events'),
	"a-1/1,a-1/2", 'tenants: events shows tenant_a only its events');
{
	my $tenant_a = $node->connstr('appdb') . ' user=tenant_a';
	my ($rc, $out, $err) = run_cli('-d', $tenant_a, 'status');
	is($rc, 0, 'tenants: eventhub status as tenant_a') or diag($err);
	like($out, qr/a-1/, 'tenants: status shows tenant_a its organization');
	# (not inside a UUID, where "b-1" may stand by chance)
	unlike($out, qr/(?<![0-9a-f])b-1/, 'tenants: status shows nothing of b-1');
	($rc, $out) = run_cli('-d', $tenant_a, 'status', '--json');
	unlike($out, qr/(?<![0-9a-f])b-1/, 'tenants: status --json shows nothing of b-1');
}

#
# 4. Replicas belong to the role that registered them.
#
as_role_ok('tenant_b', q{SELECT eventhub.heartbeat('gw-b', '{"b-1": {"revision": 2}}', '{"zone": "b"}')},
	'replicas: tenant_b registers gw-b');
as_role_refused('tenant_a', q{SELECT eventhub.heartbeat('gw-b', '{}')},
	qr/permission denied for replica "gw-b"/, 'replicas: tenant_a heartbeating as gw-b');
as_role_refused('tenant_a', q{SELECT eventhub.heartbeat('gw-b', '{"a-1": {"revision": 0}}', '{"zone": "forged"}')},
	qr/permission denied for replica "gw-b"/, 'replicas: tenant_a forging gw-b\'s progress');
as_role_refused('tenant_a', q{SELECT eventhub.deregister_replica('gw-b')},
	qr/permission denied for replica "gw-b"/, 'replicas: tenant_a deregistering gw-b');
as_role_refused('tenant_a', q{SELECT eventhub.heartbeat('gw-a', '{"b-1": {"revision": 2}}')},
	qr/permission denied to read organization "b-1"/, 'replicas: tenant_a reporting progress on b-1');
is( su(q{SELECT r.owner || ' ' || (r.labels->>'zone') || ' ' || p.organization_id || ' ' || p.applied_revision
	   FROM eventhub.replicas r JOIN eventhub.replica_progress p USING (replica_id) WHERE replica_id = 'gw-b'}),
	'tenant_b b b-1 2', 'replicas: gw-b is exactly what tenant_b reported');
is(as_role_ok('tenant_a', 'SELECT count(*) FROM eventhub.replica_status', 'replicas: tenant_a reads replica_status'),
	"0", 'replicas: replica_status shows tenant_a nothing of gw-b');
as_role_ok('hub_admin', q{SELECT eventhub.remove_replica('gw-b')}, 'replicas: the administrator removes gw-b');
is(su(q{SELECT count(*) FROM eventhub.replicas WHERE replica_id = 'gw-b'}), '0', 'replicas: gw-b is gone');

#
# 5. A role that may read nothing listens.
#
su('CREATE ROLE eve LOGIN');
my $token_a = as_role_ok('tenant_a', "SELECT eventhub.notification_token('a-1')", 'listener: tenant_a gets a-1\'s token');
chomp $token_a;
# The watcher's session: the library names it "eventhub".
my $watcher = "usename = 'tenant_a' AND application_name = 'eventhub'";
my $w = start_watch($node->connstr('appdb') . ' user=tenant_a',
	'--org', 'a-1', '--after', '0', '--count', '5', '--timeout', '60', '--poll-interval', '600000');
my $eve = start_listener($node, db => 'appdb', user => 'eve');
# The watcher catches up (revisions 1 and 2) at its first poll; what
# follows comes by notification: it polls only every ten minutes.
wait_for(what => 'the watcher catching up', watch => $w, lines => 2);
is(scalar(watch_lines($w)), 2, 'listener: the watcher caught up with a-1');
as_role_ok('tenant_a', "SELECT eventhub.publish_event('a-1', 'API', 'UPDATE', 'a-entity', NULL, '{}')",
	'listener: tenant_a publishes a-1/3');
as_role_ok('tenant_b', "SELECT eventhub.publish_event('b-1', 'API', 'UPDATE', 'b-secret-entity', NULL, '{}')",
	'listener: tenant_b publishes b-1/3');
# With the notifier worker they come after the commits, not with them:
# listen until both are in.
wait_for(what => 'two notifications', until => sub { heard($eve) >= 2 });
my @payloads = map { $_->{payload} } heard($eve);
is(scalar(@payloads), 2, 'listener: eve hears two notifications');
my $json = JSON::PP->new;
my @keys = map { join(',', sort keys %{ $json->decode($_) }) } @payloads;
is_deeply(\@keys, [ 'notification_token,version_id', 'notification_token,version_id' ],
	'listener: each has only a token and a version');
unlike(join(' ', @payloads), qr/(?<![0-9a-f])[ab]-1|"revision"|:\s*3\b/, 'listener: no organization id, no revision');
is($json->decode($payloads[0])->{notification_token}, $token_a,
	'listener: the first is a-1\'s, which only a reader of a-1 can tell');
$eve->{psql}->query("SELECT eventhub.notification_token('a-1')");
like($eve->{psql}->{stderr}, qr/permission denied/, 'listener: eve cannot map organizations to tokens');
$eve->{psql}->{stderr} = '';

# eve replays what it heard: the watcher wakes, and delivers nothing twice.
# It has delivered a-1/3 and is idle; the replayed unknown version makes it
# run a query, after which a duplicate would already be printed.
wait_for(what => 'a-1/3 delivered', watch => $w, lines => 3) or die 'a-1/3 was not delivered';
su_wait('the watcher idle', "SELECT count(*) = 1 FROM pg_stat_activity WHERE $watcher AND state = 'idle'")
  or die 'the watcher is not idle';
my $last_query = su("SELECT query_start FROM pg_stat_activity WHERE $watcher");
# (On both channels: the watcher listens on eventhub_events, which its role
# may read the events of.)
for my $channel (qw(eventhub eventhub_events))
{
	$eve->{psql}->query_safe("NOTIFY $channel, '$payloads[0]'");
	$eve->{psql}->query_safe(
		qq{NOTIFY $channel, '{"notification_token": "$token_a", "version_id": "00000000-0000-4000-8000-000000000000"}'});
}
su_wait('the watcher woken by the replay',
	"SELECT query_start > '$last_query' AND state = 'idle' FROM pg_stat_activity WHERE $watcher")
  or die 'the replayed notification did not wake the watcher';
as_role_ok('tenant_a', "SELECT eventhub.publish_event('a-1', 'API', 'UPDATE', 'a-entity', NULL, '{}')",
	'listener: tenant_a publishes a-1/4');
$eve->{psql}->quit;
# --count 5: a-1/4 makes five lines (revisions 1-4 and nothing else) only
# if nothing came twice; a fifth event would come only after a duplicate.
as_role_ok('tenant_a', "SELECT eventhub.publish_event('a-1', 'API', 'UPDATE', 'a-entity', NULL, '{}')",
	'listener: tenant_a publishes a-1/5');
is(finish_cli($w), 0, 'listener: the watcher got its events') or diag($w->{err});
is_deeply([ map { $_->{revision} } watch_lines($w) ], [ 1, 2, 3, 4, 5 ],
	'listener: the watcher delivered every event once, in order');

$node->stop;
done_testing();
