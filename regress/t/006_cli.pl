# 006_cli.pl: the CLI's publish, status and cleanup commands, its help and
# exit statuses, and a caller-driven event loop (client/examples/eventloop.c:
# eh_socket, eh_next_timeout_ms and eh_process instead of eh_wait).

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use Time::HiRes;
use PostgreSQL::Test::Utils;
use Test::More;

# A retention of a day: the event the cleanup test dates three hours back
# is the CLI's to delete, not the worker's.
my $node = eventhub_node('cli', retention => '1d');
my $connstr = $node->connstr('postgres');
my ($rc, $out, $err);

# The CLI on the node (cli) or without -d (bare), its results in $rc, $out, $err.
sub bare { ($rc, $out, $err) = run_cli(@_) }
sub cli { bare('-d', $connstr, @_) }
# eventhub publish --org acme --type API --action ACTION --entity ARGS...
sub publish_acme { cli('publish', '--org', 'acme', '--type', 'API', '--action', shift, '--entity', @_) }
sub query { return $node->safe_psql('postgres', $_[0]) }

#
# publish
#
my $started = Time::HiRes::time();
publish_acme('CREATE', 'weather', '--correlation-id', 'req-1', '--data', '{"path": "/w"}');
is("$rc $out", "0 1\n", 'publish prints the revision');
# It returns once the server has answered, not when the query timeout
# (30 s, the default of --query-timeout) has passed: half of it tells one
# from the other on any machine.
my $query_timeout = 30;
cmp_ok(Time::HiRes::time() - $started, '<', $query_timeout / 2, 'publish returns as soon as it has the revision');
publish_acme('UPDATE', 'weather');
is("$rc $out", "0 2\n", 'the next publish prints the next revision; --data defaults to {}');
is(query('SELECT event_data::text FROM eventhub.events WHERE revision = 2'), '{}', 'default data');
publish_acme('CREATE', 'weather', '--correlation-id', 'req-1', '--data', '{"path": "/w"}');
is("$rc $out", "0 1\n", 'a replay prints the original revision');
publish_acme('DELETE', 'weather', '--correlation-id', 'req-1');
is($rc, 1, 'a reused correlation id with other content exits 1');
like($err, qr/correlation id "req-1" is already used by a different event \(SQLSTATE 23505\)/, 'and says why on stderr');
is($out, '', 'nothing on stdout');
publish_acme('CREATE', 'x', '--data', '{not json');
is($rc, 1, 'malformed --data exits 1');
like($err, qr/invalid input syntax for type json.*SQLSTATE 22P02/, 'with the server\'s message');
publish_acme('UPSERT', 'x');
is($rc, 2, 'an unknown action is a usage error (exit 2)');
like($err, qr/--action must be CREATE, UPDATE or DELETE/, 'named on stderr');
is(query('SELECT count(*) FROM eventhub.events'), '2', 'no failed publish wrote anything');

#
# status
#
cli('status');
is($rc, 0, 'status exits 0');
like($out, qr/^ORGANIZATION_ID\s+REVISION\s+VERSION_ID\s+UPDATED_AT\s+KEPT_EVENTS\n/, 'status has a header');
my $version = query("SELECT version_id FROM eventhub.organization_states WHERE organization_id = 'acme'");
like($out, qr/^acme\s+2\s+\Q$version\E\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+2$/m, 'status shows head, version, update and kept events');
like($out, qr/no replicas report heartbeats/, 'and that no replica reports');
cli('status', '--org', 'nobody');
is($rc, 1, 'status of an unknown organization exits 1');
like($err, qr/organization "nobody" is not registered/, 'and says so');

#
# cleanup
#
query("SET eventhub.protect_tables = off; UPDATE eventhub.events SET processed_timestamp = now() - interval '3 hours' WHERE revision = 1");
cli('cleanup', '--older-than', '2 hours');
is("$rc $out", "0 1\n", 'cleanup prints how many events it deleted');
cli('cleanup', '--older-than', '2h');
is("$rc $out", "0 0\n", 'nothing more to delete');
cli('cleanup', '--older-than', '-1 hour');
is($rc, 1, 'a negative duration exits 1');
like($err, qr/--older-than must not be negative/, 'and says so');
cli('cleanup', '--older-than', 'soon');
is($rc, 1, 'a duration PostgreSQL cannot read exits 1');
like($err, qr/invalid input syntax for type interval/, 'with the server\'s message');
is(query('SELECT count(*) FROM eventhub.events'), '1', 'the refused cleanups deleted nothing');

