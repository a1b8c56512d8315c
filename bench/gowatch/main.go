// Command gowatch is make bench's Go watcher: `eventhub watch --org ORG`
// written on the Go package, printing each event as the CLI does (one
// JSON line), so that the same stamping reads both.
//
//	gowatch -conninfo CONNINFO -org ORG [-after REVISION]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
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
	var line []byte
	handler := eventhub.HandlerFuncs{TransactionFunc: func(_ context.Context, t *eventhub.Transaction) error {
		for i, c := range t.Changes {
			// The CLI's line, appended into one reused buffer as the CLI
			// writes it (no reflection, no allocation per field).
			line = append(line[:0], `{"organization_id": `...)
			line = appendString(line, t.Organization)
			line = append(line, `, "revision": `...)
			line = strconv.AppendInt(line, c.Revision, 10)
			line = append(line, `, "version_id": "`...)
			line = append(line, c.VersionID...)
			line = append(line, `", "processed_timestamp": "`...)
			line = c.Processed.UTC().AppendFormat(line, stamp)
			line = append(line, `", "originated_timestamp": "`...)
			line = c.Originated.UTC().AppendFormat(line, stamp)
			line = append(line, `", "event_type": `...)
			line = appendString(line, c.Type)
			line = append(line, `, "action": "`...)
			line = append(line, c.Action...)
			line = append(line, `", "entity_id": `...)
			line = appendString(line, c.EntityID)
			line = append(line, `, "correlation_id": `...)
			line = appendString(line, c.CorrelationID)
			line = append(line, `, "event_data": `...)
			line = append(line, c.Data...)
			line = append(line, `, "transaction_first_revision": `...)
			line = strconv.AppendInt(line, t.Changes[0].Revision, 10)
			line = append(line, `, "transaction_end": `...)
			line = strconv.AppendBool(line, i == len(t.Changes)-1)
			line = append(line, "}\n"...)
			if _, err := out.Write(line); err != nil {
				return err
			}
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

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
