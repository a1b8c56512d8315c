package eventhub

// The events a notification on channel eventhub_events may carry
// (docs/protocol.md, "Notifications that carry their events"): base64 of
// a 12-byte nonce, the AES-256-GCM ciphertext and its tag, under the
// organization's data key, with the token's 16 bytes and the version's 16
// as additional data. A watcher delivers them without a fetch when they
// come from the notifier's process and follow its cursor.

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

const sealedFormat = 1

// sealedNote is a notification with events, as the listener received it.
type sealedNote struct {
	token, version, events string
}

// opened is what a sealed notification holds.
type opened struct {
	previous    string // the version before the first event; "" when there is none
	hasPrevious bool
	rows        []row
}

var errSealed = errors.New("eventhub: a notification's events do not open")

// uuidBytes parses a UUID in its text form.
func uuidBytes(s string) ([]byte, error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return nil, errSealed
	}
	return hex.DecodeString(s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:])
}

func uuidText(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// sealKey is an organization's data key, ready to open with.
type sealKey struct {
	raw  []byte
	aead cipher.AEAD
}

// newSealKey prepares a data key, or returns prev if it is the same key.
func newSealKey(raw []byte, prev *sealKey) *sealKey {
	if prev != nil && string(prev.raw) == string(raw) {
		return prev
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil
	}
	return &sealKey{raw: raw, aead: gcm}
}

// openSealed opens a notification's events with the organization's key.
func openSealed(key *sealKey, n sealedNote) (*opened, error) {
	raw, err := base64.StdEncoding.DecodeString(n.events)
	if err != nil || len(raw) < 12+16 {
		return nil, errSealed
	}
	token, err := hex.DecodeString(n.token)
	if err != nil || len(token) != 16 {
		return nil, errSealed
	}
	version, err := uuidBytes(n.version)
	if err != nil {
		return nil, errSealed
	}
	plain, err := key.aead.Open(nil, raw[:12], raw[12:], append(token, version...))
	if err != nil {
		return nil, errSealed
	}
	return parseSealed(plain)
}

// reader reads the plaintext; a read past its end sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return make([]byte, n)
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() byte    { return r.bytes(1)[0] }
func (r *reader) u16() uint16 { return binary.BigEndian.Uint16(r.bytes(2)) }
func (r *reader) i64() int64  { return int64(binary.BigEndian.Uint64(r.bytes(8))) }
func (r *reader) text() string {
	n := binary.BigEndian.Uint32(r.bytes(4))
	if n > uint32(len(r.b)) {
		r.bad = true
		return ""
	}
	return string(r.bytes(int(n)))
}
func (r *reader) time() time.Time { return time.UnixMicro(r.i64()) }

func parseSealed(plain []byte) (*opened, error) {
	r := &reader{b: plain}
	if r.u8() != sealedFormat {
		return nil, fmt.Errorf("%w: unknown format", errSealed)
	}
	r.i64() // sent_at
	o := &opened{}
	if r.u8() == 1 {
		o.hasPrevious, o.previous = true, uuidText(r.bytes(16))
	}
	count := int(r.u16())
	for i := 0; i < count && !r.bad; i++ {
		var w row
		w.Revision = r.i64()
		r.i64() // transaction_first_revision: the events end at a transaction's end
		w.end = r.u8() == 1
		w.VersionID = uuidText(r.bytes(16))
		w.Processed, w.Originated = r.time(), r.time()
		w.Type = r.text()
		w.Action = Action(r.text())
		w.EntityID, w.CorrelationID = r.text(), r.text()
		w.Data = []byte(r.text())
		o.rows = append(o.rows, w)
	}
	if r.bad || count == 0 || len(r.b) != 0 || !o.rows[len(o.rows)-1].end {
		return nil, errSealed
	}
	for i := 1; i < len(o.rows); i++ {
		if o.rows[i].Revision != o.rows[i-1].Revision+1 {
			return nil, errSealed
		}
	}
	return o, nil
}
