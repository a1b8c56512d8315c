// Command gowatch is make bench's Go watcher: `eventhub watch --org ORG`
// written on the Go package, printing each event as the CLI does (one
// JSON line), so that the same stamping reads both.
//
//	gowatch -conninfo CONNINFO -org ORG [-after REVISION]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	eventhub "github.com/eventhub/eventhub/go"
)

const stamp = "2006-01-02T15:04:05.000000Z"

func main() {
	conninfo := flag.String("conninfo", "", "libpq connection string")
	org := flag.String("org", "", "organization to follow")
	after := flag.Int64("after", -1, "start after this revision (its version unchecked), as watch --after; default: the head")
	flag.Parse()
	if *org == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	handler := eventhub.HandlerFuncs{TransactionFunc: func(_ context.Context, t *eventhub.Transaction) error {
		for i, c := range t.Changes {
			org, _ := json.Marshal(t.Organization)
			typ, _ := json.Marshal(c.Type)
			id, _ := json.Marshal(c.EntityID)
			corr, _ := json.Marshal(c.CorrelationID)
			fmt.Fprintf(out, `{"organization_id": %s, "revision": %d, "version_id": "%s", "processed_timestamp": "%s", "originated_timestamp": "%s", "event_type": %s, "action": "%s", "entity_id": %s, "correlation_id": %s, "event_data": %s, "transaction_first_revision": %d, "transaction_end": %t}`+"\n",
				org, c.Revision, c.VersionID, c.Processed.UTC().Format(stamp), c.Originated.UTC().Format(stamp),
				typ, c.Action, id, corr, c.Data, t.Changes[0].Revision, i == len(t.Changes)-1)
		}
		return out.Flush()
	}}
	cfg := eventhub.Config{ConnString: *conninfo, Handler: handler, Start: eventhub.AtHead}
	if *after < 0 {
		cfg.Organizations = []string{*org}
	}
	w, err := eventhub.NewWatcher(cfg)
	if err == nil && *after >= 0 {
		err = w.FollowAt(*org, eventhub.Cursor{Revision: *after})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gowatch:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		time.AfterFunc(2*time.Second, func() { os.Exit(130) })
	}()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "gowatch:", err)
		os.Exit(1)
	}
}
