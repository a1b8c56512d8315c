package eventhub_test

// Servers of a test's own (a restart, a standby promoted over a history
// it had not received) and pgbouncer in front of one: the real
// components, started by the tests, as the TAP suites start theirs.

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

func pgBindir() string {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// server is a PostgreSQL with eventhub preloaded, on a private socket
// directory and port.
type server struct {
	dir, data string
	port      int
}

func (s *server) dsn() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", s.dir, s.port)
}

func (s *server) pgctl(args ...string) error {
	args = append([]string{"-D", s.data, "-l", filepath.Join(s.dir, "log"), "-w"}, args...)
	if out, err := exec.Command(filepath.Join(pgBindir(), "pg_ctl"), args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pg_ctl %s: %v\n%s%s", strings.Join(args, " "), err, out, log)
	}
	return nil
}

func (s *server) conf(extra ...string) string {
	return strings.Join(append([]string{
		"shared_preload_libraries = 'eventhub'",
		"listen_addresses = ''",
		"unix_socket_directories = '" + s.dir + "'",
		fmt.Sprintf("port = %d", s.port),
		"fsync = off",
		"max_connections = 60",
		"wal_level = replica",
		"max_wal_senders = 4",
		"hot_standby = on",
	}, extra...), "\n") + "\n"
}

// newServer initializes and starts a server in a new temporary
// directory and creates the extension; stop stops it and removes it.
func newServer(extra ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "eventhub-go-test")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, data: filepath.Join(dir, "data")}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	initdb := exec.Command(filepath.Join(pgBindir(), "initdb"), "-D", s.data, "-U", "postgres", "-A", "trust",
		"--no-sync", "-E", "UTF8", "--locale", "C.UTF-8")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := appendFile(filepath.Join(s.data, "postgresql.conf"), s.conf(extra...)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.pgctl("start"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.exec("CREATE EXTENSION eventhub"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *server) exec(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func (s *server) stop() {
	s.pgctl("-m", "immediate", "stop")
	os.RemoveAll(s.dir)
}

// testServer is newServer for one test, stopped at its end.
func testServer(t *testing.T, extra ...string) *server {
	t.Helper()
	if os.Getenv("EVENTHUB_TEST_DSN") != "" {
		t.Skip("needs servers of its own (EVENTHUB_TEST_DSN is set)")
	}
	s, err := newServer(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// standby makes a streaming standby of s (pg_basebackup) and starts it.
func (s *server) standby(t *testing.T) *server {
	t.Helper()
	dir, err := os.MkdirTemp("", "eventhub-go-standby")
	if err != nil {
		t.Fatal(err)
	}
	sb := &server{dir: dir, data: filepath.Join(dir, "data")}
	t.Cleanup(sb.stop)
	if sb.port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	backup := exec.Command(filepath.Join(pgBindir(), "pg_basebackup"), "-D", sb.data, "-R", "-X", "stream",
		"-h", s.dir, "-p", fmt.Sprint(s.port), "-U", "postgres", "--no-sync")
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	if err := appendFile(filepath.Join(sb.data, "postgresql.conf"), sb.conf()); err != nil {
		t.Fatal(err)
	}
	if err := sb.pgctl("start"); err != nil {
		t.Fatal(err)
	}
	return sb
}

// pgbouncer starts pgbouncer in front of s in transaction pooling, and
// returns its connection string.
func (s *server) pgbouncer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/pgbouncer"); err != nil {
			t.Fatal("pgbouncer is not installed (scripts/deps.sh installs it)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
postgres = host=%s port=%d user=postgres dbname=postgres
[pgbouncer]
listen_addr =
unix_socket_dir = %s
listen_port = %d
auth_type = any
pool_mode = transaction
default_pool_size = 3
max_client_conn = 50
logfile = %s/pgbouncer.log
`, s.dir, s.port, dir, port, dir)
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	sock := filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", port))
	waitFor(t, 10*time.Second, "pgbouncer listens", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres", dir, port)
}
