# 023_prometheus.pl: monitoring with a real Prometheus (Debian's prometheus,
# prometheus-postgres-exporter and prometheus-node-exporter), wired as
# docs/operations.md (Monitoring) says: the exporter runs eventhub.metrics()
# with prometheus/postgres-exporter-queries.yml as a role with the operator
# bundle; each of two replicas (`eventhub watch`) writes its metrics file
# for a node_exporter of its own, with the textfile collector only; a third
# replica heartbeats, then stops (SIGSTOP).  Prometheus scrapes all three
# every second and evaluates prometheus/eventhub-rules.yml, as shipped,
# every second.  Through its HTTP API the test finds each replica's lag,
# the stopped replica stale and EventhubReplicaStale firing, and it answers
# every query of the dashboard.  `promtool check metrics` checks every
# exposition, and the metrics the server and the client expose are the ones
# docs/operations.md lists.
use strict;
use warnings;

use EventhubTest;
use File::Path qw(make_path);
use HTTP::Tiny;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

for my $program (qw(prometheus promtool prometheus-postgres-exporter prometheus-node-exporter))
{
	plan skip_all => "$program is not installed (scripts/deps.sh installs it)"
	  unless grep { -x "$_/$program" } split /:/, $ENV{PATH};
}

# A replica is stale after $ttl seconds without a heartbeat (the watchers
# heartbeat every 200 ms); maintenance, which removes it after twice that,
# runs once at start and then not again.
my $ttl = 5;
my $node = eventhub_node('prometheus', replica_ttl => "${ttl}s", maintenance_interval => '1h');
my $connstr = $node->connstr('postgres');
my $tmp = PostgreSQL::Test::Utils::tempdir;
my $http = HTTP::Tiny->new(timeout => 10);
my $json = JSON::PP->new;

# The metric names docs/operations.md lists in its Monitoring tables.
my ($monitoring) = slurp_file("$work/docs/operations.md") =~ /^## Monitoring\n(.*?)(?=^## |\z)/ms;
my @documented = $monitoring =~ /^\| `(eventhub_\w+)` \|/mg;
my @documented_server = sort grep { !/^eventhub_client_/ } @documented;
my @documented_client = sort grep { /^eventhub_client_/ } @documented;

# check_metrics(NAME, TEXT): promtool check metrics accepts TEXT.
sub check_metrics
{
	my ($name, $text) = @_;
	my $out = '';
	IPC::Run::run([ 'promtool', 'check', 'metrics' ], '<', \$text, '>&', \$out);
	ok($? == 0 && $text =~ /^eventhub_/m, "promtool check metrics: $name")
	  or diag("$out\n$text");
}

