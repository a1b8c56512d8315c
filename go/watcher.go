package eventhub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgx/v4"
)

// Cursor is a position in one organization's history: the revision and
// the version id of the last event applied. VersionID is empty at
// revision 0 when there is no version to check (an organization never
// registered); an organization registered without events has revision 0
// and a version.
type Cursor struct {
	Revision  int64
	VersionID string
}

// Change is one event as a watcher delivers it.
type Change struct {
	Revision      int64
	VersionID     string
	Type          string
	Action        Action
	EntityID      string
	CorrelationID string
	// Data is event_data as the server prints it (jsonb's text form).
	Data json.RawMessage
	// Processed is when the event was published (its transaction's
	// clock); Originated is the publisher's Event.Originated.
	Processed, Originated time.Time
}

// Transaction is one publishing transaction's events in one organization,
// whole and in revision order.
type Transaction struct {
	Organization string
	Changes      []Change
	// Cursor is the last event's revision and version: the cursor to
	// store with the state once the transaction is applied.
	Cursor Cursor
}

// Entity is one entity of an organization's current state: its latest
// event's data (the entity's whole state).
type Entity struct {
	Type string
	ID   string
	Data json.RawMessage
}

// Snapshot is an organization's whole current state at a head. The
// consumer replaces the organization's state with it: an entity it had
// that the snapshot does not name is gone.
type Snapshot struct {
	Organization string
	// Reason is nil for a first start, or why the consumer's cursor could
	// not be followed (ErrHistoryRemoved, ErrCursorAhead,
	// ErrVersionMismatch): the state it had may hold changes the
	// database's history does not.
	Reason error
	// Cursor is the snapshot's head: the cursor to store with the state.
	Cursor   Cursor
	Entities []Entity
}

// Resync asks the consumer to reload an organization's state from its
// own source (a watcher that does not start from snapshots, or whose
// snapshot is incomplete: ErrIncompleteState). Once the handler returns
// nil, the watcher continues from Head: reload, then store Head as the
// cursor.
type Resync struct {
	Organization string
	Reason       error
	Head         Cursor
}

// Handler receives what a Watcher delivers, one call at a time, on the
// goroutine that runs Run. A call that returns an error is made again
// (after a backoff, on a new session) with the same content: the cursor
// moves only when a call returns nil. Handlers must not block forever:
// while one runs, the watcher neither fetches nor polls.
type Handler interface {
	// OnSnapshot replaces an organization's state.
	OnSnapshot(ctx context.Context, s *Snapshot) error
	// OnTransaction applies one whole transaction.
	OnTransaction(ctx context.Context, t *Transaction) error
	// OnResync reloads an organization from the consumer's own source.
	OnResync(ctx context.Context, r *Resync) error
}

// HandlerFuncs is a Handler made of functions. A nil SnapshotFunc or
// TransactionFunc ignores what it would receive; a nil ResyncFunc cannot
// reload, so the organization waits (not ready) and the resync is tried
// again after a backoff: nothing is skipped silently.
type HandlerFuncs struct {
	SnapshotFunc    func(ctx context.Context, s *Snapshot) error
	TransactionFunc func(ctx context.Context, t *Transaction) error
	ResyncFunc      func(ctx context.Context, r *Resync) error
}

// OnSnapshot calls SnapshotFunc.
func (h HandlerFuncs) OnSnapshot(ctx context.Context, s *Snapshot) error {
	if h.SnapshotFunc == nil {
		return nil
	}
	return h.SnapshotFunc(ctx, s)
}

// OnTransaction calls TransactionFunc.
func (h HandlerFuncs) OnTransaction(ctx context.Context, t *Transaction) error {
	if h.TransactionFunc == nil {
		return nil
	}
	return h.TransactionFunc(ctx, t)
}

// OnResync calls ResyncFunc.
func (h HandlerFuncs) OnResync(ctx context.Context, r *Resync) error {
	if h.ResyncFunc == nil {
		return fmt.Errorf("eventhub: organization %q needs a reload (%v) and the handler has no ResyncFunc", r.Organization, r.Reason)
	}
	return h.ResyncFunc(ctx, r)
}

