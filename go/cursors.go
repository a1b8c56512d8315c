package eventhub

// Two CursorStores: a file, rewritten atomically, and a table in the
// consumer's own database, written in the transaction that applies.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// FileCursors keeps cursors in a JSON file ({"org": {"revision": N,
// "version_id": "…"}}), rewritten whole at each Save through a temporary
// file renamed over it: a consumer killed at any moment finds the old
// cursor or the new one. Saving after applying makes delivery at least
// once across the consumer's crashes (a transaction applied but not yet
// saved comes again): apply idempotently, as entity creates, updates and
// deletes by id are. For exactly once, use TableCursors.
type FileCursors struct {
	path    string
	mu      sync.Mutex
	cursors map[string]fileCursor
}

type fileCursor struct {
	Revision  int64   `json:"revision"`
	VersionID *string `json:"version_id"`
}

// OpenFileCursors reads the file at path; a missing file holds no cursor.
func OpenFileCursors(path string) (*FileCursors, error) {
	f := &FileCursors{path: path, cursors: map[string]fileCursor{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &f.cursors); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidInput, path, err)
	}
	return f, nil
}

// Load returns the organization's stored cursor.
func (f *FileCursors) Load(_ context.Context, organization string) (Cursor, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.cursors[organization]
	c := Cursor{Revision: fc.Revision}
	if fc.VersionID != nil {
		c.VersionID = *fc.VersionID
	}
	return c, ok, nil
}

// Save stores the organization's cursor, and the file with it, durably.
func (f *FileCursors) Save(organization string, c Cursor) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc := fileCursor{Revision: c.Revision}
	if c.VersionID != "" {
		v := c.VersionID
		fc.VersionID = &v
	}
	prev, had := f.cursors[organization]
	f.cursors[organization] = fc
	if err := f.write(); err != nil {
		if had {
			f.cursors[organization] = prev
		} else {
			delete(f.cursors, organization)
		}
		return err
	}
	return nil
}

func (f *FileCursors) write() error {
	data, err := json.Marshal(f.cursors)
	if err != nil {
		return err
	}
	dir := filepath.Dir(f.path)
	tmp, err := os.CreateTemp(dir, filepath.Base(f.path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if d, err := os.Open(dir); err == nil { // the rename, durable
		d.Sync()
		d.Close()
	}
	return nil
}

// Execer runs a statement: a pgx.Tx, *pgx.Conn or *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error)
}

// Beginner begins a transaction: a *pgx.Conn or *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// TableCursors keeps cursors in a table of the consumer's own database
// (organization_id text PRIMARY KEY, revision bigint, version_id uuid),
// written in the same transaction as the consumer's own changes: a
// consumer that applies to PostgreSQL then applies every transaction
// exactly once across its own crashes. Apply does it all.
type TableCursors struct {
	db    Querier
	table string // quoted
}

// NewTableCursors keeps cursors in the table named (schema-qualified if
// wanted: "app.eventhub_cursors"), read through db.
func NewTableCursors(db Querier, table ...string) (*TableCursors, error) {
	if len(table) != 1 && len(table) != 2 {
		return nil, invalid("a table name is one or two parts (schema, table)")
	}
	for _, p := range table {
		if p == "" {
			return nil, invalid("an empty table name")
		}
	}
	return &TableCursors{db: db, table: pgx.Identifier(table).Sanitize()}, nil
}

// CreateTable creates the table if it does not exist.
func (t *TableCursors) CreateTable(ctx context.Context, db Execer) error {
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.table+` (
		organization_id text PRIMARY KEY,
		revision bigint NOT NULL,
		version_id uuid)`)
	return err
}

// Load returns the organization's stored cursor.
func (t *TableCursors) Load(ctx context.Context, organization string) (Cursor, bool, error) {
	return t.load(ctx, t.db, organization, "")
}

func (t *TableCursors) load(ctx context.Context, q Querier, organization, lock string) (Cursor, bool, error) {
	var rev int64
	var ver *string
	err := q.QueryRow(ctx, `SELECT revision, version_id::text FROM `+t.table+` WHERE organization_id = $1`+lock,
		organization).Scan(&rev, &ver)
	if errors.Is(err, pgx.ErrNoRows) {
		return Cursor{}, false, nil
	}
	if err != nil {
		return Cursor{}, false, err
	}
	return cursorOf(&rev, ver), true, nil
}

// Save stores the organization's cursor in the caller's transaction.
func (t *TableCursors) Save(ctx context.Context, tx Execer, organization string, c Cursor) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+t.table+` (organization_id, revision, version_id)
		VALUES ($1, $2, NULLIF($3, '')::uuid)
		ON CONFLICT (organization_id) DO UPDATE SET revision = excluded.revision, version_id = excluded.version_id`,
		organization, c.Revision, c.VersionID)
	return err
}

// Apply runs apply and stores the cursor in one transaction of db, once:
// if the stored cursor is already c (a commit whose answer was lost, a
// handler called again), it does nothing. Call it from a Handler with the
// Transaction's or the Snapshot's cursor.
func (t *TableCursors) Apply(ctx context.Context, db Beginner, organization string, c Cursor, apply func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) // a no-op after Commit
	stored, ok, err := t.load(ctx, tx, organization, " FOR UPDATE")
	if err != nil {
		return err
	}
	if ok && stored == c {
		return nil // applied already
	}
	if err := apply(tx); err != nil {
		return err
	}
	if err := t.Save(ctx, tx, organization, c); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
