package eventhub

// A watcher's session: two connections to one server (the fetching one,
// which the Run goroutine uses, and the listening one, which a goroutine
// of the session reads), whether notifications reach it, and the loop
// that waits for a notification, a poll or a heartbeat. Where
// notifications cannot reach it, there is no listening connection and the
// fetching one waits for events between fetches (wait.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// How long the probe notification may take to arrive.
const probeTimeout = time.Second

// Notifications with events kept per organization until the Run
// goroutine looks at them; more, and they are dropped for a fetch.
const maxSealed = 64

// The zero token: poll every organization now.
const zeroToken = "00000000000000000000000000000000"

func sqlstate(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

// session runs one session to its end. It reports whether it caught every
// organization up once (which resets the reconnect backoff).
func (w *Watcher) session(ctx context.Context, again bool) (caughtUp bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	config := w.conn.Copy()
	// Behind a transaction-pooling proxy a server connection that another
	// client left listening may reach this one: its notifications are
	// dropped, not kept.
	config.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) {}
	fetch, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return false, err
	}
	defer func() {
		fetch.Close(context.Background())
		// A statement that ctx interrupted (most often a wait) left the
		// connection to a goroutine of pgconn's, which sends the server a
		// cancel request and closes it (in 15 s at most): it ends before
		// the session does.
		<-fetch.PgConn().CleanupDone()
	}()
	var standby, sealed bool
	if err := fetch.QueryRow(ctx, helloSQL).Scan(&standby, &sealed); err != nil {
		return false, err
	}
	channel := "eventhub"
	if sealed {
		channel = "eventhub_events"
	}
	w.mu.Lock()
	w.withKeys, w.keys, w.prepared = false, map[string]*sealKey{}, false
	w.mu.Unlock()
	if again {
		w.reconnects.Add(1)
		w.logf("eventhub: connected again")
	}

	// Listen before the first catch-up, so that nothing published in
	// between goes unannounced.
	var lis *listener
	if !standby && w.cfg.Listen == ListenAuto {
		if lis, err = w.startListening(ctx, fetch, channel); err != nil {
			return false, err
		}
		if lis != nil {
			defer lis.stop()
		}
	} else if standby && w.cfg.Listen == ListenAuto {
		w.logf("eventhub: the server is a standby: waiting for events where it can, else polling every %v", w.cfg.FallbackPollInterval)
	} else if standby {
		w.logf("eventhub: the server is a standby: polling every %v", w.cfg.FallbackPollInterval)
	}
	w.mu.Lock()
	w.listening = lis != nil
	w.withKeys = sealed && lis != nil // events come only to a listener
	for _, s := range w.orgs {
		s.dirty = true
	}
	w.mu.Unlock()

	var ws waits
	nextPoll, nextBeat := time.Now(), time.Now()
	for {
		if now := time.Now(); !now.Before(nextBeat) {
			if err := w.heartbeat(ctx, fetch, standby); err != nil {
				return caughtUp, err
			}
			nextBeat = time.Now().Add(w.cfg.HeartbeatInterval)
			continue
		} else if !now.Before(nextPoll) {
			promoted, err := w.poll(ctx, fetch, standby)
			if err != nil {
				return caughtUp, err
			}
			if promoted {
				return caughtUp, errors.New("the standby was promoted: listening on a new session")
			}
			nextPoll = time.Now().Add(w.pollInterval(lis, &ws))
		} else if w.canWait(lis, &ws) {
			pollSoon, err := w.waitForEvents(ctx, fetch, &ws, earliest(nextPoll, nextBeat))
			if err != nil {
				return caughtUp, err
			}
			if pollSoon {
				nextPoll = time.Now() // a promotion, or no waiting: poll now
			}
			w.mu.Lock()
			w.waiting = ws.works
			w.mu.Unlock()
		} else if err := w.waitForWork(ctx, lis, earliest(nextPoll, nextBeat)); err != nil {
			return caughtUp, err
		}
		w.mu.Lock()
		pollNow := w.pollNow
		w.pollNow = false
		w.mu.Unlock()
		if pollNow {
			if _, err := w.poll(ctx, fetch, standby); err != nil {
				return caughtUp, err
			}
		}
		if err := w.catchUpDirty(ctx, fetch); err != nil {
			return caughtUp, err
		}
		if !caughtUp && w.allReady() {
			caughtUp = true
			w.mu.Lock()
			w.connected = true
			w.mu.Unlock()
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// waitForWork returns at until, or sooner: a notification (handled), a
// Follow or Unfollow, the end of ctx (its error). Without a listener it
// waits on a timer. With one it reads the listening connection itself:
// delivery from a notification then needs no hand-off between goroutines
// (measured: about 8% of a watcher's CPU per event).
func (w *Watcher) waitForWork(ctx context.Context, lis *listener, until time.Time) error {
	if lis == nil {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-w.wake:
		}
		return nil
	}
	n, err := lis.wait(until)
	// Then every notification already read off the socket, so that a
	// burst costs one catch-up, not one each.
	for err == nil && n != nil {
		w.notified(n, lis.channel)
		n, err = lis.buffered()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	return nil
}

// listener is a session's listening connection, read by the session's own
// goroutine with a read deadline. A goroutine of its own only interrupts
// the read (a deadline in the past) when ctx ends or the watcher is
// signalled: pgconn keeps the connection across a timeout.
type listener struct {
	conn    *pgx.Conn
	channel string
	poked   int32 // atomic: 1 when the next wait must not block
	done    chan struct{}
	ended   chan struct{}
}

// wait reads the listening connection until a notification (returned),
// until, or a poke (nil, nil).
func (l *listener) wait(until time.Time) (*pgconn.Notification, error) {
	// The deadline first, then the poke: a poke after the check moves the
	// deadline into the past, so the read returns at once.
	if err := l.conn.PgConn().Conn().SetReadDeadline(until); err != nil {
		return nil, err
	}
	if atomic.SwapInt32(&l.poked, 0) == 1 {
		return nil, nil
	}
	return l.read()
}

// buffered returns a notification the connection has read already, or
// nil: a read with its deadline passed takes what pgx and pgconn hold
// and makes no system call.
func (l *listener) buffered() (*pgconn.Notification, error) {
	if err := l.conn.PgConn().Conn().SetReadDeadline(time.Now()); err != nil {
		return nil, err
	}
	return l.read()
}

// read waits for a notification until the read deadline: nil, nil once it
// passes (pgconn keeps the connection across a timeout).
func (l *listener) read() (*pgconn.Notification, error) {
	n, err := l.conn.WaitForNotification(context.Background())
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, nil
	}
	return n, err
}

// interrupt ends the wait in progress, or the next one, whenever ctx ends
// or the watcher is signalled, until stop.
func (l *listener) interrupt(ctx context.Context, wake <-chan struct{}) {
	defer close(l.ended)
	for {
		select {
		case <-l.done:
			return
		case <-ctx.Done():
		case <-wake:
		}
		atomic.StoreInt32(&l.poked, 1)
		_ = l.conn.PgConn().Conn().SetReadDeadline(time.Now())
		if ctx.Err() != nil {
			return
		}
	}
}

func (l *listener) stop() {
	close(l.done)
	<-l.ended // the goroutine ends before the session does
	l.conn.Close(context.Background())
}

// startListening opens the listening connection and starts what
// interrupts its reads; nil if notifications do not reach it.
func (w *Watcher) startListening(ctx context.Context, fetch *pgx.Conn, channel string) (*listener, error) {
	conn, err := w.listen(ctx, fetch, channel)
	if err != nil || conn == nil {
		return nil, err
	}
	l := &listener{conn: conn, channel: channel, done: make(chan struct{}), ended: make(chan struct{})}
	go l.interrupt(ctx, w.wake)
	return l, nil
}

// The first query: whether the server is a standby, and whether this role
// may open the events notifications carry (then it listens on
// eventhub_events instead of eventhub: both announce the same).
const helloSQL = `SELECT pg_catalog.pg_is_in_recovery(), COALESCE(
	pg_catalog.has_function_privilege(pg_catalog.to_regprocedure('eventhub.notification_data_key(text)'), 'EXECUTE')
	AND pg_catalog.has_function_privilege(pg_catalog.to_regprocedure('eventhub.notifier_pid()'), 'EXECUTE'), false)`

// listen opens the listening connection to the server fetch reached and
// checks that notifications reach it: it listens on a channel of its own,
// has fetch notify it, and listens on eventhub if that notification
// arrives. A transaction-pooling proxy hands the LISTEN's server
// connection to others, and the notification never comes: then it
// returns nil, and the session polls.
func (w *Watcher) listen(ctx context.Context, fetch *pgx.Conn, channel string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, sameServer(w.conn, fetch))
	if err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	ok, err := w.probe(ctx, conn, fetch, "eventhub_probe_"+hex.EncodeToString(b[:]))
	if err == nil && ok {
		_, err = conn.Exec(ctx, "LISTEN "+channel)
	}
	if err == nil && ok {
		// Not behind a transaction pooler: the fetch may be prepared.
		if _, err = fetch.PgConn().Prepare(ctx, preparedFetch, fetchSQL, nil); err == nil {
			w.prepared = true
		}
	}
	if err != nil || !ok {
		conn.Close(context.Background())
		if code := sqlstate(err); err != nil && code != "25006" && !strings.HasPrefix(code, "0A") {
			return nil, err
		}
		w.logf("eventhub: notifications do not reach this connection (a standby, a transaction-pooling proxy?): waiting for events where the server can, else polling every %v", w.cfg.FallbackPollInterval)
		return nil, nil
	}
	return conn, nil
}

