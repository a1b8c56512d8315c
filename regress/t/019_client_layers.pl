# 019_client_layers.pl: the client library's non-blocking publish, a
# callback that stops, and a rotated notification key, through
# client/test_layers (see its header for what each mode does).
#
#   1. stop: a callback that stops after every event gets the rest of its
#      batch at the next call, from the batch already fetched (one fetch
#      for all of them) and without waiting for a poll (the poll interval
#      is 60 s; each eh_wait may take 40 s, and the whole run must stay
#      far below one interval);
#   2. rotate: after eventhub.rotate_notification_key(), a client following
#      every organization reads the tokens again once, not a discovery per
#      notification, and keeps being woken by notifications (each event
#      must arrive within 20 s, a third of the poll interval);
#   3. publish: eh_publish_send() from a client that is not connected yet,
#      its result through eh_publish_result() in a loop over eh_sockets()
#      and eh_timeout_ms(): the revision is the stored one, a repeated
#      correlation id gives the same revision, a second publish while one
#      is under way is refused, a refused publish reports its SQLSTATE, and
#      the loop's waits end on the sockets, not on short timeouts.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use Test::More;

my $driver = "$libdir/test_layers";
BAIL_OUT("no test_layers at $driver") unless -x $driver;
my $node = eventhub_node('layers');

# Runs the driver; returns its key=value line as a hash (empty on failure).
# The backstop only turns a hung driver into a failure.
sub drive
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $driver, $node->connstr('postgres'), @_ ], '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	note("test_layers @_: $out$err");
	return $ok ? (map { split /=/, $_, 2 } split ' ', $out) : ();
}

# 1. A callback that stops.
publish($node, 'stopper', 5);
my %r = drive('stop', 'stopper', 5);
is($r{delivered}, 5, 'stop: every event delivered');
is($r{most_per_call}, 1, 'stop: one event per call, as the callback asked');
is($r{fetches}, 1, 'stop: the rest of the batch was not fetched again');
cmp_ok($r{elapsed_ms} // 1e9, '<', 30000,
	'stop: the rest came without waiting for a poll (' . ($r{elapsed_ms} // '?') . ' ms, the poll interval is 60000)');

# 2. A rotated notification key under eh_subscribe_all().
publish($node, $_, 1) for qw(rotating bystander);
%r = drive('rotate', 'rotating', 10);
is($r{published}, 10, 'rotate: every event published after the rotation arrived by notification');
cmp_ok($r{notifications} // 0, '>=', 10, 'rotate: notifications kept arriving');
cmp_ok($r{polls_after_rotation} // 1e9, '<=', 3,
	'rotate: the tokens were read again once, not a discovery per notification ('
	  . ($r{polls_after_rotation} // '?') . ' for 10 events)');

# 3. The non-blocking publish.
%r = drive('publish', 'async');
my $stored = $node->safe_psql('postgres',
	"SELECT revision FROM eventhub.events WHERE organization_id = 'async' AND correlation_id = 'async-1'");
ok(defined $r{revision} && $r{revision} eq $stored, "publish: eh_publish_result gave the stored revision ($stored)");
is($r{repeated}, $stored, 'publish: the same correlation id gave the same revision');
is($r{busy_refused}, 1, 'publish: a second publish while one is under way is refused');
is($r{refused_rc}, -4, 'publish: a refused publish is EH_ERR_SERVER');
is($r{refused_sqlstate}, '22P02', 'publish: with the SQLSTATE of the refusal');
cmp_ok($r{timed_out_waits} // 1e9, '<=', 2,
	'publish: the loop woke on its sockets, not on short timeouts (' . ($r{timed_out_waits} // '?')
	  . ' timed-out waits in ' . ($r{rounds} // '?') . ' rounds)');

$node->stop;
done_testing();
