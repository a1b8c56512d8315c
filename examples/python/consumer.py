#!/usr/bin/python3
"""Reference consumer of eventhub, written against the SQL protocol of the
docs/protocol.md alone ("The consumer protocol" under eventhub.events_since,
"Notifications", "Errors"), with psycopg 3 (Debian's python3-psycopg).

    consumer.py --conninfo CONNINFO --org ORG [--org ORG...] --cursor-file PATH
                [--snapshot] [--poll-interval-ms N] [--reload-ms N] [--count N] [--timeout S]

It prints one line per applied event and per resync:

    EVENT <org> <revision> <version_id> <action> <entity_id>
    RESYNC <org> <ZE001|ZE002|ZE003> <head_revision> <head_version_id or ->

and keeps its cursors in the cursor file, so that a restarted consumer
resumes where it stopped. With --snapshot it also keeps each organization's
entities (in the cursor file, with the cursor), starts from a snapshot and
resyncs from one ("Bootstrap from a snapshot", "Resync from a snapshot"),
reads eventhub.transactions_since and applies each transaction as one unit
("Transactions"), and prints besides:

    SNAPSHOT <org> <head_revision> <head_version_id or -> <entities>
    TXN <org> <first_revision> <last_revision> <events>
    DIGEST <org> <revision> <sha256 of the entities>

(a snapshot applied; a transaction applied, after its EVENT lines; caught
up), and RESYNC ... ZE004 when a bootstrap found the snapshot incomplete and
fell back to the reload. Exit status: 0 after --count events, 1 on a
permanent error (bad login, missing privilege, ...), 2 on bad usage, 3 when
--timeout expires.
"""

import argparse
import hashlib
import json
import os
import select
import sys
import tempfile
import time
from collections import deque

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

BATCH_SIZE = 1000  # events_since's max_events (protocol step 3)
ZERO_TOKEN = "0" * 32  # "poll now" (docs/sql.md, Notifications)
MIN_BACKOFF, MAX_BACKOFF = 0.1, 2.0
RESYNC_STATES = ("ZE001", "ZE002", "ZE003")
SNAPSHOT_INCOMPLETE, SNAPSHOT_MOVED = "ZE004", "ZE005"
# connection exception; terminated backend, server shutting down or starting
# up; too many connections, out of memory; serialization failure, deadlock
RETRYABLE_CLASSES = ("08", "57P", "53", "40")
RETRYABLE_STATES = ("55P03", "57014")  # lock_timeout, statement_timeout


def log(message):
    print(f"consumer: {message}", file=sys.stderr, flush=True)


def describe(error):
    """libpq's message on one line."""
    return " ".join(str(error).split())


class CountReached(Exception):
    """--count events were applied."""


class Timeout(Exception):
    """--timeout expired."""