func (w *Watcher) probe(ctx context.Context, conn, fetch *pgx.Conn, channel string) (bool, error) {
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return false, err
	}
	if _, err := fetch.Exec(ctx, "SELECT pg_catalog.pg_notify($1, '')", channel); err != nil {
		return false, err
	}
	deadline := time.Now().Add(probeTimeout)
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil && n.Channel == channel:
			_, err = conn.Exec(ctx, "UNLISTEN "+channel)
			return err == nil, err
		case err == nil:
			continue
		case ctx.Err() == nil && wctx.Err() != nil && !conn.IsClosed():
			return false, nil // it did not come
		default:
			return false, err
		}
	}
}

// sameServer is the configuration of a connection to the server that
// conn reached: with several hosts, the listening connection must be
// where the fetching one is.
func sameServer(config *pgx.ConnConfig, conn *pgx.Conn) *pgx.ConnConfig {
	return sameServerAddr(config, conn.PgConn().Conn().RemoteAddr())
}

// sameServerAddr is config narrowed to the host at addr. Over TCP every
// attempt config makes at that host is kept, in its order: with sslmode
// prefer (the default) there are two, with TLS and without, and the
// server may refuse TLS.
func sameServerAddr(config *pgx.ConnConfig, addr net.Addr) *pgx.ConnConfig {
	c := config.Copy()
	switch a := addr.(type) {
	case *net.UnixAddr:
		// /dir/.s.PGSQL.5432
		base := filepath.Base(a.Name)
		if port, err := strconv.Atoi(strings.TrimPrefix(base, ".s.PGSQL.")); err == nil {
			c.Host, c.Port = filepath.Dir(a.Name), uint16(port)
			c.Fallbacks = nil
		}
	case *net.TCPAddr:
		var same []*pgconn.FallbackConfig
		for _, f := range append([]*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port, TLSConfig: c.TLSConfig}}, c.Fallbacks...) {
			if int(f.Port) == a.Port && resolvesTo(f.Host, a.IP) {
				same = append(same, f)
			}
		}
		if len(same) > 0 {
			c.Host, c.Port, c.TLSConfig, c.Fallbacks = same[0].Host, same[0].Port, same[0].TLSConfig, same[1:]
		}
	}
	return c
}

