# Copyright: the eventhub authors.  Written for eventhub's TAP suites.

=pod

=head1 NAME

EventhubTest - what eventhub's TAP tests share

=head1 SYNOPSIS

  use EventhubTest;
  use Test::More;

  my $node = eventhub_node('primary', maintenance_interval => '100ms');
  publish($node, 'acme', 3);
  my $w = start_watch($node->connstr('postgres'), '--org', 'acme', '--after', '0');
  wait_for(what => 'three events', watch => $w, lines => 3) or die;
  wait_for_maintenance($node);
  grant_bundle($node, 'postgres', reader => 'regress_reader');

=head1 DESCRIPTION

In the shape of pg_rewind's RewindTest.pm: the files under regress/t read as
scenarios, and what they all need is written here once: a node with eventhub
preloaded and created, the paths of the built tree, publishing, the CLI and
its watcher, one wait on a condition, maintenance triggered or waited for
(never slept for), and the role bundles of docs/operations.md, read from
that page so that the documentation and the tests cannot drift apart.

Every wait ends on a condition; its bound is derived from
$PostgreSQL::Test::Utils::timeout_default (PG_TEST_TIMEOUT_DEFAULT), so it
only turns a hang into a failure and never decides a result on a busy
machine.

=cut

package EventhubTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT = qw(
  $work $cli $libdir $examples
  eventhub_node eventhub_standby
  sql_literal publish publish_sql
  run_cli start_cli start_watch watch_lines finish_cli
  start_listener heard notifications_in
  wait_for
  worker_pid wait_for_worker run_maintenance wait_for_maintenance reload_settings
  role_bundles bundle_sql grant_bundle
);

# The built tree the suites run from (scripts/test.sh stages it and sets
# EVENTHUB_WORK), the CLI, the directory of libeventhub and the client's
# example programs.
our $work = $ENV{EVENTHUB_WORK};
BAIL_OUT('EVENTHUB_WORK is not set: run the suites with make prove_installcheck')
  unless defined $work;
our $cli      = "$work/client/eventhub";
our $libdir   = "$work/client";
our $examples = "$work/client/examples";

my $json = JSON::PP->new;

# eventhub_node(NAME, %opt): a started node with eventhub preloaded and
# CREATE EXTENSION eventhub run.  Options:
#   database              where the extension is created and the workers run
#                         (eventhub.database); created if not "postgres"
#   db_owner              owner of that database (a LOGIN role, created)
#   maintenance_interval, retention, replica_ttl, stalled_client_timeout:
#                         the eventhub.* settings of those names
#   conf                  more postgresql.conf text
#   preload => 0          without shared_preload_libraries (no workers)
#   extension => 0        without CREATE EXTENSION
#   start => 0            initialized only (no database, no extension)
#   init => {...}         passed to PostgreSQL::Test::Cluster::init
#                         (allows_streaming, extra, ...)
sub eventhub_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	my $db = $opt{database} // 'postgres';
	my $conf = 'shared_preload_libraries = '
	  . (($opt{preload} // 1) ? "'eventhub'" : "''") . "\n";
	$conf .= "eventhub.database = '$db'\n" if $db ne 'postgres';
	for my $setting (qw(maintenance_interval retention replica_ttl stalled_client_timeout))
	{
		$conf .= "eventhub.$setting = '$opt{$setting}'\n" if defined $opt{$setting};
	}
	$conf .= "$opt{conf}\n" if defined $opt{conf};
	$node->append_conf('postgresql.conf', $conf);
	return $node unless $opt{start} // 1;
	$node->start;
	if ($db ne 'postgres')
	{
		my $owner = '';
		if (defined $opt{db_owner})
		{
			$node->safe_psql('postgres', qq{CREATE ROLE "$opt{db_owner}" LOGIN});
			$owner = qq{ OWNER "$opt{db_owner}"};
		}
		$node->safe_psql('postgres', qq{CREATE DATABASE "$db"$owner});
	}
	$node->safe_psql($db, 'CREATE EXTENSION eventhub') if $opt{extension} // 1;
	return $node;
}

# eventhub_standby(PRIMARY, NAME): a started hot standby of PRIMARY,
# streaming from a fresh base backup.
sub eventhub_standby
{
	my ($primary, $name) = @_;
	my $backup = "for_$name";
	$primary->backup($backup);
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, $backup, has_streaming => 1);
	$standby->start;
	return $standby;
}

