// Command gopublish is make bench's Go publisher: CLIENTS connections
// (pgx, each its own goroutine, as pgbench -c), each publishing with the Go
// package's Publish in a loop for SECONDS to an organization of its own,
// PREFIX<i> for client i (as pgbench's PREFIX || :client_id). It prints
// "publishes=N seconds=S tps=T".
//
//	gopublish -conninfo CONNINFO -clients N -seconds S -prefix P -data JSON
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	eventhub "github.com/eventhub/eventhub/go"
	"github.com/jackc/pgx/v4"
)

func main() {
	conninfo := flag.String("conninfo", "", "libpq connection string")
	clients := flag.Int("clients", 1, "connections, one goroutine each")
	seconds := flag.Float64("seconds", 5, "how long to publish")
	prefix := flag.String("prefix", "gopub-", "client i publishes to organization PREFIX<i>")
	data := flag.String("data", "{}", "event data (JSON)")
	flag.Parse()
	if *clients < 1 || *seconds <= 0 || !json.Valid([]byte(*data)) || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx := context.Background()
	conns := make([]*pgx.Conn, *clients)
	for i := range conns {
		c, err := pgx.Connect(ctx, *conninfo)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gopublish:", err)
			os.Exit(1)
		}
		defer c.Close(ctx)
		conns[i] = c
	}
	var published atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func(c *pgx.Conn, i int) {
			defer wg.Done()
			ev := eventhub.Event{Organization: *prefix + strconv.Itoa(i), Type: "API", Action: eventhub.Update,
				EntityID: "weather-api", Data: json.RawMessage(*data)}
			for time.Now().Before(deadline) {
				if _, err := eventhub.Publish(ctx, c, ev); err != nil {
					failed.Store(err)
					return
				}
				published.Add(1)
			}
		}(c, i)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if err, _ := failed.Load().(error); err != nil {
		fmt.Fprintln(os.Stderr, "gopublish:", err)
		os.Exit(1)
	}
	n := published.Load()
	fmt.Printf("publishes=%d seconds=%.3f tps=%.1f\n", n, elapsed, float64(n)/elapsed)
}