// Start says where an organization without a stored cursor starts.
type Start int

const (
	// FromSnapshot starts from a snapshot of the organization's current
	// state, and answers every resync with a new one (the consumer keeps
	// no state of its own). The default.
	FromSnapshot Start = iota
	// AtHead starts at the organization's head: the consumer loaded the
	// state from its own source. Resyncs call OnResync.
	AtHead
	// FromBeginning replays the history from revision 1, while it is kept
	// whole (else ErrHistoryRemoved: a resync). Resyncs call OnResync.
	FromBeginning
)

// Listen says how a watcher learns that organizations moved.
type Listen int

const (
	// ListenAuto listens where notifications reach the connection (it
	// checks with a notification of its own). Elsewhere (a hot standby, a
	// transaction-pooling proxy) it waits for events with
	// eventhub.wait_for_events between fetches, and polls at
	// FallbackPollInterval where the server cannot wait (an older
	// eventhub, not preloaded, no EXECUTE). The default.
	ListenAuto Listen = iota
	// ListenNever polls only, at FallbackPollInterval: it neither listens
	// nor waits.
	ListenNever
)

// CursorStore gives the cursor a consumer stored for an organization, if
// any, when a watcher starts following it. The consumer stores cursors
// itself, with the state they describe: FileCursors and TableCursors are
// two ways.
type CursorStore interface {
	Load(ctx context.Context, organization string) (c Cursor, ok bool, err error)
}

// Config configures a Watcher. Zero values take the defaults.
type Config struct {
	// ConnString is a libpq connection string or URL, as pgx parses it;
	// several hosts with target_session_attrs=read-write follow the
	// primary through a failover. A Watcher opens two connections: one
	// listens, one fetches.
	ConnString string
	// Organizations to follow; more with Follow. With All, every
	// organization the role may read, new ones included.
	Organizations []string
	All           bool
	// Handler receives the snapshots, transactions and resyncs.
	Handler Handler
	// Cursors, if set, gives stored cursors; an organization without one
	// starts as Start says.
	Cursors CursorStore
	Start   Start
	Listen  Listen
	// PollInterval: how often the heads are polled while listening, or
	// waiting with eventhub.wait_for_events (default 5 s).
	// FallbackPollInterval: while neither (default 250 ms); it also bounds
	// each wait, and under All the poll that finds new organizations.
	PollInterval         time.Duration
	FallbackPollInterval time.Duration
	// BatchSize and BatchBytes bound a fetch (default 1000 events, 1 MiB;
	// a transaction larger comes in parts, delivered whole) and a
	// snapshot's page (BatchSize entities).
	BatchSize  int
	BatchBytes int
	// ReconnectMin and ReconnectMax bound the backoff between sessions
	// (default 100 ms doubling to 5 s; reset by a session that caught up).
	ReconnectMin, ReconnectMax time.Duration
	// Replica, if set, registers the watcher in the replica registry:
	// every HeartbeatInterval (default 10 s) it reports the cursors
	// applied with eventhub.heartbeat, on the primary only.
	Replica           string
	HeartbeatInterval time.Duration
	// Logf, if set, receives what the watcher reports (reconnects,
	// resyncs, the fallback to polling).
	Logf func(format string, args ...interface{})
}

// Stats are a watcher's counters since it was made, as the C library's
// eh_stat counts them.
type Stats struct {
	Notifications   int64 // eventhub notifications received
	Polls           int64 // polls of the heads
	Fetches         int64 // event fetches run
	Reconnects      int64 // sessions begun after a lost one
	EventsDelivered int64 // events handed to OnTransaction
	Transactions    int64 // OnTransaction calls that returned nil
	Snapshots       int64 // OnSnapshot calls that returned nil
	// SealedEvents counts events delivered from the notifications that
	// carried them, without a fetch.
	SealedEvents int64
	// Resyncs by reason: history_removed, cursor_ahead, version_mismatch.
	Resyncs map[string]int64
	// Waits counts the waits for events (eventhub.wait_for_events) that
	// the server answered, where the watcher cannot listen.
	Waits     int64
	Connected bool // now: a session is up, and caught up once since it began
	Listening bool // now: the session's notifications reach it
	// Waiting: now the session cannot listen and waits for events with
	// eventhub.wait_for_events instead of polling at FallbackPollInterval.
	Waiting bool
}

