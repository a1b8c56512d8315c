package eventhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"

	eventhub "github.com/eventhub/eventhub/go"
)

// row is an event as eventhub.events holds it.
type row struct {
	revision                   int64
	version, action, entity    string
	correlation, data, evtType string
}

func eventsOf(t *testing.T, conn *pgx.Conn, organization string) []row {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT revision, version_id::text, action, entity_id, correlation_id,
		event_data::text, event_type FROM eventhub.events WHERE organization_id = $1 ORDER BY revision`, organization)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.revision, &r.version, &r.action, &r.entity, &r.correlation, &r.data, &r.evtType); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The event commits and rolls back with the caller's own write, and a
// rolled-back revision is the next publisher's: no gap.
func TestPublishInTheCallersTransaction(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	o := org(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS apis (org text, id text, context text, PRIMARY KEY (org, id))`); err != nil {
		t.Fatal(err)
	}
	publishWith := func(entity, path string, commit bool) int64 {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO apis VALUES ($1, $2, $3)`, o, entity, path); err != nil {
			t.Fatal(err)
		}
		p, err := eventhub.Publish(ctx, tx, eventhub.Event{Organization: o, Type: "API", Action: eventhub.Create,
			EntityID: entity, Data: map[string]string{"context": path}})
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return p.Revision
	}
	if r := publishWith("rolled-back", "/gone", false); r != 1 {
		t.Fatalf("first publish: revision %d, want 1", r)
	}
	if r := publishWith("weather", "/weather", true); r != 1 {
		t.Fatalf("the publish after a rollback: revision %d, want 1 (the rolled-back one's)", r)
	}
	if r := publishWith("orders", "/orders", true); r != 2 {
		t.Fatalf("second commit: revision %d, want 2", r)
	}
	got := eventsOf(t, conn, o)
	if len(got) != 2 || got[0].entity != "weather" || got[1].entity != "orders" {
		t.Fatalf("events: %+v, want weather at 1 and orders at 2", got)
	}
	if got[0].data != `{"context": "/weather"}` || got[0].action != "CREATE" || got[0].evtType != "API" {
		t.Fatalf("event 1: %+v", got[0])
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM apis WHERE org = $1`, o).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the application's rows: %d (%v), want 2: the rolled-back write went with its event", n, err)
	}
}

// A connection and a pool fit Querier too; each publish is a transaction
// of its own there.
func TestPublishOnConnAndPool(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	pool := testPool(t)
	o := org(t)
	for i, q := range []eventhub.Querier{conn, pool} {
		p, err := eventhub.Publish(ctx, q, eventhub.Event{Organization: o, Type: "CERT", Action: eventhub.Update,
			EntityID: "c", Data: json.RawMessage(`{"pem": "x"}`)})
		if err != nil || p.Revision != int64(i+1) {
			t.Fatalf("publish %d: %+v, %v", i+1, p, err)
		}
	}
	if got := eventsOf(t, conn, o); len(got) != 2 || got[1].data != `{"pem": "x"}` {
		t.Fatalf("events: %+v", got)
	}
}