#
# help, usage errors, connection errors, timeouts
#
for my $cmd ('publish', 'watch', 'status', 'cleanup')
{
	bare($cmd, '--help');
	is($rc, 0, "$cmd --help exits 0");
	like($out, qr/^Usage: eventhub $cmd/, "$cmd --help shows its usage");
}
bare('--help');
like($out, qr/Commands:.*publish.*watch.*status.*cleanup/s, '--help lists the commands');
bare('frobnicate');
is($rc, 2, 'an unknown command exits 2');
like($err, qr/unknown command "frobnicate"/, 'and names it');
bare('-d', 'host=/nonexistent-socket-dir', 'status');
is($rc, 1, 'a failed connection exits 1');
like($err, qr/could not connect/, 'and says so');
# watch retries a connection that fails (the server may be restarting), and
# gives up only on what a retry cannot fix.
bare('-d', 'host=/nonexistent-socket-dir', 'watch', '--org', 'acme', '--timeout', '1');
is($rc, 3, 'watch keeps retrying a server it cannot reach, until --timeout');
like($err, qr/could not connect.*reconnecting in/s, 'and says so');
bare('-d', "$connstr user=regress_no_such_role", 'watch', '--org', 'acme', '--timeout', '20');
is($rc, 1, 'watch exits 1 at once when the login is refused');
like($err, qr/role "regress_no_such_role" does not exist/, 'and says why');
cli('watch', '--org', 'acme', '--timeout', '0.5');
is($rc, 3, 'watch exits 3 when --timeout passes first');
like($err, qr/timeout after 0.5 s with 0 events/, 'and says so');
# A query the server refuses (here: no EXECUTE on events_since) is reported
# and ends watch, instead of being retried in a tight loop.
query(q{
	CREATE ROLE regress_watcher LOGIN;
	GRANT USAGE ON SCHEMA eventhub TO regress_watcher;
	GRANT SELECT ON eventhub.organization_states, eventhub.events TO regress_watcher;
	GRANT EXECUTE ON FUNCTION eventhub.notification_token(text) TO regress_watcher;
});
bare('-d', "$connstr user=regress_watcher", 'watch', '--org', 'acme', '--after', '0', '--timeout', '20');
is($rc, 1, 'watch exits 1 when the server refuses to give it events');
like($err, qr/permission denied for function events_since/, 'and says why');
bare('--version');
like($out, qr/^eventhub \d+\.\d+\.\d+$/, '--version');

#
# An application's own poll() loop over two clients.
#
my $dir = PostgreSQL::Test::Utils::tempdir();
($out) = run_command([ 'pkg-config', '--cflags', '--libs', 'eventhub' ]);
ok(IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', "$examples/eventloop.c", split(' ', $out), '-o', "$dir/eventloop" ],
		'>', \$out, '2>', \$err),
	'the event-loop example builds') or diag($err);
# The library names its connections "eventhub" (PGAPPNAME, which the TAP
# framework sets, is removed).
my $loop = start_process([ "$dir/eventloop", $connstr, '4', 'loop-a', 'loop-b' ]);
wait_for(what => 'the event loop connecting', node => $node,
	sql => "SELECT count(*) = 2 FROM pg_stat_activity WHERE application_name = 'eventhub' AND state = 'idle'")
  or die "the event loop did not connect";
query(publish_sql('loop-b', action => 'CREATE', entity => 'b1') . publish_sql('loop-a', action => 'CREATE', entity => 'a1')
	  . publish_sql('loop-b', action => 'UPDATE', entity => 'b1') . publish_sql('loop-a', action => 'DELETE', entity => 'a1'));
is(finish_cli($loop), 0, 'the event loop exits 0 after four events per client') or diag($loop->{err});
for my $c (1, 2)
{
	for my $org ('loop-a', 'loop-b')
	{
		my @mine = grep { /^client $c: $org / } split /\n/, $loop->{out};
		my ($e, $second) = $org eq 'loop-a' ? ('a1', 'DELETE') : ('b1', 'UPDATE');
		is_deeply(\@mine, [ "client $c: $org revision 1 CREATE $e", "client $c: $org revision 2 $second $e" ],
			"client $c delivered $org once, in order");
	}
}

$node->stop;
done_testing();