// Status is one organization's, as a Watcher follows it.
type Status struct {
	Organization string
	// Ready: a snapshot was applied or the database's head reached once;
	// it stays true while the server is unreachable (the state can serve).
	Ready bool
	// Applied is the cursor of what the handler applied; HasCursor false
	// while the watcher waits for its start.
	Applied   Cursor
	HasCursor bool
	// Freshness is the time since the cursor was last confirmed equal to
	// the database's head (counted from when the confirming query was
	// sent); before any, since following began.
	Freshness time.Duration
	// Resyncs counts its resyncs by reason, in ResyncReasons' order.
	Resyncs [3]int64
}

// Watcher follows organizations and delivers their transactions whole,
// in revision order per organization, to a Handler. Make one with
// NewWatcher and run it with Run; its methods are safe for concurrent use.
type Watcher struct {
	cfg     Config
	conn    *pgx.ConnConfig
	h       Handler
	logf    func(string, ...interface{})
	wake    chan struct{} // a notification, Follow or Unfollow: look at the dirty set
	synced  chan struct{} // closed once synced
	stopped chan struct{} // closed when Run returns
	runErr  error         // what Run returned, once stopped is closed
	once    sync.Once
	run     int32

	mu        sync.Mutex
	orgs      map[string]*orgState
	tokens    map[string]string // notification token → organization
	pollNow   bool              // a zero token, an unknown one under All
	discovery bool              // under All: a discovery answered
	connected bool
	listening bool
	waiting   bool
	withKeys  bool                // the session listens on eventhub_events: its notifications may carry events
	keys      map[string]*sealKey // organization → data key, for eventhub_events
	notifier  uint32              // the notifier's pid: only its events are believed
	prepared  bool                // the fetch is prepared on this session's connection (Run's goroutine only)

	notifications, polls, fetches, reconnects, delivered, txns, snapshots, sealed, waited atomic.Int64
	resyncs                                                                               [3]atomic.Int64
}

// orgState is the watcher's view of one organization; guarded by mu,
// but written only by the Run goroutine (besides dirty).
type orgState struct {
	cursor      Cursor
	hasCursor   bool
	loaded      bool // the cursor store was asked
	ready       bool
	dirty       bool // something says it moved: catch up
	confirmed   time.Time
	since       time.Time
	needsReload error        // a resync the handler has not answered yet
	sealed      []sealedNote // notifications with events, not yet looked at
	notified    string       // the version the last notification named
	resyncs     [3]int64
}

