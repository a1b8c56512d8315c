# 026_notification_events.pl: notifications that carry their events.  A
# watcher with the data key prints what the notifications carry, without a
# fetch, the same lines as a watcher that fetches; a listener without read
# access gets ciphertext it cannot open and no key; a reader that forges a
# notification with the key gets nothing delivered (only the notifier's pid
# is believed); the notifier restarting, an event too large to travel and
# eventhub.notification_events = off all fall back to fetching.  The sealed
# layout is checked with regress/sealed.py, written from docs/protocol.md.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use JSON::PP;
use MIME::Base64 ();
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'python3-cryptography is not installed'
  unless IPC::Run::run([ '/usr/bin/python3', '-c', 'import cryptography' ], '2>', \my $py_err);

my $node = eventhub_node('notification_events', conf => "log_statement = 'all'");
my $sealed_py = "$work/regress/sealed.py";
my $json = JSON::PP->new->canonical;

# reader may read acme (access control: only what is granted); outsider has
# the same bundle and no organization; stranger has nothing but LOGIN.
grant_bundle($node, 'postgres', reader => 'reader', reader => 'outsider', publisher => 'publisher');
$node->safe_psql('postgres', q{
	CREATE ROLE stranger LOGIN;
	SELECT eventhub.register_organization(o) FROM (VALUES ('acme'), ('other')) v(o);
	SELECT eventhub.grant_organization('reader', 'acme', 'read');
	SELECT eventhub.grant_organization('publisher', '', 'publish', true);
});
my $connstr = $node->connstr('postgres');

# fetches_by(APPNAME): fetches the watcher of that application name ran.
sub fetches_by
{
	my ($app) = @_;
	my @n = slurp_file($node->logfile) =~ /\] \Q$app\E LOG:  execute [^:]+: SELECT e\.organization_id, e\.revision/g;
	return scalar @n;
}

# Two watchers as reader: "carried" listens (the events come in the
# notifications), "fetched" polls every 100 ms and fetches everything.
# "carried" polls once in ten minutes, so that a poll never has its
# connection busy when a notification comes (it would fetch instead).
my $offset = -s $node->logfile;
my $carried = start_watch("$connstr user=reader application_name=carried", '--org', 'acme',
	'--poll-interval', '600000');
my $fetched = start_watch("$connstr user=reader application_name=fetched", '--org', 'acme',
	'--no-listen', '--poll-interval', '100');
# Ready once it asked for acme's data key (after LISTEN eventhub and its token).
my $keys_asked = qr/\] carried LOG:  execute <unnamed>: SELECT eventhub\.notifier_pid\(\).*\n.*parameters: \$1 = '\{acme\}'/;
$node->wait_for_log($keys_asked, $offset);
my $listener = start_listener($node, user => 'stranger');
$listener->{psql}->query_safe('LISTEN eventhub_events');

# publish_and_wait(SQL, LINES): runs SQL as publisher, then waits until both
# watchers printed LINES lines in all.
sub publish_and_wait
{
	my ($sql, $lines) = @_;
	query($node, $sql, user => 'publisher');
	ok(wait_for(watch => $carried, lines => $lines, what => "carried: $lines lines")
		  && wait_for(watch => $fetched, lines => $lines, what => "fetched: $lines lines"),
		"both watchers printed $lines lines");
}

my $marker = 'SECRET-MARKER-7d1f';
publish_and_wait(qq{SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'weather', NULL,
	'{"marker": "$marker", "text": "caf\\u00e9 \\"quoted\\" \\\\ tab\\t", "n": [1, 2.5, null]}')}, 1);
# (The first may have been fetched: its notification can come before the
# answer to the watcher's keys query is read.  From here on it cannot.)
my $fetched_first = fetches_by('carried');
# One transaction: two events, one in a savepoint rolled back, one more; and
# an event of another organization between.
publish_and_wait(q{
	BEGIN;
	SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'weather', NULL, '{"v": 2}');
	SAVEPOINT s;
	SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'rolled-back', NULL, '{}');
	ROLLBACK TO SAVEPOINT s;
	SELECT eventhub.publish_event('other', 'API', 'CREATE', 'elsewhere', NULL, '{}');
	SELECT eventhub.publish_event('acme', 'Route', 'CREATE', 'route-1', 'corr-1', '{"v": 3}',
		'2026-01-02 03:04:05.678901+00');
	COMMIT;}, 3);
is(fetches_by('carried'), $fetched_first, 'the watcher with the data key fetched nothing: the notifications carried the events');
cmp_ok(fetches_by('fetched'), '>', 0, 'the polling watcher fetched');

# An event too large to travel in a notification is fetched.
my $big = 'x' x 7000;
publish_and_wait(qq{SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'big', NULL, '{"big": "$big"}')}, 4);
is(fetches_by('carried'), $fetched_first + 1, 'an event over the size a notification carries was fetched');

is_deeply([ $carried->{out} =~ /^(.*)\n/mg ], [ $fetched->{out} =~ /^(.*)\n/mg ],
	'the lines printed from the notifications are those printed from fetches, byte for byte');
is(join(',', map { "$_->{revision}:$_->{entity_id}:$_->{transaction_end}" } watch_lines($carried)),
	'1:weather:1,2:weather:0,3:route-1:1,4:big:1', 'in order, with the transaction boundaries');

#
# What a listener without read access gets
#
my @all = heard($listener);
my @heard = grep { $_->{channel} eq 'eventhub_events' && $_->{payload} =~ /"events"/ } @all;
ok(@heard >= 2, 'a listener of any role receives the notifications with their events on eventhub_events');
my @plain = grep { $_->{channel} eq 'eventhub' } @all;
is(scalar @plain, scalar(grep { $_->{channel} eq 'eventhub_events' } @all),
	'channel eventhub announces the same, one for one');