class CursorFile:
    """organization -> cursor: the revision and the version id of the last
    event applied (docs/protocol.md, "The consumer protocol", step 1), as JSON. The
    version is None at revision 0, where there is no event to check."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path) as f:
                self.cursors = json.load(f)
        except FileNotFoundError:
            self.cursors = {}  # a new consumer replays the kept history from 0

    def get(self, org):
        c = self.cursors.get(org, {})
        return c.get("revision", 0), c.get("version_id")

    def entities(self, org):
        """Under --snapshot: the organization's entities, event type ->
        entity id -> event_data as the server prints it (event_data::text,
        so that every consumer hashes the same bytes); None when there are
        none yet (bootstrap from a snapshot)."""
        return self.cursors.get(org, {}).get("entities")

    def set(self, org, revision, version_id, entities=None):
        """Moves a cursor (with the entities it describes, under --snapshot)
        and stores the whole file atomically (a temporary file renamed over
        the old one): a consumer killed at any moment finds either the old
        cursor or the new one. A real consumer stores the cursor in the same
        transaction as the state it applied."""
        self.cursors[org] = {"revision": revision, "version_id": version_id}
        if entities is not None:
            self.cursors[org]["entities"] = entities
        directory, name = os.path.split(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.cursors, f)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise


def retryable(error):
    """A lost connection or a passing condition, which a new session may
    overcome, as opposed to a permanent error (42501 insufficient_privilege,
    a missing extension, ...)."""
    state = error.sqlstate
    if state is None:
        # No SQLSTATE: the network or a closed connection (a refused
        # connection is told apart in Consumer.connect).
        return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError))
    return state.startswith(RETRYABLE_CLASSES) or state in RETRYABLE_STATES


# What libpq says of a server refused for its role (target_session_attrs)
# or for its state, or of a connection the network or a dying server ended:
# none of it outlasts a failover. psycopg tries the hosts of a multi-host
# conninfo one by one and reports the last one's error alone, so that a
# host that closed the connection while it went down (a crash, a demoted
# leader's immediate shutdown) can be all the message says.
PASSING_REFUSALS = (
    "session is read-only",
    "session is not read-only",
    "hot standby mode",
    "is shutting down",
    "is starting up",
    "not yet accepting connections",
    "in recovery mode",
    "server closed the connection unexpectedly",
    "Connection refused",
    "timeout expired",
    "could not receive data",
)


def passing_refusal(message):
    return any(m in message for m in PASSING_REFUSALS)


class PermanentError(Exception):
    pass


class Consumer:
    def __init__(self, args):
        self.conninfo = args.conninfo
        self.orgs = args.org
        self.poll_interval = args.poll_interval_ms / 1000
        self.reload_time = args.reload_ms / 1000  # how long the simulated reload takes
        self.snapshot = args.snapshot  # keep the entities (catch_up_transactions)
        self.count = args.count
        self.deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
        self.cursors = CursorFile(args.cursor_file)
        self.applied = 0
        self.connected = False  # this session got as far as catching up
        self.tokens = {}  # notification token -> organization
        self.pending = deque()  # notification payloads not handled yet

    def remaining(self):
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout()
        return left

    def run(self):
        """Keeps a session going: after a lost connection (or an error a
        retry can fix) reconnects with exponential backoff and catches up
        from the cursors. Raises PermanentError for anything else."""
        backoff = MIN_BACKOFF
        while True:
            self.connected = False
            try:
                self.session()
            except psycopg.Error as error:
                if not retryable(error):
                    raise PermanentError(describe(error)) from error
                if self.connected:
                    backoff = MIN_BACKOFF
                log(f"{describe(error)}; reconnecting in {int(backoff * 1000)} ms")
            left = self.remaining()
            time.sleep(backoff if left is None else min(backoff, left))
            backoff = min(backoff * 2, MAX_BACKOFF)

    def connect(self):
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True)
        except psycopg.OperationalError as error:
            # libpq reports no SQLSTATE for a refused connection. Ask the
            # server whether it accepts connections at all: if it does, it
            # refused ours (bad login, unknown database), which is permanent;
            # if it does not (down, starting up, shutting down), retry.
            if pq.PGconn.ping(self.conninfo.encode()) == pq.Ping.OK:
                try:  # unless it just finished starting up: one more try
                    conn = psycopg.connect(self.conninfo, autocommit=True)
                except psycopg.OperationalError as again:
                    # With several hosts and target_session_attrs, a ping
                    # answered by one of them says nothing of the role libpq
                    # wants: during a failover every host that answers may be
                    # a standby (or shutting down), which passes.
                    if passing_refusal(str(again)):
                        raise
                    raise PermanentError(describe(error)) from error
            else:
                raise
        # Notifications that arrive while a query runs come through here;
        # without a handler psycopg would drop them.
        conn.add_notify_handler(lambda n: self.pending.append(n.payload))
        return conn

    def session(self):
        """Connects, listens, catches every organization up, then waits for
        notifications and polls."""
        # autocommit: every statement is its own transaction, so that
        # notifications are delivered between them and an error (EH00x)
        # leaves no aborted transaction behind.
        with self.connect() as conn:
            self.pending.clear()  # the catch-up below covers what they announced
            # Step 2: LISTEN before the first catch-up, so that nothing
            # published in between goes unannounced.
            listening = self.listen(conn)
            if not listening:
                log("the server is a standby: LISTEN is refused, polling only")
            # Learn the tokens (the poll does), then step 3 for every
            # organization: the catch-up also checks each cursor's version
            # (ZE003) after a restart.
            self.poll_states(conn)
            for org in self.orgs:
                self.catch_up(conn, org)
            self.connected = True
            log("connected, caught up")

            # Step 4: wake on a notification, or when the poll interval elapses.
            next_poll = time.monotonic() + self.poll_interval
            while True:
                if self.pending:
                    if self.notified(conn, self.pending.popleft()):
                        next_poll = time.monotonic()
                    continue
                wait = next_poll - time.monotonic()
                left = self.remaining()
                if left is not None:
                    wait = min(wait, left)
                if wait > 0 and self.wait_readable(conn, wait):
                    continue
                if time.monotonic() >= next_poll:
                    if not listening:  # before the poll's catch-up, as at the start
                        listening = self.listen(conn)
                        if listening:
                            log("the server is no longer a standby: listening")
                    for org in self.poll_states(conn):
                        self.catch_up(conn, org)
                    next_poll = time.monotonic() + self.poll_interval

    @staticmethod
    def listen(conn):
        """Sends LISTEN eventhub. A hot standby refuses it (25006
        read_only_sql_transaction): the consumer then relies on its polls,
        and tries again before each, so that it listens once the standby is
        promoted (docs/operations.md, "Reading from a standby")."""
        try:
            conn.execute("LISTEN eventhub")
            return True
        except psycopg.errors.ReadOnlySqlTransaction:
            return False

    def wait_readable(self, conn, timeout):
        """Waits up to TIMEOUT for the server to send something and reads
        it: notifications go to self.pending. psycopg 3.1's notifies() cannot
        time out, hence libpq's own calls. True if something was read."""
        readable, _, _ = select.select([conn.fileno()], [], [], timeout)
        if not readable:
            return False
        conn.pgconn.consume_input()  # OperationalError when the connection is lost
        while (n := conn.pgconn.notifies()) is not None:
            self.pending.append(n.extra.decode())
        if conn.pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("connection lost")
        return True

    def notified(self, conn, payload):
        """Handles one payload on channel eventhub. Notifications are
        wake-ups only: the cursor says what to fetch. Anyone may NOTIFY
        eventhub, so a payload that does not parse is ignored, and so is a
        token of an organization this consumer does not follow (or an
        outdated token after a key rotation: the next poll learns the new
        ones and catches up). Returns True for the zero token: poll now."""
        try:
            p = json.loads(payload)
            token, version = p["notification_token"], p["version_id"]
        except (ValueError, TypeError, KeyError):
            return False
        if token == ZERO_TOKEN:
            return True
        org = self.tokens.get(token)
        if org is not None and self.cursors.get(org)[1] != version:
            self.catch_up(conn, org)
        return False

    def poll_states(self, conn):
        """Reads, for every organization followed, its notification token
        (tokens change when the key is rotated, so every poll refreshes them)
        and its head. Returns the organizations whose head differs from the
        cursor."""
        rows = conn.execute(
            """SELECT o.org, eventhub.notification_token(o.org), s.revision, s.version_id::text
                 FROM unnest(%s::text[]) AS o(org)
                 LEFT JOIN eventhub.organization_states s ON s.organization_id = o.org""",
            (self.orgs,),
        ).fetchall()
        self.tokens = {token: org for org, token, _, _ in rows}
        moved = []
        for org, _, revision, version in rows:
            cur_revision, cur_version = self.cursors.get(org)
            # A cursor at revision 0 may have no version (an organization
            # registered without events has one): nothing to compare then.
            if cur_revision != (revision or 0) or (
                cur_version is not None and version is not None and cur_version != version
            ):
                moved.append(org)
        return moved

    def catch_up(self, conn, org):
        """Applies the organization's events after its cursor, a batch at a
        time, until a batch is short (step 3); resyncs on ZE001, ZE002 or
        ZE003 (step 5)."""
        if self.snapshot:
            self.catch_up_transactions(conn, org)
            return
        while True:
            revision, version = self.cursors.get(org)
            try:
                # The whole batch is read before any of it is applied: the
                # the docs do not promise that an error (ZE001, ...) comes
                # before the first row, and a batch that ends in one is not
                # used.
                batch = conn.execute(
                    """SELECT revision, version_id::text, action, entity_id
                         FROM eventhub.events_since(%s, %s, %s, %s::uuid)""",
                    (org, revision, BATCH_SIZE, version),
                ).fetchall()
            except psycopg.Error as error:
                if error.sqlstate not in RESYNC_STATES:
                    raise
                self.resync(conn, org, error.sqlstate)
                continue  # from the head just read
            for event in batch:
                self.apply(org, *event)
            if len(batch) < BATCH_SIZE:
                return

    def apply(self, org, revision, version, action, entity_id):
        """'Applies' one event (prints it), then moves the cursor past it."""
        print(f"EVENT {org} {revision} {version} {action} {entity_id}", flush=True)
        self.cursors.set(org, revision, version)
        self.applied += 1
        if self.count and self.applied >= self.count:
            raise CountReached()

    def resync(self, conn, org, reason):
        """In the documented order: (1) read the head, (2) reload the
        organization's full state, (3) continue from that head, so that an
        event published during the reload arrives afterwards instead of
        being lost. The cursor moves to the head only once the reload is
        done: it describes the state reloaded. Under --snapshot this is the
        fallback for ZE004: the entities are left as they were (a real
        consumer reloads them here)."""
        row = conn.execute(
            "SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = %s",
            (org,),
        ).fetchone()
        revision, version = row if row else (0, None)  # no row: not registered, head 0
        print(f"RESYNC {org} {reason} {revision} {version or '-'}", flush=True)
        # The reload, simulated: a real consumer rebuilds the organization
        # from its own tables here, which takes a while.
        left = self.remaining()
        time.sleep(self.reload_time if left is None else min(self.reload_time, left))
        entities = None
        if self.snapshot:
            entities = self.cursors.entities(org)
            entities = {} if entities is None else entities
        self.cursors.set(org, revision, version, entities)

    # The --snapshot mode (docs/protocol.md, "Bootstrap from a snapshot",
    # "Resync from a snapshot", "Transactions").

    def catch_up_transactions(self, conn, org):
        """catch_up under --snapshot: an organization with no entities yet is
        bootstrapped from a snapshot; then transactions_since is read until
        caught up (the batch is empty, or its last row is at the head), each
        transaction applied once its last event (transaction_end) is read. A
        transaction larger than a batch comes in parts: the parts are kept,
        and the next batch is read after the last of them, but the cursor
        moves only when the transaction is applied whole."""
        if self.cursors.entities(org) is None:
            self.from_snapshot(conn, org, None)
        pending = []
        while True:
            if pending:
                revision, version = pending[-1]["revision"], pending[-1]["version_id"]
            else:
                revision, version = self.cursors.get(org)
            try:
                # Read whole before any of it is applied, as in catch_up.
                with conn.cursor(row_factory=dict_row) as cur:
                    batch = cur.execute(
                        """SELECT revision, version_id::text, action, entity_id, event_type,
                                  event_data::text, transaction_first_revision,
                                  transaction_end, head_revision
                             FROM eventhub.transactions_since(%s, %s, %s, %s::uuid)""",
                        (org, revision, BATCH_SIZE, version),
                    ).fetchall()
            except psycopg.Error as error:
                if error.sqlstate not in RESYNC_STATES:
                    raise
                pending = []
                self.from_snapshot(conn, org, error.sqlstate)
                continue  # from the snapshot's head
            for event in batch:
                pending.append(event)
                if event["transaction_end"]:
                    self.apply_transaction(org, pending)
                    pending = []
            if not batch or batch[-1]["revision"] == batch[-1]["head_revision"]:
                print(f"DIGEST {org} {self.cursors.get(org)[0]} {digest(self.cursors.entities(org))}", flush=True)
                return

    def apply_transaction(self, org, events):
        """Applies one transaction's events to the organization's entities
        and stores them with the cursor at its last event, in one write of
        the cursor file: the consumer's state is always between two
        transactions. A DELETE removes the entity; a CREATE or UPDATE
        carries its whole state."""
        entities = self.cursors.entities(org)
        for e in events:
            print(f"EVENT {org} {e['revision']} {e['version_id']} {e['action']} {e['entity_id']}", flush=True)
            ids = entities.setdefault(e["event_type"], {})
            if e["action"] == "DELETE":
                ids.pop(e["entity_id"], None)
                if not ids:
                    del entities[e["event_type"]]
            else:
                ids[e["entity_id"]] = e["event_data"]
        last = events[-1]
        self.cursors.set(org, last["revision"], last["version_id"], entities)
        first = events[0]["transaction_first_revision"]
        print(f"TXN {org} {first} {last['revision']} {len(events)}", flush=True)
        self.applied += len(events)
        if self.count and self.applied >= self.count:
            raise CountReached()

    def from_snapshot(self, conn, org, reason):
        """Replaces the organization's entities with a snapshot and moves the
        cursor to its head. REASON is the SQLSTATE that asked for it (ZE001,
        ZE002 or ZE003, printed in a RESYNC line first), or None for a
        bootstrap. ZE005 (the head moved: only possible if the pages were not
        read in one transaction) is retried; ZE004 (the organization's
        snapshot is incomplete, and stays so until the application declares
        its full state) falls back to the reload from the application's own
        tables."""
        while True:
            try:
                revision, version, entities = self.read_snapshot(conn, org)
            except psycopg.Error as error:
                if error.sqlstate == SNAPSHOT_MOVED:
                    log(f"{org}: {describe(error)}; reading the snapshot again")
                    continue
                if error.sqlstate != SNAPSHOT_INCOMPLETE:
                    raise
                log(f"{org}: {describe(error)}; reloading from the application instead")
                self.resync(conn, org, reason or SNAPSHOT_INCOMPLETE)
                return
            if reason:
                print(f"RESYNC {org} {reason} {revision} {version or '-'}", flush=True)
            self.cursors.set(org, revision, version, entities)
            n = sum(len(ids) for ids in entities.values())
            print(f"SNAPSHOT {org} {revision} {version or '-'} {n}", flush=True)
            return

    @staticmethod
    def read_snapshot(conn, org):
        """Reads the organization's head and every page of its entities in
        one REPEATABLE READ, READ ONLY transaction, so that the pages are
        consistent with each other and with the head: continuing from the
        head then misses nothing and repeats nothing. Each page starts after
        the previous page's last (event_type, entity_id); a page shorter
        than BATCH_SIZE is the last. Returns (revision, version, entities)."""
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        try:
            revision, version = conn.execute(
                "SELECT revision, version_id::text FROM eventhub.snapshot_head(%s)", (org,)
            ).fetchone()
            entities = {}
            after = (None, None)  # the first page
            while True:
                page = conn.execute(
                    """SELECT event_type, entity_id, event_data::text
                         FROM eventhub.snapshot_entities(%s, %s, %s, %s, %s, NULL, %s::uuid)""",
                    (org, revision, *after, BATCH_SIZE, version),
                ).fetchall()
                for event_type, entity_id, data in page:
                    entities.setdefault(event_type, {})[entity_id] = data
                if len(page) < BATCH_SIZE:
                    break
                after = page[-1][:2]
            conn.execute("COMMIT")
        except BaseException:
            if conn.pgconn.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
                conn.execute("ROLLBACK")
            raise
        return revision, version, entities


