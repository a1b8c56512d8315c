# 025_patroni.pl: eventhub under Patroni, the failover matrix.
#
# One etcd and three PostgreSQL nodes managed by Patroni
# (scripts/ha-cluster.sh), eventhub preloaded through Patroni's
# configuration.  Throughout, two publishers write through a multi-host
# conninfo with target_session_attrs=read-write, retrying the documented
# retryable errors with the same correlation id (regress/ha-publisher.sh):
# one with `eventhub publish` (libeventhub's eh_publish), one with plain SQL
# (psql).  Consumers of every kind follow them through the same conninfo:
# `eventhub watch --all` and `eventhub watch --org` (libeventhub, as
# replicas with heartbeats), and the Go and Python reference consumers.
#
#   A. a planned switchover (patronictl switchover): nothing acknowledged
#      lost, no resync; every `eventhub watch` consumer prints the first
#      event each publisher got acknowledged by the new leader within a
#      second or so of that acknowledgement (measured and printed;
#      checked against 2.5 s, room for a loaded machine);
#   B. synchronous_mode on, the leader crashes (its Patroni and postmaster
#      SIGKILLed): nothing acknowledged lost, no resync;
#   C. the crashed leader rejoins;
#   D. synchronous_mode on, the leader's PostgreSQL stalls (every process
#      of it stopped) for longer than the ttl while its Patroni runs: a
#      replica takes over and acknowledges publishes; when the old leader
#      goes on, its Patroni finds the lock taken, steps down and rejoins:
#      nothing acknowledged lost, no resync (the cluster's Patroni speaks
#      etcd's v2 API: over etcd3, Debian 12's Patroni 3.0.2 writes the lock
#      back and the new leader's acknowledged publishes are rewound away);
#   E. synchronous_mode off, both replicas' WAL receivers stopped (real
#      lag), events acknowledged and applied by the consumers, the leader
#      crashes: every consumer that applied a lost event gets a resync
#      (ZE002 or ZE003) before anything of that organization's new history,
#      and a consumer stopped before the lost events sees none of them;
#   F. the old leader of E rejoins (pg_rewind): the workers run on the
#      leader only, the replicas registered before the failovers are still
#      registered and still hold retention, and a consumer reading from the
#      rejoined node as a standby gets new events by polling.
#
# After each step the notifier and the maintenance worker run on the leader
# and on no replica.  At the end the test prints, per publisher and per
# consumer: acknowledged, present, lost, duplicated, resyncs, and each
# step's timings.

use strict;
use warnings;

use EventhubTest;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

plan skip_all => 'patroni is not installed (scripts/deps.sh installs it)'
  unless IPC::Run::run([ 'sh', '-c', 'command -v patroni && command -v etcd' ], '>', \my $found);
my $pgx = '/usr/share/gocode/src/github.com/jackc/pgx/v4';
plan skip_all => 'go or pgx v4 is not installed (golang-go, golang-github-jackc-pgx-v4-dev)'
  unless IPC::Run::run([ 'sh', '-c', 'command -v go' ], '>', \my $go_path) && -d $pgx;
plan skip_all => 'psycopg 3 is not installed (python3-psycopg)'
  unless -x '/usr/bin/python3' && IPC::Run::run([ '/usr/bin/python3', '-c', 'import psycopg' ], '2>', \my $py_err);

my $json    = JSON::PP->new;
my $dir     = PostgreSQL::Test::Utils::tempdir_short();
my $ha_dir  = "$dir/ha";
my $ha      = "$work/scripts/ha-cluster.sh";
my $limit   = $PostgreSQL::Test::Utils::timeout_default;
my $backstop = 4 * $limit;
my $started = 0;
my (@publishers, @consumers);

# ha(ARGS): scripts/ha-cluster.sh ARGS; its stdout, or dies with its stderr.
sub ha
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'bash', $ha, @_ ], '<', \'', '>', \$out, '2>', \$err, IPC::Run::timeout($backstop))
	  or die "ha-cluster.sh @_ failed: $err$out";
	chomp $out;
	return $out;
}

# Everything started here stops, whatever happened.
END
{
	my $status = $?;
	for my $p (@publishers, @consumers)
	{
		next unless $p->{h};
		eval { kill 'CONT', $p->{h}{KIDS}[0]{PID}; $p->{h}->kill_kill; };
	}
	eval { ha('down', $ha_dir) } if $started;
	$? = $status;
}

# The nodes: node1..3 on HA_BASE_PORT + 11..13.  A base of the pid's own
# keeps two runs on one machine apart.
my $base = 20000 + ($$ % 400) * 40;
my %port = map { ("node$_" => $base + 10 + $_) } 1 .. 3;

