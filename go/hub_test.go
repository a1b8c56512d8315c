package eventhub_test

// The design's interface (package hub) used as the design uses it: a
// deployment service on one replica publishes API_CREATE, UPDATE and
// DELETE in the transaction of its own write; the event listener of
// another replica applies each batch to an in-memory map.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4/pgxpool"

	eventhub "github.com/eventhub/eventhub/go"
	"github.com/eventhub/eventhub/go/hub"
)

// replica is a controller replica: its hub and the map its event
// listener keeps.
type replica struct {
	hub     hub.EventHub
	mu      sync.Mutex
	apis    map[string]string // entity id → context
	batches [][]hub.Event
	done    chan struct{}
}

func newReplica(t *testing.T, pool *pgxpool.Pool, org string) *replica {
	t.Helper()
	r := &replica{hub: hub.New(pool, hub.Options{Logf: t.Logf}), apis: map[string]string{}, done: make(chan struct{})}
	if err := r.hub.RegisterOrganization(org); err != nil {
		t.Fatal(err)
	}
	events := make(chan []hub.Event)
	if err := r.hub.Subscribe(org, events); err != nil {
		t.Fatal(err)
	}
	go func() { // the design's EventListener
		defer close(r.done)
		for batch := range events {
			r.mu.Lock()
			r.batches = append(r.batches, batch)
			for _, e := range batch {
				switch e.Action {
				case "CREATE", "UPDATE":
					var api struct{ Context string }
					json.Unmarshal(e.EventData, &api)
					r.apis[e.EntityID] = api.Context
				case "DELETE":
					delete(r.apis, e.EntityID)
				case hub.ActionResync:
					r.apis["RESYNC"] = "" // a real listener reloads from its tables
				}
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		r.hub.Close()
		close(events)
		<-r.done
	})
	return r
}

func (r *replica) snapshot() (map[string]string, [][]hub.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]string{}
	for k, v := range r.apis {
		m[k] = v
	}
	return m, append([][]hub.Event(nil), r.batches...)
}

// deploy is the design's deployment service: its write and the event in
// one transaction.
func deploy(ctx context.Context, pool *pgxpool.Pool, h hub.EventHub, org, action, id, path string, commit bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if action == "DELETE" {
		_, err = tx.Exec(ctx, `DELETE FROM hub_apis WHERE org = $1 AND id = $2`, org, id)
	} else {
		_, err = tx.Exec(ctx, `INSERT INTO hub_apis VALUES ($1, $2, $3) ON CONFLICT (org, id) DO UPDATE SET context = $3`, org, id, path)
	}
	if err != nil {
		return err
	}
	data, _ := json.Marshal(map[string]string{"context": path})
	if err := h.PublishEvent(hub.WithTx(ctx, tx), org, hub.EventTypeAPI, action, id, "", data); err != nil {
		return err
	}
	if !commit {
		return nil
	}
	return tx.Commit(ctx)
}

func TestHubDesignUsage(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS hub_apis (org text, id text, context text, PRIMARY KEY (org, id))`); err != nil {
		t.Fatal(err)
	}
	o := org(t)
	one, two := newReplica(t, pool, o), newReplica(t, pool, o)
	for _, r := range []*replica{one, two} {
		if err := r.hub.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		action, id, path string
		commit           bool
	}{
		{"CREATE", "weather", "/weather", true},
		{"CREATE", "rolled-back", "/never", false},
		{"CREATE", "maps", "/maps", true},
		{"UPDATE", "weather", "/weather/v2", true},
		{"DELETE", "maps", "", true},
	}
	for _, s := range steps {
		if err := deploy(ctx, pool, one.hub, o, s.action, s.id, s.path, s.commit); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"weather": "/weather/v2"}
	for _, r := range []*replica{one, two} {
		waitFor(t, 10*time.Second, "the replica holds the table's state", func() bool {
			m, _ := r.snapshot()
			return len(m) == 1 && m["weather"] == want["weather"]
		})
		_, batches := r.snapshot()
		if len(batches) != 4 {
			t.Fatalf("%d batches, want one per committed transaction (4): %+v", len(batches), batches)
		}
		for i, b := range batches {
			if len(b) != 1 || b[0].Revision != int64(i+1) || b[0].EventType != hub.EventTypeAPI {
				t.Fatalf("batch %d: %+v", i, b)
			}
		}
	}
}

// Events removed before a subscription read them: the subscription
// receives a RESYNC event at the head, never a silent gap.
func TestHubResyncAfterCleanUp(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	o := org(t)
	h := hub.New(pool, hub.Options{Logf: t.Logf})
	events := make(chan []hub.Event, 10)
	if err := h.Subscribe(o, events); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	start := time.Now().Add(-time.Minute)
	for _, e := range []struct{ action, id string }{{"CREATE", "x"}, {"CREATE", "y"}, {"UPDATE", "y"}, {"UPDATE", "y"}} {
		if err := h.PublishEvent(ctx, o, hub.EventTypeAPI, e.action, e.id, "", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// Compaction keeps each entity's latest event: x (1) and y's last (4).
	if err := h.CleanUpEvents(ctx, start, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := h.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	got := func() []hub.Event {
		select {
		case b := <-events:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("nothing delivered")
		}
		return nil
	}
	// The batch from the cursor (0) reaches the hole (2, 3): the whole
	// history is not there, so no event of it comes, only the resync.
	if b := got(); len(b) != 1 || b[0].Action != hub.ActionResync || b[0].Revision != 4 {
		t.Fatalf("first batch %+v: want a RESYNC at head 4", b)
	}
	if err := h.PublishEvent(ctx, o, hub.EventTypeAPI, "DELETE", "x", "", nil); err != nil {
		t.Fatal(err)
	}
	if b := got(); len(b) != 1 || b[0].Action != "DELETE" || b[0].Revision != 5 {
		t.Fatalf("after the resync %+v: want the DELETE at 5", b)
	}
	if err := h.Subscribe(o, events); !errors.Is(err, eventhub.ErrInvalidInput) {
		t.Fatalf("a second Subscribe of the same channel: %v", err)
	}
}
