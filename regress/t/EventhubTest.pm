# EventhubTest: what eventhub's TAP suites share, in the shape of pg_rewind's
# RewindTest.pm: a node with eventhub, the built tree's paths, queries and
# publishing, the CLI and its watcher, the client's test programs, one wait
# on a condition (bounded by timeout_default, so it only turns a hang into a
# failure) and the checks built on it (the log's lines), maintenance
# triggered or waited for, and the role bundles of docs/operations.md, read
# from that page.  A helper two TAP files need lives here, not in them.
package EventhubTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use IPC::Run;
use Digest::SHA qw(sha256_hex);
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT = qw(
  $work $cli $libdir $examples
  eventhub_node eventhub_node_quiet eventhub_standby
  sql_literal publish publish_sql
  run_cli start_process start_cli start_watch watch_lines finish_cli
  start_listener heard notifications_in wait_for_listening
  query org_head notification_token wait_for wait_or_die wait_until pump_during_waits logged run_driver
  worker_pid wait_for_worker run_maintenance wait_for_maintenance reload_settings
  role_bundles bundle_sql grant_bundle
  start_pgbench_publishers fold_watch_lines map_digest app_map app_digest
  go_example_build
);

# The staged tree (scripts/test.sh sets EVENTHUB_WORK), the CLI, libeventhub's
# directory and the client's example programs; under perl -c, a syntax
# check, the current directory stands in for it.
our $work = $ENV{EVENTHUB_WORK} // ($^C ? '.' : undef);
BAIL_OUT('EVENTHUB_WORK is not set: run the suites with make prove_installcheck')
  unless defined $work;
our $cli      = "$work/client/eventhub";
our $libdir   = "$work/client";
our $examples = "$work/client/examples";

my $json = JSON::PP->new;

# eventhub_node(NAME, %opt): a started node with eventhub preloaded and created.
# Options: database (eventhub.database, created), db_owner (its owner, a LOGIN
# role created), maintenance_interval, retention, replica_ttl,
# stalled_client_timeout (the eventhub.* settings), conf (more
# postgresql.conf), preload => 0, extension => 0, start => 0 (initialized
# only), init => {...} (for Cluster::init).
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

# eventhub_node_quiet(NAME, %opt): eventhub_node whose worker runs a cycle only
# when the test makes it (a reload, a restart of the worker): an hour's
# maintenance_interval, and the extension created once the worker's first
# look found it missing.  For short retentions that must not race a cycle.
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

# eventhub_standby(PRIMARY, NAME): a started hot standby streaming from a fresh
# base backup of PRIMARY.
sub eventhub_standby
{
	my ($primary, $name) = @_;
	$primary->backup("for_$name");
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, "for_$name", has_streaming => 1);
	$standby->start;
	return $standby;
}

# sql_literal(STR): an SQL expression for the Perl string STR (NULL if undef):
# quoted if printable ASCII, else its UTF-8 bytes in hex.
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

# The arguments of publish_event after the organization and correlation id.
sub event_args
{
	my (%opt) = @_;
	return map { sql_literal($_) } $opt{event_type} // 'API', $opt{action} // 'UPDATE',
	  $opt{entity} // 'e';
}