// NewWatcher checks cfg and makes a Watcher; nothing connects before Run.
func NewWatcher(cfg Config) (*Watcher, error) {
	conn, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("%w: connection string: %v", ErrInvalidInput, err)
	}
	if cfg.Handler == nil {
		return nil, invalid("a watcher needs a Handler")
	}
	if cfg.All && len(cfg.Organizations) > 0 {
		return nil, invalid("All and Organizations exclude each other")
	}
	if cfg.Start < FromSnapshot || cfg.Start > FromBeginning || cfg.Listen < ListenAuto || cfg.Listen > ListenNever {
		return nil, invalid("unknown Start or Listen")
	}
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setDefault(&cfg.PollInterval, 5*time.Second)
	setDefault(&cfg.FallbackPollInterval, 250*time.Millisecond)
	setDefault(&cfg.ReconnectMin, 100*time.Millisecond)
	setDefault(&cfg.ReconnectMax, 5*time.Second)
	setDefault(&cfg.HeartbeatInterval, 10*time.Second)
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1000
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = 1 << 20
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	// Unnamed statements (their descriptions cached): a transaction-pooling
	// proxy would lose named ones between transactions.
	conn.BuildStatementCache = func(c *pgconn.PgConn) stmtcache.Cache {
		return stmtcache.New(c, stmtcache.ModeDescribe, 32)
	}
	if conn.RuntimeParams["application_name"] == "" {
		conn.RuntimeParams["application_name"] = "eventhub go watcher"
	}
	w := &Watcher{
		cfg:     cfg,
		conn:    conn,
		h:       cfg.Handler,
		logf:    cfg.Logf,
		wake:    make(chan struct{}, 1),
		synced:  make(chan struct{}),
		stopped: make(chan struct{}),
		orgs:    map[string]*orgState{},
		tokens:  map[string]string{},
	}
	if w.logf == nil {
		w.logf = func(string, ...interface{}) {}
	}
	for _, o := range cfg.Organizations {
		if o == "" {
			return nil, invalid("an organization id may not be empty")
		}
		w.orgs[o] = &orgState{since: time.Now(), dirty: true}
	}
	return w, nil
}

// Follow adds an organization (a no-op if followed). It starts from its
// stored cursor or as Config.Start says, at once if Run is running.
func (w *Watcher) Follow(organization string) error {
	return w.follow(organization, orgState{})
}

// FollowAt adds an organization from the cursor given, as if it were
// stored (a no-op if followed): for a consumer that read its state and
// the head itself.
func (w *Watcher) FollowAt(organization string, c Cursor) error {
	return w.follow(organization, orgState{cursor: c, hasCursor: true, loaded: true})
}

func (w *Watcher) follow(organization string, s orgState) error {
	if organization == "" {
		return invalid("an organization id may not be empty")
	}
	if w.cfg.All {
		return invalid("a watcher of all organizations follows every one already")
	}
	s.since, s.dirty = time.Now(), true
	w.mu.Lock()
	if w.orgs[organization] == nil {
		w.orgs[organization] = &s
		w.pollNow = true // its token
	}
	w.mu.Unlock()
	w.signal()
	return nil
}