is(scalar(grep { join(',', sort keys %{ decode_json($_->{payload}) }) ne 'notification_token,version_id' } @plain), 0,
	'with the two members of its payload, as before');
my $first = decode_json($heard[0]{payload});
my $ciphertext = MIME::Base64::decode_base64($first->{events});
unlike($ciphertext, qr/\Q$marker\E|weather/, 'the events it carries are not readable');
my ($ok, $out, $err);
$node->psql('postgres', "SELECT eventhub.notification_data_key('acme')", extra_params => [ '-U', 'outsider' ],
	stderr => \$err);
like($err, qr/permission denied|not allowed|privilege/i, 'a role with the reader bundle but no grant on the organization gets no key');
$node->psql('postgres', "SELECT eventhub.notification_data_key('acme')", extra_params => [ '-U', 'stranger' ],
	stderr => \$err);
like($err, qr/permission denied/, 'nor does a role without the bundle');

# The reader's key opens it, as docs/protocol.md lays it out.
my $key = query($node, q{SELECT encode(eventhub.notification_data_key('acme'), 'hex')}, user => 'reader');
my $token = query($node, q{SELECT eventhub.notification_token('acme')}, user => 'reader');
is($first->{notification_token}, $token, 'the first notification is acme\'s');
IPC::Run::run([ '/usr/bin/python3', $sealed_py, 'open', $key, $token, $first->{version_id}, $first->{events} ],
	'>', \$out, '2>', \$err);
my $opened = eval { decode_json($out) } // {};
is(scalar @{ $opened->{events} // [] }, 1, 'the reader\'s data key opens it: one event') or diag($err);
like($opened->{events}[0]{event_data} // '', qr/\Q$marker\E/, 'the event as published');
is($opened->{previous}, undef, 'the first event of the organization comes without a previous version');
IPC::Run::run([ '/usr/bin/python3', $sealed_py, 'open', $key, query($node, q{SELECT eventhub.notification_token('other')}),
		$first->{version_id}, $first->{events} ], '>', \$out, '2>', \$err);
isnt($?, 0, 'bound to its notification: with another token it does not open');

#
# A forged notification: reader holds the key and may NOTIFY
#
my ($head, $head_version) = split /\|/, query($node, q{SELECT revision, version_id FROM eventhub.organization_states WHERE organization_id = 'acme'});
my $forged_version = '11111111-2222-4333-8444-555555555555';
my $doc = { format => 1, sent_at_us => 0, previous => $head_version,
	events => [ { revision => $head + 1, transaction_first_revision => $head + 1, transaction_end => JSON::PP::true,
		version_id => $forged_version, processed_us => 0, originated_us => 0, event_type => 'API',
		action => 'DELETE', entity_id => 'FORGED', correlation_id => 'forged', event_data => '{}' } ] };
IPC::Run::run([ '/usr/bin/python3', $sealed_py, 'seal', $key, $token, $forged_version ],
	'<', \$json->encode($doc), '>', \$out, '2>', \$err) or die "sealing failed: $err";
chomp(my $forged = $out);
IPC::Run::run([ '/usr/bin/python3', $sealed_py, 'open', $key, $token, $forged_version, $forged ], '>', \$out);
like($out, qr/FORGED/, 'the forged events open with the key: only their sender gives them away');
query($node, sprintf(q{SELECT pg_notify('eventhub_events', %s)},
	sql_literal($json->encode({ notification_token => $token, version_id => $forged_version, events => $forged }))),
	'reader');
publish_and_wait(q{SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'after-forgery', NULL, '{}')}, 5);
unlike($carried->{out}, qr/FORGED/, 'the watcher did not deliver the forged event');
is((watch_lines($carried))[4]{entity_id}, 'after-forgery', 'the next line is the real event');

#
# The notifier restarts: clients ask for its pid again
#
my $old_pid = query($node, 'SELECT eventhub.notifier_pid()');
$offset = -s $node->logfile;
query($node, "SELECT pg_terminate_backend($old_pid)");
ok(wait_for(node => $node, sql => "SELECT eventhub.notifier_pid() IS NOT NULL AND eventhub.notifier_pid() <> $old_pid"),
	'a new notifier runs');
# Its first notification tells clients to poll; then the watcher asks again.
$node->wait_for_log(qr/\] carried LOG:  execute <unnamed>: SELECT eventhub\.notifier_pid\(\)/, $offset);
# (that query, answered, is in the log before the next statement is)
query($node, 'SELECT 1');
# (The first event may race the answer, as at the start.)
publish_and_wait(q{SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'new-notifier-1', NULL, '{}')}, 6);
my $before = fetches_by('carried');
publish_and_wait(q{SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'new-notifier-2', NULL, '{}')}, 7);
is(fetches_by('carried'), $before, 'after the restart the events come in the notifications again');

#
# eventhub.notification_events = off
#
reload_settings($node, 'eventhub.notification_events = off', worker => 0);
$before = fetches_by('carried');
publish_and_wait(q{SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'off', NULL, '{}')}, 8);
is(fetches_by('carried'), $before + 1, 'with notification_events off, the event was fetched');
@heard = grep { $_->{channel} eq 'eventhub_events' } heard($listener);
unlike($heard[-1]{payload}, qr/"events"/, 'and the notification carried none');

is_deeply([ $carried->{out} =~ /^(.*)\n/mg ], [ $fetched->{out} =~ /^(.*)\n/mg ],
	'in the end both watchers printed the same lines');
$_->{h}->kill_kill for $carried, $fetched;
$listener->{psql}->quit;
done_testing();
