package eventhub

import (
	"net"
	"testing"

	"github.com/jackc/pgx/v4"
)

// The listening connection goes to the host the fetching one reached,
// with every attempt the connection string makes there: with sslmode
// prefer, TLS and then plain (a server that refuses TLS is reached by
// the second).
func TestSameServerKeepsEveryAttemptAtTheHost(t *testing.T) {
	config, err := pgx.ParseConfig("host=127.0.0.1,127.0.0.2 port=5001,5002 sslmode=prefer target_session_attrs=read-write")
	if err != nil {
		t.Fatal(err)
	}
	c := sameServerAddr(config, &net.TCPAddr{IP: net.ParseIP("127.0.0.2"), Port: 5002})
	if c.Host != "127.0.0.2" || c.Port != 5002 || c.TLSConfig == nil {
		t.Fatalf("first attempt %s:%d tls %v, want 127.0.0.2:5002 with TLS", c.Host, c.Port, c.TLSConfig != nil)
	}
	if len(c.Fallbacks) != 1 || c.Fallbacks[0].Host != "127.0.0.2" || c.Fallbacks[0].Port != 5002 || c.Fallbacks[0].TLSConfig != nil {
		t.Fatalf("fallbacks %+v, want 127.0.0.2:5002 without TLS", c.Fallbacks)
	}
	if c.ValidateConnect == nil {
		t.Fatal("target_session_attrs is no longer checked")
	}
	if config.Host != "127.0.0.1" || len(config.Fallbacks) != 3 {
		t.Fatalf("the watcher's own configuration changed: %s, %d fallbacks", config.Host, len(config.Fallbacks))
	}

	u := sameServerAddr(config, &net.UnixAddr{Name: "/run/pg/.s.PGSQL.5003", Net: "unix"})
	if u.Host != "/run/pg" || u.Port != 5003 || len(u.Fallbacks) != 0 {
		t.Fatalf("unix socket: %s:%d, %d fallbacks", u.Host, u.Port, len(u.Fallbacks))
	}
}
