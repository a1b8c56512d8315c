package eventhub_test

// The differential test: publishers write entities to a table of their
// own and publish the same change in the same transaction (transactions
// of 1 to 3 changes, a tenth rolled back); a watcher keeps a Store. At
// every quiescent point the store equals the table, and a reader that
// looks at the store all the while never sees part of a transaction.
//
// EVENTHUB_DIFF_RUNS runs (default 3) of seeds EVENTHUB_DIFF_SEED,
// EVENTHUB_DIFF_SEED+1, ... (default 1): `make test-long` runs 50.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	eventhub "github.com/eventhub/eventhub/go"
)

const (
	diffPublishers   = 4
	diffEntities     = 12 // per publisher
	diffPhases       = 4  // quiescent points per run
	diffTxnsPerPhase = 25 // per publisher
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// An entity's data: which transaction of its publisher wrote it. The
// publisher's "counter" entity also names what that transaction wrote
// ("put" or "del" by entity id).
type diffData struct {
	Seq    int               `json:"seq"`
	Writes map[string]string `json:"writes,omitempty"`
}

func TestDifferential(t *testing.T) {
	runs, seed := envInt("EVENTHUB_DIFF_RUNS", 3), envInt("EVENTHUB_DIFF_SEED", 1)
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, testDSN+" pool_max_conns=8")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS diff_source
		(org text, type text, id text, data jsonb, PRIMARY KEY (org, type, id))`); err != nil {
		t.Fatal(err)
	}
	var divergences, halves int64
	for i := 0; i < runs; i++ {
		s := int64(seed + i)
		t.Run(fmt.Sprintf("seed-%d", s), func(t *testing.T) {
			d, h := differentialRun(t, pool, s)
			divergences += d
			halves += h
		})
	}
	t.Logf("%d runs: %d divergences, %d half transactions seen", runs, divergences, halves)
}

func differentialRun(t *testing.T, pool *pgxpool.Pool, seed int64) (divergences, halves int64) {
	ctx := context.Background()
	o := fmt.Sprintf("%s-%d", org(t), seed)
	app := "go-diff-" + o
	r := newRecorder()
	w, _ := runWatcher(t, eventhub.Config{ConnString: testDSN + " application_name=" + app,
		Organizations: []string{o}, Handler: r, ReconnectMin: 10 * time.Millisecond})

	// The reader: checks the store's view of each publisher all the time.
	stopReader := make(chan struct{})
	var readerDone sync.WaitGroup
	var checks int64
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for {
			select {
			case <-stopReader:
				return
			default:
			}
			if msg := halfTransaction(r.store.List(o)); msg != "" {
				if atomic.AddInt64(&halves, 1) == 1 {
					t.Errorf("a reader saw part of a transaction: %s", msg)
				}
			}
			atomic.AddInt64(&checks, 1)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	defer func() {
		close(stopReader)
		readerDone.Wait()
	}()

	rng := rand.New(rand.NewSource(seed))
	seqs := make([]int, diffPublishers)
	for phase := 0; phase < diffPhases; phase++ {
		var wg sync.WaitGroup
		errs := make(chan error, diffPublishers)
		for p := 0; p < diffPublishers; p++ {
			prng := rand.New(rand.NewSource(rng.Int63()))
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := 0; i < diffTxnsPerPhase; i++ {
					if err := diffTransaction(ctx, pool, prng, o, p, &seqs[p]); err != nil {
						errs <- err
						return
					}
				}
			}(p)
		}
		if phase == 1 { // a killed connection in the middle of a phase
			time.Sleep(time.Duration(rng.Intn(50)) * time.Millisecond)
			if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// Quiescent: the store reaches the head and equals the table.
		head, err := pool.Query(ctx, `SELECT revision, version_id::text FROM eventhub.organization_states WHERE organization_id = $1`, o)
		if err != nil {
			t.Fatal(err)
		}
		var c eventhub.Cursor
		for head.Next() {
			if err := head.Scan(&c.Revision, &c.VersionID); err != nil {
				t.Fatal(err)
			}
		}
		head.Close()
		waitFor(t, 30*time.Second, fmt.Sprintf("phase %d: the store reaches %+v", phase, c), atCursor(r.store, o, c))
		if got, want := r.store.Digest(o), tableDigest(t, pool, o); got != want {
			divergences++
			t.Errorf("phase %d at %+v: the store's digest %s, the table's %s", phase, c, got, want)
		}
	}
	if st := w.Stats(); st.Reconnects < 1 {
		t.Errorf("stats %+v: the killed connection was not seen", st)
	}
	t.Logf("seed %d: %d transactions applied, %d reader checks", seed, w.Stats().Transactions, atomic.LoadInt64(&checks))
	return divergences, atomic.LoadInt64(&halves)
}

// diffTransaction writes 1 to 3 changes of publisher p's entities to the
// table and publishes them, plus p's counter, in one transaction; one in
// ten rolls back.
func diffTransaction(ctx context.Context, pool *pgxpool.Pool, rng *rand.Rand, o string, p int, seq *int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	next := *seq + 1
	writes := map[string]string{}
	for n := 1 + rng.Intn(3); n > 0; n-- {
		id := fmt.Sprintf("p%d-e%d", p, rng.Intn(diffEntities))
		if _, dup := writes[id]; dup {
			continue
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM diff_source WHERE org = $1 AND type = 'API' AND id = $2)`,
			o, id).Scan(&exists); err != nil {
			return err
		}
		action := eventhub.Create
		switch {
		case exists && rng.Intn(3) == 0:
			action = eventhub.Delete
		case exists:
			action = eventhub.Update
		}
		if action == eventhub.Delete {
			writes[id] = "del"
			if _, err := tx.Exec(ctx, `DELETE FROM diff_source WHERE org = $1 AND type = 'API' AND id = $2`, o, id); err != nil {
				return err
			}
		} else {
			writes[id] = "put"
			if err := diffPut(ctx, tx, o, id, diffData{Seq: next}); err != nil {
				return err
			}
		}
		if _, err := eventhub.Publish(ctx, tx, eventhub.Event{Organization: o, Type: "API", Action: action,
			EntityID: id, Data: diffData{Seq: next}}); err != nil {
			return err
		}
	}
	counter := fmt.Sprintf("p%d-counter", p)
	if err := diffPut(ctx, tx, o, counter, diffData{Seq: next, Writes: writes}); err != nil {
		return err
	}
	if _, err := eventhub.Publish(ctx, tx, eventhub.Event{Organization: o, Type: "API", Action: eventhub.Update,
		EntityID: counter, Data: diffData{Seq: next, Writes: writes}}); err != nil {
		return err
	}
	if rng.Intn(10) == 0 {
		return tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	*seq = next
	return nil
}

