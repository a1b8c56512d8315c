# 006_cli.pl: the CLI's publish, status and cleanup commands, its help and
# exit statuses, a caller-driven event loop (client/examples/eventloop.c:
# eh_socket, eh_next_timeout_ms and eh_process instead of eh_wait), and
# transactions, get and watch --snapshot: the lines of docs/cli.md.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use JSON::PP;
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
#
# publish
#
my $started = Time::HiRes::time();
publish_acme('CREATE', 'weather', '--correlation-id', 'req-1', '--data', '{"path": "/w"}');
is("$rc $out", "0 1\n", 'publish prints the revision');
# It returns once the server has answered, not when the next poll (5 s, the
# default of --poll-interval) or the query timeout (30 s) is due: half the
# poll interval tells one from the other on any machine.
my $poll_interval = 5;
cmp_ok(Time::HiRes::time() - $started, '<', $poll_interval / 2, 'publish returns as soon as it has the revision');
publish_acme('UPDATE', 'weather');
is("$rc $out", "0 2\n", 'the next publish prints the next revision; --data defaults to {}');
is(query($node, 'SELECT event_data::text FROM eventhub.events WHERE revision = 2'), '{}', 'default data');
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
is(query($node, 'SELECT count(*) FROM eventhub.events'), '2', 'no failed publish wrote anything');

#
# status
#
cli('status');
is($rc, 0, 'status exits 0');
like($out, qr/^ORGANIZATION_ID\s+REVISION\s+VERSION_ID\s+UPDATED_AT\s+KEPT_EVENTS\n/, 'status has a header');
my $version = query($node, "SELECT version_id FROM eventhub.organization_states WHERE organization_id = 'acme'");
like($out, qr/^acme\s+2\s+\Q$version\E\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+2$/m, 'status shows head, version, update and kept events');
like($out, qr/no replicas report heartbeats/, 'and that no replica reports');
cli('status', '--org', 'nobody');
is($rc, 1, 'status of an unknown organization exits 1');
like($err, qr/organization "nobody" is not registered/, 'and says so');

#
# cleanup
#
query($node, "SET eventhub.protect_tables = off; UPDATE eventhub.events SET processed_timestamp = now() - interval '3 hours' WHERE revision = 1");
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
is(query($node, 'SELECT count(*) FROM eventhub.events'), '1', 'the refused cleanups deleted nothing');

