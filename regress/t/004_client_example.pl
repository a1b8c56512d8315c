# 004_client_example.pl: the client library's page (docs/client.md) works as written.
#
# The subscriber shown in docs/client.md is client/examples/subscriber.c, word
# for word; it builds against the installed library with that page's
# pkg-config command (and against the static library), and it prints the
# committed events of the organizations it follows.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $work = $ENV{EVENTHUB_WORK} or die "EVENTHUB_WORK is not set";
my $example = slurp_file("$work/client/examples/subscriber.c");
my $readme = slurp_file("$work/docs/client.md");

my ($shown) = $readme =~ /<!-- example: client\/examples\/subscriber\.c -->\n```c\n(.*?)```/s;
ok(defined $shown, 'docs/client.md shows the example');
is($shown, $example, 'docs/client.md shows client/examples/subscriber.c exactly');

my ($version) = slurp_file("$work/client/eventhub.h") =~ /#define EVENTHUB_VERSION "([^"]+)"/;
my ($out, $err) = run_command([ 'pkg-config', '--modversion', 'eventhub' ]);
chomp $out;
is($out, $version, 'pkg-config knows the installed library and its version');

my $dir = PostgreSQL::Test::Utils::tempdir();
($out, $err) = run_command([ 'pkg-config', '--cflags', '--libs', 'eventhub' ]);
chomp $out;
my @flags = split ' ', $out;
my $ok = IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', "$work/client/examples/subscriber.c",
		@flags, '-o', "$dir/subscriber" ], '>', \$out, '2>', \$err);
ok($ok, 'the example builds with `cc subscriber.c $(pkg-config --cflags --libs eventhub)`') or diag($err);

($out, $err) = run_command([ 'pkg-config', '--variable=libdir', 'eventhub' ]);
chomp $out;
my $libdir = $out;
($out, $err) = run_command([ 'pkg-config', '--cflags', 'eventhub' ]);
chomp $out;
$ok = IPC::Run::run([ 'cc', "$work/client/examples/subscriber.c", split(' ', $out),
		"$libdir/libeventhub.a", '-lpq', '-o', "$dir/subscriber_static" ], '>', \my $o2, '2>', \my $e2);
ok($ok, 'the example links against the static library') or diag($e2);
($out, $err) = run_command([ 'ldd', "$dir/subscriber_static" ]);
unlike($out, qr/libeventhub/, 'the static build does not need libeventhub.so');

my $node = PostgreSQL::Test::Cluster->new('example');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION eventhub;
	SELECT eventhub.publish_event('acme', 'API', 'CREATE', 'weather', 'r1', '{"v": 1}');
	SELECT eventhub.publish_event('globex', 'CERTIFICATE', 'CREATE', 'tls', 'r2', '{}');
});

for my $binary ('subscriber', 'subscriber_static')
{
	my ($sub_out, $sub_err) = ('', '');
	my $timer = IPC::Run::timer($PostgreSQL::Test::Utils::timeout_default);
	my $h = IPC::Run::start([ "$dir/$binary", $node->connstr('postgres'), 'acme', 'globex' ],
		'>', \$sub_out, '2>', \$sub_err, $timer);
	$h->pump until $sub_out =~ /globex revision 1/ || $timer->is_expired;
	$node->safe_psql('postgres',
		"SELECT eventhub.publish_event('acme', 'API', 'UPDATE', 'weather', 'r3-$binary', '{\"v\": 2}')");
	$h->pump until $sub_out =~ /acme revision 2/ || $timer->is_expired;
	$h->kill_kill;
	my @lines = sort split /\n/, $sub_out;
	is_deeply(
		\@lines,
		[
			'acme revision 1: CREATE API weather {"v": 1}',
			'acme revision 2: UPDATE API weather {"v": 2}',
			'globex revision 1: CREATE CERTIFICATE tls {}'
		],
		"$binary prints the kept history, then a new event") or diag($sub_err);
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
