package eventhub_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	eventhub "github.com/eventhub/eventhub/go"
)

// Events that notifications carry are delivered without a fetch, and
// the store still equals the database.
func TestWatcherSealedEvents(t *testing.T) {
	conn := connect(t, testDSN)
	o := org(t)
	w, r := synced(t, eventhub.Config{Organizations: []string{o}})
	for i := 0; i < 10; i++ {
		rev := publishTx(t, conn, ev(o, "a", eventhub.Update, `{"i": 1}`), ev(o, "b", eventhub.Update, `{"i": 2}`))
		waitFor(t, 10*time.Second, "delivered", func() bool { c, _ := r.store.Cursor(o); return c.Revision == rev })
	}
	converges(t, testDSN, r, o)
	if st := w.Stats(); st.SealedEvents == 0 || st.Transactions != 10 {
		t.Fatalf("stats %+v: want events from the notifications", st)
	}
}

// seal is the notifier's sealing, for a forger who holds the data key.
func seal(t *testing.T, key []byte, token, version string, revision int64, previous string, entity string) string {
	var p bytes.Buffer
	w := func(v interface{}) { binary.Write(&p, binary.BigEndian, v) }
	uuid := func(s string) []byte { b, _ := hex.DecodeString(strings.ReplaceAll(s, "-", "")); return b }
	text := func(s string) { w(uint32(len(s))); p.WriteString(s) }
	w(uint8(1))
	w(time.Now().UnixMicro())
	w(uint8(1))
	p.Write(uuid(previous))
	w(uint16(1))
	w(revision)
	w(revision)
	w(uint8(1))
	p.Write(uuid(version))
	w(time.Now().UnixMicro())
	w(time.Now().UnixMicro())
	text("API")
	text("CREATE")
	text(entity)
	text("forged")
	text(`{"forged": true}`)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, 12)
	rand.Read(nonce)
	aad := append(uuid(token), uuid(version)...)
	return base64.StdEncoding.EncodeToString(append(nonce, gcm.Seal(nil, nonce, p.Bytes(), aad)...))
}

// A role that may read the organization holds its data key, and anyone
// may NOTIFY: events sealed by anyone but the notifier are a wake-up,
// never delivered.
func TestWatcherForgedSealedEvents(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, testDSN)
	o := org(t)
	publishTx(t, conn, ev(o, "a", eventhub.Create, `{}`))
	w, r := synced(t, eventhub.Config{Organizations: []string{o}})
	var token string
	var key []byte
	if err := conn.QueryRow(ctx, `SELECT eventhub.notification_token($1), eventhub.notification_data_key($1)`, o).Scan(&token, &key); err != nil {
		t.Fatal(err)
	}
	cur, _ := r.store.Cursor(o)
	version := "0b7e3c4e-0000-4000-8000-000000000001"
	payload, _ := json.Marshal(map[string]string{"notification_token": token, "version_id": version,
		"events": seal(t, key, token, version, cur.Revision+1, cur.VersionID, "forged")})
	before := w.Stats().Notifications
	if _, err := conn.Exec(ctx, `SELECT pg_notify('eventhub_events', $1)`, string(payload)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the forged notification arrives", func() bool { return w.Stats().Notifications > before })
	rev := publishTx(t, conn, ev(o, "b", eventhub.Create, `{}`))
	waitFor(t, 10*time.Second, "the real event", func() bool { c, _ := r.store.Cursor(o); return c.Revision == rev })
	if _, forged := r.store.Get(o, "API", "forged"); forged {
		t.Fatal("the watcher delivered events a forger sealed")
	}
	converges(t, testDSN, r, o)
}
