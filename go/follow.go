package eventhub

// Following one organization: its start (a stored cursor, a snapshot, the
// head or the beginning), the catch-up a whole transaction at a time, and
// the resyncs (docs/protocol.md: The steps, Transactions, Bootstrap from a
// snapshot, Resync).

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

const (
	headSQL         = `SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = $1`
	snapshotHeadSQL = `SELECT revision, version_id::text FROM eventhub.snapshot_head($1)`
	snapshotPageSQL = `SELECT event_type, entity_id, event_data::text FROM eventhub.snapshot_entities($1, $2, $3, $4, $5, NULL, NULLIF($6, '')::uuid)`
)

// catchUpDirty catches up every organization marked as moved.
func (w *Watcher) catchUpDirty(ctx context.Context, fetch *pgx.Conn) error {
	w.mu.Lock()
	var dirty []string
	for o, s := range w.orgs {
		if s.dirty {
			s.dirty = false // a notification during the catch-up marks it again
			dirty = append(dirty, o)
		}
	}
	w.mu.Unlock()
	for i, o := range dirty {
		if err := w.catchUp(ctx, fetch, o); err != nil {
			w.mu.Lock()
			for _, o := range dirty[i:] {
				if s := w.orgs[o]; s != nil {
					s.dirty = true
				}
			}
			w.mu.Unlock()
			return err
		}
	}
	w.mu.Lock()
	w.checkSynced()
	w.mu.Unlock()
	return nil
}

// state returns a copy of the organization's state, false if it is not
// followed.
func (w *Watcher) state(org string) (orgState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.orgs[org]
	if s == nil {
		return orgState{}, false
	}
	return *s, true
}

// update changes the organization's state if it is still followed.
func (w *Watcher) update(org string, f func(s *orgState)) {
	w.mu.Lock()
	if s := w.orgs[org]; s != nil {
		f(s)
	}
	w.mu.Unlock()
}

// start gives an organization without a cursor one: the stored one, or
// as Config.Start says.
func (w *Watcher) start(ctx context.Context, fetch *pgx.Conn, org string) error {
	s, _ := w.state(org)
	if !s.loaded && w.cfg.Cursors != nil {
		c, ok, err := w.cfg.Cursors.Load(ctx, org)
		if err != nil {
			return &handlerError{err}
		}
		w.update(org, func(s *orgState) { s.loaded, s.cursor, s.hasCursor = true, c, ok })
		if ok {
			return nil
		}
	}
	switch w.cfg.Start {
	case FromSnapshot:
		return w.snapshot(ctx, fetch, org, nil)
	case AtHead:
		head, err := Head(ctx, fetch, org)
		if err != nil {
			return err
		}
		w.update(org, func(s *orgState) { s.cursor, s.hasCursor = head, true })
	default:
		w.update(org, func(s *orgState) { s.cursor, s.hasCursor = Cursor{}, true })
	}
	return nil
}

// Head returns an organization's head: the revision and version of its
// latest event ({0, ""} for an organization never registered). A consumer
// that loads its state itself reads the head first, then the state, and
// follows from the head (Watcher.FollowAt).
func Head(ctx context.Context, q Querier, organization string) (Cursor, error) {
	var rev *int64
	var ver *string
	err := q.QueryRow(ctx, headSQL, organization).Scan(&rev, &ver)
	if errors.Is(err, pgx.ErrNoRows) {
		return Cursor{}, nil // not registered: head (0, NULL)
	}
	if err != nil {
		return Cursor{}, wrap(err)
	}
	return cursorOf(rev, ver), nil
}

// cursorOf is the cursor of a revision and version read as nullable
// columns.
func cursorOf(rev *int64, ver *string) Cursor {
	var c Cursor
	if rev != nil {
		c.Revision = *rev
	}
	if ver != nil {
		c.VersionID = *ver
	}
	return c
}

// row is one row of the fetch.
type row struct {
	Change
	head int64 // the head when it was read (0 in a notification's events)
	end  bool  // the transaction's last event
}