// Unfollow stops following an organization; nothing more of it is
// delivered once the call in progress, if any, returns.
func (w *Watcher) Unfollow(organization string) {
	w.mu.Lock()
	delete(w.orgs, organization)
	w.mu.Unlock()
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// HasSynced reports whether every organization followed is ready (under
// All: a discovery answered too), as client-go's informers do. It stays
// true from then on.
func (w *Watcher) HasSynced() bool {
	select {
	case <-w.synced:
		return true
	default:
		return false
	}
}

// ErrStopped is what WaitForSync returns when Run returned nil (its
// context ended) before the watcher synced.
var ErrStopped = errors.New("eventhub: the watcher stopped")

// WaitForSync blocks until HasSynced, until ctx ends (its error), or
// until Run returns before that: then Run's error, or ErrStopped.
func (w *Watcher) WaitForSync(ctx context.Context) error {
	select {
	case <-w.synced:
		return nil
	case <-w.stopped:
		if w.HasSynced() {
			return nil
		}
		if w.runErr != nil {
			return w.runErr
		}
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readyLocked: every organization is ready (under All, a discovery
// answered too); mu held.
func (w *Watcher) readyLocked() bool {
	if w.cfg.All && !w.discovery {
		return false
	}
	for _, s := range w.orgs {
		if !s.ready {
			return false
		}
	}
	return true
}

// checkSynced closes synced once every organization is ready; mu held.
func (w *Watcher) checkSynced() {
	if w.readyLocked() {
		w.once.Do(func() { close(w.synced) })
	}
}

// Status returns every followed organization's status, by organization.
func (w *Watcher) Status() []Status {
	now := time.Now()
	w.mu.Lock()
	out := make([]Status, 0, len(w.orgs))
	for o, s := range w.orgs {
		st := Status{Organization: o, Ready: s.ready, Applied: s.cursor, HasCursor: s.hasCursor, Resyncs: s.resyncs}
		if s.confirmed.IsZero() {
			st.Freshness = now.Sub(s.since)
		} else {
			st.Freshness = now.Sub(s.confirmed)
		}
		out = append(out, st)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Organization < out[j].Organization })
	return out
}

// FollowsAll reports whether the watcher follows every organization
// (Config.All).
func (w *Watcher) FollowsAll() bool { return w.cfg.All }

// Synced reports, under All, whether a discovery answered and every
// organization is ready; else whether every organization is ready (as
// HasSynced, but it can go back to false when one is followed anew).
func (w *Watcher) Synced() bool { return w.allReady() }

// Stats returns the watcher's counters.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	connected, listening, waiting := w.connected, w.listening, w.waiting
	w.mu.Unlock()
	s := Stats{
		Notifications:   w.notifications.Load(),
		Polls:           w.polls.Load(),
		Fetches:         w.fetches.Load(),
		Reconnects:      w.reconnects.Load(),
		EventsDelivered: w.delivered.Load(),
		Transactions:    w.txns.Load(),
		Snapshots:       w.snapshots.Load(),
		SealedEvents:    w.sealed.Load(),
		Resyncs:         map[string]int64{},
		Waits:           w.waited.Load(),
		Connected:       connected,
		Listening:       listening,
		Waiting:         waiting,
	}
	for i, name := range ResyncReasons {
		s.Resyncs[name] = w.resyncs[i].Load()
	}
	return s
}

// ResyncReasons name the resync errors, in SQLSTATE order (ZE001-ZE003),
// as the C library and the CLI name them.
var ResyncReasons = [3]string{"history_removed", "cursor_ahead", "version_mismatch"}

// ReasonName is the name of a resync reason (ResyncReasons), or "".
func ReasonName(reason error) string {
	for i, kind := range []error{ErrHistoryRemoved, ErrCursorAhead, ErrVersionMismatch} {
		if errors.Is(reason, kind) {
			return ResyncReasons[i]
		}
	}
	return ""
}

// Run follows the organizations until ctx ends (then it returns nil) or
// an error no retry can cure (a refused login, a missing database or
// privilege: returned). A lost connection, a server restarting or a
// failover start a new session after a backoff, from the cursors applied.
// Every goroutine Run starts has ended when it returns. Run may be
// called once.
func (w *Watcher) Run(ctx context.Context) error {
	if !atomic.CompareAndSwapInt32(&w.run, 0, 1) {
		return errors.New("eventhub: Watcher.Run called twice")
	}
	err := w.runSessions(ctx)
	w.runErr = err
	close(w.stopped)
	return err
}

// runSessions runs sessions until ctx ends or an error no retry cures.
func (w *Watcher) runSessions(ctx context.Context) error {
	backoff := w.cfg.ReconnectMin
	sessions := 0
	for {
		caughtUp, err := w.session(ctx, sessions > 0)
		sessions++
		w.mu.Lock()
		w.connected, w.listening, w.waiting = false, false, false
		w.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		if permanent(err) {
			return err
		}
		if caughtUp {
			backoff = w.cfg.ReconnectMin
		}
		w.logf("eventhub: %v; reconnecting in %v", err, backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		if backoff *= 2; backoff > w.cfg.ReconnectMax {
			backoff = w.cfg.ReconnectMax
		}
	}
}

// permanent: an error no new session cures.
func permanent(err error) bool {
	if err == nil || errors.Is(err, errHandler) {
		return false
	}
	if errors.Is(err, ErrPermission) || errors.Is(err, ErrInvalidInput) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return false
	}
	code := sqlstate(err)
	return len(code) == 5 && (code[:2] == "28" || code == "3D000")
}

// errHandler marks a handler's error: a new session tries again.
var errHandler = errors.New("handler")

type handlerError struct{ err error }

func (e *handlerError) Error() string        { return "the handler failed: " + e.err.Error() }
func (e *handlerError) Unwrap() error        { return e.err }
func (e *handlerError) Is(target error) bool { return target == errHandler }
