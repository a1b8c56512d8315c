# 001_notify.pl: the NOTIFY that announces published events, as each
# publishing transaction sends it (the library not preloaded: no notifier
# worker; 012_notifier.pl tests the worker, which sends the same payloads).
#
# When a transaction that published commits, eventhub sends on channel
# "eventhub" one notification per organization it moved, with the payload
#     {"notification_token": "<32 hex digits>", "version_id": "<uuid>"}
# where the token is eventhub.notification_token(organization) and the
# version is the organization's version after the transaction.  This test
# drives real psql sessions that LISTEN, reads the notifications psql
# prints, and checks that they
#   - carry exactly those two keys, the organization's token and its head
#     version, and neither the organization id nor a revision;
#   - give every awkward organization id, up to the 1024-byte limit, its own
#     token of the same fixed size;
#   - arrive only when the publishing transaction commits, never for a
#     rolled-back publish, a rolled-back savepoint or an idempotent replay;
#   - come once per organization and transaction, naming its last version;
#   - never carry the event's data;
#   - change tokens when the key is rotated.
#
# Every "nothing was sent" check is followed by a publish that must be
# heard, so a session that hears nothing at all cannot pass it.

use strict;
use warnings;

use EventhubTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

# UTF8 so that non-ASCII ids are stored and delivered as UTF-8 bytes.
my $node = eventhub_node('notify', preload => 0,
	init => { extra => [ '--encoding=UTF8', '--locale=C' ] });
is($node->safe_psql('postgres', 'SELECT eventhub.notification_mode()'), 'transaction',
	'without the library preloaded, each publishing transaction notifies');

my $json = JSON::PP->new->utf8;

#
# Helpers
#

# One-line SELECT that publishes an event of organization ORG with
# correlation id CORR (a correlation id identifies the event row later).
sub publish_1
{
	my ($org, $corr, %opt) = @_;
	return publish_sql($org, corr => $corr, entity => 'entity-1', %opt);
}

# Runs SCRIPT in one psql session; returns (exit code, stdout, stderr).
sub run_session
{
	my ($script, %opt) = @_;
	my ($out, $err) = ('', '');
	my $ret = $node->psql(
		'postgres', $script,
		stdout        => \$out,
		stderr        => \$err,
		on_error_stop => $opt{on_error_stop} // 1,
		extra_params  => $opt{extra_params} // [],
		timeout       => $PostgreSQL::Test::Utils::timeout_default);
	return ($ret, $out, $err);
}

# Notifications psql printed in OUT (notifications_in); a line that
# mentions a notification but does not parse fails the test.
sub notifications
{
	my ($out, $label) = @_;
	my @found = notifications_in($out);
	my $mentions = () = $out =~ /Asynchronous notification/g;
	is(scalar(@found), $mentions, "$label: every notification psql printed parses");
	return @found;
}

# Lines of OUT that are not notifications (query results and echo).
sub other_lines
{
	my ($out) = @_;
	return grep { !/^Asynchronous notification / } split /\n/, $out;
}

my $uuid_re = qr/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

# Checks channel and shape of notification N and returns its decoded payload.
# The shape: exactly the documented keys in the documented order, the token
# 32 lower-case hex digits, the version id a lower-case UUID string.
sub decode_payload
{
	my ($n, $label) = @_;
	is($n->{channel}, 'eventhub', "$label: channel is eventhub");
	like(
		$n->{payload},
		qr/^\{"notification_token": "[0-9a-f]{32}", "version_id": "$uuid_re"\}$/,
		"$label: payload has the documented form");
	my $obj = eval { $json->decode($n->{payload}) };
	is(ref($obj), 'HASH', "$label: payload parses as a JSON object")
	  or diag("JSON error: $@");
	$obj = {} unless ref($obj) eq 'HASH';
	is_deeply(
		[ sort keys %$obj ],
		[qw(notification_token version_id)],
		"$label: payload has exactly notification_token and version_id");
	return $obj;
}

# The token of organization ORG, as eventhub.notification_token() gives it.
sub token_of
{
	my ($org) = @_;
	return $node->safe_psql('postgres',
		'SELECT eventhub.notification_token(' . sql_literal($org) . ')');
}

