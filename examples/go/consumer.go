package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

const (
	batchSize  = 1000                               // events_since's max_events (protocol step 3)
	zeroToken  = "00000000000000000000000000000000" // "poll now" (docs/sql.md, Notifications)
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// errCountReached ends the run once --count events were applied.
var errCountReached = errors.New("count reached")

type consumer struct {
	config   *pgx.ConnConfig
	orgs     []string
	poll     time.Duration
	reload   time.Duration // how long the simulated reload takes
	snapshot bool          // --snapshot: keep the entities (snapshot.go)
	count    int
	applied  int
	cursors  *cursorFile
	tokens   map[string]string // notification token → organization
}

// run keeps a session going: after a lost connection (or an error a retry
// can fix) it reconnects with exponential backoff and catches up from the
// cursors. Any other error is permanent and returned.
func (c *consumer) run(ctx context.Context) error {
	backoff := minBackoff
	for {
		connected, err := c.session(ctx)
		if errors.Is(err, errCountReached) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		if connected {
			backoff = minBackoff
		}
		logf("%v; reconnecting in %v", err, backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		if backoff *= 2; backoff > maxBackoff {
			backoff = maxBackoff
		}
	}
}

// retryable tells a lost connection or a passing condition, which a new
// session may overcome, from a permanent error (bad login, unknown
// database, 42501 insufficient_privilege, a missing extension, ...).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // no SQLSTATE: the network, a closed connection
	}
	code := pgErr.Code
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "57P"), // terminated backend, server shutting down or starting up
		strings.HasPrefix(code, "53"),  // too many connections, out of memory
		strings.HasPrefix(code, "40"),  // serialization failure, deadlock
		code == "55P03",                // lock_not_available (lock_timeout)
		code == "57014":                // query_canceled (statement_timeout)
		return true
	}
	return false
}

// session connects, listens, catches every organization up, then waits for
// notifications and polls. It returns why it ended, and whether it got as
// far as catching up (which resets the backoff).
func (c *consumer) session(ctx context.Context) (connected bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, c.config)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())

	// Step 2: LISTEN before the first catch-up, so that nothing published
	// in between goes unannounced.
	listening, err := listen(ctx, conn)
	if err != nil {
		return false, err
	}
	if !listening {
		logf("the server is a standby: LISTEN is refused, polling only")
	}
	// Learn the tokens (the poll does), then step 3 for every organization:
	// the catch-up also checks each cursor's version (ZE003) after a restart.
	if _, err := c.pollStates(ctx, conn); err != nil {
		return false, err
	}
	for _, org := range c.orgs {
		if err := c.catchUp(ctx, conn, org); err != nil {
			return false, err
		}
	}
	logf("connected, caught up")

	// Step 4: wake on a notification, or when the poll interval elapses.
	nextPoll := time.Now().Add(c.poll)
	for {
		waitCtx, cancel := context.WithDeadline(ctx, nextPoll)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		if n != nil {
			pollNow, err := c.notified(ctx, conn, n.Payload)
			if err != nil {
				return true, err
			}
			if pollNow {
				nextPoll = time.Now()
			}
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil || waitCtx.Err() == nil || conn.IsClosed() {
			return true, err // the run's timeout, or the connection is lost
		}
		if !listening { // before the poll's catch-up, as at the start
			if listening, err = listen(ctx, conn); err != nil {
				return true, err
			}
			if listening {
				logf("the server is no longer a standby: listening")
			}
		}
		if err := c.pollAndCatchUp(ctx, conn); err != nil {
			return true, err
		}
		nextPoll = time.Now().Add(c.poll)
	}
}

// listen sends LISTEN eventhub. A hot standby refuses it (25006
// read_only_sql_transaction): the consumer then relies on its polls, and
// tries again before each, so that it listens once the standby is promoted
// (docs/operations.md, "Reading from a standby").
func listen(ctx context.Context, conn *pgx.Conn) (bool, error) {
	_, err := conn.Exec(ctx, "LISTEN eventhub")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25006" {
		return false, nil
	}
	return err == nil, err
}

// notified handles one payload on channel eventhub. Notifications are
// wake-ups only: the cursor says what to fetch. Anyone may NOTIFY
// eventhub, so a payload that does not parse is ignored, and so is a token
// of an organization this consumer does not follow (or an outdated token
// after a key rotation: the next poll learns the new ones and catches up).
// It returns true for the zero token: poll now.
func (c *consumer) notified(ctx context.Context, conn *pgx.Conn, payload string) (bool, error) {
	var p struct {
		Token     string `json:"notification_token"`
		VersionID string `json:"version_id"`
	}
	if json.Unmarshal([]byte(payload), &p) != nil {
		return false, nil
	}
	if p.Token == zeroToken {
		return true, nil
	}
	org, ok := c.tokens[p.Token]
	if !ok {
		return false, nil
	}
	if cur := c.cursors.cursors[org]; cur.VersionID != nil && *cur.VersionID == p.VersionID {
		return false, nil // already applied (the notification of an event a catch-up fetched)
	}
	return false, c.catchUp(ctx, conn, org)
}

