package eventhub_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgconn"

	eventhub "github.com/eventhub/eventhub/go"
)

// Retryable draws docs/protocol.md's line, whatever wraps the error.
func TestRetryable(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("publishing: %w", &pgconn.PgError{Code: code}) }
	cases := []struct {
		err  error
		want bool
	}{
		{pg("57P01"), true}, {pg("57P03"), true}, {pg("08006"), true}, {pg("57014"), true},
		{pg("55P03"), true}, {pg("40001"), true}, {pg("40P01"), true}, {pg("55000"), true},
		{pg("3F000"), true}, {pg("42883"), true}, {pg("25006"), true},
		{io.ErrUnexpectedEOF, true},
		{pg("42501"), false}, {pg("28P01"), false}, {pg("3D000"), false}, {pg("22023"), false},
		{pg("23505"), false}, {pg("ZE001"), false},
		{context.Canceled, false}, {fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{errors.New("something else"), false}, {nil, false},
	}
	for _, c := range cases {
		if got := eventhub.Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