sub conn_of { return "host=127.0.0.1 port=$port{$_[0]} dbname=postgres user=postgres connect_timeout=5"; }

# sql_on(NODE, SQL): its result, or undef (with the error in $@) when it fails.
sub sql_on
{
	my ($node, $sql) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', conn_of($node), '-c', $sql ],
		'<', \'', '>', \$out, '2>', \$err, IPC::Run::timeout($limit));
	$@ = $err;
	return undef unless $ok;
	chomp $out;
	return $out;
}

sub leader { my ($name) = split ' ', ha('leader', $ha_dir); return $name; }

# ha_pumped(ARGS): ha(ARGS), with the publishers and consumers pumped and
# the consumers' lines read while it runs, so that when each line came
# counts (lines_of).
sub ha_pumped
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'bash', $ha, @_ ], '<', \'', '>', \$out, '2>', \$err, IPC::Run::timeout($backstop));
	while ($h->pumpable)
	{
		$h->pump_nb;
		$_->{h}->pump_nb for grep { $_->{h} && $_->{h}->pumpable } @publishers, @consumers;
		lines_of($_) for @consumers;
		usleep(10_000);
	}
	$h->finish or die "ha-cluster.sh @_ failed: $err$out";
	chomp $out;
	return $out;
}

# Publishers and consumers are pumped by every wait.
pump_during_waits(sub { grep { $_->{h} } @publishers, @consumers });

my $t_up = time;
{
	local $ENV{HA_BASE_PORT}  = $base;
	local $ENV{HA_PARAMETERS} = 'eventhub.retention=1s,eventhub.maintenance_interval=1h,eventhub.replica_ttl=30min';
	local $ENV{HA_WAIT_LIMIT} = $limit;
	$started = 1;
	note(ha('up', $ha_dir));
}
my %timing = (up => time - $t_up);
# A crashed leader's lock lasts its ttl: 12 s instead of the script's 20
# (loop_wait + 2 * retry_timeout must stay within it).
ha('config', $ha_dir, '{"ttl": 12, "loop_wait": 1, "retry_timeout": 5}');
my $conninfo = ha('conninfo', $ha_dir);
like($conninfo, qr/target_session_attrs=read-write/, 'the cluster is up; its conninfo names every node');

# The workers run on the leader, and on no replica.
sub workers_on_leader_only
{
	my ($step, @down) = @_;
	my %down = map { ($_ => 1) } @down;
	my $leader = leader();
	my $ok = wait_until(
		"$step: eventhub's workers on $leader only",
		sub {
			for my $node (grep { !$down{$_} } sort keys %port)
			{
				my $n = sql_on($node,
					"SELECT count(*) FILTER (WHERE backend_type = 'eventhub notifier') || ',' || count(*) FILTER (WHERE backend_type = 'eventhub maintenance') FROM pg_stat_activity"
				) // return 0;
				return 0 unless $n eq ($node eq $leader ? '1,1' : '0,0');
			}
			return 1;
		});
	ok($ok, "$step: the notifier and the maintenance worker run on the leader ($leader), none on a replica");
}
workers_on_leader_only('start');

# Build the Go consumer offline (as 013 does).
{
	my ($out, $err) = ('', '');
	IPC::Run::run(go_example_build($dir), '>', \$out, '2>', \$err, IPC::Run::timeout($backstop))
	  or BAIL_OUT("the Go consumer does not build: $err");
}

# Consumers.  kind: watch (eventhub watch: JSON lines) or ref (EVENT and
# RESYNC lines).
my @followed = qw(pub-cli pub-sql lost-org);
sub start_consumer
{
	my ($name, $kind, @cmd) = @_;
	# IPC::Run's own timeout only stops a run that hangs: the END block
	# stops them otherwise.
	my $c = { name => $name, kind => $kind, out => '', err => '' };
	$c->{h} = IPC::Run::start(\@cmd, '<', \'', '>', \$c->{out}, '2>', \$c->{err}, IPC::Run::timeout(5 * $backstop));
	push @consumers, $c;
	return $c;
}
my @watch_common = ('--after', '0', '--poll-interval', '1000', '--heartbeat-interval', '500', '--timeout', $backstop);
my $w_all = start_consumer('watch --all', 'watch', $cli, '-d', $conninfo, 'watch', '--all', '--replica-id', 'w-all',
	@watch_common);
my $w_org = start_consumer('watch --org', 'watch', $cli, '-d', $conninfo, 'watch', (map { ('--org', $_) } @followed),
	'--replica-id', 'w-org', @watch_common);
