package eventhub

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v4"
)

// Querier is what Publish and RegisterOrganization run their statement on:
// the caller's pgx.Tx (the event then commits or rolls back with the
// caller's own writes), a *pgx.Conn or a *pgxpool.Pool (the statement is
// then a transaction of its own).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row
}

// Action is what an event did to its entity.
type Action string

// The actions of docs/sql.md. A Delete is a tombstone: the entity is gone.
const (
	Create Action = "CREATE"
	Update Action = "UPDATE"
	Delete Action = "DELETE"
)

// Event is an event to publish.
type Event struct {
	// Organization, Type and EntityID name the entity; none may be empty.
	Organization string
	Type         string
	Action       Action
	EntityID     string
	// CorrelationID is the idempotency key within the organization: a
	// publish that repeats one with the same content returns the first
	// event's revision and changes nothing, one with other content fails
	// with ErrCorrelationConflict. Empty: the server generates one, so a
	// retry would publish the event twice; set it wherever a publish may be
	// retried.
	CorrelationID string
	// Data is the entity's state (for a Delete, whatever consumers want to
	// know of the deletion), marshalled with encoding/json; a
	// json.RawMessage or []byte holding JSON goes as it is. Nil sends {}.
	Data interface{}
	// Originated is when the change was made; zero: the transaction's
	// start. It is not part of the idempotency comparison.
	Originated time.Time
}

// Published is what a publish returns.
type Published struct {
	// Revision is the event's revision in its organization: the next
	// gapless one, or, for a repeated correlation id, the first event's.
	Revision int64
	// Replayed is true when the correlation id was already committed with
	// the same content: nothing was published, Revision is the first
	// event's. A retry after a commit whose answer was lost says so.
	Replayed bool
}

// The statements Publish sends, each prepared by pgx once per connection.
// Without a correlation id the server generates a new one, so the publish
// cannot be a replay: publish_event, which costs less than
// publish_event_result.
const (
	publishSQL         = `SELECT eventhub.publish_event($1, $2, $3, $4, $5, $6::jsonb, coalesce($7::timestamptz, pg_catalog.now())), false`
	publishReplayedSQL = `SELECT revision, replayed FROM eventhub.publish_event_result($1, $2, $3, $4, $5, $6::jsonb, coalesce($7::timestamptz, pg_catalog.now()))`
)

// Publish appends ev to its organization's history in q's transaction: the
// event gets the organization's next gapless revision and rotates its
// version id, and is delivered to watchers once that transaction commits.
// Bad input fails with ErrInvalidInput before anything is sent.
func Publish(ctx context.Context, q Querier, ev Event) (Published, error) {
	data, err := ev.payload()
	if err != nil {
		return Published{}, err
	}
	var correlation, originated interface{}
	sql := publishSQL
	if ev.CorrelationID != "" {
		correlation, sql = ev.CorrelationID, publishReplayedSQL
	}
	if !ev.Originated.IsZero() {
		originated = ev.Originated
	}
	var p Published
	err = q.QueryRow(ctx, sql, ev.Organization, ev.Type, string(ev.Action), ev.EntityID,
		correlation, data, originated).Scan(&p.Revision, &p.Replayed)
	if err != nil {
		return Published{}, wrap(err)
	}
	return p, nil
}

// payload checks ev and returns its data as JSON text.
func (ev Event) payload() (string, error) {
	switch {
	case ev.Organization == "":
		return "", invalid("an event needs an organization")
	case ev.Type == "":
		return "", invalid("an event needs a type")
	case ev.EntityID == "":
		return "", invalid("an event needs an entity id")
	case ev.Action != Create && ev.Action != Update && ev.Action != Delete:
		return "", invalid("action %q: CREATE, UPDATE or DELETE", string(ev.Action))
	}
	var raw []byte
	switch d := ev.Data.(type) {
	case nil:
		return "{}", nil
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		var err error
		if raw, err = json.Marshal(d); err != nil {
			return "", invalid("event data: %v", err)
		}
	}
	if !json.Valid(raw) {
		return "", invalid("event data is not JSON")
	}
	return string(raw), nil
}

// RegisterOrganization makes an organization known before its first event,
// at revision 0 (watchers following every organization then see it), and
// returns its version id. Idempotent: an organization that exists keeps
// its revision and version.
func RegisterOrganization(ctx context.Context, q Querier, organization string) (string, error) {
	if organization == "" {
		return "", invalid("an organization id may not be empty")
	}
	var version string
	if err := q.QueryRow(ctx, `SELECT eventhub.register_organization($1)::text`, organization).Scan(&version); err != nil {
		return "", wrap(err)
	}
	return version, nil
}
