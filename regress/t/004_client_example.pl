# 004_client_example.pl: the client library's page (docs/client.md) works as
# written.  Its subscriber is client/examples/subscriber.c word for word; it
# builds against the installed library with that page's pkg-config command
# (and against the static library), and prints the committed events of the
# organizations it follows.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $example = slurp_file("$examples/subscriber.c");
my ($shown) = slurp_file("$work/docs/client.md") =~ /<!-- example: client\/examples\/subscriber\.c -->\n```c\n(.*?)```/s;
ok(defined $shown, 'docs/client.md shows the example');
is($shown, $example, 'docs/client.md shows client/examples/subscriber.c exactly');

sub pkg_config { return (run_command([ 'pkg-config', @_, 'eventhub' ]))[0] }
my ($version) = slurp_file("$work/client/eventhub.h") =~ /#define EVENTHUB_VERSION "([^"]+)"/;
is(pkg_config('--modversion'), $version, 'pkg-config knows the installed library and its version');

my $dir = PostgreSQL::Test::Utils::tempdir();
my ($out, $err);
ok(IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', "$examples/subscriber.c",
			split(' ', pkg_config('--cflags', '--libs')), '-o', "$dir/subscriber" ], '>', \$out, '2>', \$err),
	'the example builds with `cc subscriber.c $(pkg-config --cflags --libs eventhub)`') or diag($err);
ok(IPC::Run::run([ 'cc', "$examples/subscriber.c", split(' ', pkg_config('--cflags')),
			pkg_config('--variable=libdir') . '/libeventhub.a', '-lpq', '-lcrypto', '-o', "$dir/subscriber_static" ],
		'>', \$out, '2>', \$err),
	'the example links against the static library') or diag($err);
($out, $err) = run_command([ 'ldd', "$dir/subscriber_static" ]);
unlike($out, qr/libeventhub/, 'the static build does not need libeventhub.so');

my $node = eventhub_node('example');
publish($node, 'acme', 1, action => 'CREATE', entity => 'weather', data => '{"v": 1}');
publish($node, 'globex', 1, event_type => 'CERTIFICATE', action => 'CREATE', entity => 'tls');

for my $binary ('subscriber', 'subscriber_static')
{
	my $sub = start_process([ "$dir/$binary", $node->connstr('postgres'), 'acme', 'globex' ], { appname => 1 });
	wait_for(what => "$binary: the kept history", watch => $sub, matches => qr/globex revision 1/);
	publish($node, 'acme', 1, entity => 'weather', data => '{"v": 2}');
	wait_for(what => "$binary: the new event", watch => $sub, matches => qr/acme revision 2/);
	$sub->{h}->kill_kill;
	is_deeply(
		[ sort split /\n/, $sub->{out} ],
		[
			'acme revision 1: CREATE API weather {"v": 1}',
			'acme revision 2: UPDATE API weather {"v": 2}',
			'globex revision 1: CREATE CERTIFICATE tls {}'
		],
		"$binary prints the kept history, then a new event") or diag($sub->{err});
	# the next round starts from scratch: remove the event this round added
	$node->safe_psql('postgres', q{
		SET eventhub.protect_tables = off;
		DELETE FROM eventhub.events WHERE organization_id = 'acme' AND revision = 2;
		UPDATE eventhub.organization_states s SET revision = 1, version_id = e.version_id
		  FROM eventhub.events e WHERE e.organization_id = 'acme' AND e.revision = 1 AND s.organization_id = 'acme';
	});
}

$node->stop;
done_testing();