#
# help, usage errors, connection errors, timeouts
#
for my $cmd ('publish', 'watch', 'status', 'cleanup', 'get', 'metrics')
{
	bare($cmd, '--help');
	is($rc, 0, "$cmd --help exits 0");
	like($out, qr/^Usage: eventhub $cmd/, "$cmd --help shows its usage");
}
bare('--help');
like($out, qr/Commands:.*publish.*watch.*get.*status.*metrics.*cleanup/s, '--help lists the commands');
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
query($node, q{
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
query($node, publish_sql('loop-b', action => 'CREATE', entity => 'b1') . publish_sql('loop-a', action => 'CREATE', entity => 'a1')
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

#
# Transactions: the event lines say which events were published together,
# and --count never stops inside a transaction.
#
publish($node, 'clitxn', 3);
publish($node, 'clitxn', 1);
cli('watch', '--org', 'clitxn', '--after', '0', '--count', '1', '--timeout', '60');
is($rc, 0, 'watch --count 1 exits 0 after a transaction of three');
my @lines = map { JSON::PP->new->decode($_) } split /\n/, $out;
is(join(' ', map { "$_->{revision}:$_->{transaction_first_revision}:" . ($_->{transaction_end} ? 'end' : '-') } @lines),
	'1:1:- 2:1:- 3:1:end', 'the whole transaction, marked as one, and nothing of the next');
like((split /\n/, $out)[0], qr/"event_data": \{\}, "transaction_first_revision": 1, "transaction_end": false\}$/,
	'the two keys come last');

#
# get: the live entities and the head they are consistent with.
#
query($node, join('',
	publish_sql('cliget', event_type => 'API', action => 'CREATE', entity => 'w', data => '{"v": 1}'),
	publish_sql('cliget', event_type => 'API', action => 'CREATE', entity => 'gone'),
	publish_sql('cliget', event_type => 'API', action => 'UPDATE', entity => 'w', data => '{"v": 2}'),
	publish_sql('cliget', event_type => 'API', action => 'DELETE', entity => 'gone'),
	publish_sql('cliget', event_type => 'CERT', action => 'CREATE', entity => "\x{e9}t\x{e9}", data => '{"pem": "x"}')));
my $entities_sql = q{
	SELECT string_agg(json_build_object('organization_id', organization_id, 'event_type', event_type,
	         'entity_type', event_type, 'entity_id', entity_id, 'revision', revision, 'version_id', version_id,
	         'event_data', event_data)::text,
	         E'\n' ORDER BY event_type, entity_id)
	  FROM (SELECT DISTINCT ON (event_type, entity_id) * FROM eventhub.events WHERE organization_id = 'cliget'
	         ORDER BY event_type, entity_id, revision DESC) e
	 WHERE action <> 'DELETE'};
my $json = JSON::PP->new->canonical;
my @want = map { $json->encode(JSON::PP->new->decode($_)) } split /\n/, query($node, $entities_sql);
my ($head_rev, $head_ver) = split /\|/, query($node, "SELECT revision, version_id FROM eventhub.organization_states WHERE organization_id = 'cliget'");
cli('get', '--org', 'cliget', '--batch-bytes', '1024');
is($rc, 0, 'get exits 0') or diag($err);
@lines = split /\n/, $out;
my $end = pop @lines;
is_deeply([ map { $json->encode(JSON::PP->new->decode($_)) } @lines ], \@want,
	"get prints the server's live entities, in order, one per line");
is($end, qq({"snapshot": "end", "organization_id": "cliget", "head_revision": $head_rev, "head_version_id": "$head_ver", "entities": 2}),
	'then the end line with the head');
# The type is event_type, as in the SQL and on event lines, then again as
# entity_type, deprecated.
like($lines[0], qr/^\{"organization_id": "cliget", "event_type": "API", "entity_type": "API", "entity_id": "w", "revision": 3, "version_id": "[-0-9a-f]{36}", "event_data": \{"v": 2\}\}$/,
	'an entity line has its keys in the documented order');
cli('get', '--org', 'cli-nobody');
is("$rc $out", qq(0 {"snapshot": "end", "organization_id": "cli-nobody", "head_revision": 0, "head_version_id": null, "entities": 0}\n),
	'get of an organization without events prints only the end line, at 0');
query($node, q{SET eventhub.protect_tables = off;
	UPDATE eventhub.organization_states SET complete_after = NULL WHERE organization_id = 'clitxn'});
cli('get', '--org', 'clitxn');
is($rc, 1, 'get of an incomplete organization exits 1 (a retry cannot help)');
like($err, qr/snapshot of organization "clitxn" is incomplete/, 'and says why');
cli('watch', '--org', 'clitxn', '--snapshot', '--after', '0');
is($rc, 2, '--snapshot does not take --after');
cli('get', '--org', 'a', '--org', 'b');
is($rc, 2, 'get takes one --org');

#
# watch --snapshot: begin, entities, end, then events; a resync answered
# by a new snapshot between markers.
#
reload_settings($node, 'eventhub.compaction = on', worker => 0) or die 'the reload did not happen';
query($node, join('', map { publish_sql('cliwatch', action => 'CREATE', entity => $_) } qw(a b)));
my $w = start_watch($connstr, '--org', 'cliwatch', '--snapshot', '--poll-interval', '200');
wait_for(what => 'the snapshot', watch => $w, matches => qr/"snapshot": "end"/) or die 'no snapshot';
publish($node, 'cliwatch', 1, entity => 'z');
wait_for(what => 'the event after the snapshot', watch => $w, lines => 5) or die 'no event';
# Stopped, it misses twenty updates of u in one transaction, all but the
# last of which the cleanup removes.  (Twenty: more than a notification
# carries, so that it has to fetch them once it runs again.)
$w->{h}->signal('STOP');
publish($node, 'cliwatch', 20, entity => 'u');
query($node, 'SELECT eventhub.cleanup_events(clock_timestamp())');
$w->{h}->signal('CONT');
wait_for(what => 'the second snapshot', watch => $w, matches => qr/"reason": "history_removed".*"snapshot": "end"/s)
  or die 'no resync';
publish($node, 'cliwatch', 1, entity => 'y');
wait_for(what => 'the event after the second snapshot', watch => $w, matches => qr/"revision": 24, .*"entity_id": "y"/)
  or die 'no event after the resync';
$w->{h}->signal('TERM');
eval { $w->{h}->finish };
# Event lines are the ones with an action (docs/cli.md), entity lines the others.
my @marks = map {
	    $_->{snapshot} ? "$_->{snapshot}" . ($_->{reason} ? "($_->{reason},$_->{head_revision})" : '')
	  . (defined $_->{entities} ? "($_->{head_revision},$_->{entities})" : '')
	  : defined $_->{action} ? "event:$_->{revision}"
	  : "entity:$_->{entity_id}"
} watch_lines($w);
is(join(' ', @marks),
	'begin(initial,2) entity:a entity:b end(2,2) event:3 begin(history_removed,23) entity:a entity:b entity:u entity:z end(23,4) event:24',
	'watch --snapshot: the snapshot between markers, its events, and a resync as a new snapshot');
my ($begin) = grep { /"snapshot": "begin"/ } split /\n/, $w->{out};
like($begin, qr/^\{"snapshot": "begin", "organization_id": "cliwatch", "reason": "initial", "head_revision": 2, "head_version_id": "[-0-9a-f]{36}"\}$/,
	'the begin line as documented');
my ($entity) = grep { /"entity_id": "a"/ } split /\n/, $w->{out};
like($entity, qr/^\{"organization_id": "cliwatch", "event_type": "API", "entity_type": "API", "entity_id": "a", "revision": 1, "version_id": "[-0-9a-f]{36}", "event_data": \{\}\}$/,
	'an entity line of watch --snapshot as one of get');

# watch --all --snapshot: each organization's snapshot whole, one after
# another; one whose state is incomplete (clitxn, above) gets a resync
# line instead and goes on from its head.
my $all = start_watch($connstr, '--all', '--snapshot', '--poll-interval', '200');
wait_for(what => 'the snapshots of every organization', watch => $all,
	matches => qr/(?=.*"snapshot": "end", "organization_id": "cliget")(?=.*"resync": true, "organization_id": "clitxn", "reason": "history_removed")(?=.*"snapshot": "end", "organization_id": "cliwatch")/s)
  or die 'no snapshots';
$all->{h}->signal('TERM');
eval { $all->{h}->finish };
my ($open, $whole, @got) = (undef, 1);
for my $l (watch_lines($all))
{
	if (($l->{snapshot} // '') eq 'begin') { $whole = 0 if defined $open; $open = $l->{organization_id} }
	elsif ($l->{snapshot}) { $whole = 0 unless ($open // '') eq $l->{organization_id}; undef $open }
	elsif (defined $l->{event_type} && !defined $l->{action}) { $whole = 0 unless ($open // '') eq $l->{organization_id};
		push @got, $json->encode($l) if $l->{organization_id} eq 'cliget' }
}
ok($whole, 'watch --all --snapshot: snapshots one after another, each between its markers');
is_deeply(\@got, \@want, "and each has its organization's entities");
unlike($all->{out}, qr/"snapshot": "begin", "organization_id": "clitxn"/,
	'an incomplete organization gets no snapshot, only the resync line');

$node->stop;
done_testing();
