// Command consumer follows organizations with the eventhub Go package
// (github.com/eventhub/eventhub/go, docs/go.md): a Watcher delivers each
// publishing transaction whole, and the consumer stores its cursor with
// the state the cursor describes, in one file renamed into place.
//
//	consumer --conninfo CONNINFO --org ORG [--org ORG...] --cursor-file PATH
//	         [--snapshot] [--poll-interval-ms N] [--reload-ms N] [--count N] [--timeout S]
//
// It prints one line per applied event and per resync:
//
//	EVENT <org> <revision> <version_id> <action> <entity_id>
//	RESYNC <org> <ZE001|ZE002|ZE003|ZE004> <head_revision> <head_version_id or ->
//
// Without --snapshot it replays each organization's kept history from
// revision 0 and answers a resync with a reload of its own (simulated: a
// sleep of --reload-ms) before it goes on from the head. With --snapshot
// it keeps each organization's entities in the cursor file, starts and
// resyncs from snapshots (RESYNC ... ZE004 when a snapshot is incomplete
// and it reloads instead), and prints besides:
//
//	SNAPSHOT <org> <head_revision> <head_version_id or -> <entities>
//	TXN <org> <first_revision> <last_revision> <events>
//	DIGEST <org> <revision> <sha256 of the entities>
//
// (a snapshot applied; a transaction applied, after its EVENT lines; the
// entities after either). Exit status: 0 after --count events, 1 on a
// permanent error (bad login, missing privilege, ...), 2 on bad usage, 3
// when --timeout expires.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	eventhub "github.com/eventhub/eventhub/go"
)

// orgList collects repeated --org flags.
type orgList []string

func (o *orgList) String() string     { return fmt.Sprint([]string(*o)) }
func (o *orgList) Set(v string) error { *o = append(*o, v); return nil }

func logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "consumer: "+format+"\n", args...)
}

func main() {
	var (
		orgs       orgList
		conninfo   = flag.String("conninfo", "", "libpq connection string or URL")
		cursorPath = flag.String("cursor-file", "", "JSON file keeping each organization's cursor (and entities)")
		pollMs     = flag.Int("poll-interval-ms", 1000, "poll the organizations' heads this often")
		reloadMs   = flag.Int("reload-ms", 0, "how long the simulated reload of a resync takes")
		snapshot   = flag.Bool("snapshot", false, "keep the entities: start and resync from snapshots")
		count      = flag.Int("count", 0, "exit 0 after this many events (0: run until killed)")
		timeout    = flag.Float64("timeout", 0, "exit 3 after this many seconds (0: never)")
	)
	flag.Var(&orgs, "org", "organization to follow (repeatable)")
	flag.Parse()
	if *conninfo == "" || *cursorPath == "" || len(orgs) == 0 || flag.NArg() > 0 || *pollMs <= 0 || *reloadMs < 0 {
		flag.Usage()
		os.Exit(2)
	}
	state, err := loadState(*cursorPath, *snapshot)
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if *timeout > 0 {
		ctx, stop = context.WithTimeout(ctx, time.Duration(*timeout*float64(time.Second)))
		defer stop()
	}
	c := &consumer{state: state, reload: time.Duration(*reloadMs) * time.Millisecond, count: *count, done: stop}
	start := eventhub.FromBeginning
	if *snapshot {
		start = eventhub.FromSnapshot
	}
	poll := time.Duration(*pollMs) * time.Millisecond
	w, err := eventhub.NewWatcher(eventhub.Config{
		ConnString:           *conninfo,
		Organizations:        orgs,
		Handler:              c,
		Cursors:              state,
		Start:                start,
		PollInterval:         poll,
		FallbackPollInterval: poll,
		Logf:                 logf,
	})
	if err != nil {
		logf("%v", err)
		os.Exit(2)
	}
	err = w.Run(ctx)
	switch {
	case c.reached():
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		logf("timeout after %g s (%d events applied)", *timeout, c.applied)
		os.Exit(3)
	default:
		logf("error: %v", err)
		os.Exit(1)
	}
}