def digest(entities):
    """The sha256, in lower-case hex, of the lines
    "<event_type>\t<entity_id>\t<event_data>\n" of every entity, sorted
    bytewise and concatenated (an empty map hashes "")."""
    lines = sorted(
        f"{event_type}\t{entity_id}\t{data}\n".encode()
        for event_type, ids in entities.items()
        for entity_id, data in ids.items()
    )
    return hashlib.sha256(b"".join(lines)).hexdigest()


def main():
    parser = argparse.ArgumentParser(description="eventhub reference consumer")
    parser.add_argument("--conninfo", required=True, help="libpq connection string or URL")
    parser.add_argument("--org", action="append", required=True, help="organization (repeatable)")
    parser.add_argument("--cursor-file", required=True, help="JSON file keeping each cursor")
    parser.add_argument("--poll-interval-ms", type=int, default=1000)
    parser.add_argument("--reload-ms", type=int, default=0, help="how long the simulated reload takes")
    parser.add_argument(
        "--snapshot", action="store_true", help="keep the entities: start and resync from snapshots, apply whole transactions"
    )
    parser.add_argument("--count", type=int, default=0, help="exit 0 after N events (0: never)")
    parser.add_argument("--timeout", type=float, default=0, help="exit 3 after S seconds (0: never)")
    args = parser.parse_args()  # exits 2 on bad usage
    if args.poll_interval_ms <= 0 or args.reload_ms < 0:
        parser.error("--poll-interval-ms must be positive, --reload-ms not negative")

    consumer = Consumer(args)
    try:
        consumer.run()
    except CountReached:
        return 0
    except Timeout:
        log(f"timeout after {args.timeout:g} s ({consumer.applied} events applied)")
        return 3
    except PermanentError as error:
        log(f"error: {error}")
        return 1
    except psycopg.Error as error:
        log(f"error: {describe(error)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