// catchUp applies the organization's transactions after its cursor until
// it reaches the head, and answers a resync error as Config.Start says.
func (w *Watcher) catchUp(ctx context.Context, fetch *pgx.Conn, org string) error {
	s, ok := w.state(org)
	if !ok {
		return nil
	}
	if !s.hasCursor {
		if err := w.start(ctx, fetch, org); err != nil {
			return err
		}
	} else if s.needsReload != nil {
		if err := w.reload(ctx, fetch, org, s.needsReload); err != nil {
			return err
		}
	}
	if done, err := w.deliverSealed(ctx, org); done || err != nil {
		return err
	}
	var pending []Change // a transaction larger than a batch, so far
	for {
		s, ok := w.state(org)
		if !ok {
			return nil
		}
		from := s.cursor
		if n := len(pending); n > 0 {
			from = Cursor{pending[n-1].Revision, pending[n-1].VersionID}
		}
		sent := time.Now()
		batch, err := w.fetchBatch(ctx, fetch, org, from)
		if reason := resyncReason(err); reason != nil {
			pending = nil
			w.resyncs[resyncIndex(reason)].Add(1)
			w.update(org, func(s *orgState) { s.resyncs[resyncIndex(reason)]++ })
			w.logf("eventhub: organization %q: %v; resyncing", org, err)
			if w.cfg.Start == FromSnapshot {
				err = w.snapshot(ctx, fetch, org, reason)
			} else {
				err = w.reload(ctx, fetch, org, reason)
			}
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		for _, r := range batch {
			pending = append(pending, r.Change)
			if r.end {
				if err := w.deliver(ctx, org, pending); err != nil {
					return err
				}
				pending = nil
			}
		}
		if n := len(batch); n == 0 || batch[n-1].Revision == batch[n-1].head {
			w.update(org, func(s *orgState) { s.ready, s.confirmed = true, sent })
			return nil
		}
	}
}

func resyncReason(err error) error {
	for _, kind := range []error{ErrHistoryRemoved, ErrCursorAhead, ErrVersionMismatch} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return nil
}

func resyncIndex(reason error) int {
	switch reason {
	case ErrHistoryRemoved:
		return 0
	case ErrCursorAhead:
		return 1
	}
	return 2
}

// The fetch, its columns all in text (timestamps in microseconds since
// the epoch): sent unnamed, or prepared once per connection where no
// transaction pooler can lose it (Watcher.prepared).
const (
	preparedFetch = "eventhub_fetch"
	fetchSQL      = `SELECT revision, version_id::text, event_type, action, entity_id, correlation_id,
		event_data::text, (extract(epoch FROM processed_timestamp) * 1000000)::bigint,
		(extract(epoch FROM originated_timestamp) * 1000000)::bigint, transaction_end, head_revision
		FROM eventhub.transactions_since($1, $2, $3, NULLIF($4, '')::uuid, $5)`
)

// fetchBatch reads one batch after FROM, whole before any of it is
// applied.
func (w *Watcher) fetchBatch(ctx context.Context, fetch *pgx.Conn, org string, from Cursor) ([]row, error) {
	w.fetches.Add(1)
	params := [][]byte{[]byte(org), []byte(strconv.FormatInt(from.Revision, 10)),
		[]byte(strconv.Itoa(w.cfg.BatchSize)), []byte(from.VersionID), []byte(strconv.Itoa(w.cfg.BatchBytes))}
	var rr *pgconn.ResultReader
	if w.prepared {
		rr = fetch.PgConn().ExecPrepared(ctx, preparedFetch, params, nil, nil)
	} else {
		rr = fetch.PgConn().ExecParams(ctx, fetchSQL, params, nil, nil, nil)
	}
	var batch []row
	bad := false
	for rr.NextRow() {
		r, ok := fetchedRow(rr.Values())
		bad = bad || !ok
		batch = append(batch, r)
	}
	if _, err := rr.Close(); err != nil {
		return nil, wrap(err)
	}
	if bad {
		return nil, errors.New("eventhub: the fetch returned a row it cannot read")
	}
	return batch, nil
}

// fetchedRow decodes one row of fetchSQL (text values, reused by pgconn
// after the call: copied).
func fetchedRow(v [][]byte) (row, bool) {
	var r row
	if len(v) != 11 {
		return r, false
	}
	var errs [4]error
	var processed, originated int64
	r.Revision, errs[0] = strconv.ParseInt(string(v[0]), 10, 64)
	r.VersionID, r.Type, r.Action = string(v[1]), string(v[2]), Action(v[3])
	r.EntityID, r.CorrelationID, r.Data = string(v[4]), string(v[5]), append([]byte(nil), v[6]...)
	processed, errs[1] = strconv.ParseInt(string(v[7]), 10, 64)
	originated, errs[2] = strconv.ParseInt(string(v[8]), 10, 64)
	r.end = string(v[9]) == "t"
	r.head, errs[3] = strconv.ParseInt(string(v[10]), 10, 64)
	r.Processed, r.Originated = time.UnixMicro(processed), time.UnixMicro(originated)
	for _, e := range errs {
		if e != nil {
			return r, false
		}
	}
	return r, true
}

// deliver hands one whole transaction to the handler, then moves the
// cursor past it.
func (w *Watcher) deliver(ctx context.Context, org string, changes []Change) error {
	if _, ok := w.state(org); !ok {
		return nil
	}
	last := changes[len(changes)-1]
	t := &Transaction{Organization: org, Changes: changes, Cursor: Cursor{last.Revision, last.VersionID}}
	if err := w.h.OnTransaction(ctx, t); err != nil {
		return &handlerError{err}
	}
	w.delivered.Add(int64(len(changes)))
	w.txns.Add(1)
	w.update(org, func(s *orgState) { s.cursor = t.Cursor })
	return nil
}

// snapshot reads the organization's state and hands it to the handler,
// which replaces its own; the cursor moves to the snapshot's head. On
// ErrIncompleteState it falls back to OnResync.
func (w *Watcher) snapshot(ctx context.Context, fetch *pgx.Conn, org string, reason error) error {
	for {
		snap, err := w.readSnapshot(ctx, fetch, org)
		if errors.Is(err, ErrSnapshotMoved) {
			continue
		}
		if errors.Is(err, ErrIncompleteState) {
			w.logf("eventhub: organization %q: %v; asking the handler to reload", org, err)
			if reason == nil {
				reason = ErrIncompleteState
			}
			return w.reload(ctx, fetch, org, reason)
		}
		if err != nil {
			return err
		}
		snap.Reason = reason
		if _, ok := w.state(org); !ok {
			return nil
		}
		if err := w.h.OnSnapshot(ctx, snap); err != nil {
			return &handlerError{err}
		}
		w.snapshots.Add(1)
		w.update(org, func(s *orgState) {
			s.cursor, s.hasCursor, s.loaded, s.needsReload = snap.Cursor, true, true, nil
		})
		return nil
	}
}

// readSnapshot reads the head and every page in one REPEATABLE READ, READ
// ONLY transaction.
func (w *Watcher) readSnapshot(ctx context.Context, fetch *pgx.Conn, org string) (*Snapshot, error) {
	tx, err := fetch.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background()) // after an error; a no-op after Commit
	snap := &Snapshot{Organization: org}
	var rev int64
	var ver *string
	if err := tx.QueryRow(ctx, snapshotHeadSQL, org).Scan(&rev, &ver); err != nil {
		return nil, wrap(err)
	}
	snap.Cursor = cursorOf(&rev, ver)
	var afterType, afterID *string // NULL: the first page
	for {
		rows, err := tx.Query(ctx, snapshotPageSQL, org, snap.Cursor.Revision, afterType, afterID,
			w.cfg.BatchSize, snap.Cursor.VersionID)
		if err != nil {
			return nil, wrap(err)
		}
		n := 0
		for rows.Next() {
			var e Entity
			var data string
			if err := rows.Scan(&e.Type, &e.ID, &data); err != nil {
				rows.Close()
				return nil, err
			}
			e.Data = []byte(data)
			snap.Entities = append(snap.Entities, e)
			n++
		}
		if err := rows.Err(); err != nil {
			return nil, wrap(err)
		}
		if n < w.cfg.BatchSize {
			break
		}
		last := snap.Entities[len(snap.Entities)-1]
		afterType, afterID = &last.Type, &last.ID
	}
	return snap, tx.Commit(ctx)
}