// A repeated correlation id with the same content returns the first
// revision, says it was a replay and adds nothing; with other content it is
// refused.
func TestPublishIdempotentByCorrelationID(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	o := org(t)
	ev := eventhub.Event{Organization: o, Type: "API", Action: eventhub.Update, EntityID: "a",
		CorrelationID: "req-1", Data: map[string]int{"v": 1}}
	first, err := eventhub.Publish(ctx, conn, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eventhub.Publish(ctx, conn, eventhub.Event{Organization: o, Type: "API", Action: eventhub.Update, EntityID: "b"}); err != nil {
		t.Fatal(err)
	}
	ev.Originated = time.Now().Add(time.Minute) // not compared
	again, err := eventhub.Publish(ctx, conn, ev)
	if err != nil || first.Replayed || !again.Replayed || again.Revision != first.Revision {
		t.Fatalf("replay: %+v, %v; want revision %d replayed (first: %+v)", again, err, first.Revision, first)
	}
	if got := eventsOf(t, conn, o); len(got) != 2 || got[0].correlation != "req-1" {
		t.Fatalf("events after the replay: %+v, want 2", got)
	}
	ev.Data = map[string]int{"v": 2}
	_, err = eventhub.Publish(ctx, conn, ev)
	if !errors.Is(err, eventhub.ErrCorrelationConflict) {
		t.Fatalf("other content: %v, want ErrCorrelationConflict", err)
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "23505" {
		t.Fatalf("other content: %v does not unwrap to SQLSTATE 23505", err)
	}
	if eventhub.Retryable(err) {
		t.Fatal("a correlation conflict is not retryable")
	}
}

// Concurrent publishers of one organization get every revision once, in
// commit order, without a gap.
func TestPublishConcurrentGapless(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t)
	o := org(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := eventhub.Publish(ctx, pool, eventhub.Event{Organization: o, Type: "API", Action: eventhub.Update,
					EntityID: fmt.Sprintf("e%d", w), CorrelationID: fmt.Sprintf("w%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := eventsOf(t, connect(t, testDSN), o)
	if len(got) != workers*each {
		t.Fatalf("%d events, want %d", len(got), workers*each)
	}
	for i, r := range got {
		if r.revision != int64(i+1) {
			t.Fatalf("revision %d at position %d: a gap", r.revision, i+1)
		}
	}
}

// Bad input fails before anything is sent, with ErrInvalidInput.
func TestPublishInvalidInput(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	good := eventhub.Event{Organization: org(t), Type: "API", Action: eventhub.Create, EntityID: "x"}
	cases := map[string]func(*eventhub.Event){
		"no organization": func(e *eventhub.Event) { e.Organization = "" },
		"no type":         func(e *eventhub.Event) { e.Type = "" },
		"no entity":       func(e *eventhub.Event) { e.EntityID = "" },
		"bad action":      func(e *eventhub.Event) { e.Action = "UPSERT" },
		"data not JSON":   func(e *eventhub.Event) { e.Data = json.RawMessage(`{"a":`) },
		"data unmarshal":  func(e *eventhub.Event) { e.Data = func() {} },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			ev := good
			spoil(&ev)
			_, err := eventhub.Publish(ctx, conn, ev)
			if !errors.Is(err, eventhub.ErrInvalidInput) {
				t.Fatalf("%v, want ErrInvalidInput", err)
			}
		})
	}
	if got := eventsOf(t, conn, good.Organization); len(got) != 0 {
		t.Fatalf("bad input left %d events", len(got))
	}
	// What only the server checks: an organization id over its 1024-byte
	// limit (22001).
	ev := good
	ev.Organization = strings.Repeat("x", 2000)
	if _, err := eventhub.Publish(ctx, conn, ev); !errors.Is(err, eventhub.ErrInvalidInput) {
		t.Fatalf("an organization id of 2000 bytes: %v, want ErrInvalidInput", err)
	}
}

// A role without EXECUTE gets ErrPermission; a read-only transaction (as
// on a standby) ErrReadOnly, which is retryable (on the primary).
func TestPublishRefused(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	role := "go_nobody"
	if _, err := conn.Exec(ctx, `DO $$ BEGIN CREATE ROLE go_nobody LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
		GRANT USAGE ON SCHEMA eventhub TO go_nobody`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(testDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	nobody, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nobody.Close(ctx)
	ev := eventhub.Event{Organization: org(t), Type: "API", Action: eventhub.Create, EntityID: "x"}
	_, err = eventhub.Publish(ctx, nobody, ev)
	var e *eventhub.Error
	if !errors.Is(err, eventhub.ErrPermission) || !errors.As(err, &e) || e.Code != "42501" {
		t.Fatalf("without EXECUTE: %v, want ErrPermission (42501)", err)
	}
	if eventhub.Retryable(err) {
		t.Fatal("a missing privilege is not retryable")
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = eventhub.Publish(ctx, tx, ev)
	if !errors.Is(err, eventhub.ErrReadOnly) || !eventhub.Retryable(err) {
		t.Fatalf("read-only: %v, want a retryable ErrReadOnly", err)
	}
}

// RegisterOrganization: revision 0 and a version, the same on a repeat.
func TestRegisterOrganization(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	o := org(t)
	v1, err := eventhub.RegisterOrganization(ctx, conn, o)
	if err != nil || len(v1) != 36 {
		t.Fatalf("register: %q, %v", v1, err)
	}
	v2, err := eventhub.RegisterOrganization(ctx, conn, o)
	if err != nil || v2 != v1 {
		t.Fatalf("again: %q, %v; want %q", v2, err, v1)
	}
	var rev int64
	var ver string
	if err := conn.QueryRow(ctx, `SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = $1`, o).Scan(&rev, &ver); err != nil || rev != 0 || ver != v1 {
		t.Fatalf("its state: %d %q (%v)", rev, ver, err)
	}
	if _, err := eventhub.RegisterOrganization(ctx, conn, ""); !errors.Is(err, eventhub.ErrInvalidInput) {
		t.Fatalf("an empty id: %v", err)
	}
}

// A context that ends ends the call, and is not retryable.
func TestPublishContextCanceled(t *testing.T) {
	conn := connect(t, testDSN)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := eventhub.Publish(ctx, conn, eventhub.Event{Organization: org(t), Type: "API", Action: eventhub.Create, EntityID: "x"})
	if err == nil || eventhub.Retryable(err) {
		t.Fatalf("canceled: %v (retryable %v)", err, eventhub.Retryable(err))
	}
}
