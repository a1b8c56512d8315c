// Command gofloor is the floor of a Go watcher in make bench: the least any
// watcher written in Go on pgx does per event. One pgconn connection
// listens on eventhub_events; each notification's arrival is printed as a
// line with the time it arrived as processed_timestamp (so that the same
// stamping counts the lines; the latency it reports means nothing). It
// neither opens the events nor checks them.
//
//	gofloor CONNINFO
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"

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
	var line []byte
	config.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) {
		line = append(line[:0], `{"processed_timestamp": "`...)
		line = time.Now().UTC().AppendFormat(line, "2006-01-02T15:04:05.000000Z")
		line = append(line, "\"}\n"...)
		out.Write(line)
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
