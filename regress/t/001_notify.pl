# 001_notify.pl: the NOTIFY each publishing transaction sends (the library not
# preloaded: no notifier worker; 012_notifier.pl tests the worker's).  On
# commit, channel "eventhub" carries one notification per organization moved,
# {"notification_token": "<32 hex digits>", "version_id": "<uuid>"}: the
# organization's token and its version after the transaction, never its id,
# a revision or the event's data; for every awkward id up to 1024 bytes; only
# for what commits (not rollbacks, savepoints rolled back, replays); new
# tokens after a key rotation.  Real psql sessions LISTEN; every "nothing was
# sent" check is followed by a publish that must be heard.

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
my $uuid_re = qr/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

# One publish of ORG with correlation id CORR (which finds the event later).
sub publish_1
{
	my ($org, $corr, %opt) = @_;
	return publish_sql($org, corr => $corr, entity => 'entity-1', %opt);
}

# One psql session (a leading hash: psql options) that LISTENs, then runs
# LINES; returns (exit code, stdout, stderr).
sub session
{
	my $opt = ref $_[0] ? shift : {};
	return $node->psql('postgres', join("\n", 'LISTEN eventhub;', @_),
		timeout => $PostgreSQL::Test::Utils::timeout_default, %$opt);
}

# The notifications psql printed in OUT; each must parse.
sub notifications
{
	my ($out, $label) = @_;
	my @found = notifications_in($out);
	my $mentions = () = $out =~ /Asynchronous notification/g;
	is(scalar(@found), $mentions, "$label: every notification psql printed parses");
	return @found;
}

# session(LINES) that must succeed; returns (stdout, its notifications).
sub heard_in
{
	my $label = shift;
	my ($ret, $out, $err) = session(@_);
	is($ret, 0, "$label: session succeeded") or diag($err);
	return ($out, notifications($out, $label));
}

# Lines of OUT that are not notifications (query results and echo).
sub other_lines
{
	return grep { !/^Asynchronous notification / } split /\n/, $_[0];
}

# Checks notification N's channel and shape (the documented keys in order, a
# 32-hex-digit token, a lower-case UUID); returns its decoded payload.
sub decode_payload
{
	my ($n, $label) = @_;
	is($n->{channel}, 'eventhub', "$label: channel is eventhub");
	like($n->{payload}, qr/^\{"notification_token": "[0-9a-f]{32}", "version_id": "$uuid_re"\}$/,
		"$label: payload has the documented form");
	my $obj = eval { $json->decode($n->{payload}) };
	is(ref($obj), 'HASH', "$label: payload parses as a JSON object") or diag("JSON error: $@");
	$obj = {} unless ref($obj) eq 'HASH';
	is_deeply([ sort keys %$obj ], [qw(notification_token version_id)],
		"$label: payload has exactly notification_token and version_id");
	return $obj;
}

sub count_events
{
	return $node->safe_psql('postgres', "SELECT count(*) FROM eventhub.events WHERE $_[0]");
}

# Checks that notification N (none: nothing to check) announces ORG at the
# version of its event with correlation id CORR; with HEAD, also that this
# is the organization's head.  Returns the payload.
sub check_event_notification
{
	my ($n, $org, $corr, $label, $head) = @_;
	return unless $n;
	my $p = decode_payload($n, $label);
	my @row = split /\|/, $node->safe_psql('postgres',
		"SELECT e.version_id, encode(convert_to(e.organization_id, 'UTF8'), 'hex'), s.version_id"
		  . ' FROM eventhub.events e JOIN eventhub.organization_states s USING (organization_id)'
		  . ' WHERE e.correlation_id = ' . sql_literal($corr));
	ok(@row, "$label: the event is in eventhub.events") or return $p;
	utf8::encode(my $bytes = $org);
	is($row[1], unpack('H*', $bytes), "$label: the event is of the organization published to");
	is($p->{notification_token}, notification_token($node, $org), "$label: notification_token is the organization's token");
	is($p->{version_id}, $row[0], "$label: version_id equals the event's");
	is($p->{version_id}, $row[2], "$label: version_id equals organization_states.version_id") if $head;
	return $p;
}

#
# 1. A published event is announced with its organization's token and the
# version it published; neither the id nor the revision travels.
#
{
	my ($out, @n) = heard_in('basic', publish_1('org-basic', 'basic-1'), 'SELECT pg_backend_pid();');
	is(scalar(@n), 1, 'basic: one notification');
	my ($revision, $pid) = other_lines($out);
	is($revision, 1, 'basic: publish_event returned revision 1');
	if (@n)
	{
		check_event_notification($n[0], 'org-basic', 'basic-1', 'basic', 1);
		is($n[0]{pid}, $pid, 'basic: sent by the publishing backend');
		unlike($n[0]{payload}, qr/org-basic|revision/,
			'basic: the payload names neither the organization nor a revision');
	}
	is(notification_token($node, 'org-basic'), notification_token($node, 'org-basic'), 'basic: a token is stable');
}

