package eventhub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgconn"
)

// The kinds of error eventhub's contract names (docs/protocol.md, Errors).
// An *Error matches one of them with errors.Is.
var (
	// ErrHistoryRemoved (SQLSTATE ZE001): events after the cursor were
	// removed by retention before they were read. Resync.
	ErrHistoryRemoved = errors.New("eventhub: the history after the cursor was removed")
	// ErrCursorAhead (ZE002): the cursor is above the organization's head,
	// as after a failover to a standby that lagged. Resync.
	ErrCursorAhead = errors.New("eventhub: the cursor is ahead of the organization's head")
	// ErrVersionMismatch (ZE003): the history at the cursor has another
	// version, as after a failover that rewrote it. Resync.
	ErrVersionMismatch = errors.New("eventhub: the history diverged at the cursor")
	// ErrIncompleteState (ZE004): the organization's latest events are not
	// its whole state, so no snapshot can be read.
	ErrIncompleteState = errors.New("eventhub: the organization's state is incomplete")
	// ErrSnapshotMoved (ZE005): the organization moved while a snapshot was
	// read outside one transaction. Read it again.
	ErrSnapshotMoved = errors.New("eventhub: the organization moved during the snapshot")
	// ErrPermission (42501): a missing privilege, on a function or on the
	// organization. No retry helps until an administrator grants it.
	ErrPermission = errors.New("eventhub: permission denied")
	// ErrInvalidInput (class 22, and the checks this package makes before
	// it sends anything): a bad argument.
	ErrInvalidInput = errors.New("eventhub: invalid input")
	// ErrCorrelationConflict (23505): the correlation id is used in the
	// organization by an event with other content.
	ErrCorrelationConflict = errors.New("eventhub: the correlation id is used by another event")
	// ErrReadOnly (25006): a write reached a read-only server, a hot
	// standby. Retry on the primary.
	ErrReadOnly = errors.New("eventhub: the server is read-only")
)

// Error is an error the server raised with a SQLSTATE of eventhub's
// contract. It matches its kind with errors.Is and unwraps to the
// *pgconn.PgError it came from.
type Error struct {
	// Kind is one of the package's sentinel errors.
	Kind error
	// Code is the SQLSTATE.
	Code string
	// Message and Detail are the server's.
	Message string
	Detail  string

	pg *pgconn.PgError
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s (SQLSTATE %s): %s", e.Message, e.Code, e.Detail)
	}
	return fmt.Sprintf("%s (SQLSTATE %s)", e.Message, e.Code)
}

// Is reports whether target is the error's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the server's *pgconn.PgError.
func (e *Error) Unwrap() error { return e.pg }

// kinds are the SQLSTATEs of the contract and their kinds; class 22 is
// ErrInvalidInput as a whole (kindOf).
var kinds = map[string]error{
	"ZE001": ErrHistoryRemoved,
	"ZE002": ErrCursorAhead,
	"ZE003": ErrVersionMismatch,
	"ZE004": ErrIncompleteState,
	"ZE005": ErrSnapshotMoved,
	"42501": ErrPermission,
	"23505": ErrCorrelationConflict,
	"25006": ErrReadOnly,
}

// kindOf is the kind of a SQLSTATE of the contract; nil for the others.
func kindOf(code string) error {
	if strings.HasPrefix(code, "22") {
		return ErrInvalidInput
	}
	return kinds[code]
}

// wrap turns a server error of the contract into an *Error; any other
// error is returned as it is.
func wrap(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err
	}
	kind := kindOf(pg.Code)
	if kind == nil {
		return err
	}
	return &Error{Kind: kind, Code: pg.Code, Message: pg.Message, Detail: pg.Detail, pg: pg}
}

// invalid is an ErrInvalidInput found before anything was sent.
func invalid(format string, args ...interface{}) error {
	return fmt.Errorf("%w: "+format, append([]interface{}{ErrInvalidInput}, args...)...)
}

// Retryable reports whether a retry may succeed where err failed: the
// connection was lost or refused, the server is shutting down or starting,
// a write reached a standby (retry on the primary), a statement or lock
// timeout, a serialization failure or deadlock, or the extension being
// updated or created again (docs/protocol.md, Errors). A publish retried
// with the same correlation id is published once. The caller's own
// context ending is not retryable.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "57P01", "57P02", "57P03", "57014", "55P03", "40001", "40P01", "55000",
			"3F000", "42P01", "42883", "25006":
			return true
		}
		return strings.HasPrefix(pg.Code, "08")
	}
	// No SQLSTATE: the connection broke or could not be made (pgconn marks
	// a request that never reached the server safe to retry).
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err)
}
