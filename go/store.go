package eventhub

// The cache: a Handler that keeps every organization's current entities
// (client-go's informer store and lister), updated a whole transaction at
// a time, with handlers told of each change.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
)

// Deleted is what a delete handler receives.
type Deleted struct {
	// Entity is the state the store held before the deletion.
	Entity Entity
	// FinalStateUnknown: the deletion was learned from a snapshot (the
	// entity is not in it), not from its DELETE event, as client-go's
	// DeletedFinalStateUnknown.
	FinalStateUnknown bool
}

// EntityHandlerFuncs are told of each change a Store applies, after the
// store holds the whole transaction or snapshot, in the order of the
// changes; on the watcher's goroutine. Nil functions are skipped.
type EntityHandlerFuncs struct {
	AddFunc    func(organization string, e Entity)
	UpdateFunc func(organization string, old, new Entity)
	DeleteFunc func(organization string, d Deleted)
}

type entityKey struct{ typ, id string }

type storeOrg struct {
	entities map[entityKey]Entity
	cursor   Cursor
}

// Store is a Handler that keeps the current entities of every
// organization a Watcher follows (start FromSnapshot). It is in memory:
// a Watcher with a Store needs no Config.Cursors, and a cursor stored
// beyond the Store's life does not describe it (a transaction for an
// organization the store never loaded is refused, not applied to an
// empty state). A reader never sees
// part of a transaction or snapshot: each is applied under the store's
// lock. Its methods are safe for concurrent use.
type Store struct {
	mu       sync.RWMutex
	orgs     map[string]*storeOrg
	handlers []EntityHandlerFuncs
}

// NewStore makes an empty Store.
func NewStore() *Store {
	return &Store{orgs: map[string]*storeOrg{}}
}

// AddHandler adds handlers told of every change from now on.
func (s *Store) AddHandler(h EntityHandlerFuncs) {
	s.mu.Lock()
	s.handlers = append(s.handlers, h)
	s.mu.Unlock()
}

// Get returns an entity of an organization.
func (s *Store) Get(organization, entityType, entityID string) (Entity, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.orgs[organization]
	if o == nil {
		return Entity{}, false
	}
	e, ok := o.entities[entityKey{entityType, entityID}]
	return e, ok
}

// List returns an organization's entities, by type then id (byte order).
func (s *Store) List(organization string) []Entity {
	s.mu.RLock()
	o := s.orgs[organization]
	var out []Entity
	if o != nil {
		out = make([]Entity, 0, len(o.entities))
		for _, e := range o.entities {
			out = append(out, e)
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Organizations returns the organizations the store holds, sorted.
func (s *Store) Organizations() []string {
	s.mu.RLock()
	out := make([]string, 0, len(s.orgs))
	for o := range s.orgs {
		out = append(out, o)
	}
	s.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Cursor returns the cursor of the state the store holds for an
// organization: what it applied last.
func (s *Store) Cursor(organization string) (Cursor, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	o := s.orgs[organization]
	if o == nil {
		return Cursor{}, false
	}
	return o.cursor, true
}

// Digest is the sha256, in lower-case hex, of the lines
// "<type>\t<id>\t<data>\n" of an organization's entities, sorted bytewise
// and concatenated: the digest `eventhub watch` and the reference
// consumers print, equal wherever the state is.
func (s *Store) Digest(organization string) string {
	entities := s.List(organization)
	lines := make([]string, len(entities))
	for i, e := range entities {
		lines[i] = e.Type + "\t" + e.ID + "\t" + string(e.Data) + "\n"
	}
	sort.Strings(lines) // byte order
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// change is one handler call to make once the lock is released.
type change struct {
	old, new Entity
	kind     byte // 'a', 'u', 'd', 'D' (final state unknown)
}

// OnSnapshot replaces the organization's entities.
func (s *Store) OnSnapshot(_ context.Context, snap *Snapshot) error {
	next := make(map[entityKey]Entity, len(snap.Entities))
	for _, e := range snap.Entities {
		next[entityKey{e.Type, e.ID}] = e
	}
	s.mu.Lock()
	var changes []change
	if prev := s.orgs[snap.Organization]; prev != nil {
		for k, old := range prev.entities {
			if _, ok := next[k]; !ok {
				changes = append(changes, change{old: old, kind: 'D'})
			}
		}
		for k, e := range next {
			if old, ok := prev.entities[k]; !ok {
				changes = append(changes, change{new: e, kind: 'a'})
			} else if string(old.Data) != string(e.Data) {
				changes = append(changes, change{old: old, new: e, kind: 'u'})
			}
		}
	} else {
		for _, e := range snap.Entities {
			changes = append(changes, change{new: e, kind: 'a'})
		}
	}
	s.orgs[snap.Organization] = &storeOrg{entities: next, cursor: snap.Cursor}
	handlers := s.handlers
	s.mu.Unlock()
	s.tell(handlers, snap.Organization, changes)
	return nil
}

// OnTransaction applies one whole transaction.
func (s *Store) OnTransaction(_ context.Context, t *Transaction) error {
	s.mu.Lock()
	o := s.orgs[t.Organization]
	if o == nil {
		if t.Changes[0].Revision != 1 {
			s.mu.Unlock()
			return fmt.Errorf("eventhub: the store holds nothing of organization %q, and a transaction at revision %d "+
				"would be applied to an empty state: a Store starts from a snapshot (or from revision 1); "+
				"a cursor stored beyond the Store's life does not describe it", t.Organization, t.Changes[0].Revision)
		}
		o = &storeOrg{entities: map[entityKey]Entity{}}
		s.orgs[t.Organization] = o
	}
	changes := make([]change, 0, len(t.Changes))
	for _, c := range t.Changes {
		k := entityKey{c.Type, c.EntityID}
		old, had := o.entities[k]
		if c.Action == Delete {
			if had {
				delete(o.entities, k)
				changes = append(changes, change{old: old, kind: 'd'})
			}
			continue
		}
		e := Entity{Type: c.Type, ID: c.EntityID, Data: c.Data}
		o.entities[k] = e
		if had {
			changes = append(changes, change{old: old, new: e, kind: 'u'})
		} else {
			changes = append(changes, change{new: e, kind: 'a'})
		}
	}
	o.cursor = t.Cursor
	handlers := s.handlers
	s.mu.Unlock()
	s.tell(handlers, t.Organization, changes)
	return nil
}

// OnResync fails: a store has no other source than snapshots. The
// watcher tries again after a backoff (an incomplete snapshot stays so
// until the application declares its full state).
func (s *Store) OnResync(_ context.Context, r *Resync) error {
	return fmt.Errorf("eventhub: organization %q needs a reload (%v), which a Store cannot do: it follows snapshots", r.Organization, r.Reason)
}

func (s *Store) tell(handlers []EntityHandlerFuncs, org string, changes []change) {
	for _, h := range handlers {
		for _, c := range changes {
			switch {
			case c.kind == 'a' && h.AddFunc != nil:
				h.AddFunc(org, c.new)
			case c.kind == 'u' && h.UpdateFunc != nil:
				h.UpdateFunc(org, c.old, c.new)
			case (c.kind == 'd' || c.kind == 'D') && h.DeleteFunc != nil:
				h.DeleteFunc(org, Deleted{Entity: c.old, FinalStateUnknown: c.kind == 'D'})
			}
		}
	}
}
