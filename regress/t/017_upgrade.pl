# 017_upgrade.pl: from each earlier release (0.1.0 to 0.4.0) to this one the
# way an operator does it.  A server runs the old release (built from the
# release's own source, which scripts/test.sh takes from git), publishes and
# runs its worker; an organization loses events to a cleanup (before 0.4.0
# its latest event too: compaction keeps that one since); the new
# binaries are installed and the server restarted; until ALTER EXTENSION
# eventhub UPDATE the new library refuses clearly and its worker waits; new
# watchers resuming from stored cursors run across the update and go on
# without a resync; heads, events, grants and replicas are kept; the
# organizations that kept all their events are complete (complete_after 0)
# and the one that lost some before 0.4.0 is marked (NULL); a database updated from the
# old release has the same catalog as a fresh one; and its dump, restored by
# a superuser with a plain pg_restore (the write guard left on), brings all
# of it back, publishing going on gaplessly.  Each release takes about as
# long as the other: building it, and one server's life.

use strict;
use warnings;

use EventhubTest;
use File::Copy;
use File::Path qw(make_path);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The releases staged (scripts/test.sh takes their source from git history).
my @releases = grep { -f "$work/v$_/eventhub.control" } qw(0.1.0 0.2.0 0.3.0 0.4.0);
plan skip_all => 'no earlier release\'s source is staged (scripts/test.sh takes it from git history)'
  unless @releases;
my @missing = grep { !-f "$work/v$_/eventhub.control" } qw(0.1.0 0.2.0 0.3.0 0.4.0);
note("not staged, skipped: @missing") if @missing;

# A private copy of the PostgreSQL installation (relocatable: the server
# finds its share directory relative to its binaries) whose eventhub files
# can be swapped without touching the machine's.
my $pg_lib = '/usr/lib/postgresql/15';
my $pg_share = '/usr/share/postgresql/15';
my $inst = "$PostgreSQL::Test::Utils::tmp_check/inst";
make_path("$inst/usr/lib/postgresql", "$inst/usr/share/postgresql");
system('cp', '-a', $pg_lib, "$inst/usr/lib/postgresql/") == 0
  && system('cp', '-a', $pg_share, "$inst/usr/share/postgresql/") == 0 or die 'copying the server failed';
my $libdir = "$inst$pg_lib/lib";
my $extdir = "$inst$pg_share/extension";
# This release: the version the installed build creates.
my ($new) = slurp_file("$pg_share/extension/eventhub.control") =~ /^default_version = '([^']+)'/m or die;

sub install_eventhub
{
	my ($so, @sql) = @_;
	unlink glob("$extdir/eventhub*");
	copy($so, "$libdir/eventhub.so") or die "copying $so: $!";
	copy($_, $extdir) or die "copying $_: $!" for @sql;
}

upgrade_from($_) for @releases;