# The event with correlation id CORR and its organization's state, as
# {revision, version_id, org_hex, state_revision, state_version_id}, or
# undef if there is no such event.  org_hex is the id's UTF-8 bytes in hex.
sub event_row
{
	my ($corr) = @_;
	my $r = $node->safe_psql(
		'postgres', sprintf(
			"SELECT e.revision, e.version_id,"
			  . " encode(convert_to(e.organization_id, 'UTF8'), 'hex'),"
			  . " s.revision, s.version_id"
			  . " FROM eventhub.events e"
			  . " JOIN eventhub.organization_states s ON s.organization_id = e.organization_id"
			  . " WHERE e.correlation_id = %s",
			sql_literal($corr)));
	return undef if $r eq '';
	my @f = split /\|/, $r;
	return {
		revision         => $f[0],
		version_id       => $f[1],
		org_hex          => $f[2],
		state_revision   => $f[3],
		state_version_id => $f[4],
	};
}

sub hex_of
{
	my ($str) = @_;
	my $bytes = $str;
	utf8::encode($bytes);
	return unpack('H*', $bytes);
}

# Checks that notification N announces the organization ORG at the state of
# its event with correlation id CORR (its token, and that event's version);
# with head => 1 also that this event is the organization's head.  Returns
# the payload.
sub check_event_notification
{
	my ($n, $org, $corr, $label, %opt) = @_;
	my $p   = decode_payload($n, $label);
	my $row = event_row($corr);
	ok(defined $row, "$label: the event is in eventhub.events")
	  or return $p;
	is($row->{org_hex}, hex_of($org), "$label: the event is of the organization published to");
	is($p->{notification_token}, token_of($org),
		"$label: notification_token is the organization's token");
	is($p->{version_id}, $row->{version_id},
		"$label: version_id equals the event's");
	if ($opt{head})
	{
		is($p->{version_id}, $row->{state_version_id},
			"$label: version_id equals organization_states.version_id");
	}
	return $p;
}

sub count_events
{
	my ($where) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM eventhub.events WHERE $where");
}

#
# 1. A published event is announced with its organization's token and the
# version it published; neither the id nor the revision travels.
#
{
	my ($ret, $out, $err) = run_session(join "\n",
		'LISTEN eventhub;',
		publish_1('org-basic', 'basic-1'),
		'SELECT pg_backend_pid();');
	is($ret, 0, 'basic: session succeeded') or diag($err);
	my @n = notifications($out, 'basic');
	is(scalar(@n), 1, 'basic: one notification');
	my ($revision, $pid) = other_lines($out);
	is($revision, 1, 'basic: publish_event returned revision 1');
	if (@n)
	{
		check_event_notification($n[0], 'org-basic', 'basic-1', 'basic', head => 1);
		is($n[0]{pid}, $pid, 'basic: sent by the publishing backend');
		unlike($n[0]{payload}, qr/org-basic|revision/,
			'basic: the payload names neither the organization nor a revision');
	}
	is(token_of('org-basic'), token_of('org-basic'), 'basic: a token is stable');
}

