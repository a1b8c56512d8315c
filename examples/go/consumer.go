package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	eventhub "github.com/eventhub/eventhub/go"
)

// entities is an organization's state: event type → entity id → the
// entity's event_data as the server prints it.
type entities map[string]map[string]string

// digest is the sha256, in lower-case hex, of the lines
// "<event_type>\t<entity_id>\t<event_data>\n" of every entity, sorted
// bytewise and concatenated (no entity: the hash of "").
func (m entities) digest() string {
	var lines []string
	for eventType, ids := range m {
		for id, data := range ids {
			lines = append(lines, eventType+"\t"+id+"\t"+data+"\n")
		}
	}
	sort.Strings(lines) // byte by byte
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// stored is one organization's entry in the cursor file: the cursor, and
// under --snapshot the entities it describes.
type stored struct {
	Revision  int64     `json:"revision"`
	VersionID *string   `json:"version_id"`
	Entities  *entities `json:"entities,omitempty"` // nil: none stored; empty: none there
}

// state is the cursor file, {"acme": {"revision": 42, "version_id":
// "…"}, …}, read once and rewritten whole after every change: a consumer
// killed at any moment finds the old file or the new one, never half.
// It is the Watcher's CursorStore.
type state struct {
	path     string
	snapshot bool
	orgs     map[string]stored
}

func loadState(path string, snapshot bool) (*state, error) {
	s := &state{path: path, snapshot: snapshot, orgs: map[string]stored{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &s.orgs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Load gives the stored cursor; under --snapshot only one stored with its
// entities (else the organization starts from a snapshot).
func (s *state) Load(_ context.Context, org string) (eventhub.Cursor, bool, error) {
	st, ok := s.orgs[org]
	if !ok || (s.snapshot && st.Entities == nil) {
		return eventhub.Cursor{}, false, nil
	}
	c := eventhub.Cursor{Revision: st.Revision}
	if st.VersionID != nil {
		c.VersionID = *st.VersionID
	}
	return c, true, nil
}

// entities is an organization's stored entities; nil if none are.
func (s *state) entities(org string) entities {
	if e := s.orgs[org].Entities; e != nil {
		return *e
	}
	return nil
}

// save stores an organization's cursor and entities, the file renamed
// into place.
func (s *state) save(org string, c eventhub.Cursor, m entities) error {
	st := stored{Revision: c.Revision}
	if m != nil {
		st.Entities = &m
	}
	if c.VersionID != "" {
		st.VersionID = &c.VersionID
	}
	s.orgs[org] = st
	data, err := json.Marshal(s.orgs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), filepath.Base(s.path)+".*.tmp")
	if err != nil {
		return err
	}
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// consumer is the Watcher's Handler: it prints what it applies and
// stores the cursor after each transaction, snapshot or reload.
type consumer struct {
	state   *state
	reload  time.Duration // how long the simulated reload takes
	count   int           // stop after this many events (0: never)
	applied int
	done    context.CancelFunc
}

func (c *consumer) reached() bool { return c.count > 0 && c.applied >= c.count }

// code names a resync's reason by its SQLSTATE.
func code(reason error) string {
	for code, kind := range map[string]error{
		"ZE001": eventhub.ErrHistoryRemoved, "ZE002": eventhub.ErrCursorAhead,
		"ZE003": eventhub.ErrVersionMismatch, "ZE004": eventhub.ErrIncompleteState,
	} {
		if errors.Is(reason, kind) {
			return code
		}
	}
	return reason.Error()
}

func version(c eventhub.Cursor) string {
	if c.VersionID == "" {
		return "-"
	}
	return c.VersionID
}

// OnTransaction prints and applies one whole transaction, then stores the
// cursor with the state.
func (c *consumer) OnTransaction(ctx context.Context, t *eventhub.Transaction) error {
	if err := ctx.Err(); err != nil {
		return err // stopping: --count reached, nothing more is applied
	}
	m := c.state.entities(t.Organization)
	for _, ch := range t.Changes {
		fmt.Printf("EVENT %s %d %s %s %s\n", t.Organization, ch.Revision, ch.VersionID, ch.Action, ch.EntityID)
		if !c.state.snapshot {
			continue
		}
		if m == nil {
			m = entities{}
		}
		if ch.Action == eventhub.Delete {
			delete(m[ch.Type], ch.EntityID)
			if len(m[ch.Type]) == 0 {
				delete(m, ch.Type)
			}
		} else {
			if m[ch.Type] == nil {
				m[ch.Type] = map[string]string{}
			}
			m[ch.Type][ch.EntityID] = string(ch.Data)
		}
	}
	if c.state.snapshot {
		fmt.Printf("TXN %s %d %d %d\n", t.Organization, t.Changes[0].Revision, t.Cursor.Revision, len(t.Changes))
		fmt.Printf("DIGEST %s %d %s\n", t.Organization, t.Cursor.Revision, m.digest())
	}
	c.applied += len(t.Changes)
	return c.stored(t.Organization, t.Cursor, m)
}

// OnSnapshot replaces an organization's entities.
func (c *consumer) OnSnapshot(ctx context.Context, s *eventhub.Snapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Reason != nil {
		fmt.Printf("RESYNC %s %s %d %s\n", s.Organization, code(s.Reason), s.Cursor.Revision, version(s.Cursor))
	}
	m := entities{}
	for _, e := range s.Entities {
		if m[e.Type] == nil {
			m[e.Type] = map[string]string{}
		}
		m[e.Type][e.ID] = string(e.Data)
	}
	fmt.Printf("SNAPSHOT %s %d %s %d\n", s.Organization, s.Cursor.Revision, version(s.Cursor), len(s.Entities))
	fmt.Printf("DIGEST %s %d %s\n", s.Organization, s.Cursor.Revision, m.digest())
	return c.stored(s.Organization, s.Cursor, m)
}

// OnResync reloads an organization from the application's own source
// (simulated by a sleep) and goes on from the head the watcher read before
// the reload: an event published during the reload comes next.
func (c *consumer) OnResync(ctx context.Context, r *eventhub.Resync) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Printf("RESYNC %s %s %d %s\n", r.Organization, code(r.Reason), r.Head.Revision, version(r.Head))
	select {
	case <-time.After(c.reload):
	case <-ctx.Done():
		return ctx.Err()
	}
	m := c.state.entities(r.Organization) // a real consumer reloads them here
	if c.state.snapshot && m == nil {
		m = entities{}
	}
	if c.state.snapshot {
		fmt.Printf("DIGEST %s %d %s\n", r.Organization, r.Head.Revision, m.digest())
	}
	return c.stored(r.Organization, r.Head, m)
}

// stored saves the cursor with the state, and ends the run once --count
// events are applied.
func (c *consumer) stored(org string, cur eventhub.Cursor, m entities) error {
	if err := c.state.save(org, cur, m); err != nil {
		return err
	}
	if c.reached() {
		c.done()
	}
	return nil
}
