package eventhub_test

// The watcher through the faults users meet: a server restart, reading on
// a hot standby, a failover to a standby that had not received everything
// (a rewritten history), transaction-pooling pgbouncer.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	eventhub "github.com/eventhub/eventhub/go"
)

// synced runs a watcher with a recorder and waits for its first sync.
func synced(t *testing.T, cfg eventhub.Config) (*eventhub.Watcher, *recorder) {
	t.Helper()
	r := newRecorder()
	cfg.Handler = r
	if cfg.ReconnectMin == 0 {
		cfg.ReconnectMin = 20 * time.Millisecond
	}
	w, _ := runWatcher(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return w, r
}

// converges waits until the store holds the organization as the database
// at dsn does.
func converges(t *testing.T, dsn string, r *recorder, o string) {
	t.Helper()
	conn := connect(t, dsn)
	head, digest := sourceDigest(t, conn, o)
	waitFor(t, 30*time.Second, fmt.Sprintf("the store reaches %+v", head), atCursor(r.store, o, head))
	if got := r.store.Digest(o); got != digest {
		t.Fatalf("store digest %s, the database's %s", got, digest)
	}
}

func publishN(t *testing.T, dsn, o, prefix string, n int) {
	t.Helper()
	conn := connect(t, dsn)
	for i := 0; i < n; i++ {
		publishTx(t, conn, ev(o, fmt.Sprintf("%s%d", prefix, i%3), eventhub.Update, fmt.Sprintf(`{"%s": %d}`, prefix, i)))
	}
}

// A restarted server: the watcher reconnects and catches up from its
// cursor, with no snapshot.
func TestWatcherServerRestart(t *testing.T) {
	s := testServer(t)
	o := org(t)
	publishN(t, s.dsn(), o, "a", 3)
	w, r := synced(t, eventhub.Config{ConnString: s.dsn(), Organizations: []string{o}})
	if err := s.pgctl("-m", "fast", "restart"); err != nil {
		t.Fatal(err)
	}
	publishN(t, s.dsn(), o, "b", 5)
	converges(t, s.dsn(), r, o)
	if st := w.Stats(); st.Reconnects < 1 || st.Snapshots != 1 || st.Transactions != 5 {
		t.Fatalf("stats %+v: want a reconnect, the first snapshot only, and 5 transactions", st)
	}
}

// On a hot standby the watcher polls (LISTEN is refused there) and
// delivers what the primary publishes; after a failover to a standby that
// lacks what the watcher applied and publishes a history of its own, the
// watcher (given both hosts, target_session_attrs=read-write) resyncs from
// a snapshot and holds the new primary's state.
func TestWatcherStandbyAndPromotion(t *testing.T) {
	p := testServer(t)
	o := org(t)
	publishN(t, p.dsn(), o, "a", 3)
	sb := p.standby(t)

	// A reader on the standby.
	reader, rr := synced(t, eventhub.Config{ConnString: sb.dsn(), Organizations: []string{o},
		FallbackPollInterval: 20 * time.Millisecond})
	publishN(t, p.dsn(), o, "b", 4)
	converges(t, p.dsn(), rr, o)
	if st := reader.Stats(); st.Listening || st.Notifications != 0 {
		t.Fatalf("on a standby: stats %+v, want polling", st)
	}

	both := fmt.Sprintf("host=%s,%s port=%d,%d user=postgres dbname=postgres target_session_attrs=read-write",
		p.dir, sb.dir, p.port, sb.port)
	w, r := synced(t, eventhub.Config{ConnString: both, Organizations: []string{o}})
	converges(t, p.dsn(), r, o)

	// The standby stops; the primary publishes what the watcher applies
	// and the standby never receives; the primary dies.
	if err := sb.pgctl("-m", "fast", "stop"); err != nil {
		t.Fatal(err)
	}
	publishN(t, p.dsn(), o, "lost", 4)
	converges(t, p.dsn(), r, o)
	lost, _ := r.store.Cursor(o)
	if err := p.pgctl("-m", "immediate", "stop"); err != nil {
		t.Fatal(err)
	}
	// The standby is promoted and publishes a history of its own.
	if err := sb.pgctl("start"); err != nil {
		t.Fatal(err)
	}
	if err := sb.pgctl("promote"); err != nil {
		t.Fatal(err)
	}
	publishN(t, sb.dsn(), o, "new", 2)
	converges(t, sb.dsn(), r, o)
	if got, _ := r.store.Cursor(o); got.Revision >= lost.Revision {
		t.Fatalf("the new primary's head %+v is not below the lost cursor %+v: the test proves nothing", got, lost)
	}
	for _, e := range r.store.List(o) {
		if strings.HasPrefix(e.ID, "lost") {
			t.Fatalf("the store still holds %+v, which the new primary never had", e)
		}
	}
	r.mu.Lock()
	n := len(r.snapshots)
	last := r.snapshots[n-1]
	r.mu.Unlock()
	if n != 2 || !errors.Is(last.Reason, eventhub.ErrCursorAhead) && !errors.Is(last.Reason, eventhub.ErrVersionMismatch) {
		t.Fatalf("%d snapshots, the last for %v: want a resync for cursor_ahead or version_mismatch", n, last.Reason)
	}
	if st := w.Stats(); st.Reconnects < 1 || !st.Listening {
		t.Fatalf("stats %+v: want a reconnect, listening on the new primary", st)
	}
}

// Behind transaction-pooling pgbouncer the probe notification never
// arrives: the watcher polls, with unnamed statements, and delivers.
func TestWatcherTransactionPooling(t *testing.T) {
	s := testServer(t)
	bouncer := s.pgbouncer(t)
	o := org(t)
	publishN(t, s.dsn(), o, "a", 2)
	w, r := synced(t, eventhub.Config{ConnString: bouncer, Organizations: []string{o},
		FallbackPollInterval: 20 * time.Millisecond})
	// A publisher through the same pooler, which may hand it the server
	// connection the probe listened on.
	conn := connect(t, bouncer)
	for i := 0; i < 5; i++ {
		p, err := eventhub.Publish(context.Background(), conn, ev(o, fmt.Sprint("p", i), eventhub.Create, `{}`))
		if err != nil || p.Revision != int64(3+i) {
			t.Fatalf("publish through pgbouncer: %+v, %v", p, err)
		}
	}
	converges(t, s.dsn(), r, o)
	if st := w.Stats(); st.Listening || st.Reconnects != 0 || st.Transactions != 5 {
		t.Fatalf("stats %+v: want polling, no reconnect, 5 transactions", st)
	}
}
