package eventhub_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	eventhub "github.com/eventhub/eventhub/go"
)

// Publish an event in the transaction of the write it describes.
func ExamplePublish() {
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE apis SET context = $2 WHERE id = $1`, "weather-api", "/weather/v2"); err != nil {
		log.Fatal(err)
	}
	p, err := eventhub.Publish(ctx, tx, eventhub.Event{
		Organization:  "acme",
		Type:          "API",
		Action:        eventhub.Update,
		EntityID:      "weather-api",
		CorrelationID: "req-8c1f",
		Data:          map[string]string{"context": "/weather/v2"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("acme is at revision %d", p.Revision)
}

// Keep every organization's entities in a Store, and act on changes.
func ExampleStore() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := eventhub.NewStore()
	store.AddHandler(eventhub.EntityHandlerFuncs{
		UpdateFunc: func(org string, old, new eventhub.Entity) { log.Printf("%s: %s %s changed", org, new.Type, new.ID) },
		DeleteFunc: func(org string, d eventhub.Deleted) { log.Printf("%s: %s %s deleted", org, d.Entity.Type, d.Entity.ID) },
	})
	w, err := eventhub.NewWatcher(eventhub.Config{
		ConnString: "host=db1,db2 dbname=gateway target_session_attrs=read-write",
		All:        true,
		Handler:    store,
		Replica:    "gateway-7d9f",
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := w.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}()
	if err := w.WaitForSync(ctx); err != nil {
		log.Fatal(err)
	}
	if api, ok := store.Get("acme", "API", "weather-api"); ok {
		log.Printf("serving %s", api.Data)
	}
}

// Apply to your own tables exactly once: the cursor is stored in the
// transaction that applies.
func ExampleTableCursors_Apply() {
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cursors, err := eventhub.NewTableCursors(pool, "eventhub_cursors")
	if err != nil {
		log.Fatal(err)
	}
	if err := cursors.CreateTable(ctx, pool); err != nil {
		log.Fatal(err)
	}
	w, err := eventhub.NewWatcher(eventhub.Config{
		ConnString:    os.Getenv("EVENTHUB_URL"),
		Organizations: []string{"acme"},
		Cursors:       cursors,
		Handler: eventhub.HandlerFuncs{
			SnapshotFunc: func(ctx context.Context, s *eventhub.Snapshot) error {
				return cursors.Apply(ctx, pool, s.Organization, s.Cursor, func(tx pgx.Tx) error {
					// replace the organization's rows with s.Entities
					return nil
				})
			},
			TransactionFunc: func(ctx context.Context, t *eventhub.Transaction) error {
				return cursors.Apply(ctx, pool, t.Organization, t.Cursor, func(tx pgx.Tx) error {
					// apply t.Changes
					return nil
				})
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(w.Run(ctx))
}