// pollStates reads, for every organization followed, its notification
// token (tokens change when the key is rotated, so every poll refreshes
// them) and its head. It returns the organizations whose head differs from
// the cursor.
func (c *consumer) pollStates(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT o.org, eventhub.notification_token(o.org), s.revision, s.version_id::text
		  FROM unnest($1::text[]) AS o(org)
		  LEFT JOIN eventhub.organization_states s ON s.organization_id = o.org`, c.orgs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	tokens := map[string]string{}
	var moved []string
	for rows.Next() {
		var org, token string
		var revision *int64 // NULL: never registered, head revision 0
		var version *string
		if err := rows.Scan(&org, &token, &revision, &version); err != nil {
			return nil, err
		}
		tokens[token] = org
		head := cursor{VersionID: version}
		if revision != nil {
			head.Revision = *revision
		}
		if differs(c.cursors.cursors[org], head) {
			moved = append(moved, org)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.tokens = tokens
	return moved, nil
}

// differs: the head is another revision or version than the cursor. A
// cursor at revision 0 may have no version (an organization registered
// without events has one): nothing to compare then.
func differs(cur, head cursor) bool {
	if cur.Revision != head.Revision {
		return true
	}
	return cur.VersionID != nil && head.VersionID != nil && *cur.VersionID != *head.VersionID
}

func (c *consumer) pollAndCatchUp(ctx context.Context, conn *pgx.Conn) error {
	moved, err := c.pollStates(ctx, conn)
	if err != nil {
		return err
	}
	for _, org := range moved {
		if err := c.catchUp(ctx, conn, org); err != nil {
			return err
		}
	}
	return nil
}

type event struct {
	revision         int64
	versionID        string
	action, entityID string
}

// catchUp applies the organization's events after its cursor, a batch at a
// time, until a batch is short (step 3), and resyncs on ZE001, ZE002 or
// ZE003 (step 5).
func (c *consumer) catchUp(ctx context.Context, conn *pgx.Conn, org string) error {
	if c.snapshot {
		return c.catchUpTransactions(ctx, conn, org)
	}
	for {
		batch, err := c.fetch(ctx, conn, org)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "ZE001" || pgErr.Code == "ZE002" || pgErr.Code == "ZE003") {
			if err := c.resync(ctx, conn, org, pgErr.Code); err != nil {
				return err
			}
			continue // from the head just read
		}
		if err != nil {
			return err
		}
		for _, e := range batch {
			if err := c.apply(org, e); err != nil {
				return err
			}
		}
		if len(batch) < batchSize {
			return nil
		}
	}
}

// fetch reads one batch after the cursor. The whole batch is read before
// any of it is applied: the documentation does not promise that an error
// (ZE001, ...) comes before the first row, and a batch that ends in one is
// not used.
func (c *consumer) fetch(ctx context.Context, conn *pgx.Conn, org string) ([]event, error) {
	cur := c.cursors.cursors[org]
	rows, err := conn.Query(ctx, `
		SELECT revision, version_id::text, action, entity_id
		  FROM eventhub.events_since($1, $2, $3, $4::uuid)`,
		org, cur.Revision, batchSize, cur.VersionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var batch []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.revision, &e.versionID, &e.action, &e.entityID); err != nil {
			return nil, err
		}
		batch = append(batch, e)
	}
	return batch, rows.Err()
}

// apply "applies" one event (prints it), then moves the cursor past it.
func (c *consumer) apply(org string, e event) error {
	fmt.Printf("EVENT %s %d %s %s %s\n", org, e.revision, e.versionID, e.action, e.entityID)
	if err := c.cursors.set(org, cursor{Revision: e.revision, VersionID: &e.versionID}); err != nil {
		return err
	}
	c.applied++
	if c.count > 0 && c.applied >= c.count {
		return errCountReached
	}
	return nil
}

// resync, in the documented order: (1) read the head, (2) reload the
// organization's full state, (3) continue from that head, so that an event
// published during the reload arrives afterwards instead of being lost.
// The cursor moves to the head only once the reload is done: it describes
// the state reloaded. Under --snapshot this is the fallback for ZE004: the
// entities are left as they were (a real consumer reloads them here).
func (c *consumer) resync(ctx context.Context, conn *pgx.Conn, org, reason string) error {
	head := cursor{}
	err := conn.QueryRow(ctx,
		"SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = $1",
		org).Scan(&head.Revision, &head.VersionID)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) { // no row: not registered, head 0
		return err
	}
	version := "-"
	if head.VersionID != nil {
		version = *head.VersionID
	}
	fmt.Printf("RESYNC %s %s %d %s\n", org, reason, head.Revision, version)
	// The reload, simulated: a real consumer rebuilds the organization from
	// its own tables here, which takes a while.
	select {
	case <-time.After(c.reload):
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.snapshot {
		if head.Entities = c.cursors.cursors[org].Entities; head.Entities == nil {
			head.Entities = &entities{}
		}
	}
	return c.cursors.set(org, head)
}