#
# 2. Every awkward organization id gets its own token of the same size.
#
{
	# 1024 bytes of control characters, the longest id.
	my @six_byte_controls = grep { !/[\b\t\n\f\r]/ } map { chr } 1 .. 31;
	my $worst_id = join '', map { $six_byte_controls[ $_ % @six_byte_controls ] } 0 .. 1023;
	my @ids = (
		[ 'double quotes',      'org"with"quotes"' ],
		[ 'backslash',          'org\\with\\backslash\\' ],
		[ 'newline',            "org\nwith\nnewline\n" ],
		[ 'tab',                "org\twith\ttab" ],
		[ 'control \\x01',      "org\x01ctl" ],
		[ 'non-ASCII e-acute',  "caf\x{e9}" ],
		[ 'emoji',              "org-\x{1F600}-emoji" ],
		[ 'everything at once', "\"\\/\b\f\n\r\t\x01\x1f\x7f \\u0041 \x{e9}\x{1F600}\"{}: ," ],
		[ '1024 bytes of controls',     $worst_id ],
		[ '1024 bytes of 2-byte UTF-8', "\x{e9}" x 512 ],
		[ 'a prefix of another',        'org' ],
	);
	is(length($worst_id), 1024, 'worst-case id is 1024 bytes');
	my $i = 0;
	my ($out, @n) = heard_in('awkward ids', map { publish_1($_->[1], 'awkward-' . $i++) } @ids);
	is(scalar(@n), scalar(@ids), 'awkward ids: one notification per publish');
	my %tokens;
	for my $k (grep { $n[$_] } 0 .. $#ids)
	{
		my ($label, $id) = @{ $ids[$k] };
		my $p = check_event_notification($n[$k], $id, "awkward-$k", "id with $label", 1);
		is(length($n[$k]{payload}), 112, "id with $label: the payload is 112 bytes, whatever the id");
		$tokens{ $p->{notification_token} // '' } = 1;
	}
	is(scalar(keys %tokens), scalar(@ids), 'awkward ids: every organization has its own token');
}

#
# 3. An id of 1025 bytes is refused and announces nothing.
#
{
	my ($ret, $out, $err) = session({ on_error_stop => 0 },
		publish_1('x' x 1025, 'too-long-ascii'),
		publish_1(("\x{e9}" x 512) . 'x', 'too-long-utf8'),    # 513 characters, 1025 bytes
		publish_1("\x01" x 1025, 'too-long-ctl'),
		publish_1('org-after-too-long', 'after-too-long'));
	my @errors = $err =~ /ERROR:  organization_id is too long/g;
	is(scalar(@errors), 3, '1025-byte ids: all three publishes refused') or diag($err);
	like($err, qr/The value is 1025 bytes long; the limit is 1024 bytes\./,
		'1025-byte ids: the error says which limit');
	is(count_events("correlation_id LIKE 'too-long-%'"), 0, '1025-byte ids: no event stored');
	is($node->safe_psql('postgres',
			'SELECT count(*) FROM eventhub.organization_states WHERE octet_length(organization_id) > 1024'),
		0, '1025-byte ids: no organization registered');
	my @n = notifications($out, '1025-byte ids');
	is(scalar(@n), 1, '1025-byte ids: only the following publish is announced');
	check_event_notification($n[0], 'org-after-too-long', 'after-too-long', 'publish after 1025-byte ids');
}

#
# 4. Delivered only on commit: with every input line echoed, the
# notification comes right after COMMIT, not after the publish.
#
{
	my ($out, @n) = heard_in('commit', { extra_params => ['--echo-all'] },
		'BEGIN;',
		"SELECT eventhub.publish_event('org-commit', 'API', 'CREATE', 'e-1', 'commit-1', '{}');",
		'SELECT 1;', 'COMMIT;', 'SELECT 2;');
	is(scalar(@n), 1, 'commit: one notification');
	my @lines = split /\n/, $out, -1;
	my ($publish_at) = grep { $lines[$_] =~ /^SELECT eventhub\.publish_event/ } 0 .. $#lines;
	my ($select1_at, $commit_at, $select2_at) =
	  map { my $s = $_; my ($at) = grep { $lines[$_] eq $s } 0 .. $#lines; $at } 'SELECT 1;', 'COMMIT;', 'SELECT 2;';
	ok(defined $publish_at && defined $select1_at && defined $commit_at && defined $select2_at,
		'commit: psql echoed the script')
	  or diag($out);
	if (@n && defined $commit_at && defined $select2_at)
	{
		cmp_ok($n[0]{line}, '>', $select1_at,
			'commit: nothing was heard before COMMIT (not after the publish, not after SELECT 1)');
		cmp_ok($n[0]{line}, '>', $commit_at, 'commit: the notification comes after COMMIT');
		cmp_ok($n[0]{line}, '<', $select2_at, 'commit: the notification comes with COMMIT, before the next query');
		check_event_notification($n[0], 'org-commit', 'commit-1', 'commit', 1);
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
	is(scalar(notifications($listener->query_safe('SELECT 1'), 'cross-session, open')),
		0, 'cross-session: nothing heard while the transaction is open');
	$publisher->query_safe('COMMIT');
	my @n = notifications($listener->query_safe('SELECT 1'), 'cross-session, committed');
	is(scalar(@n), 1, 'cross-session: heard once the publisher committed');
	check_event_notification($n[0], 'org-cross', 'cross-1', 'cross-session', 1);
	$publisher->quit;
	$listener->quit;
}

#
# 5. Rolled-back publishes announce nothing: a whole transaction, a
# savepoint beside a kept publish, a savepoint alone; then a sentinel.
#
{
	my ($out, @n) = heard_in('rollback',
		'BEGIN;', publish_1('org-rolled-back', 'rb-1'), 'ROLLBACK;',
		'BEGIN;', publish_1('org-sp-kept', 'sp-kept'), 'SAVEPOINT s1;',
		publish_1('org-sp-dropped', 'sp-dropped'), publish_1('org-sp-kept', 'sp-kept-dropped'),
		'ROLLBACK TO SAVEPOINT s1;', 'COMMIT;',
		'BEGIN;', 'SAVEPOINT s2;', publish_1('org-sp-only', 'sp-only'), 'ROLLBACK TO SAVEPOINT s2;', 'COMMIT;',
		publish_1('org-rollback-sentinel', 'rb-sentinel'));
	is(count_events("correlation_id IN ('rb-1', 'sp-dropped', 'sp-kept-dropped', 'sp-only')"),
		0, 'rollback: rolled-back events are not stored');
	is(scalar(@n), 2, 'rollback: only the kept publish and the sentinel are announced');
	check_event_notification($n[0], 'org-sp-kept', 'sp-kept', 'publish kept beside a rolled-back savepoint', 1);
	check_event_notification($n[1], 'org-rollback-sentinel', 'rb-sentinel', 'publish after the rollbacks');
	my %heard = map { ($_->{payload} =~ /"notification_token": "(\w+)"/) => 1 } @n;
	is(scalar(grep { $heard{ notification_token($node, $_) } } qw(org-rolled-back org-sp-dropped org-sp-only)),
		0, 'rollback: no rolled-back organization is announced');
}

#
# 6. An idempotent replay returns the original revision and announces
# nothing.
#
{
	my @args = ('org-idem', 'idem-1', data => '{"k": [1, 2]}');
	my ($out, @n) = heard_in('replay',
		publish_1(@args), publish_1(@args), 'BEGIN;', publish_1(@args), 'COMMIT;',
		publish_1('org-idem', 'idem-2'));
	is_deeply([ other_lines($out) ], [ 1, 1, 1, 2 ], 'replay: returns the original revision, nothing new');
	is(count_events("organization_id = 'org-idem'"), 2, 'replay: stores no second copy');
	is(scalar(@n), 2, 'replay: only the original and the next publish are announced');
	check_event_notification($n[0], 'org-idem', 'idem-1', 'original of replay');
	check_event_notification($n[1], 'org-idem', 'idem-2', 'publish after replay', 1);
}

#
# 7. Several publishes in one transaction: one notification per
# organization, in the order they were first published to, each naming the
# organization's last version.
#
{
	my ($out, @n) = heard_in('one transaction', 'BEGIN;',
		(map { publish_1(@$_) } [ 'org-multi', 'multi-1' ], [ 'org-multi', 'multi-2' ],
			[ 'org-multi-other', 'multi-other-1' ], [ 'org-multi', 'multi-3' ], [ 'org-multi', 'multi-4' ]),
		'COMMIT;');
	is(scalar(@n), 2, 'one transaction: one notification per organization');
	check_event_notification($n[0], 'org-multi', 'multi-4', 'one transaction, first organization: its last version',
		1);
	check_event_notification($n[1], 'org-multi-other', 'multi-other-1', 'one transaction, second organization', 1);
}

#
# Savepoints: a released savepoint's publishes count, a rolled-back one's
# do not, at any depth, and the version announced is the one that commits.
# A PL/pgSQL exception block is a savepoint too.
#
{
	my ($out, @n) = heard_in('savepoints',
		'BEGIN;', publish_1('org-nest', 'nest-1'),
		'SAVEPOINT a;', publish_1('org-nest', 'nest-2'),
		'SAVEPOINT b;', publish_1('org-nest', 'nest-3'), publish_1('org-nest-inner', 'nest-inner-1'),
		'RELEASE SAVEPOINT b;', 'ROLLBACK TO SAVEPOINT a;',
		'SAVEPOINT c;', publish_1('org-nest-released', 'nest-released-1'), 'RELEASE SAVEPOINT c;',
		'COMMIT;',
		'BEGIN;', publish_1('org-nest', 'nest-4'),
		'SAVEPOINT d;', publish_1('org-nest', 'nest-5'), 'RELEASE SAVEPOINT d;',
		q{DO $$ BEGIN PERFORM eventhub.publish_event('org-nest', 'API', 'UPDATE', 'e', 'nest-6', '{}');}
		  . q{ RAISE EXCEPTION 'undo'; EXCEPTION WHEN raise_exception THEN NULL; END $$;},
		'COMMIT;');
	is(count_events("correlation_id IN ('nest-2', 'nest-3', 'nest-inner-1', 'nest-6')"),
		0, 'savepoints: rolled-back events are not stored');
	is(scalar(@n), 3, 'savepoints: org-nest, org-nest-released, then org-nest again');
	check_event_notification($n[0], 'org-nest', 'nest-1', 'savepoints: the version before the rolled-back savepoint');
	check_event_notification($n[1], 'org-nest-released', 'nest-released-1', 'savepoints: a released savepoint');
	check_event_notification($n[2], 'org-nest', 'nest-5',
		'savepoints: the last released version, not the exception block\'s', 1);
	unlike(join("\n", map { $_->{payload} } @n), qr/\Q@{[notification_token($node, 'org-nest-inner')]}\E/,
		'savepoints: an organization published to only in a rolled-back savepoint is not announced');
}

#
# 8. The event's data never travels in the payload.
#
{
	my $marker = 'DATA-MARKER-5b1e9c';
	my ($out, @n) = heard_in('data',
		publish_1('org-data', 'CORRELATION-MARKER-5b1e9c', event_type => 'TYPE-MARKER-5b1e9c',
			entity => 'ENTITY-MARKER-5b1e9c',
			data   => qq({"secret": "$marker", "nested": {"list": ["$marker"]}, "$marker": 1})));
	is($node->safe_psql('postgres',
			"SELECT event_data::text LIKE '%$marker%' FROM eventhub.events"
			  . " WHERE correlation_id = 'CORRELATION-MARKER-5b1e9c'"),
		't', 'data: the marker is in the stored event_data');
	is(scalar(@n), 1, 'data: one notification');
	check_event_notification($n[0], 'org-data', 'CORRELATION-MARKER-5b1e9c', 'data', 1);
	unlike($out, qr/MARKER|org-data/,
		'data: neither event_data, other event fields nor the organization id appear in anything the listener received');
}

#
# 9. Rotating the key changes every token; notifications use the new one.
#
{
	my $before = notification_token($node, 'org-basic');
	$node->safe_psql('postgres', 'SELECT eventhub.rotate_notification_key()');
	isnt(notification_token($node, 'org-basic'), $before, 'rotation: the token changed');
	my ($out, @n) = heard_in('rotation', publish_1('org-basic', 'basic-after-rotation'));
	is(scalar(@n), 1, 'rotation: one notification');
	check_event_notification($n[0], 'org-basic', 'basic-after-rotation', 'rotation', 1);
}

# Without shared memory eventhub.metrics() answers all the same, its
# counters at 0 (docs/sql.md).
is($node->safe_psql('postgres', q{SELECT string_agg(name || '=' || value, ' ' ORDER BY name)
	FROM eventhub.metrics() WHERE type = 'counter'}),
	'eventhub_events_published_total=0 eventhub_notifications_sent_total=0 '
	  . 'eventhub_retention_deleted_events_total=0 eventhub_stalled_clients_terminated_total=0',
	'not preloaded: metrics() answers, its counters at 0');

$node->stop;
done_testing();
