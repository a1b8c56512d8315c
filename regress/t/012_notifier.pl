# 012_notifier.pl: notifications sent by the notifier background worker,
# outside the publishers' commits (the library preloaded).
#
#   - eventhub.notification_mode() says 'worker'; the notifications come
#     from the notifier's backend, with the payload of 001_notify.pl;
#   - a burst of commits is coalesced: one notification per organization
#     and batch, the last naming each organization's head version;
#   - a rolled-back publish announces nothing;
#   - in another database than eventhub.database, each transaction notifies;
#   - while the notifier is gone, publishers notify by themselves, and it
#     comes back and tells everyone to poll (the zero token);
#   - a full queue (the notifier stopped while 70,000 events are published)
#     loses no event: the notifier says so with the zero token, and a
#     subscriber that would not poll for ten minutes catches up at once.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $json = JSON::PP->new;
my $node = eventhub_node('notifier', conf => "log_statement = 'none'");
my $dir = PostgreSQL::Test::Utils::tempdir();

sub notifier_pid
{
	return $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'eventhub notifier'");
}

ok(wait_for(what => 'the notifier', node => $node, sql => "SELECT eventhub.notification_mode() = 'worker'"),
	'preloaded: the notifier announces what this database publishes') or die 'the notifier did not attach';

# A listener that collects every notification it receives; @heard: what it
# heard since forget().
my $listener = start_listener($node);
my @heard;
sub forget { $listener->{heard} = []; @heard = (); }

# Collects notifications until COND (on what was heard) holds.
sub hear_until
{
	my ($cond) = @_;
	return wait_for(what => 'notifications', until => sub { @heard = heard($listener); $cond->() });
}

# Runs pgbench with the script SQL on 4 clients, TRANSACTIONS each.
sub pgbench
{
	my ($name, $sql, $transactions) = @_;
	my ($out, $err);
	append_to_file("$dir/$name.sql", $sql);
	IPC::Run::run([ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', $transactions, '-f', "$dir/$name.sql",
			'-h', $node->host, '-p', $node->port, 'postgres' ], '>', \$out, '2>', \$err)
	  or die "pgbench failed: $err";
}

# The last version heard for TOKEN.
sub last_heard
{
	my ($token) = @_;
	my @mine = grep { $_->{notification_token} eq $token } map { $json->decode($_->{payload}) } @heard;
	return @mine ? $mine[-1]{version_id} : '';
}

# One publish.
my $publisher_pid = $node->safe_psql('postgres',
	"SELECT pg_backend_pid() FROM (SELECT eventhub.publish_event('solo', 'API', 'CREATE', 'e', NULL, '{}')) p");
ok(hear_until(sub { @heard >= 1 }), 'one publish: heard');
like($heard[0]{payload}, qr/^\{"notification_token": "[0-9a-f]{32}", "version_id": "[0-9a-f-]{36}"\}$/,
	'one publish: the documented payload');
is($json->decode($heard[0]{payload})->{notification_token}, notification_token($node, 'solo'), 'one publish: the organization\'s token');
is(last_heard(notification_token($node, 'solo')), (org_head($node, 'solo'))[1], 'one publish: its head version');
is($heard[0]{pid}, notifier_pid(), 'one publish: sent by the notifier');
isnt($heard[0]{pid}, $publisher_pid, 'one publish: not by the publisher');

# A burst of single-event commits to five organizations: coalesced.
my $sent_sql = "SELECT value FROM eventhub.metrics() WHERE name = 'eventhub_notifications_sent_total'";
my $sent_before = $node->safe_psql('postgres', $sent_sql);
forget();
pgbench('burst', "\\set o random(1, 5)\nSELECT eventhub.publish_event('burst-' || :o, 'API', 'UPDATE', 'e', NULL, '{}');\n", 500);
my %tokens = map { ($_ => notification_token($node, "burst-$_")) } 1 .. 5;
my %heads = map { ($_ => (org_head($node, "burst-$_"))[1]) } 1 .. 5;
ok(hear_until(sub { !grep { last_heard($tokens{$_}) ne $heads{$_} } 1 .. 5 }),
	'burst: every organization\'s head version was announced')
  or diag(explain({ heads => \%heads, heard => { map { ($_ => last_heard($tokens{$_})) } 1 .. 5 } }));