# publish_sql(ORG, %opt): "SELECT eventhub.publish_event(...);\n" for one event
# of ORG.  Options: corr (NULL), event_type ('API'), action ('UPDATE'),
# entity ('e'), data (JSON text, '{}').
sub publish_sql
{
	my ($org, %opt) = @_;
	return sprintf("SELECT eventhub.publish_event(%s, %s, %s, %s, %s, %s::jsonb);\n",
		sql_literal($org), event_args(%opt), sql_literal($opt{corr}), sql_literal($opt{data} // '{}'));
}

# publish(NODE, ORG, N, %opt): publishes N events of ORG in one transaction;
# returns the last revision.  Options: db, user, tag (correlation ids
# "TAG-1".."TAG-N"), and publish_sql's.
sub publish
{
	my ($node, $org, $n, %opt) = @_;
	my $corr = defined $opt{tag} ? sql_literal("$opt{tag}-") . ' || i' : 'NULL';
	my $sql = sprintf(
		"SELECT max(eventhub.publish_event(%s, %s, %s, %s, %s, %s::jsonb)) FROM generate_series(1, %d) i",
		sql_literal($org), event_args(%opt), $corr, sql_literal($opt{data} // '{}'), $n // 1);
	return $node->safe_psql($opt{db} // 'postgres', $sql,
		defined $opt{user} ? (extra_params => [ '-U', $opt{user} ]) : ());
}

# run_cli(ARGS...): runs the CLI with empty stdin; returns (status, stdout, stderr).
sub run_cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, @_ ], '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

# start_process([COMMAND...], {opts}?): COMMAND in the background, as { h =>
# harness, out, err, in (fed to stdin) }, killed after twice timeout_default.
# Options: prefix => [command it runs under], appname => 1 (keep PGAPPNAME,
# removed by default so that the library's name "eventhub" shows).
sub start_process
{
	my ($cmd, $opt) = (@_, {});
	my $c = { out => '', err => '', in => '' };
	local %ENV = %ENV;
	delete $ENV{PGAPPNAME} unless $opt->{appname};
	$c->{h} = IPC::Run::start([ @{ $opt->{prefix} // [] }, @$cmd ],
		'<', \$c->{in}, '>', \$c->{out}, '2>', \$c->{err},
		IPC::Run::timeout(2 * $PostgreSQL::Test::Utils::timeout_default));
	return $c;
}

# go_example_build(DIR): the command that builds the Go example consumer
# (examples/go, on the package in go/) into DIR/consumer-go, offline, in
# GOPATH mode: Debian's pgx v4 under /usr/share/gocode, the package linked
# under DIR/gopath.  Run it with IPC::Run::run or start_process.
sub go_example_build
{
	my ($dir) = @_;
	my $pkg = "$dir/gopath/src/github.com/eventhub/eventhub";
	return [ 'sh', '-c', "mkdir -p '$pkg' && ln -sfn '$work/go' '$pkg/go' && cd '$work/examples/go'"
		  . " && GO111MODULE=off GOPATH='$dir/gopath:/usr/share/gocode' GOCACHE='$work/gocache' GOFLAGS= exec go build -o '$dir/consumer-go' ." ];
}

# start_cli(ARGS..., {opts}?): start_process of the CLI.
sub start_cli
{
	my $opt = ref $_[-1] eq 'HASH' ? pop : {};
	return start_process([ $cli, @_ ], $opt);
}

# start_watch(CONNSTR, ARGS..., {opts}?): start_cli of "-d CONNSTR watch ARGS".
sub start_watch
{
	my ($connstr, @args) = @_;
	return start_cli('-d', $connstr, 'watch', @args);
}

# watch_lines(HANDLE): the complete JSON lines it printed so far, decoded.
sub watch_lines
{
	my ($c) = @_;
	return map { $json->decode($_) } $c->{out} =~ /^(\{.*)\n/mg;
}

# finish_cli(HANDLE of start_process): closes stdin, waits; returns its status.
sub finish_cli
{
	my ($c) = @_;
	$c->{h}->finish;
	return $c->{h}->result(0);
}

# start_pgbench_publishers(NODE, SCRIPT, %opt): pgbench -n running the file
# SCRIPT in the background (start_process's handle; finish_cli waits for it
# and returns its status).  Options: clients (4), transactions (per client,
# 10), seed (--random-seed), define => { NAME => VALUE } (-D), db.
sub start_pgbench_publishers
{
	my ($node, $script, %opt) = @_;
	my $clients = $opt{clients} // 4;
	return start_process(
		[ 'pgbench', '-n', '-c', $clients, '-j', ($clients > 1 ? 2 : 1), '-t', $opt{transactions} // 10,
			defined $opt{seed} ? ("--random-seed=$opt{seed}") : (),
			(map { ('-D', "$_=$opt{define}{$_}") } sort keys %{ $opt{define} // {} }),
			'-f', $script, '-h', $node->host, '-p', $node->port, $opt{db} // 'postgres' ]);
}

# fold_watch_lines(LINES...): what a consumer holds after the decoded lines of
# `eventhub watch [--snapshot]` (watch_lines), per organization: { ORG => {
# map => { "TYPE\tID" => event_data (decoded) }, revision => the last event
# applied or snapshot ended at, version => its version, snapshots => [ the
# begin lines of the snapshots that ended ], aborts => N, resyncs => [ resync
# lines ], events => [ event lines ] } }.  A snapshot's begin starts a new
# map, its entity lines fill it and its end replaces the organization's map
# with it (an abort drops it); CREATE and UPDATE set an entity, DELETE
# removes it.
sub fold_watch_lines
{
	my %org;
	my %pending;
	for my $l (@_)
	{
		my $o = $org{ $l->{organization_id} } //= { map => {}, revision => 0, snapshots => [], aborts => 0,
			resyncs => [], events => [] };
		my $snap = $l->{snapshot} // '';
		if ($snap eq 'begin')
		{
			$pending{ $l->{organization_id} } = { begin => $l, map => {} };
		}
		elsif ($snap eq 'end')
		{
			my $p = delete $pending{ $l->{organization_id} } or croak 'a snapshot end without its begin';
			croak "snapshot of $l->{organization_id}: $l->{entities} entities announced, "
			  . scalar(keys %{ $p->{map} }) . ' received'
			  unless $l->{entities} == keys %{ $p->{map} };
			$o->{map} = $p->{map};
			@$o{qw(revision version)} = @$l{qw(head_revision head_version_id)};
			push @{ $o->{snapshots} }, $p->{begin};
		}
		elsif ($snap eq 'abort')
		{
			delete $pending{ $l->{organization_id} };
			$o->{aborts}++;
		}
		elsif ($l->{resync})
		{
			push @{ $o->{resyncs} }, $l;
		}
		elsif (!defined $l->{action})
		{
			# An entity line: no action (docs/cli.md); its type is event_type.
			my $p = $pending{ $l->{organization_id} } or croak 'an entity line outside a snapshot';
			$p->{map}{"$l->{event_type}\t$l->{entity_id}"} = $l->{event_data};
		}
		else
		{
			my $key = "$l->{event_type}\t$l->{entity_id}";
			if ($l->{action} eq 'DELETE') { delete $o->{map}{$key} }
			else { $o->{map}{$key} = $l->{event_data} }
			@$o{qw(revision version)} = @$l{qw(revision version_id)};
			push @{ $o->{events} }, $l;
		}
	}
	return \%org;
}

# map_digest(MAP): a digest of an entity map { KEY => event_data (decoded) }:
# sha256 of its sorted lines "KEY\tDATA\n", DATA in canonical JSON (keys
# sorted), so that maps decoded from different texts of the same values
# agree.  Not the reference consumers' digest (app_digest's).
my $canonical = JSON::PP->new->canonical->allow_nonref;

sub map_digest
{
	my ($map) = @_;
	my $text = join '', sort map { "$_\t" . $canonical->encode($map->{$_}) . "\n" } keys %$map;
	utf8::encode($text);
	return sha256_hex($text);
}

# query(NODE, SQL, %opt): the result of SQL on NODE (safe_psql: dies on an
# error).  Options: db ('postgres'), user (the role it connects as),
# session (a background_psql of NODE to run it in instead).
sub query
{
	my ($node, $sql, %opt) = @_;
	return $opt{session}->query_safe($sql) if $opt{session};
	return $node->safe_psql($opt{db} // 'postgres', $sql,
		defined $opt{user} ? (extra_params => [ '-U', $opt{user} ]) : ());
}

# org_head(NODE, ORG, %opt): ORG's head as (revision, version_id); options
# as query's.
sub org_head
{
	my ($node, $org, %opt) = @_;
	return split /\|/, query($node,
		'SELECT revision, version_id FROM eventhub.organization_states WHERE organization_id = ' . sql_literal($org),
		%opt);
}

# notification_token(NODE, ORG): the token a notification of ORG carries in
# place of its name; options as query's.
sub notification_token
{
	my ($node, $org, %opt) = @_;
	return query($node, 'SELECT eventhub.notification_token(' . sql_literal($org) . ')', %opt);
}

# app_map(NODE, ORG, %opt): the application's entities of ORG as an entity map
# for map_digest, read from table (app.entities: organization_id, event_type,
# entity_id, event_data) in db, or through session (a background_psql).
sub app_map
{
	my ($node, $org, %opt) = @_;
	my $rows = query($node,
		'SELECT json_agg(json_build_array(event_type, entity_id, event_data)) FROM '
		  . ($opt{table} // 'app.entities') . ' WHERE organization_id = ' . sql_literal($org), %opt);
	return { map { ("$_->[0]\t$_->[1]" => $_->[2]) } @{ $rows eq '' ? [] : $json->decode($rows) } };
}

# app_digest(NODE, ORG, %opt): the digest the reference consumers print
# (docs/protocol.md): sha256 of the bytewise sorted lines "TYPE\tID\tDATA\n",
# DATA the server's text of event_data, over app_map's table (options as
# app_map's).
sub app_digest
{
	my ($node, $org, %opt) = @_;
	return query($node,
		q{SELECT encode(sha256(convert_to(coalesce(string_agg(l, '' ORDER BY l COLLATE "C"), ''), 'UTF8')), 'hex')}
		  . q{ FROM (SELECT event_type || E'\t' || entity_id || E'\t' || event_data::text || E'\n' AS l FROM }
		  . ($opt{table} // 'app.entities') . ' WHERE organization_id = ' . sql_literal($org) . ') s', %opt);
}

# notifications_in(TEXT): the notifications psql printed in TEXT, in order, as
# { channel, payload, pid, line } (line: its index among TEXT's lines).
sub notifications_in
{
	my @lines = split /\n/, $_[0], -1;
	return map {
		$lines[$_] =~
		  /^Asynchronous notification "([^"]*)" with payload "(.*)" received from server process with PID (\d+)\.$/
		  ? { channel => $1, payload => $2, pid => $3, line => $_ }
		  : ()
	} 0 .. $#lines;
}

# start_listener(NODE, %opt): a background psql (options db, user) that ran
# LISTEN eventhub and goes on after an error.
sub start_listener
{
	my ($node, %opt) = @_;
	my $psql = $node->background_psql($opt{db} // 'postgres',
		defined $opt{user} ? (extra_params => [ '-U', $opt{user} ]) : (), on_error_stop => 0);
	$psql->query_safe('LISTEN eventhub');
	return { psql => $psql, heard => [] };
}

# heard(LISTENER): every notification it heard so far (notifications_in's).
sub heard
{
	my ($l) = @_;
	push @{ $l->{heard} }, notifications_in($l->{psql}->query_safe('SELECT 1'));
	return @{ $l->{heard} };
}

# wait_for_listening(NODE, OFFSET): waits (or dies) until a client that started
# after byte OFFSET of the log, with its statements logged, sent LISTEN
# eventhub and then asked for notification tokens: it hears what follows.
sub wait_for_listening
{
	my ($node, $offset) = @_;
	return $node->wait_for_log(qr/LISTEN eventhub(?:_events)?\n.*notification_token/s, $offset);
}

# wait_for(%cond): true once the condition holds; false, with a diag naming
# WHAT, after timeout_default seconds or once the watched process exited.
# Conditions: until => CODE; node => NODE, sql => SQL [, db] [, equals => VALUE
# ('t')] (errors mean "not yet"); watch => HANDLE with matches => RE, lines => N
# (JSON lines) or stderr => RE.  Options: what, timeout, pump => [handles].
sub wait_for
{
	my (%w) = @_;
	my @pump = (@{ $w{pump} // [] }, $w{watch} ? $w{watch} : ());
	my $c = $w{watch};
	my $cond =
	    $w{until} ? $w{until}
	  : $w{node} ? sub {
		my ($out, $err) = ('', '');
		$w{node}->psql($w{db} // 'postgres', $w{sql}, stdout => \$out, stderr => \$err);
		return $out eq ($w{equals} // 't');
	  }
	  : defined $w{lines} ? sub { scalar(watch_lines($c)) >= $w{lines} }
	  : $w{matches} ? sub { $c->{out} =~ $w{matches} }
	  : $w{stderr} ? sub { $c->{err} =~ $w{stderr} }
	  :              croak 'wait_for: no condition';

	my $deadline = time() + ($w{timeout} // $PostgreSQL::Test::Utils::timeout_default);
	for (;;)
	{
		$_->{h}->pump_nb for grep { $_->{h}->pumpable } @pump;
		return 1 if $cond->();
		my $gone = $c && !$c->{h}->pumpable;
		if ($gone || time() > $deadline)
		{
			return 1 if $cond->();    # one last look at what they printed
			diag('wait_for: ' . ($w{what} // 'condition') . ': '
				  . ($gone ? 'the process exited first' : 'timed out'));
			diag("stdout: $_->{out}\nstderr: $_->{err}") for @pump;
			return 0;
		}
		usleep(20_000);
	}
}

# wait_or_die(%cond): wait_for(%cond), dying (naming what) if it times out:
# for a precondition of the checks that follow, not a check itself.
sub wait_or_die
{
	my (%cond) = @_;
	wait_for(%cond) or die(($cond{what} // 'condition') . ": timed out\n");
	return 1;
}

# pump_during_waits(CODE): CODE returns the background processes (handles
# of start_process) that wait_until pumps while it waits, so that their
# output is read and their pipes do not fill.
my $pumped = sub { () };

sub pump_during_waits
{
	($pumped) = @_;
	return;
}

# wait_until(WHAT, CODE): wait_for's until, with the processes of
# pump_during_waits pumped.
sub wait_until
{
	my ($what, $cond) = @_;
	return wait_for(what => $what, until => $cond, pump => [ $pumped->() ]);
}

# logged(NODE, RE, OFFSET): every text of NODE's log after byte OFFSET that
# RE matches, in order, once there is one; none (and a diag) after
# timeout_default.  What a check on the log uses: Cluster's wait_for_log
# cannot fail, it returns or dies.
sub logged
{
	my ($node, $re, $offset) = @_;
	my @found;
	wait_for(what => "a log entry matching $re", until => sub {
		my $log = slurp_file($node->logfile, $offset // 0);
		@found = ();
		push @found, substr($log, $-[0], $+[0] - $-[0]) while $log =~ /$re/g;
		return scalar @found;
	});
	return @found;
}

# run_driver(NODE, PROGRAM, ARGS...): runs the client's test program
# client/PROGRAM with NODE's connection string and ARGS; returns the
# key=value pairs of the line it printed as a hash (empty if it failed).
# The timeout only turns a hung program into a failure.
sub run_driver
{
	my ($node, $program, @args) = @_;
	my $driver = "$libdir/$program";
	BAIL_OUT("no $program at $driver") unless -x $driver;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $driver, $node->connstr('postgres'), @args ], '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	note("$program @args: $out$err");
	return $ok ? (map { split /=/, $_, 2 } split ' ', $out) : ();
}

# The maintenance worker's row of pg_stat_activity (in db, other than not).
sub worker_where
{
	my (%opt) = @_;
	return "backend_type = 'eventhub maintenance'"
	  . (defined $opt{db} ? ' AND datname = ' . sql_literal($opt{db}) : '')
	  . (defined $opt{not} ? " AND pid <> $opt{not}" : '');
}

# worker_pid(NODE, %opt): the maintenance worker's pid ('' if none); option db.
sub worker_pid
{
	my ($node, %opt) = @_;
	return $node->safe_psql('postgres',
		'SELECT pid FROM pg_stat_activity WHERE ' . worker_where(db => $opt{db}));
}

# wait_for_worker(NODE, %opt): waits until one maintenance worker is connected
# (to db) and, with not => PID, is another one; returns its pid, or dies.
sub wait_for_worker
{
	my ($node, %opt) = @_;
	my $where = worker_where(%opt);
	wait_or_die(what => 'the maintenance worker', node => $node,
		sql => "SELECT count(*) = 1 FROM pg_stat_activity WHERE $where");
	return $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE $where");
}

# A superuser's preamble in a database whose owner may have planted settings.
my $su = "SET ROLE NONE; SET search_path = pg_catalog, public;\n";

# run_maintenance(NODE, %opt): runs one cycle now (eventhub.run_maintenance()
# in db); returns the number of events it deleted.
sub run_maintenance
{
	my ($node, %opt) = @_;
	return $node->safe_psql($opt{db} // 'postgres', "${su}SELECT eventhub.run_maintenance()");
}

# wait_for_maintenance(NODE, %opt): true once the worker (of db) has run
# `cycles` (1) cycles that started after the call, so that what had expired is
# gone: it writes a marker event just past the retention and waits for its
# deletion (oldest go first; a lone tombstone, which compaction lets go).
# False after timeout_default.
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
SELECT 'eventhub-test-marker', $marker_seq, gen_random_uuid(), t, t, 'API', 'DELETE', '$corr', '$corr', 'null'
  FROM (SELECT clock_timestamp() - current_setting('eventhub.retention')::interval
               - interval '1 millisecond' AS t) s;
COMMIT;});
		wait_for(what => "a maintenance cycle (marker $corr)", node => $node, db => $db,
			sql => "${su}SELECT count(*) = 0 FROM eventhub.events"
			  . " WHERE organization_id = 'eventhub-test-marker' AND correlation_id = '$corr'")
		  or return 0;
	}
	return 1;
}

# reload_settings(NODE, CONF, %opt): appends CONF, reloads, and returns true
# once new sessions see it and (unless worker => 0) the worker of db ran two
# marker cycles with it; false after a timeout.
sub reload_settings
{
	my ($node, $conf, %opt) = @_;
	my $loaded = $node->safe_psql('postgres', 'SELECT pg_conf_load_time()');
	$node->append_conf('postgresql.conf', "$conf\n");
	$node->reload;
	wait_for(what => 'the reload', node => $node, sql => "SELECT pg_conf_load_time() > '$loaded'")
	  or return 0;
	return 1 unless $opt{worker} // 1;
	return wait_for_maintenance($node, db => $opt{db}, cycles => 2);
}

# role_bundles(): { KIND => SQL }, the GRANTs of the SQL block under "## Roles"
# in docs/operations.md, each to "gateway_KIND" (publisher, reader, operator,
# maintainer, admin).
my %bundles;

sub role_bundles
{
	return {%bundles} if %bundles;
	my ($block) = slurp_file("$work/docs/operations.md") =~ /^## Roles\n.*?^```sql\n(.*?)^```/ms
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

# bundle_sql(KIND, ROLE): the documented GRANTs of KIND, as written, to ROLE
# (quoted unless a plain lower-case name).
sub bundle_sql
{
	my ($kind, $role) = @_;
	my $sql = role_bundles()->{$kind}
	  // croak "docs/operations.md documents no role bundle \"$kind\"";
	$role = qq{"$role"} unless $role =~ /^[a-z_][a-z0-9_]*\z/;
	$sql =~ s/\bgateway_\Q$kind\E\b/$role/g;
	return $sql;
}

# grant_bundle(NODE, DB, KIND => ROLE, ...): grants each ROLE (created as a
# LOGIN role if missing) the documented bundle KIND.
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

1;