#
# 2. Every awkward organization id gets its own token of the same size.
#
# 1024 bytes of control characters, the longest id.
my @six_byte_controls = grep { !/[\b\t\n\f\r]/ } map { chr } 1 .. 31;
my $worst_id = join '',
  map { $six_byte_controls[ $_ % @six_byte_controls ] } 0 .. 1023;
{
	my @ids = (
		[ 'double quotes',    'org"with"quotes"' ],
		[ 'backslash',        'org\\with\\backslash\\' ],
		[ 'newline',          "org\nwith\nnewline\n" ],
		[ 'tab',              "org\twith\ttab" ],
		[ 'control \\x01',    "org\x01ctl" ],
		[ 'non-ASCII e-acute', "caf\x{e9}" ],
		[ 'emoji',            "org-\x{1F600}-emoji" ],
		[
			'everything at once',
			"\"\\/\b\f\n\r\t\x01\x1f\x7f \\u0041 \x{e9}\x{1F600}\"{}: ,"
		],
		[ '1024 bytes of controls', $worst_id ],
		[ '1024 bytes of 2-byte UTF-8', "\x{e9}" x 512 ],
		[ 'a prefix of another', 'org' ],
	);
	is(length($worst_id), 1024, 'worst-case id is 1024 bytes');

	my $i = 0;
	my $script = join "\n", 'LISTEN eventhub;',
	  map { publish_1($_->[1], 'awkward-' . $i++) } @ids;
	my ($ret, $out, $err) = run_session($script);
	is($ret, 0, 'awkward ids: every publish succeeded') or diag($err);
	my @n = notifications($out, 'awkward ids');
	is(scalar(@n), scalar(@ids), 'awkward ids: one notification per publish');

	my %tokens;
	for my $k (0 .. $#ids)
	{
		my ($label, $id) = @{ $ids[$k] };
		next unless $n[$k];
		my $p = check_event_notification($n[$k], $id, "awkward-$k", "id with $label",
			head => 1);
		is(length($n[$k]{payload}), 112, "id with $label: the payload is 112 bytes, whatever the id");
		$tokens{ $p->{notification_token} // '' } = 1;
	}
	is(scalar(keys %tokens), scalar(@ids), 'awkward ids: every organization has its own token');
}

#
# 3. An id of 1025 bytes is refused and announces nothing.
#
{
	my $long_ascii = 'x' x 1025;
	my $long_utf8  = ("\x{e9}" x 512) . 'x';    # 513 characters, 1025 bytes
	my ($ret, $out, $err) = run_session(
		join("\n",
			'LISTEN eventhub;',
			publish_1($long_ascii, 'too-long-ascii'),
			publish_1($long_utf8,  'too-long-utf8'),
			publish_1("\x01" x 1025, 'too-long-ctl'),
			publish_1('org-after-too-long', 'after-too-long')),
		on_error_stop => 0);
	my @errors = $err =~ /ERROR:  organization_id is too long/g;
	is(scalar(@errors), 3, '1025-byte ids: all three publishes refused')
	  or diag($err);
	like($err, qr/The value is 1025 bytes long; the limit is 1024 bytes\./,
		'1025-byte ids: the error says which limit');
	is(count_events("correlation_id LIKE 'too-long-%'"),
		0, '1025-byte ids: no event stored');
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM eventhub.organization_states WHERE octet_length(organization_id) > 1024"
		),
		0,
		'1025-byte ids: no organization registered');
	my @n = notifications($out, '1025-byte ids');
	is(scalar(@n), 1, '1025-byte ids: only the following publish is announced');
	check_event_notification($n[0], 'org-after-too-long', 'after-too-long',
		'publish after 1025-byte ids')
	  if @n;
}

#
# 4. Delivered only on commit: with every input line echoed, the
# notification comes right after COMMIT, not after the publish.
#
{
	my $script = join "\n",
	  'LISTEN eventhub;',
	  'BEGIN;',
	  "SELECT eventhub.publish_event('org-commit', 'API', 'CREATE', 'e-1', 'commit-1', '{}');",
	  'SELECT 1;',
	  'COMMIT;',
	  'SELECT 2;';
	my ($ret, $out, $err) =
	  run_session($script, extra_params => ['--echo-all']);
	is($ret, 0, 'commit: session succeeded') or diag($err);
	my @n = notifications($out, 'commit');
	is(scalar(@n), 1, 'commit: one notification');
	my @lines = split /\n/, $out, -1;
	my ($publish_at) = grep { $lines[$_] =~ /^SELECT eventhub\.publish_event/ } 0 .. $#lines;
	my ($select1_at) = grep { $lines[$_] eq 'SELECT 1;' } 0 .. $#lines;
	my ($commit_at)  = grep { $lines[$_] eq 'COMMIT;' } 0 .. $#lines;
	my ($select2_at) = grep { $lines[$_] eq 'SELECT 2;' } 0 .. $#lines;
	ok( defined $publish_at
		  && defined $select1_at
		  && defined $commit_at
		  && defined $select2_at,
		'commit: psql echoed the script')
	  or diag($out);
	if (@n && defined $commit_at && defined $select2_at)
	{
		cmp_ok($n[0]{line}, '>', $select1_at,
			'commit: nothing was heard before COMMIT (not after the publish, not after SELECT 1)');
		cmp_ok($n[0]{line}, '>', $commit_at,
			'commit: the notification comes after COMMIT');
		cmp_ok($n[0]{line}, '<', $select2_at,
			'commit: the notification comes with COMMIT, before the next query');
		check_event_notification($n[0], 'org-commit', 'commit-1', 'commit',
			head => 1);
	}
}

# The same across sessions: a listener polling while the publisher's
# transaction is open hears nothing until the publisher commits.
{
	my $listener  = $node->background_psql('postgres');
	my $publisher = $node->background_psql('postgres');
	$listener->query_safe('LISTEN eventhub');
	$publisher->query_safe('BEGIN');
	$publisher->query_safe(publish_1('org-cross', 'cross-1'));
	my $before = $listener->query_safe('SELECT 1');
	is(scalar(notifications($before, 'cross-session, open')),
		0, 'cross-session: nothing heard while the transaction is open');
	$publisher->query_safe('COMMIT');
	my $after = $listener->query_safe('SELECT 1');
	my @n     = notifications($after, 'cross-session, committed');
	is(scalar(@n), 1, 'cross-session: heard once the publisher committed');
	check_event_notification($n[0], 'org-cross', 'cross-1', 'cross-session',
		head => 1)
	  if @n;
	$publisher->quit;
	$listener->quit;
}