func diffPut(ctx context.Context, tx pgx.Tx, o, id string, d diffData) error {
	_, err := tx.Exec(ctx, `INSERT INTO diff_source VALUES ($1, 'API', $2, $3)
		ON CONFLICT (org, type, id) DO UPDATE SET data = excluded.data`, o, id, d)
	return err
}

// halfTransaction checks one view of the store: for each publisher, no
// entity is newer than its counter, and what the counter's transaction
// wrote is there (or gone) as it says. It returns what is wrong, or "".
func halfTransaction(entities []eventhub.Entity) string {
	seqs := map[string]int{}
	counters := map[string]diffData{}
	for _, e := range entities {
		var d diffData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return fmt.Sprintf("%s: %v", e.ID, err)
		}
		seqs[e.ID] = d.Seq
		if len(e.ID) > 8 && e.ID[len(e.ID)-8:] == "-counter" {
			counters[e.ID[:len(e.ID)-8]] = d
		}
	}
	for id, s := range seqs {
		p := id[:strings.IndexByte(id, '-')]
		if c, ok := counters[p]; !ok && s > 0 || ok && s > c.Seq {
			return fmt.Sprintf("%s at transaction %d, its publisher's counter at %d", id, s, c.Seq)
		}
	}
	for p, c := range counters {
		for id, what := range c.Writes {
			s, present := seqs[id]
			if what == "del" && present || what == "put" && (!present || s != c.Seq) {
				return fmt.Sprintf("%s's transaction %d: %s %s, the store has it %v at %d", p, c.Seq, what, id, present, s)
			}
		}
	}
	return ""
}

// tableDigest is the Store's digest of the table's rows.
func tableDigest(t *testing.T, pool *pgxpool.Pool, o string) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT type, id, data::text FROM diff_source WHERE org = $1`, o)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var typ, id, data string
		if err := rows.Scan(&typ, &id, &data); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, typ+"\t"+id+"\t"+data+"\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil))
}