# sql_literal(STR): an SQL expression for the text STR (a Perl character
# string).  A plain quoted literal when STR is printable ASCII; otherwise its
# UTF-8 bytes in hex, so that no byte of it needs quoting or escaping.
sub sql_literal
{
	my ($str) = @_;
	return 'NULL' unless defined $str;
	if ($str =~ /^[\x20-\x7e]*\z/ && $str !~ /\\/)
	{
		(my $q = $str) =~ s/'/''/g;
		return "'$q'";
	}
	my $bytes = $str;
	utf8::encode($bytes);
	return "convert_from('\\x" . unpack('H*', $bytes) . "'::bytea, 'UTF8')";
}

# publish_sql(ORG, %opt): one statement, ending in ";\n", that publishes one
# event of ORG.  Options (Perl strings, quoted here): corr (correlation id;
# NULL by default), event_type ('API'), action ('UPDATE'), entity ('e'),
# data (JSON text, '{}').
sub publish_sql
{
	my ($org, %opt) = @_;
	return sprintf("SELECT eventhub.publish_event(%s, %s, %s, %s, %s, %s::jsonb);\n",
		map { sql_literal($_) } $org,
		$opt{event_type} // 'API',
		$opt{action}     // 'UPDATE',
		$opt{entity}     // 'e',
		$opt{corr},
		$opt{data} // '{}');
}

# publish(NODE, ORG, N, %opt): publishes N events of ORG in one transaction
# and returns the last revision.  Options: db ('postgres'), user (publish as
# that role), tag (correlation ids "TAG-1" .. "TAG-N"; NULL without),
# event_type, action, entity, data as in publish_sql.
sub publish
{
	my ($node, $org, $n, %opt) = @_;
	$n //= 1;
	my $corr = defined $opt{tag} ? sql_literal("$opt{tag}-") . ' || i' : 'NULL';
	my $sql = sprintf(
		"SELECT max(eventhub.publish_event(%s, %s, %s, %s, %s, %s::jsonb))"
		  . " FROM generate_series(1, %d) i",
		sql_literal($org),
		sql_literal($opt{event_type} // 'API'),
		sql_literal($opt{action}     // 'UPDATE'),
		sql_literal($opt{entity}     // 'e'),
		$corr,
		sql_literal($opt{data} // '{}'), $n);
	return $node->safe_psql($opt{db} // 'postgres', $sql,
		defined $opt{user} ? (extra_params => [ '-U', $opt{user} ]) : ());
}

# run_cli(ARGS...): runs the CLI to its end; returns (exit status, stdout,
# stderr).  Its standard input is empty.
sub run_cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, @_ ], '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

# start_cli(ARGS..., {opts}?): starts the CLI in the background and returns
# a handle { h => IPC::Run harness, out => stdout so far, err => stderr so
# far, in => what is fed to stdin }.  A trailing hash ref may give
# prefix => [ 'valgrind', ... ] (a command the CLI runs under) and
# appname => 1 (keep PGAPPNAME; by default it is removed so that the
# library's fallback application name "eventhub" shows).  A backstop
# timeout of twice timeout_default kills a CLI that outlives the test.
sub start_cli
{
	my $opt = ref $_[-1] eq 'HASH' ? pop : {};
	my $c = { out => '', err => '', in => '' };
	local %ENV = %ENV;
	delete $ENV{PGAPPNAME} unless $opt->{appname};
	$c->{h} = IPC::Run::start([ @{ $opt->{prefix} // [] }, $cli, @_ ],
		'<', \$c->{in}, '>', \$c->{out}, '2>', \$c->{err},
		IPC::Run::timeout(2 * $PostgreSQL::Test::Utils::timeout_default));
	return $c;
}

# start_watch(CONNSTR, WATCH_ARGS..., {opts}?): start_cli of
# "eventhub -d CONNSTR watch WATCH_ARGS...".
sub start_watch
{
	my ($connstr, @args) = @_;
	return start_cli('-d', $connstr, 'watch', @args);
}

# watch_lines(HANDLE): the complete JSON lines a CLI printed so far,
# decoded (the last line may still be being written: it is left out).
sub watch_lines
{
	my ($c) = @_;
	return map { $json->decode($_) } $c->{out} =~ /^(\{.*)\n/mg;
}

# finish_cli(HANDLE): closes its stdin, waits for it to exit and returns
# its exit status.
sub finish_cli
{
	my ($c) = @_;
	$c->{h}->finish;
	return $c->{h}->result(0);
}

# notifications_in(TEXT): the notifications psql printed in TEXT, in order,
# as { channel, payload, pid, line } (line: the index of its line in TEXT).
sub notifications_in
{
	my ($text) = @_;
	my @lines = split /\n/, $text, -1;
	my @found;
	for my $i (0 .. $#lines)
	{
		push @found, { channel => $1, payload => $2, pid => $3, line => $i }
		  if $lines[$i] =~
		  /^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID (\d+)\.$/;
	}
	return @found;
}

# start_listener(NODE, %opt): a background psql session that has run
# LISTEN eventhub and goes on after an error (a refused query is a test's
# expected outcome).  Options: db ('postgres'), user.  heard() collects what
# it received.
sub start_listener
{
	my ($node, %opt) = @_;
	my $l = {
		psql => $node->background_psql(
			$opt{db} // 'postgres',
			defined $opt{user} ? (extra_params => [ '-U', $opt{user} ]) : (),
			on_error_stop => 0),
		heard => []
	};
	$l->{psql}->query_safe('LISTEN eventhub');
	return $l;
}

# heard(LISTENER): collects the notifications that arrived since the last
# call and returns every one heard so far (notifications_in's hashes).
# Use it as a wait condition: wait_for(until => sub { heard($l) >= 2 }).
sub heard
{
	my ($l) = @_;
	push @{ $l->{heard} }, notifications_in($l->{psql}->query_safe('SELECT 1'));
	return @{ $l->{heard} };
}

# wait_for(%cond): waits until a condition holds; returns true then, or
# false (with a diag naming WHAT) once timeout_default seconds have passed
# or a watched process has exited without it.  It never dies, so the test
# can assert on the result.  The condition is one of:
#   until => CODE                     true when done
#   node => NODE, sql => SQL [, db => DB] [, equals => VALUE]
#                                     SQL's output (psql -XAtq) is VALUE
#                                     ('t' by default); errors count as
#                                     "not yet"
#   watch => HANDLE, matches => RE    the process's stdout matches RE
#   watch => HANDLE, lines => N       it printed N complete JSON lines
#   watch => HANDLE, stderr => RE     its stderr matches RE
# Other options: what (the label of the diag), timeout (seconds),
# pump => [ HANDLE, ... ] (more processes to read from while waiting).
sub wait_for
{
	my (%w) = @_;
	my $what = $w{what} // 'condition';
	my @pump = @{ $w{pump} // [] };
	push @pump, $w{watch} if $w{watch};
	my $cond;
	if ($w{until})
	{
		$cond = $w{until};
	}
	elsif ($w{node})
	{
		my $want = $w{equals} // 't';
		$cond = sub {
			my ($out, $err) = ('', '');
			$w{node}->psql($w{db} // 'postgres', $w{sql}, stdout => \$out, stderr => \$err);
			return $out eq $want;
		};
	}
	elsif (defined $w{lines})
	{
		$cond = sub { scalar(watch_lines($w{watch})) >= $w{lines} };
	}
	elsif ($w{matches})
	{
		$cond = sub { $w{watch}{out} =~ $w{matches} };
	}
	elsif ($w{stderr})
	{
		$cond = sub { $w{watch}{err} =~ $w{stderr} };
	}
	else
	{
		croak 'wait_for: no condition';
	}

	my $deadline = time() + ($w{timeout} // $PostgreSQL::Test::Utils::timeout_default);
	for (;;)
	{
		$_->{h}->pump_nb for grep { $_->{h}->pumpable } @pump;
		return 1 if $cond->();
		my $gone = $w{watch} && !$w{watch}{h}->pumpable;
		if ($gone || time() > $deadline)
		{
			# one last look at what the processes printed
			return 1 if $cond->();
			diag("wait_for: $what: " . ($gone ? 'the process exited first' : 'timed out'));
			diag("stdout: $_->{out}\nstderr: $_->{err}") for @pump;
			return 0;
		}
		usleep(20_000);
	}
}

# worker_pid(NODE, %opt): the pid of the maintenance worker, '' if none.
# Options: db (its database; any by default).
sub worker_pid
{
	my ($node, %opt) = @_;
	my $where = "backend_type = 'eventhub maintenance'";
	$where .= ' AND datname = ' . sql_literal($opt{db}) if defined $opt{db};
	return $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE $where");
}

# wait_for_worker(NODE, %opt): waits until one maintenance worker is
# connected (to db, when given) and, with not => PID, is not that one (a
# restarted worker); returns its pid, or dies.
sub wait_for_worker
{
	my ($node, %opt) = @_;
	my $where = "backend_type = 'eventhub maintenance'";
	$where .= ' AND datname = ' . sql_literal($opt{db}) if defined $opt{db};
	$where .= " AND pid <> $opt{not}" if defined $opt{not};
	wait_for(
		what => 'the maintenance worker',
		node => $node,
		sql  => "SELECT count(*) = 1 FROM pg_stat_activity WHERE $where")
	  or die 'the maintenance worker did not start';
	return $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE $where");
}

# The superuser's preamble in a database whose owner may have planted
# settings (ALTER DATABASE ... SET role, search_path).
my $su = "SET ROLE NONE; SET search_path = pg_catalog, public;\n";

# run_maintenance(NODE, %opt): runs one maintenance cycle now, in a session
# of its own (eventhub.run_maintenance()); returns the number of events it
# deleted.  The deterministic way to apply retention: a test that needs
# retention to have run calls this instead of waiting for the worker.
# Options: db ('postgres').
sub run_maintenance
{
	my ($node, %opt) = @_;
	return $node->safe_psql($opt{db} // 'postgres', "${su}SELECT eventhub.run_maintenance()");
}

# wait_for_maintenance(NODE, %opt): waits until the maintenance worker has
# run a cycle that started after this call, so that every event that was
# expired when it was called is gone (those kept for a live replica
# excepted).  How: it writes a marker event (organization
# "eventhub-test-marker", with no head in organization_states, nothing
# announced) dated a millisecond past the retention, then waits for the
# worker to delete it; the worker deletes the oldest first, so the marker
# goes last of what was expired.  Needs a short eventhub.maintenance_interval.
# Options: db (the worker's database, 'postgres'), cycles (how many such
# cycles in a row, 1).  Returns true, or false after timeout_default.
my $marker_seq = 0;

sub wait_for_maintenance
{
	my ($node, %opt) = @_;
	my $db = $opt{db} // 'postgres';
	for (1 .. ($opt{cycles} // 1))
	{
		my $corr = 'marker-' . ++$marker_seq;
		$node->safe_psql($db, qq{${su}BEGIN;
SET LOCAL eventhub.protect_tables = off;
INSERT INTO eventhub.events
SELECT 'eventhub-test-marker', $marker_seq, gen_random_uuid(), t, t, 'API', 'UPDATE', 'e', '$corr', '{}'
  FROM (SELECT clock_timestamp() - current_setting('eventhub.retention')::interval
               - interval '1 millisecond' AS t) s;
COMMIT;});
		wait_for(
			what => "a maintenance cycle (marker $corr)",
			node => $node,
			db   => $db,
			sql  => "${su}SELECT count(*) = 0 FROM eventhub.events"
			  . " WHERE organization_id = 'eventhub-test-marker' AND correlation_id = '$corr'")
		  or return 0;
	}
	return 1;
}

# reload_settings(NODE, CONF, %opt): appends CONF to postgresql.conf,
# reloads, and returns once the new settings are in force: new sessions
# see them (pg_conf_load_time() moved on) and, unless worker => 0, the
# maintenance worker has run a cycle with them (two marker cycles: the
# first may have begun before the worker reloaded).  Options: db (the
# worker's database), worker.  Returns true, or false after a timeout.
sub reload_settings
{
	my ($node, $conf, %opt) = @_;
	my $loaded = $node->safe_psql('postgres', 'SELECT pg_conf_load_time()');
	$node->append_conf('postgresql.conf', "$conf\n");
	$node->reload;
	wait_for(
		what => 'the reload',
		node => $node,
		sql  => "SELECT pg_conf_load_time() > '$loaded'")
	  or return 0;
	return 1 unless $opt{worker} // 1;
	return wait_for_maintenance($node, db => $opt{db}, cycles => 2);
}

# role_bundles(): the GRANT bundles documented in docs/operations.md (its
# "## Roles" section's SQL block), as { kind => SQL }: publisher, reader,
# operator, maintainer, admin; in each SQL the role is "gateway_KIND".  The
# page is the one source: the tests grant what it documents.
my %bundles;

sub role_bundles
{
	return {%bundles} if %bundles;
	my $page = slurp_file("$work/docs/operations.md");
	my ($block) = $page =~ /^## Roles\n.*?^```sql\n(.*?)^```/ms
	  or croak 'docs/operations.md: no SQL block under "## Roles"';
	for my $stmt (split /;\s*\n/, $block)
	{
		$stmt =~ s/^\s*--.*\n//mg;
		next unless $stmt =~ /\S/;
		my ($kind) = $stmt =~ /\bTO gateway_(\w+)/
		  or croak "docs/operations.md: a statement granting no gateway_ role: $stmt";
		$bundles{$kind} .= "$stmt;\n";
	}
	return {%bundles};
}

# bundle_sql(KIND, ROLE): the documented GRANTs of KIND, as written in
# docs/operations.md, to ROLE instead of gateway_KIND (quoted unless a plain
# lower-case name).  regress/sql/security.sql holds the publisher and reader
# bundles so: index(its text, bundle_sql('reader', 'regress_eh_reader')).
sub bundle_sql
{
	my ($kind, $role) = @_;
	my $sql = role_bundles()->{$kind}
	  // croak "docs/operations.md documents no role bundle \"$kind\"";
	$role = qq{"$role"} unless $role =~ /^[a-z_][a-z0-9_]*\z/;
	$sql =~ s/\bgateway_\Q$kind\E\b/$role/g;
	return $sql;
}

# grant_bundle(NODE, DB, KIND => ROLE, ...): grants each ROLE the bundle
# KIND as documented (creating ROLE as a LOGIN role if it does not exist).
sub grant_bundle
{
	my ($node, $db, @pairs) = @_;
	my $sql = '';
	while (my ($kind, $role) = splice(@pairs, 0, 2))
	{
		$sql .= qq{DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$role')}
		  . qq{ THEN CREATE ROLE "$role" LOGIN; END IF; END \$\$;\n}
		  . bundle_sql($kind, $role);
	}
	return $node->safe_psql($db, "$su$sql");
}

# --- added by tests2 ---

push @EXPORT, qw(eventhub_node_quiet);

# eventhub_node_quiet(NAME, %opt): eventhub_node (same options) whose
# maintenance worker runs only when the test makes it: at a reload (SIGHUP:
# the worker reloads, then runs a cycle and a look for stalled clients at
# once) or at a restart of the worker.  Its eventhub.maintenance_interval is
# an hour, and the extension is created only once the worker's first look
# has found it missing, so that no cycle of its own can fall in the middle
# of the test: whatever eventhub.retention and eventhub.replica_ttl are,
# events and replicas go when run_maintenance() (or such a trigger) says.
# Added for 005 and 007, whose short retention raced the worker's cycle.
sub eventhub_node_quiet
{
	my ($name, %opt) = @_;
	my $db = $opt{database} // 'postgres';
	my $node = eventhub_node($name, %opt, maintenance_interval => '1h', extension => 0);
	$node->wait_for_log(
		qr/eventhub background worker is waiting for the extension in database "\Q$db\E"/);
	$node->safe_psql($db, 'CREATE EXTENSION eventhub');
	return $node;
}
# --- added by tests3 ---

# wait_for_listening(NODE, OFFSET): waits until a client that started after
# byte OFFSET of NODE's log, and whose statements the server logs
# (log_statement = all, the test default, or options='-c log_statement=all'
# in its conninfo), follows: it has sent LISTEN eventhub and then asked for
# notification tokens, in the query that reads its heads (a subscription
# from the head starts there) or, with --all, right after it.  What is
# published from then on reaches it by notification.  Dies after
# timeout_default.  For 010, 012 and 016.
sub wait_for_listening
{
	my ($node, $offset) = @_;
	return $node->wait_for_log(qr/LISTEN eventhub\n.*notification_token/s, $offset);
}
push @EXPORT, 'wait_for_listening';

1;
