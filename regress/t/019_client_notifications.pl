# 019_client_notifications.pl: the client library's notification path,
# through client/test_notifications (see its header for what each mode
# does).
#
#   1. rotate: after eventhub.rotate_notification_key(), a client following
#      every organization reads the tokens again once, not a discovery per
#      notification, and keeps being woken by notifications (each event
#      must arrive within 20 s, a third of the poll interval);
#   2. discover: a discovery's answer and a notification that came in
#      behind it, carrying an event committed after the discovery's
#      snapshot, are read together: the event is delivered from the
#      notification and the discovery's older head causes no resync.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('notifications');

# 1. A rotated notification key under eh_subscribe_all().
publish($node, $_, 1) for qw(rotating bystander);
my %r = run_driver($node, 'test_notifications', 'rotate', 'rotating', 10);
is($r{published}, 10, 'rotate: every event published after the rotation arrived by notification');
cmp_ok($r{notifications} // 0, '>=', 10, 'rotate: notifications kept arriving');
cmp_ok($r{polls_after_rotation} // 1e9, '<=', 3,
	'rotate: the tokens were read again once, not a discovery per notification ('
	  . ($r{polls_after_rotation} // '?') . ' for 10 events)');

# 2. A discovery's answer and a notification behind it.
publish($node, 'racer', 1);
%r = run_driver($node, 'test_notifications', 'discover', 'racer');
is($r{in_notification}, 1, 'discover: the event committed after the discovery came in its notification, read with the answer');
is($r{resyncs}, 0, 'discover: and the discovery\'s older head did not resync the organization');
ok(defined $r{cursor} && $r{cursor} eq $r{revision}, 'discover: the cursor is at the event (' . ($r{cursor} // '?') . ')');

$node->stop;
done_testing();