// reload asks the handler to reload the organization from its own source:
// the head first, then the reload, then the cursor at that head.
func (w *Watcher) reload(ctx context.Context, fetch *pgx.Conn, org string, reason error) error {
	head, err := Head(ctx, fetch, org)
	if err != nil {
		return err
	}
	w.update(org, func(s *orgState) { s.needsReload = reason })
	if err := w.h.OnResync(ctx, &Resync{Organization: org, Reason: reason, Head: head}); err != nil {
		return &handlerError{err}
	}
	w.update(org, func(s *orgState) { s.cursor, s.hasCursor, s.loaded, s.needsReload = head, true, true, nil })
	return nil
}

// deliverSealed delivers the events the organization's notifications
// carried, in order, as long as they follow its cursor. It reports
// whether that reached the version the last notification named, so that
// no fetch is needed.
func (w *Watcher) deliverSealed(ctx context.Context, org string) (bool, error) {
	w.mu.Lock()
	s := w.orgs[org]
	if s == nil || !s.hasCursor || !s.ready || len(s.sealed) == 0 {
		w.mu.Unlock()
		return false, nil
	}
	notes, key := s.sealed, w.keys[org]
	s.sealed = nil
	w.mu.Unlock()
	received := time.Now()
	for _, n := range notes {
		o, err := openSealed(key, n)
		if err != nil {
			return false, nil // a wake-up only: fetch
		}
		st, ok := w.state(org)
		if !ok {
			return true, nil
		}
		first := o.rows[0]
		if o.rows[len(o.rows)-1].Revision <= st.cursor.Revision {
			continue // applied already
		}
		if first.Revision != st.cursor.Revision+1 || o.hasPrevious != (first.Revision > 1) ||
			o.hasPrevious && o.previous != st.cursor.VersionID {
			return false, nil // they do not follow the cursor: fetch
		}
		var txn []Change
		for _, r := range o.rows {
			txn = append(txn, r.Change)
			if r.end {
				if err := w.deliver(ctx, org, txn); err != nil {
					return false, err
				}
				w.sealed.Add(int64(len(txn)))
				txn = nil
			}
		}
	}
	caughtUp := false
	w.update(org, func(s *orgState) {
		if caughtUp = s.cursor.VersionID == s.notified && len(s.sealed) == 0; caughtUp {
			s.confirmed = received
		}
	})
	return caughtUp, nil
}
