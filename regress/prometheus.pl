# The Prometheus files of prometheus/, with no server: promtool checks the
# rules and runs their unit tests, and every metric name the rules, the
# dashboard and the exporter's queries use is one that docs/operations.md
# (Monitoring) lists, the list regress/t/023_prometheus.pl compares with what
# the server and the client expose.  Run from the tree's top directory:
# perl regress/prometheus.pl (scripts/run-suites.sh runs it as the
# "prometheus" suite).
use strict;
use warnings;

use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

my $dir = 'prometheus';
sub slurp { local (@ARGV, $/) = @_; return <> }

# promtool NAME ARGS...: one test, promtool's output shown when it fails.
sub promtool
{
	my ($name, @args) = @_;
	my $out = `promtool @args 2>&1`;
	ok($? == 0, $name) or diag($out);
}

promtool('promtool check rules', 'check', 'rules', "$dir/eventhub-rules.yml");
promtool('promtool test rules', 'test', 'rules', "$dir/eventhub-rules.test.yml");

# The documented names: the first column of the tables in Monitoring.
my ($monitoring) = slurp('docs/operations.md') =~ /^## Monitoring\n(.*?)(?=^## |\z)/ms;
my %documented = map { $_ => 1 } $monitoring =~ /^\| `(eventhub_\w+)` \|/mg;
my @client = grep { /^eventhub_client_/ } keys %documented;
my @server = grep { !/^eventhub_client_/ } keys %documented;
ok(@server >= 18 && @client >= 8, 'docs/operations.md lists the server\'s and the client\'s metrics')
  or diag('found: ' . join(' ', sort keys %documented));

# The rules: every eventhub_* name they use (expressions and annotations),
# where a recording rule's source may be an exporter's name of a documented
# series (eventhub_replicas_by_state: see postgres-exporter-queries.yml).
my $rules = slurp("$dir/eventhub-rules.yml");
$rules =~ s/^\s*#.*\n//mg;
my %recorded_from;
while ($rules =~ /- record: (\w+)\n\s+expr: (\w+)\n/g)
{
	$recorded_from{$2} = $1;
}
ok(!grep({ !$documented{$_} } values %recorded_from), 'the rules record only documented names');
my @unknown = grep { !$documented{$_} && !$recorded_from{$_} } $rules =~ /\b(eventhub_\w+)/g;
ok(!@unknown, 'the rules use only documented metrics') or diag("not documented: @unknown");

# Every alert has a test where it fires and one where it does not.
my $tests = slurp("$dir/eventhub-rules.test.yml");
for my $alert ($rules =~ /- alert: (\w+)/g)
{
	my @cases = $tests =~ /alertname: \Q$alert\E\n\s+exp_alerts:(.*)/g;
	ok((grep { /\[\]/ } @cases) && (grep { !/\[\]/ } @cases),
		"$alert is tested firing and not firing");
}

# The exporter's queries: the series they export (<key>_<column> for each
# column that is not a label) and the names they read from eventhub.metrics().
my $queries = slurp("$dir/postgres-exporter-queries.yml");
my (%exported, %read, $key, $column);
for (split /\n/, $queries)
{
	next if /^\s*#/;
	$key = $1, next if /^(\w+):\s*$/;
	$column = $1, next if /^    - (\w+):\s*$/;
	$exported{"${key}_$column"} = 1 if /^\s+usage: (?!LABEL)/;
	$read{$1} = 1 for /'(eventhub_\w+)'/g;
}
my @server_read = grep { $documented{$_} } keys %read;
ok(@server_read == keys %read, 'the queries read documented metrics of eventhub.metrics()')
  or diag('not documented: ' . join(' ', grep { !$documented{$_} } keys %read));
my %reaches = map { $_ => $recorded_from{$_} // $_ } keys %exported;
@unknown = grep { !$documented{ $reaches{$_} } } keys %reaches;
ok(!@unknown, 'the exporter\'s series are documented ones (or recorded as one)')
  or diag("not documented: @unknown");
my %reached = map { $_ => 1 } values %reaches;
my @missing = grep { !$reached{$_} } @server;
ok(!@missing, 'the exporter exports every server metric') or diag("missing: @missing");

# The dashboard: valid JSON, every expression PromQL (promtool checks them
# as recording rules, with Grafana's variables filled in), documented names
# only, and every documented metric shown.
my $dashboard = eval { decode_json(slurp("$dir/grafana-dashboard.json")) };
ok($dashboard, 'the dashboard is JSON') or diag($@);
my @exprs = map { $_->{expr} } map { @{ $_->{targets} // [] } } @{ $dashboard->{panels} // [] };
my $tmp = tempdir(CLEANUP => 1);
open my $fh, '>', "$tmp/dashboard-rules.yml" or die $!;
print $fh "groups:\n  - name: dashboard\n    rules:\n";
for my $i (0 .. $#exprs)
{
	(my $e = $exprs[$i]) =~ s/\$__rate_interval/5m/g;
	$e =~ s/\$(instance|client)/.*/g;
	print $fh "      - record: dashboard_expr_$i\n        expr: " . encode_json([$e]) =~ s/^\[|\]$//gr . "\n";
}
close $fh;
promtool(scalar(@exprs) . ' dashboard expressions are PromQL', 'check', 'rules', "$tmp/dashboard-rules.yml");
my %shown = map { $_ => 1 } map { /\b(eventhub_\w+)/g } @exprs;
@unknown = grep { !$documented{$_} } keys %shown;
ok(!@unknown, 'the dashboard uses only documented metrics') or diag("not documented: @unknown");
@missing = grep { !$shown{$_} } keys %documented;
ok(!@missing, 'the dashboard shows every documented metric') or diag("not shown: @missing");

done_testing();