my %ref = (go => ["$dir/consumer-go"], python => [ '/usr/bin/python3', "$work/examples/python/consumer.py" ]);
my @refs = map {
	start_consumer($_, 'ref', @{ $ref{$_} }, '--conninfo', "$conninfo application_name=ha-$_", (map { ('--org', $_) } @followed),
		'--cursor-file', "$dir/cursor-$_.json", '--poll-interval-ms', '1000', '--timeout', $backstop)
} sort keys %ref;
# A replica that stops before the failover of E, holding retention.
my $holder = start_consumer('holder', 'watch', $cli, '-d', $conninfo, 'watch', '--org', 'ret-org', '--replica-id', 'r-hold',
	@watch_common);
# One stopped before E's lost events: it must never see them.
my $sleeper = start_consumer('sleeper', 'watch', $cli, '-d', $conninfo, 'watch', (map { ('--org', $_) } @followed),
	'--replica-id', 'w-sleeper', @watch_common);
my @running = ($w_all, $w_org, @refs);

# What a consumer printed: [kind, org, revision, version] per line, kind
# EVENT or RESYNC (revision: for a resync, the head it goes on from).  Read
# as it comes: only the lines printed since the last call are parsed.
sub lines_of
{
	my ($c) = @_;
	$c->{lines} //= [];
	$c->{pos}   //= 0;
	while ((my $nl = index($c->{out}, "\n", $c->{pos})) >= 0)
	{
		my $line = substr($c->{out}, $c->{pos}, $nl - $c->{pos});
		$c->{pos} = $nl + 1;
		my $l;
		if ($c->{kind} eq 'watch')
		{
			my $j = $json->decode($line);
			$l = $j->{resync} ? [ 'RESYNC', $j->{organization_id}, $j->{head_revision}, $j->{reason} ]
			  : [ 'EVENT', $j->{organization_id}, $j->{revision}, $j->{version_id} ];
		}
		else
		{
			# EVENT org revision version ...; RESYNC org reason revision version.
			my @f = split / /, $line;
			$l = $f[0] eq 'EVENT' ? [ @f[ 0 .. 3 ] ] : $f[0] eq 'RESYNC' ? [ 'RESYNC', $f[1], $f[3], $f[2] ] : next;
		}
		push @{ $c->{lines} }, $l;
		my ($kind, $org, $rev) = @$l;
		$c->{seen}{"$org $rev"} //= time if $kind eq 'EVENT';
		$c->{applied}{$org} = $kind eq 'RESYNC' ? $rev : $rev > ($c->{applied}{$org} // 0) ? $rev : $c->{applied}{$org};
		$c->{resyncs}++ if $kind eq 'RESYNC';
	}
	return @{ $c->{lines} };
}

# The highest revision of ORG a consumer applied (since its last resync).
sub applied { my ($c, $org) = @_; lines_of($c); return $c->{applied}{$org} // 0; }

sub resyncs { my ($c) = @_; lines_of($c); return $c->{resyncs} // 0; }
# Publishers.
my %pub;
for my $kind (qw(cli sql))
{
	my $p = { kind => $kind, org => "pub-$kind", log => "$dir/pub-$kind.log", stop => "$dir/pub-$kind.stop" };
	$p->{h} = IPC::Run::start(
		[ 'bash', "$work/regress/ha-publisher.sh", $kind, $conninfo, $p->{org}, $p->{log}, $p->{stop}, $cli ],
		'<', \'', '>', \my $o, '2>', \my $e, IPC::Run::timeout(5 * $backstop));
	$pub{$kind} = $p;
	push @publishers, $p;
}

# A publisher's log: acks [id, revision, start, end], retries [id, time],
# failures.
sub pub_log
{
	my ($p) = @_;
	my (@acks, @retries, @fails);
	open my $fh, '<', $p->{log} or return ([], [], []);
	# A lexical line: $_ is often a publisher, aliased, in the callers.
	while (my $line = <$fh>)
	{
		my @f = split ' ', $line;
		push @acks,    [ @f[ 1 .. 4 ] ] if $f[0] eq 'ACK';
		push @retries, [ @f[ 1 .. 2 ] ] if $f[0] eq 'RETRY';
		push @fails, $line if $f[0] eq 'FAIL';
	}
	return (\@acks, \@retries, \@fails);
}
sub acks { return @{ (pub_log($_[0]))[0] }; }
sub last_ack { my @a = acks($_[0]); return @a ? $a[-1] : undef; }

# Waits until both publishers acknowledged an event that started after T.
sub publishing_after
{
	my ($what, $t) = @_;
	return wait_until("$what: both publishers acknowledged an event started after it",
		sub { !grep { my $ack = last_ack($_); !$ack || $ack->[2] <= $t } values %pub });
}

# Waits until every consumer in CS applied each publisher's latest
# acknowledged event; returns the time that took since T.
sub caught_up
{
	my ($what, $t, @cs) = @_;
	my %want = map { ($_->{org} => last_ack($_)->[1]) } values %pub;
	my $ok = wait_until("$what: the consumers caught up",
		sub { !grep { my $c = $_; grep { applied($c, $_) < $want{$_} } keys %want } @cs });
	ok($ok, "$what: every consumer applied the publishers' latest acknowledged events")
	  or diag(join "\n", map { my $c = $_; "$c->{name}: " . join(', ', map { "$_ " . applied($c, $_) . "/$want{$_}" } sort keys %want) . "\n$c->{err}" } @cs);
	return time - $t;
}

# The publishing outage around T: from T to the first acknowledgement after
# the first failed attempt (or to the first acknowledgement after T).
sub outage
{
	my ($t) = @_;
	my $worst = 0;
	for my $p (values %pub)
	{
		my ($acks, $retries) = pub_log($p);
		my ($fail) = grep { $_->[1] >= $t } @$retries;
		my $from = $fail ? $fail->[1] : $t;
		my ($ok) = grep { $_->[3] > $from } @$acks;
		$worst = $ok->[3] - $t if $ok && $ok->[3] - $t > $worst;
	}
	return $worst;
}

# The first event each publisher got acknowledged after its first failed
# attempt since T (by the new leader): how long after that acknowledgement
# each consumer of CS printed it (when lines_of read it), as
# ["consumer: publisher", seconds] pairs.
sub back_after
{
	my ($t, @cs) = @_;
	my @found;
	for my $p (sort { $a->{org} cmp $b->{org} } values %pub)
	{
		my ($acks, $retries) = pub_log($p);
		my ($fail) = grep { $_->[1] >= $t } @$retries;
		my ($ok) = $fail ? grep { $_->[3] > $fail->[1] } @$acks : ();
		next unless $ok;
		push @found, map { lines_of($_); [ "$_->{name}: $p->{org}", ($_->{seen}{"$p->{org} $ok->[1]"} // 1e20) - $ok->[3] ] } @cs;
	}
	return @found;
}

# Every acknowledged event is in the leader's eventhub.events, once, at its
# revision; returns (acknowledged, lost) over ACKS ([org, id, revision]).
sub check_acks
{
	my ($acks) = @_;
	my $leader = leader();
	my %rows = map { my ($org, $corr, $rev) = split /\|/; ("$org $corr" => $rev) } split /\n/,
	  sql_on($leader, "SELECT organization_id, correlation_id, revision FROM eventhub.events WHERE organization_id LIKE 'pub-%' OR organization_id = 'pause-org'");
	my $lost = grep { ($rows{"$_->[0] $_->[1]"} // -1) != $_->[2] } @$acks;
	return (scalar @$acks, $lost);
}
sub all_acks { return map { my $p = $_; map { [ $p->{org}, $_->[0], $_->[1] ] } acks($p) } values %pub; }

# A consumer's resyncs so far, to tell why when one was not expected: per
# resync its organization, reason and head, the last events the consumer
# had applied of that organization (revision:version), the leader's rows
# at those revisions and the head now, and the revisions its publisher was
# told: a needed resync from a needless one.
sub resync_context
{
	my ($c) = @_;
	my @l = lines_of($c);
	my @out;
	for my $i (grep { $l[$_][0] eq 'RESYNC' } 0 .. $#l)
	{
		my (undef, $org, $head, $reason) = @{ $l[$i] };
		# Its last three events of the organization, and the head.
		my @before = grep { $_->[0] eq 'EVENT' && $_->[1] eq $org } @l[ 0 .. $i - 1 ];
		splice(@before, 0, @before - 3) if @before > 3;
		my @revs = ((map { $_->[2] } @before), $head);
		my $leader_rows = sql_on(leader(), "SELECT string_agg(revision || ':' || version_id, ' ' ORDER BY revision) FROM eventhub.events"
			  . " WHERE organization_id = '$org' AND revision IN (" . join(',', @revs) . ')') // "($@)";
		my ($kind) = $org =~ /^pub-(cli|sql)$/;
		my %rev = map { ($_ => 1) } @revs;
		my @acked = $kind ? grep { $rev{ $_->[1] } } acks($pub{$kind}) : ();
		push @out, "$org ($reason) at $head; applied before it: "
		  . join(' ', map { "$_->[2]:$_->[3]" } @before)
		  . "; the leader now: $leader_rows; acknowledged: " . join(' ', map { "$_->[1] ($_->[0])" } @acked);
	}
	return join "\n", @out;
}

ok(publishing_after('start', time), 'both publishers publish through the multi-host conninfo');
caught_up('start', time, @running, $sleeper);

# A. A planned switchover.
my $t0 = time;
my $from = leader();
note(ha_pumped('switchover', $ha_dir));
my $to = leader();
isnt($to, $from, "A: the switchover moved the leader ($from to $to)");
ok(publishing_after('A', $t0), 'A: publishing resumes on the new leader');
$timing{A} = { publish => outage($t0), caught_up => caught_up('A', $t0, @running, $sleeper) };
my @back = back_after($t0, @running);
diag(sprintf('A: the first event acknowledged by the new leader printed after its acknowledgement: %s',
	join(', ', map { sprintf('%s %.0f ms', $_->[0], 1000 * $_->[1]) } @back)));
ok(scalar(grep { $_->[0] =~ /^watch/ } @back), 'A: a publisher saw the switchover (an attempt failed)');
cmp_ok($_->[1], '<', 2.5, "A: $_->[0]: the first event of the new leader printed within 2.5 s of its acknowledgement")
  for grep { $_->[0] =~ /^watch/ } @back;
my ($n, $lost) = check_acks([ all_acks() ]);
is($lost, 0, "A: every acknowledged event is there ($n acknowledged)");
is(resyncs($_), 0, "A: $_->{name}: no resync") or diag("$_->{name} resynced:\n" . resync_context($_)) for @running, $sleeper;
workers_on_leader_only('A');

# B. Synchronous mode, then the leader crashes.
ha('config', $ha_dir, '{"synchronous_mode": true}');
# The leader has a synchronous standby, in PostgreSQL and in Patroni's view.
sub has_sync_standby
{
	my $l = eval { leader() } // return 0;
	return (sql_on($l, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") // '') eq '1'
	  && `curl -s --max-time 2 http://127.0.0.1:@{[ $base + 20 + substr($l, 4) ]}/cluster` =~ /"role": "sync_standby"/;
}
ok(wait_until('B: a synchronous standby', \&has_sync_standby), 'B: synchronous_mode on: the leader has a synchronous standby');
ok(publishing_after('B (synchronous)', time), 'B: publishing under synchronous replication');
$t0 = time;
my $crashed = leader();
ha('crash', $ha_dir, $crashed);
ok(wait_until('B: a new leader', sub { my $l = eval { leader() }; $l && $l ne $crashed && (sql_on($l, 'SELECT NOT pg_is_in_recovery()') // '') eq 't' }),
	"B: the leader ($crashed) crashed; another took over");
my $t_writable = time - $t0;
ok(publishing_after('B', $t0), 'B: publishing resumes on the new leader');
$timing{B} = { leader => $t_writable, publish => outage($t0), caught_up => caught_up('B', $t0, @running, $sleeper) };
($n, $lost) = check_acks([ all_acks() ]);
is($lost, 0, "B: synchronous: every acknowledged event is there ($n acknowledged)");
is(resyncs($_), 0, "B: $_->{name}: no resync") or diag("$_->{name} resynced:\n" . resync_context($_)) for @running, $sleeper;
workers_on_leader_only('B', $crashed);

# rejoin(STEP, NODE): NODE's Patroni started again; waits until the leader
# has both replicas streaming; returns the seconds that took.
sub rejoin
{
	my ($step, $node) = @_;
	my $t = time;
	ha('start', $ha_dir, $node);
	ok(wait_until("$step: the old leader streams again",
		sub { (sql_on(leader(), "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") // '') eq '2' }),
		"$step: $node rejoined as a replica");
	return time - $t;
}

# C. The crashed leader rejoins.
$timing{C} = rejoin('C', $crashed);
workers_on_leader_only('C');

# D. Still synchronous: the leader's PostgreSQL stalls past the ttl.  A
# publish in flight to it waits until it goes on (no client timeout ends a
# query to a server whose kernel still answers), so the test publishes on
# the new leader itself as well, with an acknowledgement of its own.
ok(wait_until('D: a synchronous standby', \&has_sync_standby), 'D: the leader has a synchronous standby again');
ok(publishing_after('D (synchronous)', time), 'D: publishing under synchronous replication');
$t0 = time;
my $paused = leader();
ha('pause', $ha_dir, $paused, 'postgres');
ok(wait_until('D: a new leader', sub { my $l = eval { leader() }; $l && $l ne $paused && (sql_on($l, 'SELECT NOT pg_is_in_recovery()') // '') eq 't' }),
	"D: the leader's PostgreSQL ($paused) stalled past the ttl; another took over");
$timing{D} = { leader => time - $t0 };
my $promoted = leader();
my @paused_acks = split /,/, (sql_on($promoted,
		"SELECT string_agg(eventhub.publish_event('pause-org', 'API', 'UPDATE', 'pause-' || i, 'pause-' || i, '{}')::text, ',' ORDER BY i)"
		  . ' FROM generate_series(1, 20) i') // die "publishing on $promoted failed: $@");
is(scalar @paused_acks, 20, "D: $promoted acknowledged 20 publishes while $paused was stalled");
my $t_resume = time;
ha('resume', $ha_dir, $paused);
# Whichever node leads then, both others stream from it.
ok(wait_until('D: the cluster whole again', sub {
			my $l = eval { leader() } // return 0;
			(sql_on($l, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") // '') eq '2'
			  && !grep { (sql_on($_, 'SELECT pg_is_in_recovery()') // '') ne 't' } grep { $_ ne $l } sort keys %port;
		}),
	"D: $paused went on; the cluster has a leader and two streaming replicas");
$timing{D}{rejoin} = time - $t_resume;
is(leader(), $promoted, "D: $promoted keeps the lead: $paused stepped down when it went on");
ok(publishing_after('D', $t_resume), 'D: publishing goes on');
$timing{D}{publish} = outage($t0);
$timing{D}{caught_up} = caught_up('D', $t0, @running, $sleeper);
($n, $lost) = check_acks([ all_acks(), map { [ 'pause-org', "pause-$_", $paused_acks[ $_ - 1 ] ] } 1 .. 20 ]);
is($lost, 0, "D: synchronous, a stalled leader: every acknowledged event is there ($n acknowledged, 20 of them while $paused was stalled)");
is(resyncs($_), 0, "D: $_->{name}: no resync") or diag("$_->{name} resynced:\n" . resync_context($_)) for @running, $sleeper;
# (Or a resync of pause-org, which fails at once where they were lost.)
wait_until('D: watch --all has pause-org', sub { applied($w_all, 'pause-org') >= 20 || grep { $_->[0] eq 'RESYNC' && $_->[1] eq 'pause-org' } lines_of($w_all) });
is(applied($w_all, 'pause-org'), 20, 'D: watch --all applied the 20 events acknowledged while the old leader was stalled');
workers_on_leader_only('D');

# E. Asynchronous, with real lag: the replicas stop receiving WAL.
ha('config', $ha_dir, '{"synchronous_mode": false, "maximum_lag_on_failover": 1073741824}');
my $old = leader();
ok(wait_until('E: no synchronous standby',
	sub { (sql_on($old, "SELECT count(*) FILTER (WHERE sync_state = 'sync') || ',' || count(*) FROM pg_stat_replication") // '') eq '0,2' }),
	'E: synchronous_mode off');
my @replicas = grep { $_ ne $old } sort keys %port;
# The holder applies three events of ret-org (one entity, each superseding
# the one before), reports it, and stops; five more follow.
sub publish_on
{
	my ($node, $org, $n, $entity) = @_;
	sql_on($node, "SELECT count(eventhub.publish_event('$org', 'API', 'UPDATE', " . ($entity ? "'$entity'" : "'$org-' || i") . ", NULL, '{}')) FROM generate_series(1, $n) i")
	  // die "publishing to $org on $node failed: $@";
}
publish_on($old, 'ret-org', 3, 'config');
ok(wait_until('E: the holder at 3', sub { applied($holder, 'ret-org') == 3
	  && (sql_on($old, "SELECT applied_revision FROM eventhub.replica_progress WHERE replica_id = 'r-hold' AND organization_id = 'ret-org'") // '') eq '3' }),
	'E: the holder applied ret-org 1-3 and reported it');
kill 'STOP', $holder->{h}{KIDS}[0]{PID};
publish_on($old, 'ret-org', 5, 'config');
kill 'STOP', $sleeper->{h}{KIDS}[0]{PID};
# Everything so far reaches both replicas; then they stop receiving.  What
# the publishers were told before the LSN is read is in the WAL before it:
# read after, an acknowledgement of a commit past it (before the senders
# stop) would count as one the replicas must have.
my @acked_before = all_acks();
my $lsn = sql_on($old, 'SELECT pg_current_wal_lsn()');
ok(wait_until('E: the replicas caught up', sub { !grep { (sql_on($_, "SELECT pg_last_wal_replay_lsn() >= '$lsn'") // '') ne 't' } @replicas }),
	'E: both replicas replayed everything before the lag');
# The leader's WAL senders stop: what it writes from now on stays on it (a
# stopped WAL receiver would not do: the kernel's socket buffers would keep
# receiving for it).
my @senders = split /\n/, sql_on($old, 'SELECT pid FROM pg_stat_replication');
is(scalar @senders, 2, 'E: the leader has a WAL sender for each replica');
kill 'STOP', @senders;
publish_on($old, 'lost-org', 5);
ok(wait_until('E: the consumers applied the lost events', sub { !grep { applied($_, 'lost-org') < 5 } @running }),
	'E: every running consumer applied lost-org 1-5 from the leader');
# And some of the publishers' own.
my %acked_lag = map { ($_->{org} => scalar acks($_)) } values %pub;
ok(wait_until('E: acknowledgements under lag', sub { !grep { acks($_) < $acked_lag{ $_->{org} } + 3 } values %pub }),
	'E: both publishers acknowledged events the replicas never received');
caught_up('E (before the crash)', time, @running);
$t0 = time;
ha('crash', $ha_dir, $old);
# A crash takes the stopped senders with it.
kill 'KILL', @senders;
ok(wait_until('E: a new leader', sub { my $l = eval { leader() }; $l && $l ne $old && (sql_on($l, 'SELECT NOT pg_is_in_recovery()') // '') eq 't' }),
	"E: the leader ($old) crashed; another took over");
$timing{E} = { leader => time - $t0 };
my $new = leader();
is(sql_on($new, "SELECT count(*) FROM eventhub.events WHERE organization_id = 'lost-org'"), '0',
	'E: the new leader never received lost-org\'s events');
ok(publishing_after('E', $t0), 'E: publishing resumes on the new leader');
$timing{E}{publish} = outage($t0);
# lost-org's new history.
publish_on($new, 'lost-org', 2);
# Every consumer that applied a lost event resyncs that organization.
my %t_resync;
ok( wait_until(
		'E: the consumers resynced',
		sub {
			for my $c (@running)
			{
				next if $t_resync{ $c->{name} };
				$t_resync{ $c->{name} } = time - $t0 if grep { $_->[0] eq 'RESYNC' && $_->[1] eq 'lost-org' } lines_of($c);
			}
			return keys %t_resync == @running;
		}),
	'E: every consumer that applied lost-org\'s events gets a resync for it');
$timing{E}{resync} = { %t_resync };
$timing{E}{caught_up} = caught_up('E', $t0, @running);
kill 'CONT', $sleeper->{h}{KIDS}[0]{PID};
ok(wait_until('E: the sleeper', sub { applied($sleeper, 'lost-org') >= 2 && applied($sleeper, 'pub-cli') >= last_ack($pub{cli})->[1] }),
	'E: the consumer stopped before the lost events catches up');
workers_on_leader_only('E', $old);

# F. The old leader of E rejoins: its history forked, Patroni rewinds it.
$timing{F} = rejoin('F', $old);
like(slurp_file("$ha_dir/$old/patroni.log"), qr/pg_rewind exit code=0|reinitializ/, "F: Patroni rewound $old with pg_rewind (or reinitialized it)");
workers_on_leader_only('F');
is( sql_on(leader(), "SELECT string_agg(replica_id, ',' ORDER BY replica_id) FROM eventhub.replicas"
		  . " WHERE last_heartbeat >= now() - current_setting('eventhub.replica_ttl')::interval"
		  . " AND replica_id IN ('r-hold', 'w-all', 'w-org', 'w-sleeper')"),
	'r-hold,w-all,w-org,w-sleeper', 'F: the replicas registered before the failovers are registered and live');
sql_on(leader(), 'SELECT eventhub.run_maintenance()') // die "run_maintenance: $@";
is(sql_on(leader(), "SELECT string_agg(revision::text, ',' ORDER BY revision) FROM eventhub.events WHERE organization_id = 'ret-org'"),
	'3,4,5,6,7,8', 'F: retention (1 s) keeps what the stopped holder has not applied, and its cursor\'s event');
# A consumer on the rejoined node, a standby: it polls.
my $on_standby = start_consumer('on the standby', 'watch', $cli, '-d', conn_of($old), 'watch', '--org', 'ret-org',
	'--after', '8', '--fallback-poll-interval', '250', '--timeout', $backstop);
ok(wait_for(what => 'LISTEN refused on the standby', watch => $on_standby, stderr => qr/LISTEN|listen/),
	'F: on the standby the consumer cannot listen, and says so');
publish_on(leader(), 'ret-org', 1, 'config');
ok(wait_until('F: the standby consumer', sub { applied($on_standby, 'ret-org') == 9 }),
	'F: a consumer reading from the rejoined node gets a new event by polling');

# The end: publishers stop; the counts.
kill 'CONT', $holder->{h}{KIDS}[0]{PID};
for my $p (values %pub)
{
	open my $fh, '>', $p->{stop} or die $!;
	close $fh;
	$p->{h}->finish;
	my (undef, undef, $fails) = pub_log($p);
	is(scalar @$fails, 0, "publisher $p->{kind}: no error it could not retry") or diag(@$fails);
}
$_->{h}->kill_kill for grep { $_->{h} } @consumers;
my $leader = leader();
my %in_db;    # "org rev" => version, on the final leader
for (split /\n/, sql_on($leader, "SELECT organization_id, revision, version_id FROM eventhub.events WHERE organization_id <> 'ret-org'"))
{
	my ($org, $rev, $ver) = split /\|/;
	$in_db{"$org $rev"} = $ver;
}
my @final = all_acks();
my ($acked, $lost_total) = check_acks(\@final);
my ($acked_b, $lost_b) = check_acks(\@acked_before);
is($lost_b, 0, "before E's lag: every acknowledged event is on the final leader ($acked_b)");
diag(sprintf('publishers: %d acknowledged, %d present, %d lost (acknowledged in E by the leader that crashed while its replicas lagged)',
	$acked, $acked - $lost_total, $lost_total));
for my $c (@running, $sleeper)
{
	# A consumer diverges silently when it applies an event of the final
	# history of an organization after applying one that is not in it,
	# without a resync of that organization between the two.
	my (%tainted, %seen);
	my ($silent, $dup, $foreign) = (0, 0, 0);
	# The organizations the publishers and E write (ret-org is retention's,
	# which deletes some of its events).
	for my $l (grep { $_->[1] =~ /^(pub-cli|pub-sql|lost-org)$/ } lines_of($c))
	{
		my ($kind, $org, $rev, $ver) = @$l;
		if ($kind eq 'RESYNC') { delete $tainted{$org}; %seen = map { ($_ => $seen{$_}) } grep { !/^\Q$org\E / } keys %seen; next; }
		$dup++ if $seen{"$org $rev"}++;
		if (($in_db{"$org $rev"} // '') ne $ver) { $tainted{$org} = 1; $foreign++; }
		elsif ($tainted{$org}) { $silent++; }
	}
	$silent += keys %tainted;
	is($silent, 0, "$c->{name}: no silent divergence");
	is($dup, 0, "$c->{name}: no event applied twice");
	diag(sprintf('%s: %d events applied, %d of them lost in E, %d resyncs', $c->{name}, scalar(grep { $_->[0] eq 'EVENT' } lines_of($c)), $foreign, resyncs($c)));
}
# The stopped consumer's connection had received the notifications of the
# lost events, which may carry them (channel eventhub_events): resumed, it
# may apply them before it finds the connection gone, and then resyncs as
# the running consumers did.  Without them it has nothing to resync.
my $sleeper_lost = grep { $_->[0] eq 'EVENT' && $_->[1] eq 'lost-org' && ($in_db{"lost-org $_->[2]"} // '') ne $_->[3] }
  lines_of($sleeper);
if ($sleeper_lost)
{
	cmp_ok(resyncs($sleeper), '>=', 1,
		"E: the consumer stopped before the lost events applied $sleeper_lost from notifications it had not read, and resynced");
}
else
{
	is(resyncs($sleeper), 0, 'E: the consumer stopped before the lost events applied none and needed no resync');
}
diag(sprintf('timings (s): up %.1f; A switchover: publishing back after %.1f, consumers caught up after %.1f; '
	  . 'B synchronous crash: new leader after %.1f, publishing after %.1f, caught up after %.1f; C rejoin %.1f; '
	  . 'D synchronous, a stalled leader: new leader after %.1f, the old one rejoined %.1f after it went on, publishing after %.1f, caught up after %.1f; '
	  . 'E asynchronous crash: new leader after %.1f, publishing after %.1f, resyncs after %s, caught up after %.1f; F rejoin with pg_rewind %.1f',
	$timing{up}, @{ $timing{A} }{qw(publish caught_up)}, @{ $timing{B} }{qw(leader publish caught_up)}, $timing{C},
	@{ $timing{D} }{qw(leader rejoin publish caught_up)},
	@{ $timing{E} }{qw(leader publish)}, join(', ', map { sprintf '%s %.1f', $_, $timing{E}{resync}{$_} } sort keys %{ $timing{E}{resync} }),
	$timing{E}{caught_up}, $timing{F}));

done_testing();
