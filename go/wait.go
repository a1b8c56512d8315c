package eventhub

// Waiting for events without LISTEN, where notifications cannot reach the
// watcher (a hot standby, a transaction-pooling proxy): CALL
// eventhub.wait_for_events() with the cursors of the organizations
// followed, while there is nothing else to do (docs/waiting.md).
//
// The fetching connection waits, between fetches: where the watcher
// cannot listen it has no listening connection (a standby refuses LISTEN;
// behind a pooler the probe's connection is closed), and one connection
// that waits, then fetches what moved, holds one server connection behind
// a pooler, not two. The server answers as soon as an organization moves
// past its cursor (at commit on a primary, at replay on a standby), naming
// the organizations that moved, and the watcher fetches those. A wait
// lasts at most FallbackPollInterval and never past the next poll or
// heartbeat. It is not interrupted by Follow or Unfollow (a cancel request
// can reach the next statement, or behind a pooler another client's): they
// take effect when it ends. The end of Run's context interrupts it: pgx
// then closes the connection and sends the server a cancel request, and
// the session waits for that before it returns. While waits work, the
// safety-net poll of the heads runs at PollInterval (under All it stays
// at FallbackPollInterval: a new organization wakes no wait). A server
// that cannot wait (eventhub older than the procedure, not preloaded, no
// EXECUTE on it) is polled at FallbackPollInterval, as before, until the
// next session.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgtype"
	"github.com/jackc/pgx/v4"
)

// No wait shorter than this (or than half the FallbackPollInterval, if
// less): the poll is about due anyway.
const waitMin = 20 * time.Millisecond

// The statement, sent unnamed with its parameters in text: a procedure,
// run on its own in autocommit (it commits before it sleeps).
const waitSQL = `CALL eventhub.wait_for_events($1::text[], $2::bigint[], $3::uuid[], $4::integer, NULL)`

// waits is what a session learned of waiting.
type waits struct {
	works    bool // a wait answered on this session's connection
	unusable bool // the server cannot wait for this watcher: poll
}

// canWait reports whether the session waits for events between its
// polls: it cannot listen, the watcher may (ListenAuto), and the server
// did not refuse.
func (w *Watcher) canWait(lis *listener, ws *waits) bool {
	return lis == nil && w.cfg.Listen == ListenAuto && !ws.unusable
}

// pollInterval is the session's interval between polls of the heads.
func (w *Watcher) pollInterval(lis *listener, ws *waits) time.Duration {
	if lis != nil || ws.works && !w.cfg.All {
		return w.cfg.PollInterval
	}
	return w.cfg.FallbackPollInterval
}

// cannotWait: a refusal that means this server cannot wait for this
// watcher. 42883: no such procedure (an older eventhub); 42501: no
// EXECUTE on it; 55000: eventhub not preloaded; 25001: in a transaction
// block (a proxy that keeps one open); 0A000: not callable as a procedure.
func cannotWait(code string) bool {
	switch code {
	case "42883", "42501", "55000", "25001", "0A000":
		return true
	}
	return false
}

// waitArgs are the wait's parameters in text: the organizations, their
// revisions and their versions (NULL at revision 0 or without one);
// false when some organization has no cursor to wait from yet (or none
// is followed).
func (w *Watcher) waitArgs() (orgs, revs, versions []byte, ok bool) {
	w.mu.Lock()
	names := make([]string, 0, len(w.orgs))
	var vers []*string
	var rs strings.Builder
	rs.WriteByte('{')
	for o, s := range w.orgs {
		if !s.hasCursor || s.needsReload != nil {
			w.mu.Unlock()
			return nil, nil, nil, false
		}
		if len(names) > 0 {
			rs.WriteByte(',')
		}
		names = append(names, o)
		rs.WriteString(strconv.FormatInt(s.cursor.Revision, 10))
		if s.cursor.Revision > 0 && s.cursor.VersionID != "" {
			v := s.cursor.VersionID
			vers = append(vers, &v)
		} else {
			vers = append(vers, nil)
		}
	}
	w.mu.Unlock()
	rs.WriteByte('}')
	if len(names) == 0 {
		return nil, nil, nil, false
	}
	var ta, va pgtype.TextArray
	if ta.Set(names) != nil || va.Set(vers) != nil {
		return nil, nil, nil, false
	}
	var err error
	if orgs, err = ta.EncodeText(nil, nil); err != nil {
		return nil, nil, nil, false
	}
	if versions, err = va.EncodeText(nil, nil); err != nil {
		return nil, nil, nil, false
	}
	return orgs, []byte(rs.String()), versions, true
}

// waitForEvents waits on fetch until an organization moves past its
// cursor (marked to catch up), until at the latest, or until a Follow
// or Unfollow that came before it: then, or where it cannot wait now, as
// waitForWork without a listener. It reports whether the heads should be
// polled now: the server cannot wait (then ws.unusable), or an empty
// answer came early (a standby that was promoted).
func (w *Watcher) waitForEvents(ctx context.Context, fetch *pgx.Conn, ws *waits, until time.Time) (pollNow bool, err error) {
	timeout := time.Until(until)
	if timeout > w.cfg.FallbackPollInterval {
		timeout = w.cfg.FallbackPollInterval
	}
	floor := waitMin
	if half := w.cfg.FallbackPollInterval / 2; half < floor {
		floor = half
	}
	orgs, revs, versions, ok := w.waitArgs()
	if !ok || timeout < floor || len(w.wake) > 0 {
		return false, w.waitForWork(ctx, nil, until)
	}
	ms := []byte(strconv.FormatInt(timeout.Milliseconds(), 10))
	sent := time.Now()
	rr := fetch.PgConn().ExecParams(ctx, waitSQL, [][]byte{orgs, revs, versions, ms}, nil, nil, nil)
	var moved []byte
	rows := 0
	for rr.NextRow() {
		if v := rr.Values(); len(v) == 1 {
			moved = append(moved[:0], v[0]...)
		}
		rows++
	}
	_, err = rr.Close()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if code := sqlstate(err); err != nil && cannotWait(code) {
		w.logf("eventhub: the server cannot wait for events (%v): polling every %v", err, w.cfg.FallbackPollInterval)
		ws.unusable, ws.works = true, false
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("waiting for events: %w", wrap(err))
	}
	var names []string
	var a pgtype.TextArray
	if rows != 1 || a.DecodeText(nil, moved) != nil || a.AssignTo(&names) != nil {
		return false, fmt.Errorf("eventhub: wait_for_events answered %q, not one text[]", moved)
	}
	w.waited.Add(1)
	if !ws.works {
		ws.works = true
		w.logf("eventhub: waiting for events with eventhub.wait_for_events()")
	}
	if len(names) == 0 {
		// Empty before its timeout: the standby it began on was promoted.
		return time.Since(sent) < timeout-floor, nil
	}
	w.mu.Lock()
	for _, o := range names {
		if s := w.orgs[o]; s != nil {
			s.dirty = true
		}
	}
	w.mu.Unlock()
	return false, nil
}
