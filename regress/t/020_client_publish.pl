# 020_client_publish.pl: the client library's non-blocking publish,
# through client/test_publish: eh_publish_send() from a client that is not
# connected yet, its result through eh_publish_result() in a loop over
# eh_sockets() and eh_timeout_ms(): the revision is the stored one, a
# repeated correlation id gives the same revision, a second publish while
# one is under way is refused, a refused publish reports its SQLSTATE, and
# the loop's waits end on the sockets, not on short timeouts.

use strict;
use warnings;

use EventhubTest;
use Test::More;

my $node = eventhub_node('publish');

# The non-blocking publish.
my %r = run_driver($node, 'test_publish', 'async');
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
