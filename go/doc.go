// Package eventhub is the Go client of eventhub, the PostgreSQL extension
// that carries ordered, exactly-once configuration change events between
// the replicas of a controller through the database they already share.
//
// Publishing happens inside the caller's own transaction: an event commits
// or rolls back with the write it describes, and gets its organization's
// next gapless revision.
//
//	tx, err := pool.Begin(ctx)
//	...
//	// the application's own write, then:
//	p, err := eventhub.Publish(ctx, tx, eventhub.Event{
//		Organization: "acme",
//		Type:         "API",
//		Action:       eventhub.Update,
//		EntityID:     "weather-api",
//		Data:         map[string]string{"context": "/weather/v2"},
//	})
//	...
//	err = tx.Commit(ctx)
//
// A Watcher follows organizations (or all of them) over two connections,
// whatever their number, and hands each publishing transaction, whole and
// in order, to a Handler; it starts from a stored cursor, a snapshot or
// the head, resyncs from a snapshot when the history cannot be followed,
// polls where notifications cannot reach it (a hot standby, a
// transaction pooler), and reconnects through failovers. A Store is a
// Handler that keeps every organization's entities, as client-go's
// informers do; TableCursors applies exactly once in the consumer's own
// transaction.
//
//	store := eventhub.NewStore()
//	w, err := eventhub.NewWatcher(eventhub.Config{ConnString: dsn, All: true, Handler: store})
//	...
//	go w.Run(ctx)
//	err = w.WaitForSync(ctx)
//	api, ok := store.Get("acme", "API", "weather-api")
//
// Package hub offers the controller design's EventHub interface on top,
// and package ehprom the watcher's Prometheus metrics.
//
// Errors the server raises with a SQLSTATE of eventhub's contract come back
// as *Error, which matches the package's sentinel errors with errors.Is
// (ErrPermission, ErrInvalidInput, ErrReadOnly, ErrCorrelationConflict, and
// the resync reasons ErrHistoryRemoved, ErrCursorAhead, ErrVersionMismatch)
// and unwraps to pgx's *pgconn.PgError. Retryable tells the errors a retry
// may cure (with the same correlation id, a publish whose answer was lost
// returns the revision it already has) from those it cannot.
//
// The package keeps no global state. It builds with pgx v4 in GOPATH mode
// (Debian 12's golang-github-jackc-pgx-v4-dev) and as a module.
package eventhub
