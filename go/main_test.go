package eventhub_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
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
	stop, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "eventhub tests:", err)
		return 1
	}
	defer stop()
	return m.Run()
}

// startServer initializes and starts a server in a temporary directory,
// creates the extension, sets testDSN, and returns what stops it.
func startServer() (func(), error) {
	bindir := os.Getenv("PG_BINDIR")
	if bindir == "" {
		bindir = "/usr/lib/postgresql/15/bin"
	}
	dir, err := os.MkdirTemp("", "eventhub-go-test")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	conf := strings.Join([]string{
		"shared_preload_libraries = 'eventhub'",
		"listen_addresses = ''",
		"unix_socket_directories = '" + dir + "'",
		fmt.Sprintf("port = %d", port),
		"fsync = off",
		"max_connections = 50",
	}, "\n") + "\n"
	initdb := exec.Command(filepath.Join(bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale", "C.UTF-8")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := appendFile(filepath.Join(data, "postgresql.conf"), conf); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pgctl := filepath.Join(bindir, "pg_ctl")
	if out, err := exec.Command(pgctl, "-D", data, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %v\n%s%s", err, out, log)
	}
	stop := func() {
		exec.Command(pgctl, "-D", data, "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(dir)
	}
	testDSN = fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", dir, port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, testDSN)
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE EXTENSION eventhub")
		conn.Close(ctx)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("CREATE EXTENSION eventhub: %v", err)
	}
	return stop, nil
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
