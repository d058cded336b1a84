package kurrentdb_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
)

// TestAppendTooLarge: an append over the server's size limits is a
// permanent error matching eventstore.ErrAppendTooLarge, answered at once
// (never repeated, never an unknown outcome), and nothing is written;
// whether the adapter refuses it from the limits of the server's release
// (learned from its ServerFeatures) or the server refuses it.
func TestAppendTooLarge(t *testing.T) {
	blob := func(n int) eventstore.EventData {
		return eventstore.EventData{ID: uuid.NewString(), Type: "Big", Data: []byte(`"` + strings.Repeat("x", n-2) + `"`)}
	}
	cases := []struct {
		name   string
		opts   kurrentdbtest.Options
		events []eventstore.EventData
		want   string // in the error
	}{
		{"two 600 KiB events on 25.0 (1 MiB per append)", kurrentdbtest.Options{Version: "25.0"},
			[]eventstore.EventData{blob(600 << 10), blob(600 << 10)}, "over KurrentDB 25.0's limit of 1048576 bytes per append"},
		{"a 17 MiB event on 26.1 (16 MiB per event)", kurrentdbtest.Options{},
			[]eventstore.EventData{blob(17 << 20)}, "over KurrentDB 26.1's limit of 16777216 bytes per event"},
		{"an event over a limit only the server knows", kurrentdbtest.Options{MaxAppendEventSize: 1024},
			[]eventstore.EventData{blob(2048)}, "exceeds Maximum Append Event Size of 1024"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := kurrentdbtest.NewTest(t, c.opts)
			s := newStore(t, srv.URL())
			ctx := testContext(t)
			stream := "too-large-" + uuid.NewString()
			start := time.Now()
			_, err := s.Append(ctx, stream, eventstore.NoStream(), c.events...)
			took := time.Since(start)
			if !errors.Is(err, eventstore.ErrAppendTooLarge) {
				t.Fatalf("Append = %v, want an error matching eventstore.ErrAppendTooLarge", err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "outcome unknown") {
				t.Errorf("Append error %q, want it to say %q and not call the outcome unknown", err, c.want)
			}
			if took > 2*time.Second {
				t.Errorf("Append took %s, want an answer at once (no repeats)", took)
			}
			if _, err := s.ReadStream(ctx, stream, 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
				t.Errorf("ReadStream after the refusal = %v, want ErrStreamNotFound (nothing written)", err)
			}
		})
	}
	t.Run("a 5 MiB event on 26.1 is written", func(t *testing.T) {
		t.Parallel()
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		s := newStore(t, srv.URL())
		ctx := testContext(t)
		stream := "large-" + uuid.NewString()
		if _, err := s.Append(ctx, stream, eventstore.NoStream(), blob(5<<20)); err != nil {
			t.Fatalf("Append(5 MiB) = %v", err)
		}
		got, err := s.ReadStream(ctx, stream, 0, 0)
		if err != nil || len(got) != 1 || len(got[0].Data) != 5<<20 {
			t.Fatalf("ReadStream = %d events, %v; want the 5 MiB event", len(got), err)
		}
	})
}