note('burst: 2000 commits, ' . scalar(@heard) . ' notifications');
cmp_ok(scalar(@heard), '<', 2000, 'burst: fewer notifications than commits (coalesced)');
my $notifier = notifier_pid();
is(scalar(grep { $_->{pid} ne $notifier } @heard), 0, 'burst: every one from the notifier');
# The notifier counts what it sends (eventhub.metrics()), once its
# transaction commits: every notification heard is counted.
ok(wait_for(what => 'the count of notifications sent', node => $node,
		sql => "SELECT ($sent_sql) - $sent_before >= " . scalar(@heard)),
	'burst: eventhub_notifications_sent_total counts the notifications sent');

# A rolled-back publish announces nothing.
forget();
$node->safe_psql('postgres', q{
	BEGIN; SELECT eventhub.publish_event('ghost', 'API', 'CREATE', 'e', NULL, '{}'); ROLLBACK;
	SELECT eventhub.publish_event('sentinel', 'API', 'CREATE', 'e', NULL, '{}');
});
ok(hear_until(sub { last_heard(notification_token($node, 'sentinel')) ne '' }), 'rollback: the sentinel after it is heard');
is(last_heard(notification_token($node, 'ghost')), '', 'rollback: the rolled-back organization is not');

# Another database: its transactions notify by themselves.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION eventhub');
is($node->safe_psql('other', 'SELECT eventhub.notification_mode()'), 'transaction',
	'another database: each transaction notifies');
my ($ret, $out) = $node->psql('other',
	"LISTEN eventhub;\nSELECT eventhub.publish_event('o', 'API', 'CREATE', 'e', NULL, '{}');");
like($out, qr/Asynchronous notification "eventhub"/, 'another database: heard at commit');

# The notifier goes away and comes back.
my $pid = notifier_pid();
forget();
# It is restarted a second after it ends; while its database refuses new
# connections it cannot attach again, however long the publish below takes.
my $publisher = $node->background_psql('postgres');
my $admin = $node->background_psql('other');
$admin->query_safe('ALTER DATABASE postgres ALLOW_CONNECTIONS false');
$admin->query_safe("SELECT pg_terminate_backend($pid, 1000 * $PostgreSQL::Test::Utils::timeout_default)");
my ($mode, $pub_pid) = split /\|/, $publisher->query_safe(q{
	SELECT eventhub.notification_mode(), pg_backend_pid()
	  FROM (SELECT eventhub.publish_event('meanwhile', 'API', 'CREATE', 'e', NULL, '{}')) p});
is($mode, 'transaction', 'notifier gone: each transaction notifies');
ok(hear_until(sub { @heard >= 1 }), 'notifier gone: still heard');
is($heard[0]{pid}, $pub_pid, 'notifier gone: from the publisher');
$admin->query_safe('ALTER DATABASE postgres ALLOW_CONNECTIONS true');
$_->quit for $admin, $publisher;
ok(wait_for(what => 'the notifier', node => $node, sql => "SELECT eventhub.notification_mode() = 'worker'"),
	'the notifier is back') or die 'the notifier did not come back';
# Announcements it had taken when it stopped are lost: its first act is to
# tell everyone to poll.
ok(hear_until(sub { grep { $_->{payload} =~ /"notification_token": "0{32}"/ } @heard }),
	'notifier back: it tells everyone to poll');
is((grep { $_->{payload} =~ /"notification_token": "0{32}"/ } @heard)[0]{pid}, notifier_pid(),
	'notifier back: the new notifier says so');

# A full queue loses no event.  The watcher's statements are logged: once it
# has sent LISTEN eventhub, and then read the head with the notification
# token, it follows.
my $offset = -s $node->logfile;
my $watch = start_watch($node->connstr('postgres') . " options='-c log_statement=all'",
	'--org', 'overflow', '--count', '1', '--timeout', '120', '--poll-interval', '600000');
wait_for_listening($node, $offset);
$pid = notifier_pid();
kill 'STOP', $pid;
pgbench('flood', "SELECT eventhub.publish_event('flood-' || :client_id, 'API', 'UPDATE', 'e', NULL, '{}');\n", 17500);
$offset = -s $node->logfile;
$node->safe_psql('postgres', "SELECT eventhub.publish_event('overflow', 'API', 'CREATE', 'e', NULL, '{}')");
kill 'CONT', $pid;
like(join("\n", logged($node, qr/eventhub notification queue was full: .*/, $offset)),
	qr/^eventhub notification queue was full: [1-9]\d* announcements were dropped/,
	'full queue: the notifier says how many announcements were dropped');
is(finish_cli($watch), 0, 'full queue: the subscriber got its event without waiting for its poll')
  or diag($watch->{err});
like($watch->{out}, qr/"organization_id": "overflow", "revision": 1/, 'full queue: the event');

$listener->{psql}->quit;
$node->stop;
done_testing();
