// Package hub is the gateway controller design's EventHub interface,
// with eventhub behind it: a controller written against that interface
// switches backend by changing its constructor to hub.New.
//
// The interface and its types are the design's, as written there;
// declare them in the controller's own package as aliases (type EventHub
// = hub.EventHub, type Event = hub.Event, type EventType = hub.EventType)
// so that the rest of its code is unchanged. What differs from the
// design's SQLite backend is in docs/go.md ("The design's interface"): a
// cursor by revision and version instead of a timestamp, one slice per
// publishing transaction, and a resync, never a silent gap.
package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	eventhub "github.com/eventhub/eventhub/go"
)

// EventType is the kind of entity an event is about.
type EventType string

// The design's event types.
const (
	EventTypeAPI         EventType = "API"
	EventTypeCertificate EventType = "CERTIFICATE"
	EventTypeLLMTemplate EventType = "LLM_TEMPLATE"
)

// ActionResync is the Action of the one event a subscription receives
// when the organization must be reloaded from the application's tables
// (Options.Resync unset): see Options.Resync.
const ActionResync = "RESYNC"

// Event is one event, with the columns of the design's events table and
// the revision and version that order it.
type Event struct {
	OrganizationID      string
	ProcessedTimestamp  time.Time
	OriginatedTimestamp time.Time
	EventType           EventType
	Action              string
	EntityID            string
	CorrelationID       string
	EventData           []byte
	// Revision and VersionID are eventhub's cursor: the event's place in
	// its organization's gapless history.
	Revision  int64
	VersionID string
}

// EventHub is the design's interface.
type EventHub interface {
	Initialize(ctx context.Context) error
	RegisterOrganization(organizationID string) error
	PublishEvent(ctx context.Context, organizationID string, eventType EventType,
		action, entityID, correlationID string, eventData []byte) error
	Subscribe(organizationID string, eventChan chan<- []Event) error
	CleanUpEvents(ctx context.Context, timeFrom, timeEnd time.Time) error
	Close() error
}

// Options configure New.
type Options struct {
	// ConnString is the watcher's (a session: LISTEN does not pass a
	// transaction pooler; it then polls). Empty: the pool's.
	ConnString string
	// Resync, if set, reloads an organization from the application's own
	// tables when its history cannot be followed (history_removed,
	// cursor_ahead, version_mismatch; docs/protocol.md, Resync); delivery
	// continues after it returns nil. Unset, each subscription of the
	// organization receives one Event with Action ActionResync (and no
	// entity) at that point, and reloads on it.
	Resync func(ctx context.Context, organizationID string, reason error) error
	// Logf receives the watcher's reports.
	Logf func(format string, args ...interface{})
}

// Hub is the design's EventHub on eventhub. Subscriptions start at the
// organization's head when subscribed (the application loaded its state
// before), and receive one []Event per publishing transaction, in order;
// a slow receiver holds delivery back, never drops it.
type Hub struct {
	pool *pgxpool.Pool
	opts Options

	mu      sync.Mutex
	subs    map[string][]chan<- []Event
	heads   map[string]eventhub.Cursor // where a subscription starts
	watcher *eventhub.Watcher
	cancel  context.CancelFunc
	done    chan error
}

var _ EventHub = (*Hub)(nil)

type txKey struct{}

// WithTx returns a context under which PublishEvent publishes in tx, the
// caller's transaction: the event commits or rolls back with the
// caller's own write.
func WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// New makes a Hub that publishes through pool and watches through
// opts.ConnString. Nothing runs before Initialize.
func New(pool *pgxpool.Pool, opts Options) *Hub {
	if opts.ConnString == "" {
		opts.ConnString = pool.Config().ConnString()
	}
	return &Hub{pool: pool, opts: opts, subs: map[string][]chan<- []Event{}, heads: map[string]eventhub.Cursor{}}
}

// Initialize checks that the extension is there and starts the watcher.
func (h *Hub) Initialize(ctx context.Context) error {
	var version string
	if err := h.pool.QueryRow(ctx, `SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'eventhub'`).Scan(&version); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return errors.New("hub: the eventhub extension is not created in this database")
		}
		return err
	}
	w, err := eventhub.NewWatcher(eventhub.Config{
		ConnString: h.opts.ConnString,
		Handler:    eventhub.HandlerFuncs{TransactionFunc: h.transaction, ResyncFunc: h.resync},
		Start:      eventhub.AtHead,
		Logf:       h.opts.Logf,
	})
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watcher != nil {
		return errors.New("hub: initialized already")
	}
	runCtx, cancel := context.WithCancel(context.Background())
	h.watcher, h.cancel, h.done = w, cancel, make(chan error, 1)
	for org := range h.subs {
		w.FollowAt(org, h.heads[org])
	}
	go func() { h.done <- w.Run(runCtx) }()
	return nil
}

