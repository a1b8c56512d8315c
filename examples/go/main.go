// Command consumer is a reference consumer of eventhub written against the
// SQL protocol of docs/protocol.md alone ("The consumer protocol" under
// eventhub.events_since, "Notifications", "Errors"), with pgx v4.
//
//	consumer --conninfo CONNINFO --org ORG [--org ORG...] --cursor-file PATH
//	         [--snapshot] [--poll-interval-ms N] [--reload-ms N] [--count N] [--timeout S]
//
// It prints one line per applied event and per resync:
//
//	EVENT <org> <revision> <version_id> <action> <entity_id>
//	RESYNC <org> <ZE001|ZE002|ZE003> <head_revision> <head_version_id or ->
//
// and keeps its cursors in the cursor file, so that a restarted consumer
// resumes where it stopped. With --snapshot it also keeps each
// organization's entities (in the cursor file, with the cursor), starts
// from a snapshot and resyncs from one ("Bootstrap from a snapshot",
// "Resync from a snapshot"), reads eventhub.transactions_since and applies
// each transaction as one unit ("Transactions"), and prints besides:
//
//	SNAPSHOT <org> <head_revision> <head_version_id or -> <entities>
//	TXN <org> <first_revision> <last_revision> <events>
//	DIGEST <org> <revision> <sha256 of the entities>
//
// (a snapshot applied; a transaction applied, after its EVENT lines; caught
// up), and RESYNC ... ZE004 when a bootstrap found the snapshot incomplete
// and fell back to the reload. Exit status: 0 after --count events, 1 on a
// permanent error (bad login, missing privilege, ...), 2 on bad usage, 3 when
// --timeout expires.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v4"
)

// cursor is the position in one organization's history: the revision and
// the version id of the last event applied (docs/protocol.md, "The consumer
// protocol", step 1). VersionID is nil at revision 0, where there is no
// event whose version to check. Under --snapshot the cursor is stored with
// the entities it describes; nil means none yet: bootstrap from a snapshot.
type cursor struct {
	Revision  int64     `json:"revision"`
	VersionID *string   `json:"version_id"`
	Entities  *entities `json:"entities,omitempty"`
}

// cursorFile is the consumer's stored state: organization → cursor, as JSON.
type cursorFile struct {
	path    string
	cursors map[string]cursor
}

func loadCursors(path string) (*cursorFile, error) {
	f := &cursorFile{path: path, cursors: map[string]cursor{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil // a new consumer replays the kept history from 0
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &f.cursors); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// set moves an organization's cursor and stores the whole file atomically
// (a temporary file renamed over the old one): a consumer killed at any
// moment finds either the old cursor or the new one. A real consumer stores
// the cursor in the same transaction as the state it applied.
func (f *cursorFile) set(org string, c cursor) error {
	f.cursors[org] = c
	data, err := json.Marshal(f.cursors)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".*.tmp")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), f.path)
}

// orgList collects repeated --org flags.
type orgList []string

func (o *orgList) String() string     { return fmt.Sprint([]string(*o)) }
func (o *orgList) Set(v string) error { *o = append(*o, v); return nil }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "consumer: "+format+"\n", args...)
}

func main() {
	var (
		orgs       orgList
		conninfo   = flag.String("conninfo", "", "libpq connection string or URL")
		cursorPath = flag.String("cursor-file", "", "JSON file keeping each organization's cursor")
		pollMs     = flag.Int("poll-interval-ms", 1000, "poll organization_states this often")
		reloadMs   = flag.Int("reload-ms", 0, "how long the simulated reload of a resync takes")
		snapshot   = flag.Bool("snapshot", false, "keep the entities: start and resync from snapshots, apply whole transactions")
		count      = flag.Int("count", 0, "exit 0 after this many events (0: run until killed)")
		timeout    = flag.Float64("timeout", 0, "exit 3 after this many seconds (0: never)")
	)
	flag.Var(&orgs, "org", "organization to follow (repeatable)")
	flag.Parse()
	if *conninfo == "" || *cursorPath == "" || len(orgs) == 0 || flag.NArg() > 0 || *pollMs <= 0 || *reloadMs < 0 {
		flag.Usage()
		os.Exit(2)
	}
	config, err := pgx.ParseConfig(*conninfo)
	if err != nil {
		logf("bad --conninfo: %v", err)
		os.Exit(2)
	}
	cursors, err := loadCursors(*cursorPath)
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}

	ctx := context.Background()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*timeout*float64(time.Second)))
		defer cancel()
	}
	c := &consumer{
		config:   config,
		orgs:     orgs,
		poll:     time.Duration(*pollMs) * time.Millisecond,
		reload:   time.Duration(*reloadMs) * time.Millisecond,
		snapshot: *snapshot,
		count:    *count,
		cursors:  cursors,
	}
	err = c.run(ctx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		logf("timeout after %g s (%d events applied)", *timeout, c.applied)
		os.Exit(3)
	default:
		logf("error: %v", err)
		os.Exit(1)
	}
}