# upgrade_from(OLD): the whole story from release OLD, on a server of its own.
sub upgrade_from
{
	my ($old) = @_;
	my $old_src = "$work/v$old";
	# 0.1.0 named the head's column "organization", and its events_since had
	# no after_version; 0.2.0 has tokens, which its readers were granted.
	my $org_column = $old eq '0.1.0' ? 'organization' : 'organization_id';
	my $events_since_old = $old eq '0.1.0' ? 'eventhub.events_since(text, bigint, integer)'
	  : 'eventhub.events_since(text, bigint, integer, uuid)';
	# Before 0.4.0 a cleanup removed an entity's latest event too, and the
	# update marks the organization that lost it.
	my $compacted = $old ge '0.4.0';
	my $tokens = $old eq '0.1.0' ? '' : q{
		GRANT EXECUTE ON FUNCTION eventhub.notification_token(text) TO reader, "Gateway-Reader";};

	# eventhub OLD, built from its source.
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'make', '-s', '-C', $old_src, "PG_CONFIG=$pg_lib/bin/pg_config", 'eventhub.so', "sql/eventhub--$old.sql" ],
		'>', \$out, '2>', \$err) or die "building eventhub $old failed: $err";
	install_eventhub("$old_src/eventhub.so", "$old_src/eventhub.control", "$old_src/sql/eventhub--$old.sql");

	my $node = PostgreSQL::Test::Cluster->new("upgrade_from_$old" =~ s/\./_/gr, install_path => "$inst$pg_lib");
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'eventhub'\neventhub.maintenance_interval = '200ms'");
	$node->start;
	my $connstr = $node->connstr('postgres');

	$node->safe_psql('postgres', qq{
		CREATE EXTENSION eventhub;
		CREATE DATABASE upd;
		CREATE ROLE publisher LOGIN;
		CREATE ROLE reader LOGIN;
		CREATE ROLE operator LOGIN;
		GRANT USAGE ON SCHEMA eventhub TO publisher, reader, operator;
		GRANT EXECUTE ON FUNCTION eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz) TO publisher;
		GRANT SELECT ON eventhub.organization_states, eventhub.events TO reader, operator;
		GRANT EXECUTE ON FUNCTION $events_since_old,
		                          eventhub.heartbeat(text, jsonb, jsonb, text) TO reader;
		GRANT SELECT ON eventhub.replica_status TO operator;
		-- grants of every kind the update must keep: a role whose name needs
		-- quoting, PUBLIC, a column, a grant option
		CREATE ROLE "Gateway-Reader" LOGIN;
		GRANT USAGE ON SCHEMA eventhub TO "Gateway-Reader";
		GRANT EXECUTE ON FUNCTION $events_since_old TO "Gateway-Reader" WITH GRANT OPTION;
		GRANT EXECUTE ON FUNCTION eventhub.register_organization(text) TO PUBLIC;
		CREATE ROLE publisher_member IN ROLE publisher;
		GRANT SELECT (replica_id, state) ON eventhub.replica_status TO "Gateway-Reader";$tokens
	});
	$node->safe_psql('upd', 'CREATE EXTENSION eventhub');
	is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'eventhub'"),
		$old, "eventhub $old is installed from its kept script");

	publish($node, 'acme', 5, user => 'publisher');
	publish($node, 'globex', 3, user => 'publisher');
	# initech loses its first two events to a cleanup (head 3, one event kept).
	publish($node, 'initech', 2, user => 'publisher');
	$node->safe_psql('postgres', "SELECT eventhub.cleanup_events('initech', '-infinity', clock_timestamp())");
	publish($node, 'initech', 1, user => 'publisher');
	$node->safe_psql('postgres', q{SET ROLE reader; SELECT eventhub.heartbeat('gw-1', '{"acme": {"revision": 5}}')});
	ok(wait_for(what => 'the worker', node => $node,
			sql => "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type LIKE 'eventhub%' AND datname = 'postgres'"),
		"$old publishes, and its worker runs");

	my $heads_sql = "SELECT string_agg(h, ', ' ORDER BY h)
		FROM (SELECT $org_column || ' ' || revision || ' ' || version_id FROM eventhub.organization_states) s(h)";
	my $events_sql = "SELECT count(*) || ' ' || md5(string_agg(organization_id || revision || version_id || event_data::text
		|| correlation_id, ',' ORDER BY organization_id, revision)) FROM eventhub.events";
	my ($heads, $events) = map { $node->safe_psql('postgres', $_) } $heads_sql, $events_sql;
	my %cursor = map { my ($o, $r, $v) = split / /; ($o => [ $r, $v ]) } split /, /, $heads;
	is($events =~ s/ .*//r, 5 + 3 + ($compacted ? 2 : 1),
		$compacted ? "$old: initech keeps two events of three (its entity's latest)" : "$old: initech keeps one event of three");

	# The new binaries, and a restart (the library is preloaded).
	$node->stop;
	install_eventhub("$pg_lib/lib/eventhub.so", glob("$pg_share/extension/eventhub*"));
	my $offset = -s $node->logfile;
	$node->start;

	my ($rc, $stdout, $stderr) = $node->psql('postgres',
		"SET ROLE publisher; SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'x', NULL, '{}')");
	like($stderr, qr/eventhub's SQL objects in this database are at version \Q$old\E, its library at version \Q$new\E/,
		"$old: until the update, the new library refuses to publish");
	like($stderr, qr/HINT:  Run ALTER EXTENSION eventhub UPDATE in this database\./, "$old: and says what to run");
	ok(logged($node, qr/waiting for the extension in database "postgres" to be updated from version \Q$old\E to \Q$new\E/, $offset),
		"$old: the worker waits for the update, and says so");

	# Watchers of the new release, resuming from stored cursors, as the reader.
	my %watch = map {
		($_ => start_watch("$connstr user=reader", '--org', $_, '--after', $cursor{$_}[0], '--after-version', $cursor{$_}[1],
				'--poll-interval', '200'))
	} qw(acme globex);
	# Both are connected before the update.
	wait_for(what => 'the watchers', node => $node,
		sql => "SELECT count(*) = 2 FROM pg_stat_activity WHERE usename = 'reader' AND application_name <> 'eventhub probe'")
	  or die 'the watchers did not connect';

	$offset = -s $node->logfile;
	($rc, $stdout, $stderr) = $node->psql('postgres', 'ALTER EXTENSION eventhub UPDATE');
	is($rc, 0, "$old: ALTER EXTENSION eventhub UPDATE succeeds") or diag($stderr);
	if ($compacted) { unlike($stderr, qr/WARNING/, "$old: without a warning"); }
	else { like($stderr, qr/WARNING:  1 organizations lost events before 0\.4\.0/, "$old: and warns of the organization that lost events"); }
	is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'eventhub'"),
		$new, "$old: ALTER EXTENSION eventhub UPDATE goes to $new");
	is($node->safe_psql('postgres', $heads_sql =~ s/\Q$org_column\E \|\|/organization_id ||/r), $heads,
		"$old: every head is kept, revision and version");
	is($node->safe_psql('postgres', $events_sql), $events, "$old: every event is kept");
	is($node->safe_psql('postgres', "SELECT string_agg(organization_id || ' ' || coalesce(complete_after::text, 'NULL'), ', '
		ORDER BY organization_id) FROM eventhub.organization_states"), $compacted ? 'acme 0, globex 0, initech 0' : 'acme 0, globex 0, initech NULL',
		$compacted ? "$old: complete_after stays 0: compaction kept every entity's latest event"
		: "$old: complete_after is 0 where every event is kept, NULL where events were removed");
	ok(logged($node, qr/found the extension in database "postgres"/, $offset), "$old: the worker goes back to work");

	is(publish($node, 'acme', 2, user => 'publisher'), '7', "$old: the publisher publishes with the grant it had");
	is(publish($node, 'globex', 1, user => 'publisher'), '4', "$old: in every organization");
	my %expect = (acme => [ 6, 7 ], globex => [4]);
	for my $org (sort keys %watch)
	{
		my $w = $watch{$org};
		wait_for(what => "the $org watcher", watch => $w, lines => scalar @{ $expect{$org} });
		eval { $w->{h}->signal('TERM') };
		eval { $w->{h}->finish };
		note("$org watcher's stderr: $w->{err}");
		is(join(' ', $w->{out} =~ /"revision": (\d+)/g), "@{ $expect{$org} }",
			"$old: the $org watcher started before the update goes on from its cursor");
		unlike($w->{out}, qr/resync/, "$old: without a resync ($org)");
	}

	ok($node->safe_psql('postgres',
			"SELECT has_function_privilege('reader', 'eventhub.events_since(text, bigint, integer, uuid)', 'EXECUTE')
			    AND has_table_privilege('operator', 'eventhub.replica_status', 'SELECT')
			    AND has_function_privilege('reader', 'eventhub.notification_token(text)', 'EXECUTE')
			    AND NOT has_function_privilege('operator', 'eventhub.events_since(text, bigint, integer, uuid)', 'EXECUTE')
			    AND NOT has_function_privilege('operator', 'eventhub.notification_token(text)', 'EXECUTE')
			    AND NOT has_function_privilege('reader', 'eventhub.transactions_since(text, bigint, integer, uuid, integer)', 'EXECUTE')
			    AND NOT has_function_privilege('operator', 'eventhub.metrics()', 'EXECUTE')
			    AND has_function_privilege('publisher', 'eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz)', 'EXECUTE')
			    AND NOT has_function_privilege('reader', 'eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz)', 'EXECUTE')
			    AND has_function_privilege('reader', 'eventhub.notification_data_key(text)', 'EXECUTE')
			    AND NOT has_function_privilege('publisher', 'eventhub.notification_data_key(text)', 'EXECUTE')
			    AND NOT EXISTS (SELECT FROM pg_proc p, aclexplode(p.proacl) a
			                     WHERE p.oid = 'eventhub.publish_event_result(text, text, text, text, text, jsonb, timestamptz)'::regprocedure
			                       AND a.grantee = 'publisher_member'::regrole)") eq 't',
		"$old: grants on objects created again are carried over, readers may ask for tokens and keys, publishers for publish_event_result, and nothing more");
	is($node->safe_psql('postgres', q{
		SELECT has_function_privilege('Gateway-Reader', 'eventhub.events_since(text, bigint, integer, uuid)', 'EXECUTE WITH GRANT OPTION'),
		       has_function_privilege('Gateway-Reader', 'eventhub.notification_token(text)', 'EXECUTE'),
		       has_function_privilege('Gateway-Reader', 'eventhub.notification_data_key(text)', 'EXECUTE'),
		       has_function_privilege('public', 'eventhub.register_organization(text)', 'EXECUTE'),
		       has_column_privilege('Gateway-Reader', 'eventhub.replica_status', 'state', 'SELECT'),
		       has_column_privilege('Gateway-Reader', 'eventhub.replica_status', 'lag_revisions', 'SELECT'),
		       has_function_privilege('public', 'eventhub.publish_event(text, text, text, text, text, jsonb, timestamptz)', 'EXECUTE')}),
		't|t|t|t|t|f|f',
		"$old: a quoted role name (and the data key it is given), a grant option, a PUBLIC grant and column grants come through; nothing is added");
	$node->safe_psql('postgres', q{SET ROLE reader; SELECT eventhub.heartbeat('gw-1', '{"acme": {"revision": 7}}')});
	is($node->safe_psql('postgres', "SET ROLE operator; SELECT replica_id || ' ' || applied_revision || ' ' || owner
		FROM eventhub.replica_status"), 'gw-1 7 reader',
		"$old: a replica registered under $old is kept, and its next heartbeat keeps or claims it for its role");

	# Same catalog as a fresh installation.
	$node->safe_psql('upd', 'ALTER EXTENSION eventhub UPDATE');
	$node->safe_psql('postgres', 'CREATE DATABASE fresh');
	$node->safe_psql('fresh', 'CREATE EXTENSION eventhub');

	my $catalog = sub {
		my ($db) = @_;
		my ($dump, $e) = ('', '');
		# --binary-upgrade dumps an extension's member objects; OIDs and
		# transaction ids, which differ by nature, are left out.
		IPC::Run::run([ "$inst$pg_lib/bin/pg_dump", '--schema-only', '--binary-upgrade', '-d', $node->connstr($db) ],
			'>', \$dump, '2>', \$e) or die "pg_dump $db: $e";
		return join "\n", grep {
			!/binary_upgrade_set_next|binary_upgrade_create_empty_extension|^-- Dumped|^SELECT pg_catalog\.set_config|^\\(un)?restrict|relfrozenxid|^WHERE oid = |^$/
		} split /\n/, $dump;
	};
	my ($updated, $fresh) = ($catalog->('upd'), $catalog->('fresh'));
	cmp_ok(scalar(() = $fresh =~ /ALTER EXTENSION eventhub ADD/g), '>', 20, "$old: the dump lists the extension's objects");
	ok($updated eq $fresh, "a database updated from $old and a fresh one have identical catalogs") or do
	{
		append_to_file("$PostgreSQL::Test::Utils::tmp_check/$_->[0]-$old.sql", $_->[1]) for [ updated => $updated ], [ fresh => $fresh ];
		diag(`cd $PostgreSQL::Test::Utils::tmp_check && diff updated-$old.sql fresh-$old.sql | head -40`);
	};

	# The roles' grants, re-applied inside the update scripts (0.1.0 ->
	# 0.2.0), are not the objects' initial privileges (pg_dump would leave
	# them out).
	my $init_privs_sql = q{SELECT string_agg(o, E'\n' ORDER BY o)
		FROM (SELECT pg_describe_object(i.classoid, i.objoid, i.objsubid) || ' ' || i.initprivs::text FROM pg_init_privs i
		JOIN pg_depend d ON d.classid = i.classoid AND d.objid = i.objoid AND d.objsubid = 0 AND d.deptype = 'e'
		JOIN pg_extension x ON x.oid = d.refobjid AND x.extname = 'eventhub') s(o)};
	is($node->safe_psql('postgres', $init_privs_sql), $node->safe_psql('fresh', $init_privs_sql),
		"$old: the initial privileges of an updated database's objects are a fresh installation's");

	# Dumped, and restored plainly by a superuser into a new database (no
	# PGOPTIONS turning eventhub.protect_tables off).  Replicas are not dumped:
	# they register again with their next heartbeat (docs/sql.md).
	my $acl_sql = q{SELECT string_agg(o, E'\n' ORDER BY o) FROM (
		SELECT c.relname || ' ' || coalesce(c.relacl::text, '-') FROM pg_class c
		 WHERE c.relnamespace = 'eventhub'::regnamespace
		UNION ALL SELECT c.relname || '.' || a.attname || ' ' || a.attacl::text
		  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 WHERE c.relnamespace = 'eventhub'::regnamespace AND a.attacl IS NOT NULL
		UNION ALL SELECT p.oid::regprocedure::text || ' ' || coalesce(p.proacl::text, '-') FROM pg_proc p
		 WHERE p.pronamespace = 'eventhub'::regnamespace
		UNION ALL SELECT 'schema ' || nspacl::text FROM pg_namespace WHERE nspname = 'eventhub') s(o)};
	my $states_sql = "SELECT string_agg(organization_id || ' ' || coalesce(complete_after::text, 'NULL'), ', '
		ORDER BY organization_id) FROM eventhub.organization_states";
	my %before = map { ($_ => $node->safe_psql('postgres', $_)) } $heads_sql =~ s/\Q$org_column\E \|\|/organization_id ||/r,
	  $events_sql, $acl_sql, $states_sql;
	my $dumpfile = "$PostgreSQL::Test::Utils::tmp_check/postgres-$old.dump";
	$node->command_ok([ "$inst$pg_lib/bin/pg_dump", '-Fc', '-f', $dumpfile, '-d', $connstr ], "$old: pg_dump of the updated database");
	$node->safe_psql('postgres', 'CREATE DATABASE restored');
	{
		delete local $ENV{PGOPTIONS};
		$node->command_ok([ "$inst$pg_lib/bin/pg_restore", '-d', $node->connstr('restored'), $dumpfile ],
			"$old: a superuser's plain pg_restore succeeds");
	}
	is_deeply({ map { ($_ => $node->safe_psql('restored', $_)) } keys %before }, \%before,
		"$old: restored: every head and version, every event, every grant (columns and grant options too), complete_after");
	my (undef, $next, $why) = $node->psql('restored', publish_sql('acme'), extra_params => [ '-U', 'publisher' ]);
	is($next, '8', "$old: restored: the publisher publishes on") or diag($why);
	is($node->safe_psql('restored', "SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events_since('acme', 0, 100, NULL)"),
		join(',', 1 .. 8), "$old: restored: from the next revision, gapless");

	$node->stop;
}

done_testing();
