package eventhub_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// The tests run against a throwaway PostgreSQL with eventhub preloaded,
// which TestMain starts (initdb, pg_ctl) on a private socket directory and
// port and stops at the end; or against EVENTHUB_TEST_DSN, a database with
// the extension created, where they make roles and organizations of their
// own. PG_BINDIR names the server's programs (default: Debian's
// PostgreSQL 15). PostgreSQL refuses to run as root: run them as another
// user, or give EVENTHUB_TEST_DSN.
var testDSN string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testDSN = os.Getenv("EVENTHUB_TEST_DSN"); testDSN != "" {
		return m.Run()
	}
	if os.Geteuid() == 0 {
		fmt.Fprintln(os.Stderr, "eventhub tests: PostgreSQL refuses to run as root; run as another user or set EVENTHUB_TEST_DSN")
		return 1
	}
	s, err := newServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "eventhub tests:", err)
		return 1
	}
	defer s.stop()
	testDSN = s.dsn()
	return m.Run()
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err = f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// freePort is a TCP port nothing listens on now (the server listens on a
// Unix socket only; the port names the socket).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// connect opens a connection to the test server, closed at the test's end.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// org is an organization id of the test's own.
func org(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }

// testPool opens a pool on the test server, closed at the test's end.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.Connect(context.Background(), testDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
