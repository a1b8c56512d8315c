package eventhub_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	eventhub "github.com/eventhub/eventhub/go"
)

// waitFor polls cond until it holds, or fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runWatcher makes a watcher and runs it until the test ends (or until
// the returned stop), and checks that Run returned nil.
func runWatcher(t *testing.T, cfg eventhub.Config) (*eventhub.Watcher, func()) {
	t.Helper()
	if cfg.ConnString == "" {
		cfg.ConnString = testDSN
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	w, err := eventhub.NewWatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// publishTx publishes events in one transaction.
func publishTx(t *testing.T, conn *pgx.Conn, events ...eventhub.Event) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var last int64
	for _, ev := range events {
		p, err := eventhub.Publish(ctx, tx, ev)
		if err != nil {
			t.Fatal(err)
		}
		last = p.Revision
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return last
}

func ev(org, id string, a eventhub.Action, data string) eventhub.Event {
	return eventhub.Event{Organization: org, Type: "API", Action: a, EntityID: id, Data: []byte(data)}
}

// sourceDigest is the digest of the organization's state as a snapshot
// read now says it, in the Store's form.
func sourceDigest(t *testing.T, conn *pgx.Conn, org string) (eventhub.Cursor, string) {
	t.Helper()
	s := eventhub.NewStore()
	ctx := context.Background()
	var rev int64
	var ver *string
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := tx.QueryRow(ctx, `SELECT revision, version_id::text FROM eventhub.snapshot_head($1)`, org).Scan(&rev, &ver); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `SELECT event_type, entity_id, event_data::text FROM eventhub.snapshot_entities($1, $2, NULL, NULL, 100000)`, org, rev)
	if err != nil {
		t.Fatal(err)
	}
	snap := &eventhub.Snapshot{Organization: org}
	for rows.Next() {
		var e eventhub.Entity
		var data string
		if err := rows.Scan(&e.Type, &e.ID, &data); err != nil {
			t.Fatal(err)
		}
		e.Data = []byte(data)
		snap.Entities = append(snap.Entities, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	s.OnSnapshot(ctx, snap)
	c := eventhub.Cursor{Revision: rev}
	if ver != nil {
		c.VersionID = *ver
	}
	return c, s.Digest(org)
}

// recorder is a Handler that records what it is given, under a lock.
type recorder struct {
	mu        sync.Mutex
	store     *eventhub.Store
	txns      []eventhub.Transaction
	snapshots []eventhub.Snapshot
}

func newRecorder() *recorder { return &recorder{store: eventhub.NewStore()} }

func (r *recorder) OnSnapshot(ctx context.Context, s *eventhub.Snapshot) error {
	r.mu.Lock()
	r.snapshots = append(r.snapshots, *s)
	r.mu.Unlock()
	return r.store.OnSnapshot(ctx, s)
}

func (r *recorder) OnTransaction(ctx context.Context, t *eventhub.Transaction) error {
	r.mu.Lock()
	r.txns = append(r.txns, *t)
	r.mu.Unlock()
	return r.store.OnTransaction(ctx, t)
}

func (r *recorder) OnResync(ctx context.Context, rs *eventhub.Resync) error {
	return r.store.OnResync(ctx, rs)
}

func (r *recorder) counts() (txns, snapshots int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.txns), len(r.snapshots)
}

// atCursor: the store holds the organization at exactly this cursor.
func atCursor(s *eventhub.Store, org string, c eventhub.Cursor) func() bool {
	return func() bool {
		got, ok := s.Cursor(org)
		return ok && got == c
	}
}

// A watcher starts from a snapshot, then delivers each transaction whole
// and in order, and its store equals the database's state.
func TestWatcherSnapshotThenTransactions(t *testing.T) {
	conn := connect(t, testDSN)
	o := org(t)
	publishTx(t, conn, ev(o, "a", eventhub.Create, `{"v": 1}`), ev(o, "b", eventhub.Create, `{"v": 1}`))
	publishTx(t, conn, ev(o, "b", eventhub.Delete, `{}`))

	r := newRecorder()
	w, _ := runWatcher(t, eventhub.Config{Organizations: []string{o}, Handler: r})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if txns, snaps := r.counts(); snaps != 1 || txns != 0 {
		t.Fatalf("a cold start: %d snapshots and %d transactions, want 1 and 0", snaps, txns)
	}
	if got := r.store.List(o); len(got) != 1 || got[0].ID != "a" || string(got[0].Data) != `{"v": 1}` {
		t.Fatalf("the snapshot's entities: %+v", got)
	}

	// A transaction of three events, then one of one.
	publishTx(t, conn, ev(o, "a", eventhub.Update, `{"v": 2}`), ev(o, "c", eventhub.Create, `{"v": 1}`),
		ev(o, "a", eventhub.Update, `{"v": 3}`))
	publishTx(t, conn, ev(o, "c", eventhub.Delete, `{}`))
	head, digest := sourceDigest(t, conn, o)
	waitFor(t, 10*time.Second, "the store reaches the head", atCursor(r.store, o, head))
	if got := r.store.Digest(o); got != digest {
		t.Fatalf("store digest %s, the database's %s", got, digest)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.txns) != 2 || len(r.txns[0].Changes) != 3 || len(r.txns[1].Changes) != 1 {
		t.Fatalf("transactions delivered: %+v", r.txns)
	}
	if c := r.txns[0].Changes; c[0].Revision != 4 || c[1].Revision != 5 || c[2].Revision != 6 || c[2].EntityID != "a" {
		t.Fatalf("the first transaction's changes: %+v", c)
	}
	if st := w.Status(); len(st) != 1 || !st[0].Ready || st[0].Applied != head {
		t.Fatalf("status %+v, want ready at %+v", st, head)
	}
	if s := w.Stats(); !s.Listening || s.Transactions != 2 || s.EventsDelivered != 4 || s.Snapshots != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// backends returns the pids of the watcher connections of this test.
func backends(t *testing.T, conn *pgx.Conn, appName string) []int32 {
	t.Helper()
	rows, err := conn.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE application_name = $1`, appName)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := scanPids(rows)
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

func scanPids(rows pgx.Rows) ([]int32, error) {
	defer rows.Close()
	var pids []int32
	for rows.Next() {
		var p int32
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		pids = append(pids, p)
	}
	return pids, rows.Err()
}

// A killed connection: the watcher connects again and catches up from its
// cursors, without a snapshot.
func TestWatcherKilledConnection(t *testing.T) {
	conn := connect(t, testDSN)
	o := org(t)
	app := "go-killed-" + o
	publishTx(t, conn, ev(o, "a", eventhub.Create, `{"v": 1}`))
	r := newRecorder()
	w, _ := runWatcher(t, eventhub.Config{ConnString: testDSN + " application_name=" + app,
		Organizations: []string{o}, Handler: r, ReconnectMin: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	pids := backends(t, conn, app)
	if len(pids) != 2 {
		t.Fatalf("the watcher holds %d connections, want 2 (listen, fetch)", len(pids))
	}
	for _, pid := range pids {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		publishTx(t, conn, ev(o, fmt.Sprint("e", i), eventhub.Create, `{}`))
	}
	head, digest := sourceDigest(t, conn, o)
	waitFor(t, 20*time.Second, "the store reaches the head", atCursor(r.store, o, head))
	if got := r.store.Digest(o); got != digest {
		t.Fatalf("store digest %s, the database's %s", got, digest)
	}
	if s := w.Stats(); s.Reconnects < 1 || s.Snapshots != 1 || s.Transactions != 5 {
		t.Fatalf("stats %+v: want a reconnect, one snapshot and the 5 transactions", s)
	}
}

// Retention removed the history after a stored cursor: the watcher
// resyncs from a snapshot (history_removed), and the store equals the
// database; an entity deleted meanwhile is a tombstone of unknown final
// state.
func TestWatcherRetentionResync(t *testing.T) {
	conn := connect(t, testDSN)
	ctx := context.Background()
	o := org(t)
	first := publishTx(t, conn, ev(o, "gone", eventhub.Create, `{}`), ev(o, "a", eventhub.Create, `{"v": 0}`))
	var version string
	if err := conn.QueryRow(ctx, `SELECT version_id::text FROM eventhub.events WHERE organization_id = $1 AND revision = $2`,
		o, first).Scan(&version); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		publishTx(t, conn, ev(o, "a", eventhub.Update, fmt.Sprintf(`{"v": %d}`, i)))
	}
	publishTx(t, conn, ev(o, "gone", eventhub.Delete, `{}`))
	if _, err := conn.Exec(ctx, `SELECT eventhub.cleanup_events($1, $2::bigint)`, o, first+4); err != nil {
		t.Fatal(err)
	}
	// A consumer that applied the first transaction holds "gone" and "a".
	dir := t.TempDir()
	cursors, err := eventhub.OpenFileCursors(filepath.Join(dir, "cursors.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cursors.Save(o, eventhub.Cursor{Revision: first, VersionID: version}); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	r.store.OnSnapshot(ctx, &eventhub.Snapshot{Organization: o, Entities: []eventhub.Entity{
		{Type: "API", ID: "gone", Data: []byte(`{}`)}, {Type: "API", ID: "a", Data: []byte(`{"v": 0}`)}}})
	var deleted []eventhub.Deleted
	r.store.AddHandler(eventhub.EntityHandlerFuncs{DeleteFunc: func(_ string, d eventhub.Deleted) { deleted = append(deleted, d) }})
	w, _ := runWatcher(t, eventhub.Config{Organizations: []string{o}, Handler: r, Cursors: cursors})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	head, digest := sourceDigest(t, conn, o)
	if got, _ := r.store.Cursor(o); got != head || r.store.Digest(o) != digest {
		t.Fatalf("store at %+v (digest %s), the database at %+v (%s)", got, r.store.Digest(o), head, digest)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.snapshots) != 1 || !errors.Is(r.snapshots[0].Reason, eventhub.ErrHistoryRemoved) {
		t.Fatalf("snapshots %+v: want one, for history_removed", r.snapshots)
	}
	if len(deleted) != 1 || deleted[0].Entity.ID != "gone" || !deleted[0].FinalStateUnknown {
		t.Fatalf("deletes told: %+v", deleted)
	}
	if s := w.Stats(); s.Resyncs["history_removed"] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Polling only (as on a standby or behind a transaction pooler) delivers
// the same, within the poll interval.
func TestWatcherPollsOnly(t *testing.T) {
	conn := connect(t, testDSN)
	o := org(t)
	r := newRecorder()
	w, _ := runWatcher(t, eventhub.Config{Organizations: []string{o}, Handler: r, Listen: eventhub.ListenNever,
		FallbackPollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	publishTx(t, conn, ev(o, "a", eventhub.Create, `{}`), ev(o, "b", eventhub.Create, `{}`))
	head, digest := sourceDigest(t, conn, o)
	waitFor(t, 10*time.Second, "the store reaches the head", atCursor(r.store, o, head))
	if r.store.Digest(o) != digest {
		t.Fatal("digests differ")
	}
	if s := w.Stats(); s.Listening || s.Notifications != 0 || s.Polls < 2 {
		t.Fatalf("stats %+v: want polls and no notifications", s)
	}
}

// A watcher of all organizations follows new ones, over one listening
// connection whatever their number; every goroutine ends with Run.
func TestWatcherAllOrganizations(t *testing.T) {
	conn := connect(t, testDSN)
	ctx := context.Background()
	prefix := org(t)
	if _, err := conn.Exec(ctx, `SELECT eventhub.register_organization($1 || '-' || i) FROM generate_series(1, 1000) i`, prefix); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	app := "go-all-" + prefix
	r := newRecorder()
	w, stop := runWatcher(t, eventhub.Config{ConnString: testDSN + " application_name=" + app, All: true, Handler: r})
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := w.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	if n := len(w.Status()); n < 1000 {
		t.Fatalf("following %d organizations, want at least 1000", n)
	}
	var listeners int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&listeners); err != nil {
		t.Fatal(err)
	}
	if listeners != 2 {
		t.Fatalf("%d connections for 1000 organizations, want 2 (one listens)", listeners)
	}
	newOrg := prefix + "-new"
	publishTx(t, conn, ev(newOrg, "a", eventhub.Create, `{"new": true}`))
	waitFor(t, 10*time.Second, "the new organization is delivered", func() bool {
		_, ok := r.store.Get(newOrg, "API", "a")
		return ok
	})
	stop()
	waitFor(t, 5*time.Second, "the watcher's goroutines end", func() bool { return runtime.NumGoroutine() <= before })
}

// NewWatcher refuses what cannot work.
func TestNewWatcherBadConfig(t *testing.T) {
	h := eventhub.HandlerFuncs{}
	for _, cfg := range []eventhub.Config{
		{ConnString: "host=/tmp port=notaport", Handler: h},
		{ConnString: testDSN},
		{ConnString: testDSN, Handler: h, All: true, Organizations: []string{"a"}},
		{ConnString: testDSN, Handler: h, Organizations: []string{""}},
		{ConnString: testDSN, Handler: h, Start: 7},
	} {
		if _, err := eventhub.NewWatcher(cfg); !errors.Is(err, eventhub.ErrInvalidInput) {
			t.Errorf("NewWatcher(%+v): %v, want ErrInvalidInput", cfg, err)
		}
	}
}

// WaitForSync returns Run's error when Run gives up before a sync, and
// ErrStopped when Run's context ended first.
func TestWaitForSyncAfterRunStops(t *testing.T) {
	w, err := eventhub.NewWatcher(eventhub.Config{ConnString: testDSN + " dbname=no_such_database",
		Organizations: []string{"acme"}, Handler: eventhub.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := w.WaitForSync(ctx)
	if rerr := <-runErr; rerr == nil || got != rerr {
		t.Fatalf("WaitForSync %v, Run %v: want Run's error from both", got, rerr)
	}

	w, err = eventhub.NewWatcher(eventhub.Config{ConnString: testDSN, Organizations: []string{org(t)},
		Handler: eventhub.HandlerFuncs{SnapshotFunc: func(context.Context, *eventhub.Snapshot) error {
			return errors.New("not yet") // never synced
		}}, ReconnectMin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	go func() { runErr <- w.Run(rctx) }()
	time.AfterFunc(100*time.Millisecond, rcancel)
	if got := w.WaitForSync(ctx); !errors.Is(got, eventhub.ErrStopped) || <-runErr != nil {
		t.Fatalf("WaitForSync after Run's context ended: %v", got)
	}
}

// A Store refuses a transaction for an organization it never loaded,
// unless the transaction starts the history.
func TestStoreRefusesAnUnloadedOrganization(t *testing.T) {
	s := eventhub.NewStore()
	at := func(rev int64) *eventhub.Transaction {
		return &eventhub.Transaction{Organization: "acme", Changes: []eventhub.Change{{Revision: rev, Type: "API",
			Action: eventhub.Create, EntityID: "a", Data: []byte(`{}`)}}, Cursor: eventhub.Cursor{Revision: rev}}
	}
	if err := s.OnTransaction(context.Background(), at(7)); err == nil {
		t.Fatal("a transaction at revision 7 applied to an organization never loaded")
	}
	if err := s.OnTransaction(context.Background(), at(1)); err != nil {
		t.Fatalf("revision 1: %v", err)
	}
	if err := s.OnTransaction(context.Background(), at(2)); err != nil {
		t.Fatalf("revision 2 after 1: %v", err)
	}
}