#
# 5. Rolled-back publishes announce nothing.
#
{
	my ($ret, $out, $err) = run_session(
		join "\n",
		'LISTEN eventhub;',
		# whole transaction rolled back
		'BEGIN;',
		publish_1('org-rolled-back', 'rb-1'),
		'ROLLBACK;',
		# one publish kept, one rolled back to a savepoint
		'BEGIN;',
		publish_1('org-sp-kept', 'sp-kept'),
		'SAVEPOINT s1;',
		publish_1('org-sp-dropped', 'sp-dropped'),
		publish_1('org-sp-kept', 'sp-kept-dropped'),
		'ROLLBACK TO SAVEPOINT s1;',
		'COMMIT;',
		# only a rolled-back savepoint in a committed transaction
		'BEGIN;',
		'SAVEPOINT s2;',
		publish_1('org-sp-only', 'sp-only'),
		'ROLLBACK TO SAVEPOINT s2;',
		'COMMIT;',
		# the sentinel that must be heard
		publish_1('org-rollback-sentinel', 'rb-sentinel'));
	is($ret, 0, 'rollback: session succeeded') or diag($err);
	is(count_events(
			"correlation_id IN ('rb-1', 'sp-dropped', 'sp-kept-dropped', 'sp-only')"),
		0, 'rollback: rolled-back events are not stored');
	my @n = notifications($out, 'rollback');
	is(scalar(@n), 2,
		'rollback: only the kept publish and the sentinel are announced');
	check_event_notification($n[0], 'org-sp-kept', 'sp-kept',
		'publish kept beside a rolled-back savepoint', head => 1)
	  if @n >= 1;
	check_event_notification($n[1], 'org-rollback-sentinel', 'rb-sentinel',
		'publish after the rollbacks')
	  if @n >= 2;
	my %heard = map { ($_->{payload} =~ /"notification_token": "(\w+)"/) => 1 } @n;
	is(scalar(grep { $heard{ token_of($_) } } qw(org-rolled-back org-sp-dropped org-sp-only)),
		0, 'rollback: no rolled-back organization is announced');
}

#
# 6. An idempotent replay returns the original revision and announces
# nothing.
#
{
	my @args = ('org-idem', 'idem-1', data => '{"k": [1, 2]}');
	my ($ret, $out, $err) = run_session(
		join "\n",
		'LISTEN eventhub;',
		publish_1(@args),
		publish_1(@args),
		'BEGIN;',
		publish_1(@args),
		'COMMIT;',
		publish_1('org-idem', 'idem-2'));
	is($ret, 0, 'replay: session succeeded') or diag($err);
	is_deeply([ other_lines($out) ],
		[ 1, 1, 1, 2 ], 'replay: returns the original revision, nothing new');
	is(count_events("organization_id = 'org-idem'"),
		2, 'replay: stores no second copy');
	my @n = notifications($out, 'replay');
	is(scalar(@n), 2, 'replay: only the original and the next publish are announced');
	check_event_notification($n[0], 'org-idem', 'idem-1', 'original of replay')
	  if @n >= 1;
	check_event_notification($n[1], 'org-idem', 'idem-2',
		'publish after replay', head => 1)
	  if @n >= 2;
}

#
# 7. Several publishes in one transaction: one notification per
# organization, in the order they were first published to, each naming the
# organization's last version.
#
{
	my @events = (
		[ 'org-multi', 'multi-1' ],
		[ 'org-multi', 'multi-2' ],
		[ 'org-multi-other', 'multi-other-1' ],
		[ 'org-multi', 'multi-3' ],
		[ 'org-multi', 'multi-4' ],);
	my ($ret, $out, $err) = run_session(
		join "\n",
		'LISTEN eventhub;',
		'BEGIN;',
		(map { publish_1(@$_) } @events),
		'COMMIT;');
	is($ret, 0, 'one transaction: session succeeded') or diag($err);
	my @n = notifications($out, 'one transaction');
	is(scalar(@n), 2, 'one transaction: one notification per organization');
	check_event_notification($n[0], 'org-multi', 'multi-4',
		'one transaction, first organization: its last version', head => 1)
	  if @n >= 1;
	check_event_notification($n[1], 'org-multi-other', 'multi-other-1',
		'one transaction, second organization', head => 1)
	  if @n >= 2;
}

