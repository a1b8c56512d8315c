// Command gofloor is the least a watcher written in Go on pgx does per
// event: one pgconn connection listens on eventhub_events and writes each
// notification's payload as a line. It opens nothing and checks nothing;
// bench/gofloor/run.sh compares its CPU per event with eventhub watch's
// and the Go package's (docs/performance.md).
//
//	gofloor CONNINFO
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgconn"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gofloor CONNINFO")
		os.Exit(2)
	}
	config, err := pgconn.ParseConfig(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	config.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) {
		out.WriteString(n.Payload)
		out.WriteByte('\n')
		out.Flush()
	}
	ctx := context.Background()
	conn, err := pgconn.ConnectConfig(ctx, config)
	if err == nil {
		_, err = conn.Exec(ctx, "LISTEN eventhub_events").ReadAll()
	}
	for err == nil {
		err = conn.WaitForNotification(ctx)
	}
	fmt.Fprintln(os.Stderr, "gofloor:", err)
	os.Exit(1)
}