// RegisterOrganization makes an organization known at revision 0.
func (h *Hub) RegisterOrganization(organizationID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := eventhub.RegisterOrganization(ctx, h.pool, organizationID)
	return err
}

// PublishEvent publishes one event: in the caller's transaction under a
// context from WithTx, else in a transaction of its own. An empty
// correlation id lets the server make one (a retry then publishes twice).
func (h *Hub) PublishEvent(ctx context.Context, organizationID string, eventType EventType,
	action, entityID, correlationID string, eventData []byte) error {
	var q eventhub.Querier = h.pool
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		q = tx
	}
	var data interface{}
	if eventData != nil {
		data = eventData
	}
	_, err := eventhub.Publish(ctx, q, eventhub.Event{Organization: organizationID, Type: string(eventType),
		Action: eventhub.Action(action), EntityID: entityID, CorrelationID: correlationID, Data: data})
	return err
}

// Subscribe delivers the organization's transactions to eventChan, one
// slice per transaction, from now on.
func (h *Hub) Subscribe(organizationID string, eventChan chan<- []Event) error {
	if organizationID == "" || eventChan == nil {
		return fmt.Errorf("%w: Subscribe needs an organization id and a channel", eventhub.ErrInvalidInput)
	}
	// The head now: what is published after Subscribe returns comes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, err := eventhub.Head(ctx, h.pool, organizationID)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.subs[organizationID] {
		if c == eventChan {
			return fmt.Errorf("%w: this channel is subscribed to %q already", eventhub.ErrInvalidInput, organizationID)
		}
	}
	h.subs[organizationID] = append(h.subs[organizationID], eventChan)
	if _, ok := h.heads[organizationID]; !ok {
		h.heads[organizationID] = head
	}
	if h.watcher != nil {
		return h.watcher.FollowAt(organizationID, h.heads[organizationID])
	}
	return nil
}

// Unsubscribe stops delivering to eventChan (as the design's backend
// interface has it); the organization is no longer followed once it has
// no subscription.
func (h *Hub) Unsubscribe(organizationID string, eventChan chan<- []Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := h.subs[organizationID]
	for i, c := range subs {
		if c == eventChan {
			subs = append(subs[:i:i], subs[i+1:]...)
			if len(subs) == 0 {
				delete(h.subs, organizationID)
				delete(h.heads, organizationID)
				if h.watcher != nil {
					h.watcher.Unfollow(organizationID)
				}
			} else {
				h.subs[organizationID] = subs
			}
			return nil
		}
	}
	return fmt.Errorf("%w: this channel is not subscribed to %q", eventhub.ErrInvalidInput, organizationID)
}

// CleanUpEvents deletes every organization's events processed between
// timeFrom and timeEnd (eventhub.cleanup_events), except what compaction
// keeps: each entity's latest event. A subscription whose cursor was in
// the range resyncs; none skips silently.
func (h *Hub) CleanUpEvents(ctx context.Context, timeFrom, timeEnd time.Time) error {
	_, err := h.pool.Exec(ctx, `SELECT eventhub.cleanup_events(s.organization_id, $1, $2)
		FROM eventhub.organization_states s`, timeFrom, timeEnd)
	return err
}

// Close stops the watcher and waits for it; the pool stays the caller's.
func (h *Hub) Close() error {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel = nil
	h.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	return <-done
}

// Watcher returns the hub's watcher (nil before Initialize): its Status,
// Stats and WaitForSync.
func (h *Hub) Watcher() *eventhub.Watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.watcher
}

func (h *Hub) channels(org string) []chan<- []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]chan<- []Event(nil), h.subs[org]...)
}

func send(ctx context.Context, subs []chan<- []Event, batch []Event) error {
	for _, c := range subs {
		select {
		case c <- batch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (h *Hub) transaction(ctx context.Context, t *eventhub.Transaction) error {
	batch := make([]Event, len(t.Changes))
	for i, c := range t.Changes {
		batch[i] = Event{OrganizationID: t.Organization, ProcessedTimestamp: c.Processed,
			OriginatedTimestamp: c.Originated, EventType: EventType(c.Type), Action: string(c.Action),
			EntityID: c.EntityID, CorrelationID: c.CorrelationID, EventData: c.Data,
			Revision: c.Revision, VersionID: c.VersionID}
	}
	return send(ctx, h.channels(t.Organization), batch)
}

func (h *Hub) resync(ctx context.Context, r *eventhub.Resync) error {
	if h.opts.Resync != nil {
		return h.opts.Resync(ctx, r.Organization, r.Reason)
	}
	return send(ctx, h.channels(r.Organization), []Event{{OrganizationID: r.Organization, Action: ActionResync,
		Revision: r.Head.Revision, VersionID: r.Head.VersionID}})
}