#
# Savepoints: a released savepoint's publishes count, a rolled-back one's
# do not, at any depth, and the version announced is the one that commits.
# A PL/pgSQL exception block is a savepoint too.
#
{
	my ($ret, $out, $err) = run_session(
		join("\n",
			'LISTEN eventhub;',
			'BEGIN;',
			publish_1('org-nest', 'nest-1'),
			'SAVEPOINT a;',
			publish_1('org-nest', 'nest-2'),
			'SAVEPOINT b;',
			publish_1('org-nest', 'nest-3'),
			publish_1('org-nest-inner', 'nest-inner-1'),
			'RELEASE SAVEPOINT b;',
			'ROLLBACK TO SAVEPOINT a;',
			'SAVEPOINT c;',
			publish_1('org-nest-released', 'nest-released-1'),
			'RELEASE SAVEPOINT c;',
			'COMMIT;',
			'BEGIN;',
			publish_1('org-nest', 'nest-4'),
			'SAVEPOINT d;',
			publish_1('org-nest', 'nest-5'),
			'RELEASE SAVEPOINT d;',
			q{DO $$ BEGIN PERFORM eventhub.publish_event('org-nest', 'API', 'UPDATE', 'e', 'nest-6', '{}');}
			  . q{ RAISE EXCEPTION 'undo'; EXCEPTION WHEN raise_exception THEN NULL; END $$;},
			'COMMIT;'),
		on_error_stop => 1);
	is($ret, 0, 'savepoints: session succeeded') or diag($err);
	is(count_events("correlation_id IN ('nest-2', 'nest-3', 'nest-inner-1', 'nest-6')"),
		0, 'savepoints: rolled-back events are not stored');
	my @n = notifications($out, 'savepoints');
	is(scalar(@n), 3, 'savepoints: org-nest, org-nest-released, then org-nest again');
	check_event_notification($n[0], 'org-nest', 'nest-1',
		'savepoints: the version before the rolled-back savepoint')
	  if @n >= 1;
	check_event_notification($n[1], 'org-nest-released', 'nest-released-1',
		'savepoints: a released savepoint')
	  if @n >= 2;
	check_event_notification($n[2], 'org-nest', 'nest-5',
		'savepoints: the last released version, not the exception block\'s', head => 1)
	  if @n >= 3;
	unlike(join("\n", map { $_->{payload} } @n), qr/\Q@{[token_of('org-nest-inner')]}\E/,
		'savepoints: an organization published to only in a rolled-back savepoint is not announced');
}

#
# 8. The event's data never travels in the payload.
#
{
	my $marker = 'DATA-MARKER-5b1e9c';
	my ($ret, $out, $err) = run_session(
		join "\n",
		'LISTEN eventhub;',
		publish_1(
			'org-data', 'CORRELATION-MARKER-5b1e9c',
			event_type => 'TYPE-MARKER-5b1e9c',
			entity     => 'ENTITY-MARKER-5b1e9c',
			data =>
			  qq({"secret": "$marker", "nested": {"list": ["$marker"]}, "$marker": 1})));
	is($ret, 0, 'data: session succeeded') or diag($err);
	is( $node->safe_psql(
			'postgres',
			"SELECT event_data::text LIKE '%$marker%' FROM eventhub.events"
			  . " WHERE correlation_id = 'CORRELATION-MARKER-5b1e9c'"),
		't',
		'data: the marker is in the stored event_data');
	my @n = notifications($out, 'data');
	is(scalar(@n), 1, 'data: one notification');
	check_event_notification($n[0], 'org-data', 'CORRELATION-MARKER-5b1e9c',
		'data', head => 1)
	  if @n;
	unlike($out, qr/MARKER|org-data/,
		'data: neither event_data, other event fields nor the organization id appear in anything the listener received');
}

#
# 9. Rotating the key changes every token; notifications use the new one.
#
{
	my $before = token_of('org-basic');
	$node->safe_psql('postgres', 'SELECT eventhub.rotate_notification_key()');
	my $after = token_of('org-basic');
	isnt($after, $before, 'rotation: the token changed');
	my ($ret, $out, $err) = run_session(join "\n",
		'LISTEN eventhub;',
		publish_1('org-basic', 'basic-after-rotation'));
	my @n = notifications($out, 'rotation');
	is(scalar(@n), 1, 'rotation: one notification');
	check_event_notification($n[0], 'org-basic', 'basic-after-rotation', 'rotation', head => 1)
	  if @n;
}

$node->stop;
done_testing();
