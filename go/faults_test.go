package eventhub_test

// The watcher through the faults users meet: a server restart, reading on
// a hot standby, a failover to a standby that had not received everything
// (a rewritten history), transaction-pooling pgbouncer.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
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

// logLines records what a watcher logs, and passes it on to the test's
// log.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...interface{}) {
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	l.t.Log(line)
}

func (l *logLines) has(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, part) {
			return true
		}
	}
	return false
}

// sessionsWaiting waits until the server at dsn shows n sessions of the
// application (any, if "") asleep in eventhub.wait_for_events.
func sessionsWaiting(t *testing.T, dsn, app string, n int) {
	t.Helper()
	conn := connect(t, dsn)
	waitFor(t, 20*time.Second, fmt.Sprintf("%d sessions wait in eventhub.wait_for_events", n), func() bool {
		var got int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE ($1 = '' OR application_name = $1) AND wait_event = 'Extension'
			AND query LIKE 'CALL eventhub.wait_for_events(%'`, app).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got == n
	})
}

// deliveryLatencies publishes n one-event transactions at dsn, one at a
// time, and measures each one's time from its commit to its delivery to
// the store.
func deliveryLatencies(t *testing.T, dsn string, r *recorder, o string, n int) []time.Duration {
	t.Helper()
	conn := connect(t, dsn)
	var out []time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(i%4) * 37 * time.Millisecond) // not in step with any interval
		rev := publishTx(t, conn, ev(o, fmt.Sprint("lat", i), eventhub.Create, fmt.Sprintf(`{"i": %d}`, i)))
		committed := time.Now()
		for {
			if c, _ := r.store.Cursor(o); c.Revision >= rev {
				break
			}
			if time.Since(committed) > 30*time.Second {
				t.Fatalf("revision %d not delivered in 30 s", rev)
			}
			time.Sleep(time.Millisecond)
		}
		out = append(out, time.Since(committed))
	}
	return out
}

// inOrderOnce checks that the recorder received every transaction once,
// in revision order, with no gap.
func inOrderOnce(t *testing.T, r *recorder) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	for _, tx := range r.txns {
		for _, c := range tx.Changes {
			if last != 0 && c.Revision != last+1 {
				t.Fatalf("revision %d delivered after %d", c.Revision, last)
			}
			last = c.Revision
		}
	}
}

func maxOf(ds []time.Duration) (max, median time.Duration) {
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return sorted[len(sorted)-1], sorted[len(sorted)/2]
}

// On a hot standby LISTEN is refused: the watcher waits for events with
// eventhub.wait_for_events on its one connection, is woken by the replay
// of each commit, and delivers it at once, exactly once and in order (a
// poll, at FallbackPollInterval, would take seconds here); the end of
// Run's context ends a wait at once and leaves no goroutine. After a
// failover to a standby that lacks what the watcher applied and publishes
// a history of its own, the watcher (given both hosts,
// target_session_attrs=read-write) resyncs from a snapshot and holds the
// new primary's state.
func TestWatcherStandbyAndPromotion(t *testing.T) {
	p := testServer(t)
	o := org(t)
	publishN(t, p.dsn(), o, "a", 3)
	sb := p.standby(t)

	// A reader on the standby, whose polls are far apart: only waits
	// deliver promptly.
	app := fmt.Sprint("go-standby-", time.Now().UnixNano())
	before := runtime.NumGoroutine()
	logs := &logLines{t: t}
	rr := newRecorder()
	reader, stopReader := runWatcher(t, eventhub.Config{ConnString: sb.dsn() + " application_name=" + app,
		Organizations: []string{o}, Handler: rr, Logf: logs.logf,
		FallbackPollInterval: 3 * time.Second, PollInterval: time.Minute})
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := reader.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	converges(t, p.dsn(), rr, o)
	sessionsWaiting(t, sb.dsn(), app, 1)
	lat := deliveryLatencies(t, p.dsn(), rr, o, 8)
	publishN(t, p.dsn(), o, "b", 4)
	converges(t, p.dsn(), rr, o)
	inOrderOnce(t, rr)
	max, median := maxOf(lat)
	t.Logf("on the standby: commit to delivery %v (median %v, max %v)", lat, median, max)
	if max > time.Second {
		t.Errorf("a commit took %v to be delivered from the standby, want under 1 s (the poll is 3 s apart)", max)
	}
	if st := reader.Stats(); st.Listening || st.Notifications != 0 || !st.Waiting || st.Waits < 8 || st.Polls > 2 {
		t.Fatalf("on a standby: stats %+v, want waits (not notifications, not polls)", st)
	}
	if !logs.has("waiting for events with eventhub.wait_for_events()") {
		t.Fatal("the watcher did not say that it waits with wait_for_events")
	}
	sbConn := connect(t, sb.dsn())
	if n := len(backends(t, sbConn, app)); n != 1 {
		t.Fatalf("the reader holds %d connections to the standby, want 1 (it waits where it fetches)", n)
	}
	// Stopped in the middle of a wait: Run returns at once, the server's
	// session ends, no goroutine is left.
	sessionsWaiting(t, sb.dsn(), app, 1)
	stopping := time.Now()
	stopReader()
	if d := time.Since(stopping); d > time.Second {
		t.Errorf("Run took %v to return from a wait", d)
	}
	waitFor(t, 5*time.Second, "the reader's goroutines end", func() bool { return runtime.NumGoroutine() <= before })
	waitFor(t, 10*time.Second, "the reader's server session ends", func() bool {
		return len(backends(t, sbConn, app)) == 0
	})

	// A reader whose role may not EXECUTE wait_for_events: the server
	// cannot wait for it, and it polls, as before.
	if err := p.exec(`CREATE ROLE go_nowait LOGIN;
		GRANT USAGE ON SCHEMA eventhub TO go_nowait;
		GRANT SELECT ON eventhub.organization_states, eventhub.events TO go_nowait;
		GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA eventhub TO go_nowait;
		REVOKE EXECUTE ON PROCEDURE eventhub.wait_for_events(text[], bigint[], uuid[], integer, text[]) FROM go_nowait`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the standby replays the role", func() bool {
		var n int
		return sbConn.QueryRow(context.Background(), `SELECT count(*) FROM pg_roles WHERE rolname = 'go_nowait'`).Scan(&n) == nil && n == 1
	})
	plogs := &logLines{t: t}
	poller, pr := synced(t, eventhub.Config{ConnString: fmt.Sprintf("host=%s port=%d user=go_nowait dbname=postgres", sb.dir, sb.port),
		Organizations: []string{o}, Logf: plogs.logf, FallbackPollInterval: 20 * time.Millisecond, PollInterval: time.Minute})
	publishN(t, p.dsn(), o, "c", 3)
	converges(t, p.dsn(), pr, o)
	if st := poller.Stats(); st.Waiting || st.Waits != 0 || st.Polls < 3 || st.Listening {
		t.Fatalf("without EXECUTE on wait_for_events: stats %+v, want polls", st)
	}
	if !plogs.has("the server cannot wait for events") {
		t.Fatal("the watcher did not say that the server cannot wait for it")
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

// A wait that began on a standby ends, empty, when the standby is
// promoted: the watcher polls at once, sees the promotion and listens on a
// new session, long before its next poll (a minute away) or the end of
// its wait (10 s).
func TestWatcherWaitEndsAtPromotion(t *testing.T) {
	p := testServer(t)
	o := org(t)
	publishN(t, p.dsn(), o, "a", 2)
	sb := p.standby(t)
	app := fmt.Sprint("go-promoted-", time.Now().UnixNano())
	w, r := synced(t, eventhub.Config{ConnString: sb.dsn() + " application_name=" + app, Organizations: []string{o},
		FallbackPollInterval: 10 * time.Second, PollInterval: time.Minute})
	sessionsWaiting(t, sb.dsn(), app, 1)
	if err := sb.pgctl("promote"); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	waitFor(t, 5*time.Second, "the watcher listens on the promoted server", func() bool { return w.Stats().Listening })
	t.Logf("listening %v after pg_ctl promote returned", time.Since(promoted))
	publishN(t, sb.dsn(), o, "b", 3)
	converges(t, sb.dsn(), r, o)
	inOrderOnce(t, r)
	if st := w.Stats(); st.Reconnects != 1 || st.Waiting || st.Notifications == 0 {
		t.Fatalf("stats %+v: want one new session, listening", st)
	}
}

// Behind transaction-pooling pgbouncer the probe notification never
// arrives: the watcher waits for events with eventhub.wait_for_events,
// with unnamed statements, and delivers each commit at once, exactly once
// and in order (a poll, at FallbackPollInterval, would take seconds here).
func TestWatcherTransactionPooling(t *testing.T) {
	s := testServer(t)
	bouncer := s.pgbouncer(t)
	o := org(t)
	publishN(t, s.dsn(), o, "a", 2)
	logs := &logLines{t: t}
	w, r := synced(t, eventhub.Config{ConnString: bouncer, Organizations: []string{o}, Logf: logs.logf,
		FallbackPollInterval: 3 * time.Second, PollInterval: time.Minute})
	sessionsWaiting(t, s.dsn(), "", 1)
	// A publisher through the same pooler, which may hand it the server
	// connection the probe listened on, or any other: its statements are
	// unnamed.
	publisher := bouncer + " statement_cache_mode=describe"
	conn := connect(t, publisher)
	for i := 0; i < 5; i++ {
		p, err := eventhub.Publish(context.Background(), conn, ev(o, fmt.Sprint("p", i), eventhub.Create, `{}`))
		if err != nil || p.Revision != int64(3+i) {
			t.Fatalf("publish through pgbouncer: %+v, %v", p, err)
		}
	}
	converges(t, s.dsn(), r, o)
	lat := deliveryLatencies(t, publisher, r, o, 8)
	converges(t, s.dsn(), r, o)
	inOrderOnce(t, r)
	max, median := maxOf(lat)
	t.Logf("through pgbouncer: commit to delivery %v (median %v, max %v)", lat, median, max)
	if max > time.Second {
		t.Errorf("a commit took %v to be delivered through pgbouncer, want under 1 s (the poll is 3 s apart)", max)
	}
	if st := w.Stats(); st.Listening || st.Reconnects != 0 || st.Transactions != 13 || !st.Waiting || st.Polls > 2 {
		t.Fatalf("stats %+v: want waits, no reconnect, 13 transactions", st)
	}
	if !logs.has("waiting for events with eventhub.wait_for_events()") {
		t.Fatal("the watcher did not say that it waits with wait_for_events")
	}
}
