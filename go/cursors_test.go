package eventhub_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	eventhub "github.com/eventhub/eventhub/go"
)

// A consumer that applies to its own tables with TableCursors.Apply
// applies every event once: across a commit whose answer it took for a
// failure (the handler is called again), and across its own restart
// (the next watcher starts from the cursor stored with the state).
func TestTableCursorsExactlyOnce(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	o := org(t)
	cursors, err := eventhub.NewTableCursors(pool, "public", "consumer_cursors")
	if err != nil {
		t.Fatal(err)
	}
	if err := cursors.CreateTable(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// The consumer's own state: one row per event applied; a second
	// apply of an event fails on the primary key.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS applied (org text, revision bigint, PRIMARY KEY (org, revision))`); err != nil {
		t.Fatal(err)
	}
	var lostAnswers int32
	handler := eventhub.HandlerFuncs{TransactionFunc: func(ctx context.Context, tx *eventhub.Transaction) error {
		err := cursors.Apply(ctx, pool, tx.Organization, tx.Cursor, func(db pgx.Tx) error {
			for _, c := range tx.Changes {
				if _, err := db.Exec(ctx, `INSERT INTO applied VALUES ($1, $2)`, tx.Organization, c.Revision); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil && tx.Cursor.Revision%5 == 0 && atomic.AddInt32(&lostAnswers, 1) <= 3 {
			return errors.New("the commit's answer was lost") // committed, but the consumer cannot know
		}
		return err
	}}
	conn := connect(t, testDSN)
	publish := func(n int) {
		for i := 0; i < n; i++ {
			publishTx(t, conn, ev(o, "a", eventhub.Update, `{}`), ev(o, "b", eventhub.Update, `{}`))
		}
	}
	appliedUpTo := func(rev int64) func() bool {
		return func() bool {
			c, ok, err := cursors.Load(ctx, o)
			return err == nil && ok && c.Revision == rev
		}
	}
	publish(10) // revisions 1-20
	_, stop := runWatcher(t, eventhub.Config{Organizations: []string{o}, Handler: handler, Cursors: cursors,
		Start: eventhub.FromBeginning, ReconnectMin: 10 * time.Millisecond})
	waitFor(t, 20*time.Second, "the first consumer applies 20", appliedUpTo(20))
	stop()
	publish(5) // 21-30, while no consumer runs
	runWatcher(t, eventhub.Config{Organizations: []string{o}, Handler: handler, Cursors: cursors,
		Start: eventhub.FromBeginning, ReconnectMin: 10 * time.Millisecond})
	waitFor(t, 20*time.Second, "the second consumer applies 30", appliedUpTo(30))
	var n, distinct int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT revision) FROM applied WHERE org = $1`, o).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 30 || distinct != 30 || atomic.LoadInt32(&lostAnswers) < 3 {
		t.Fatalf("%d rows applied (%d distinct), %d lost answers: want 30 once each, and 3 lost answers", n, distinct, lostAnswers)
	}
}

// FileCursors survive a reopen, and a bad file is refused.
func TestFileCursors(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cursors.json")
	f, err := eventhub.OpenFileCursors(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.Load(ctx, "acme"); ok {
		t.Fatal("a new file holds a cursor")
	}
	want := eventhub.Cursor{Revision: 7, VersionID: "1c9e4e2a-5b7d-4e0f-9a51-3f2b8c6d7e10"}
	if err := f.Save("acme", want); err != nil {
		t.Fatal(err)
	}
	if err := f.Save("globex", eventhub.Cursor{}); err != nil {
		t.Fatal(err)
	}
	g, err := eventhub.OpenFileCursors(path)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok, _ := g.Load(ctx, "acme"); !ok || c != want {
		t.Fatalf("reopened: %+v %v, want %+v", c, ok, want)
	}
	if c, ok, _ := g.Load(ctx, "globex"); !ok || c != (eventhub.Cursor{}) {
		t.Fatalf("reopened globex: %+v %v", c, ok)
	}
	if matches, _ := filepath.Glob(path + ".*.tmp"); len(matches) != 0 {
		t.Fatalf("temporary files left: %v", matches)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := writeFile(bad, "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := eventhub.OpenFileCursors(bad); !errors.Is(err, eventhub.ErrInvalidInput) {
		t.Fatalf("a bad file: %v", err)
	}
	if _, err := eventhub.NewTableCursors(nil, ""); !errors.Is(err, eventhub.ErrInvalidInput) {
		t.Fatalf("an empty table name: %v", err)
	}
}