// resolvesTo reports whether host is ip or a name for it.
func resolvesTo(host string, ip net.IP) bool {
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	for _, i := range ips {
		if i.Equal(ip) {
			return true
		}
	}
	return false
}

// notified marks the organizations a notification names; one that
// carries events keeps them for the catch-up.
func (w *Watcher) notified(n *pgconn.Notification, channel string) {
	if n.Channel != channel {
		return
	}
	w.notifications.Add(1)
	var p struct {
		Token   string `json:"notification_token"`
		Version string `json:"version_id"`
		Events  string `json:"events"`
	}
	if json.Unmarshal([]byte(n.Payload), &p) != nil {
		return // anyone may NOTIFY: not ours
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.Token == zeroToken {
		w.pollNow = true
		for _, s := range w.orgs {
			s.dirty = true
		}
	} else if org, ok := w.tokens[p.Token]; ok {
		if s := w.orgs[org]; s != nil && (!s.hasCursor || s.cursor.VersionID != p.Version) {
			s.dirty, s.notified = true, p.Version
			// Events are believed from the notifier only (anyone may
			// NOTIFY); a backlog of them is dropped: the fetch reads it.
			if p.Events != "" && n.PID == w.notifier && w.keys[org] != nil && len(s.sealed) < maxSealed {
				s.sealed = append(s.sealed, sealedNote{token: p.Token, version: p.Version, events: p.Events})
			} else {
				s.sealed = nil
			}
		}
	} else if w.cfg.All {
		w.pollNow = true // a new organization, or a rotated key
	}
}

// The heads and tokens of the organizations named, or (discovery) of
// every organization the role may read (the token is NULL without read
// privilege); with the data keys and the notifier's pid where the watcher
// listens on eventhub_events; and whether the server is a standby. An
// organization that is not registered has no row in a discovery.
const (
	headsSQL = `SELECT c.org, s.revision, s.version_id::text,
		CASE WHEN eventhub.has_organization_privilege(c.org, 'read') THEN eventhub.notification_token(c.org) END,
		NULL::bytea, 0, pg_catalog.pg_is_in_recovery()
		FROM pg_catalog.unnest($1::text[]) AS c(org)
		LEFT JOIN eventhub.organization_states s ON s.organization_id = c.org`
	headsKeysSQL = `SELECT c.org, s.revision, s.version_id::text, r.token, r.key, COALESCE(eventhub.notifier_pid(), 0),
		pg_catalog.pg_is_in_recovery()
		FROM pg_catalog.unnest($1::text[]) AS c(org)
		LEFT JOIN eventhub.organization_states s ON s.organization_id = c.org
		LEFT JOIN LATERAL (SELECT eventhub.notification_token(c.org), eventhub.notification_data_key(c.org)
			WHERE eventhub.has_organization_privilege(c.org, 'read')) AS r(token, key) ON true`
	discoverSQL = `SELECT s.organization_id, s.revision, s.version_id::text,
		CASE WHEN eventhub.has_organization_privilege(s.organization_id, 'read')
		THEN eventhub.notification_token(s.organization_id) END, NULL::bytea, 0, pg_catalog.pg_is_in_recovery()
		FROM eventhub.organization_states s`
	discoverKeysSQL = `SELECT s.organization_id, s.revision, s.version_id::text, r.token, r.key, COALESCE(eventhub.notifier_pid(), 0),
		pg_catalog.pg_is_in_recovery()
		FROM eventhub.organization_states s
		LEFT JOIN LATERAL (SELECT eventhub.notification_token(s.organization_id), eventhub.notification_data_key(s.organization_id)
			WHERE eventhub.has_organization_privilege(s.organization_id, 'read')) AS r(token, key) ON true`
)

// poll reads the heads and tokens, and marks every organization whose head
// differs from its cursor; an organization at its head is confirmed fresh.
// It reports whether a server that was a standby is one no longer.
func (w *Watcher) poll(ctx context.Context, fetch *pgx.Conn, standby bool) (promoted bool, err error) {
	w.polls.Add(1)
	sent := time.Now()
	var rows pgx.Rows
	w.mu.Lock()
	keys := w.withKeys
	names := make([]string, 0, len(w.orgs))
	for o := range w.orgs {
		names = append(names, o)
	}
	w.mu.Unlock()
	switch {
	case w.cfg.All && keys:
		rows, err = fetch.Query(ctx, discoverKeysSQL)
	case w.cfg.All:
		rows, err = fetch.Query(ctx, discoverSQL)
	case keys:
		rows, err = fetch.Query(ctx, headsKeysSQL, names)
	default:
		rows, err = fetch.Query(ctx, headsSQL, names)
	}
	if err != nil {
		return false, wrap(err)
	}
	type head struct {
		org   string
		rev   *int64
		ver   *string
		token *string
		key   []byte
	}
	var heads []head
	var notifier int32
	inRecovery := standby
	for rows.Next() {
		var h head
		if err := rows.Scan(&h.org, &h.rev, &h.ver, &h.token, &h.key, &notifier, &inRecovery); err != nil {
			rows.Close()
			return false, err
		}
		heads = append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return false, wrap(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tokens := make(map[string]string, len(heads))
	w.notifier = uint32(notifier)
	prevKeys := w.keys
	if keys {
		w.keys = make(map[string]*sealKey, len(heads))
	}
	for _, h := range heads {
		s := w.orgs[h.org]
		if s == nil && w.cfg.All {
			s = &orgState{since: sent, dirty: true}
			w.orgs[h.org] = s
		}
		if s == nil {
			continue // unfollowed meanwhile
		}
		if h.token != nil {
			tokens[*h.token] = h.org
		}
		if keys && len(h.key) == 32 {
			if k := newSealKey(h.key, prevKeys[h.org]); k != nil {
				w.keys[h.org] = k
			}
		}
		if hc := cursorOf(h.rev, h.ver); !s.hasCursor || differs(s.cursor, hc) {
			s.dirty = true
		} else if s.ready {
			s.confirmed = sent
		}
	}
	w.tokens = tokens
	w.discovery = true
	return standby && !inRecovery, nil
}

// differs: the head is another revision, or the same revision above 0
// with another version, than the cursor (at revision 0 a cursor without a
// version matches a head with one).
func differs(cur, head Cursor) bool {
	if cur.Revision != head.Revision {
		return true
	}
	return cur.Revision > 0 && cur.VersionID != head.VersionID
}

// heartbeat reports the cursors applied to the replica registry, on the
// primary only.
func (w *Watcher) heartbeat(ctx context.Context, fetch *pgx.Conn, standby bool) error {
	if w.cfg.Replica == "" || standby {
		return nil
	}
	progress := map[string]map[string]interface{}{}
	w.mu.Lock()
	for o, s := range w.orgs {
		if !s.hasCursor {
			continue
		}
		p := map[string]interface{}{"revision": s.cursor.Revision}
		if s.cursor.VersionID != "" {
			p["version_id"] = s.cursor.VersionID
		}
		progress[o] = p
	}
	w.mu.Unlock()
	data, err := json.Marshal(progress)
	if err != nil {
		return err
	}
	_, err = fetch.Exec(ctx, `SELECT eventhub.heartbeat($1, $2::jsonb)`, w.cfg.Replica, string(data))
	if sqlstate(err) == "25006" {
		return nil // a standby that the first query did not see as one
	}
	return wrap(err)
}

func (w *Watcher) allReady() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readyLocked()
}