# The families an exposition declares (# TYPE lines).
sub families { my %f = map { $_ => 1 } $_[0] =~ /^# TYPE (\w+) /mg; return sort keys %f }

# get(URL): the body, or undef.
sub get
{
	my $r = $http->get($_[0]);
	return $r->{success} ? $r->{content} : undef;
}

publish($node, 'acme', 3);

#
# The replicas: gw-1 and gw-2 write their metrics files, each in the
# directory of its node_exporter; gw-stalled heartbeats like them, until it
# is stopped.
#
my %dir = map { $_ => "$tmp/$_" } qw(node1 node2);
make_path(values %dir);
my %replica;
for my $id (qw(gw-1 gw-2 gw-stalled))
{
	my @metrics = $id eq 'gw-1' ? ('--metrics-file', "$dir{node1}/eventhub.prom", '--metrics-interval', '1')
	  : $id eq 'gw-2' ? ('--metrics-file', "$dir{node2}/eventhub.prom", '--metrics-interval', '1')
	  :                 ();
	$replica{$id} = start_watch($connstr, '--org', 'acme', '--after', '0', '--replica-id', $id,
		'--heartbeat-interval', '200', @metrics);
}
ok( wait_for(
		what => 'the three replicas at revision 3',
		node => $node,
		sql => "SELECT count(*) = 3 FROM eventhub.replica_progress WHERE organization_id = 'acme' AND applied_revision = 3",
		pump => [ values %replica ]),
	'the three replicas applied the events and heartbeat');

# The server's metrics, with replicas registered: the documented ones, in a
# valid exposition.
is_deeply([ sort split /\n/, $node->safe_psql('postgres', 'SELECT DISTINCT name FROM eventhub.metrics()') ],
	\@documented_server, 'eventhub.metrics() returns the series docs/operations.md lists');
my ($rc, $exposition, $err) = run_cli('-d', $connstr, 'metrics');
is($rc, 0, 'eventhub metrics exits 0') or diag($err);
check_metrics('eventhub metrics', $exposition);

#
# The exporters and Prometheus, on free ports, as this (unprivileged) user.
#
my %port = map { $_ => PostgreSQL::Test::Cluster::get_free_port() } qw(exporter node1 node2 prometheus);
grant_bundle($node, 'postgres', operator => 'monitor');
my @daemons;
{
	# The exporter reads its connection from the environment only.
	local $ENV{DATA_SOURCE_NAME} =
	  'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres user=monitor sslmode=disable';
	push @daemons, start_process(
		[
			'prometheus-postgres-exporter',
			"--extend.query-path=$work/prometheus/postgres-exporter-queries.yml",
			'--disable-default-metrics', '--disable-settings-metrics',
			'--no-collector.database', '--no-collector.bgwriter',
			"--web.listen-address=127.0.0.1:$port{exporter}"
		]);
}
for my $n (qw(node1 node2))
{
	push @daemons, start_process(
		[
			'prometheus-node-exporter', '--collector.disable-defaults', '--collector.textfile',
			"--collector.textfile.directory=$dir{$n}", "--web.listen-address=127.0.0.1:$port{$n}"
		]);
}
open my $fh, '>', "$tmp/prometheus.yml" or die "$tmp/prometheus.yml: $!";
print $fh <<"YAML";
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $work/prometheus/eventhub-rules.yml
scrape_configs:
  - job_name: eventhub
    static_configs:
      - targets: ['127.0.0.1:$port{exporter}']
  - job_name: replicas
    static_configs:
      - targets: ['127.0.0.1:$port{node1}', '127.0.0.1:$port{node2}']
YAML
close $fh;
push @daemons, start_process(
	[
		'prometheus', "--config.file=$tmp/prometheus.yml", "--storage.tsdb.path=$tmp/prometheus-data",
		"--web.listen-address=127.0.0.1:$port{prometheus}"
	]);
my $prometheus = "http://127.0.0.1:$port{prometheus}";
my %instance = map { $_ => "127.0.0.1:$port{$_}" } qw(exporter node1 node2);

# promql(PROMQL): Prometheus' instant vector, as [ { metric => {...}, value => [t, "v"] } ].
sub promql
{
	my $body = get("$prometheus/api/v1/query?" . $http->www_form_urlencode({ query => $_[0] }));
	my $r = $body && eval { $json->decode($body) };
	return $r && $r->{status} eq 'success' ? $r->{data}{result} : [];
}

# by(LABEL, PROMQL): { value of LABEL => value } of PROMQL's series.
sub by
{
	my ($label, $promql) = @_;
	return { map { ($_->{metric}{$label} // '') => $_->{value}[1] } @{ promql($promql) } };
}

# The alerts named NAME in STATE (pending, firing).
sub alerts
{
	my ($name, $state) = @_;
	my $body = get("$prometheus/api/v1/alerts");
	my $r = $body && eval { $json->decode($body) } or return ();
	return grep { $_->{labels}{alertname} eq $name && $_->{state} eq $state } @{ $r->{data}{alerts} };
}

# Every wait reads the daemons' and the replicas' output.
pump_during_waits(sub { (@daemons, values %replica) });

ok(wait_until('every target up', sub { (promql('sum(up) == 3')->[0]{value}[1] // 0) == 3 }),
	'Prometheus scrapes the exporter and both node_exporters')
  or diag(join "\n", map { $_->{err} } @daemons);

#
# Every exposition passes promtool check metrics; the client's declares the
# documented families.
#
for my $n (qw(exporter node1 node2))
{
	check_metrics("$n /metrics", get("http://$instance{$n}/metrics") // '');
}
# The exporter declares the families of `eventhub metrics`, with the same
# help and type (eventhub_replicas under the name the rules record it from).
my %exporter_declares = map { $_ => 1 } (get("http://$instance{exporter}/metrics") // '') =~ /^(# (?:HELP|TYPE) .*)$/mg;
my @declared = grep { !/^# HELP eventhub_replicas / } $exposition =~ /^(# (?:HELP|TYPE) .*)$/mg;
s/^# TYPE eventhub_replicas /# TYPE eventhub_replicas_by_state / for @declared;
my @undeclared = grep { !$exporter_declares{$_} } @declared;
ok(@declared == 2 * @documented_server - 1 && !@undeclared,
	'the exporter declares the families of eventhub metrics, with their help and type')
  or diag(join("\n", @undeclared));
for my $n (qw(node1 node2))
{
	my $file = slurp_file("$dir{$n}/eventhub.prom");
	check_metrics("the metrics file in $n", $file);
	is_deeply([ families($file) ], \@documented_client,
		"the metrics file in $n declares the client metrics docs/operations.md lists");
}

#
# All live: each replica's lag, no stale replica, no alert.
#
ok( wait_until(
		'three live replicas, none behind',
		sub {
			my $lag = by(replica => 'eventhub_replica_lag_events');
			my $state = by(state => 'eventhub_replicas');
			return keys %$lag == 3 && !grep({ $_ != 0 } values %$lag)
			  && ($state->{live} // -1) == 3 && ($state->{stale} // -1) == 0;
		}),
	'Prometheus has each replica\'s lag (0) and three live replicas');
is_deeply(by(replica => 'eventhub_replica_lag_seconds'), { 'gw-1' => 0, 'gw-2' => 0, 'gw-stalled' => 0 },
	'and each replica\'s lag in seconds');
is(scalar(alerts('EventhubReplicaStale', 'firing')) + scalar(alerts('EventhubReplicaStale', 'pending')),
	0, 'EventhubReplicaStale does not fire while every replica heartbeats');

#
# gw-stalled stops: it falls behind by the next two events, turns stale
# after eventhub.replica_ttl, and the alert fires.  The server counts lag as
# of each replica's last heartbeat (docs/operations.md, Monitoring): a
# replica stopped while caught up shows no lag, only its heartbeat's age.
# So the test sends, for it, the heartbeat of a replica still alive but
# stuck at revision 3 once acme is at 5, before its heartbeat ages.
#
kill 'STOP', $replica{'gw-stalled'}{h}{KIDS}[0]{PID};
publish($node, 'acme', 2);
$node->safe_psql('postgres', q{SELECT eventhub.heartbeat('gw-stalled', '{"acme": {"revision": 3}}')});
ok( wait_until(
		'gw-stalled 2 behind, the others caught up',
		sub {
			my $lag = by(replica => 'eventhub_replica_lag_events');
			return ($lag->{'gw-stalled'} // 0) == 2 && ($lag->{'gw-1'} // -1) == 0 && ($lag->{'gw-2'} // -1) == 0;
		}),
	'Prometheus has the stopped replica 2 events behind, the others caught up');
my $lag_seconds = by(replica => 'eventhub_replica_lag_seconds');
ok($lag_seconds->{'gw-stalled'} > 0 && $lag_seconds->{'gw-1'} == 0,
	'the stopped replica\'s lag in seconds grows') or diag(explain $lag_seconds);
ok( wait_until(
		'gw-stalled stale',
		sub {
			my $state = by(state => 'eventhub_replicas');
			return ($state->{stale} // 0) == 1 && ($state->{live} // 0) == 2;
		}),
	'Prometheus has one stale and two live replicas');
cmp_ok(by(replica => 'eventhub_replica_heartbeat_age_seconds')->{'gw-stalled'}, '>=', $ttl,
	'the stale replica is the one without a heartbeat for eventhub.replica_ttl');
ok(wait_until('EventhubReplicaStale firing', sub { alerts('EventhubReplicaStale', 'firing') }),
	'EventhubReplicaStale fires');

#
# The replicas' own view, through the textfile collector: connected, ready,
# at revision 5, one series per node_exporter.
#
ok( wait_until(
		'both clients at revision 5',
		sub {
			my $rev = by(instance => 'eventhub_client_applied_revision{subscription="acme"}');
			return ($rev->{ $instance{node1} } // 0) == 5 && ($rev->{ $instance{node2} } // 0) == 5;
		}),
	'Prometheus has each client\'s applied revision from its metrics file');
is_deeply(by(instance => 'eventhub_client_ready{subscription="acme"}'),
	{ $instance{node1} => 1, $instance{node2} => 1 }, 'both clients are ready');
is_deeply(by(instance => 'eventhub_client_connected'),
	{ $instance{node1} => 1, $instance{node2} => 1 }, 'both clients are connected');

#
# The dashboard's queries, with Grafana's variables filled in: Prometheus
# answers each with series (but the time since the last retention pass,
# which need not have ended yet).
#
my $dashboard = $json->decode(slurp_file("$work/prometheus/grafana-dashboard.json"));
my (@refused, @empty);
for my $expr (map { $_->{expr} } map { @{ $_->{targets} // [] } } @{ $dashboard->{panels} })
{
	(my $promql = $expr) =~ s/\$__rate_interval/1m/g;
	$promql =~ s/\$(instance|client)/.*/g;
	my $body = get("$prometheus/api/v1/query?" . $http->www_form_urlencode({ query => $promql }));
	my $r = $body && eval { $json->decode($body) };
	if (!$r || $r->{status} ne 'success')
	{
		push @refused, $promql;
	}
	elsif (!@{ $r->{data}{result} } && $promql !~ /_last_pass_timestamp_seconds/)
	{
		push @empty, $promql;
	}
}
ok(!@refused, 'Prometheus answers every query of the dashboard') or diag(join "\n", @refused);
ok(!@empty, 'and finds series for them') or diag(join "\n", @empty);

kill 'CONT', $replica{'gw-stalled'}{h}{KIDS}[0]{PID};
$_->{h}->kill_kill for values %replica, @daemons;
$node->stop;
done_testing();
