package main

// The --snapshot mode (docs/protocol.md, "Bootstrap from a snapshot",
// "Resync from a snapshot", "Transactions"): the consumer keeps each
// organization's entities, starts from a snapshot instead of replaying the
// history, answers ZE001/ZE002/ZE003 with a new snapshot, and applies each
// transaction's events as one unit.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// entities is an organization's state under --snapshot: event type →
// entity id → event_data as the server prints it (event_data::text, so
// that every consumer hashes the same bytes).
type entities map[string]map[string]string

func (m entities) put(eventType, entityID, data string) {
	if m[eventType] == nil {
		m[eventType] = map[string]string{}
	}
	m[eventType][entityID] = data
}

func (m entities) remove(eventType, entityID string) {
	delete(m[eventType], entityID)
	if len(m[eventType]) == 0 {
		delete(m, eventType)
	}
}

func (m entities) count() int {
	n := 0
	for _, ids := range m {
		n += len(ids)
	}
	return n
}

// digest is the sha256, in lower-case hex, of the lines
// "<event_type>\t<entity_id>\t<event_data>\n" of every entity, sorted
// bytewise and concatenated (an empty map hashes "").
func (m entities) digest() string {
	lines := make([]string, 0, m.count())
	for eventType, ids := range m {
		for id, data := range ids {
			lines = append(lines, eventType+"\t"+id+"\t"+data+"\n")
		}
	}
	sort.Strings(lines) // Go compares strings byte by byte
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// txnEvent is one row of eventhub.transactions_since.
type txnEvent struct {
	event
	eventType, data string
	firstRevision   int64 // transaction_first_revision: names the transaction
	end             bool  // transaction_end: the transaction's last event
	head            int64 // head_revision, for the caught-up rule
}

func isResync(code string) bool { return code == "ZE001" || code == "ZE002" || code == "ZE003" }

// catchUpTransactions is catchUp under --snapshot: an organization with no
// state yet is bootstrapped from a snapshot; then transactions_since is read
// until caught up (the batch is empty, or its last row is at the head), each
// transaction applied once its last event (transaction_end) is read. A
// transaction larger than a batch comes in parts: the parts are kept, and the
// next batch is read after the last of them, but the cursor moves only when
// the transaction is applied whole.
func (c *consumer) catchUpTransactions(ctx context.Context, conn *pgx.Conn, org string) error {
	if c.cursors.cursors[org].Entities == nil {
		if err := c.fromSnapshot(ctx, conn, org, ""); err != nil {
			return err
		}
	}
	var pending []txnEvent
	for {
		from := c.cursors.cursors[org]
		if n := len(pending); n > 0 {
			from = cursor{Revision: pending[n-1].revision, VersionID: &pending[n-1].versionID}
		}
		batch, err := c.fetchTransactions(ctx, conn, org, from)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && isResync(pgErr.Code) {
			pending = nil
			if err := c.fromSnapshot(ctx, conn, org, pgErr.Code); err != nil {
				return err
			}
			continue // from the snapshot's head
		}
		if err != nil {
			return err
		}
		for _, e := range batch {
			pending = append(pending, e)
			if e.end {
				if err := c.applyTransaction(org, pending); err != nil {
					return err
				}
				pending = nil
			}
		}
		if n := len(batch); n == 0 || batch[n-1].revision == batch[n-1].head {
			cur := c.cursors.cursors[org]
			fmt.Printf("DIGEST %s %d %s\n", org, cur.Revision, cur.Entities.digest())
			return nil
		}
	}
}

// fetchTransactions reads one batch after FROM, whole before any of it is
// applied, as fetch does.
func (c *consumer) fetchTransactions(ctx context.Context, conn *pgx.Conn, org string, from cursor) ([]txnEvent, error) {
	rows, err := conn.Query(ctx, `
		SELECT revision, version_id::text, action, entity_id, event_type, event_data::text,
		       transaction_first_revision, transaction_end, head_revision
		  FROM eventhub.transactions_since($1, $2, $3, $4::uuid)`,
		org, from.Revision, batchSize, from.VersionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var batch []txnEvent
	for rows.Next() {
		var e txnEvent
		if err := rows.Scan(&e.revision, &e.versionID, &e.action, &e.entityID, &e.eventType, &e.data,
			&e.firstRevision, &e.end, &e.head); err != nil {
			return nil, err
		}
		batch = append(batch, e)
	}
	return batch, rows.Err()
}

// applyTransaction applies one transaction's events to the organization's
// entities and stores them with the cursor at its last event, in one write
// of the cursor file: the consumer's state is always between two
// transactions. A DELETE removes the entity; a CREATE or UPDATE carries
// its whole state.
func (c *consumer) applyTransaction(org string, events []txnEvent) error {
	cur := c.cursors.cursors[org]
	for _, e := range events {
		fmt.Printf("EVENT %s %d %s %s %s\n", org, e.revision, e.versionID, e.action, e.entityID)
		if e.action == "DELETE" {
			cur.Entities.remove(e.eventType, e.entityID)
		} else {
			cur.Entities.put(e.eventType, e.entityID, e.data)
		}
	}
	last := events[len(events)-1]
	cur.Revision, cur.VersionID = last.revision, &last.versionID
	if err := c.cursors.set(org, cur); err != nil {
		return err
	}
	fmt.Printf("TXN %s %d %d %d\n", org, events[0].firstRevision, last.revision, len(events))
	c.applied += len(events)
	if c.count > 0 && c.applied >= c.count {
		return errCountReached
	}
	return nil
}

// fromSnapshot replaces the organization's entities with a snapshot and moves
// the cursor to its head. REASON is the SQLSTATE that asked for it (ZE001,
// ZE002 or ZE003, printed in a RESYNC line first), or "" for a bootstrap.
// ZE005 (the head moved: only possible if the pages were not read in one
// transaction) is retried; ZE004 (the organization's snapshot is
// incomplete, and stays so until the application declares its full state)
// falls back to the reload from the application's own tables.
func (c *consumer) fromSnapshot(ctx context.Context, conn *pgx.Conn, org, reason string) error {
	for {
		head, state, err := readSnapshot(ctx, conn, org)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "ZE005" {
			logf("%s: %s; reading the snapshot again", org, pgErr.Message)
			continue
		}
		if errors.As(err, &pgErr) && pgErr.Code == "ZE004" {
			logf("%s: %s; reloading from the application instead", org, pgErr.Message)
			if reason == "" {
				reason = "ZE004"
			}
			return c.resync(ctx, conn, org, reason)
		}
		if err != nil {
			return err
		}
		version := "-"
		if head.VersionID != nil {
			version = *head.VersionID
		}
		if reason != "" {
			fmt.Printf("RESYNC %s %s %d %s\n", org, reason, head.Revision, version)
		}
		head.Entities = &state
		if err := c.cursors.set(org, head); err != nil {
			return err
		}
		fmt.Printf("SNAPSHOT %s %d %s %d\n", org, head.Revision, version, state.count())
		return nil
	}
}

// readSnapshot reads the organization's head and every page of its
// entities in one REPEATABLE READ, READ ONLY transaction, so that the pages
// are consistent with each other and with the head: continuing from the
// head then misses nothing and repeats nothing. Each page starts after the
// previous page's last (event_type, entity_id); a page shorter than
// batchSize is the last.
func readSnapshot(ctx context.Context, conn *pgx.Conn, org string) (cursor, entities, error) {
	var head cursor
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return head, nil, err
	}
	defer tx.Rollback(ctx) // after an error; a no-op after Commit
	err = tx.QueryRow(ctx, "SELECT revision, version_id::text FROM eventhub.snapshot_head($1)", org).
		Scan(&head.Revision, &head.VersionID)
	if err != nil {
		return head, nil, err
	}
	state := entities{}
	var afterType, afterID *string // NULL: the first page
	for {
		rows, err := tx.Query(ctx, `
			SELECT event_type, entity_id, event_data::text
			  FROM eventhub.snapshot_entities($1, $2, $3, $4, $5, NULL, $6::uuid)`,
			org, head.Revision, afterType, afterID, batchSize, head.VersionID)
		if err != nil {
			return head, nil, err
		}
		n := 0
		var eventType, entityID, data string
		for rows.Next() {
			if err := rows.Scan(&eventType, &entityID, &data); err != nil {
				rows.Close()
				return head, nil, err
			}
			state.put(eventType, entityID, data)
			n++
		}
		if err := rows.Err(); err != nil {
			return head, nil, err
		}
		if n < batchSize {
			break
		}
		afterType, afterID = &eventType, &entityID
	}
	return head, state, tx.Commit(ctx)
}
