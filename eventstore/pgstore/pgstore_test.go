package pgstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/storetest"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// heldStore adds the conformance suite's test hook to a Store: it runs an
// append in an explicit transaction and leaves it open.
type heldStore struct{ *Store }

var _ storetest.HoldOpener = heldStore{}

// HoldOpenAppend implements storetest.HoldOpener.
func (h heldStore) HoldOpenAppend(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (commit func(context.Context) (eventstore.AppendResult, error), abort func(), err error) {
	args, err := newAppendArgs(stream, expected, events)
	if err != nil {
		return nil, nil, err
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, _, err := h.appendOnce(ctx, tx, args, true)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	var once sync.Once
	commit = func(ctx context.Context) (eventstore.AppendResult, error) {
		err := errors.New("pgstore: held append already ended")
		once.Do(func() { err = tx.Commit(ctx) })
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		h.appended.notify()
		return res, nil
	}
	abort = func() {
		once.Do(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	}
	return commit, abort, nil
}

var _ storetest.MultiHoldOpener = heldStore{}

// HoldOpenAppendMulti implements storetest.MultiHoldOpener.
func (h heldStore) HoldOpenAppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (commit func(context.Context) ([]eventstore.AppendResult, error), abort func(), err error) {
	args, err := newMultiArgs(appends)
	if err != nil {
		return nil, nil, err
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	res, _, err := h.appendMultiOnce(ctx, tx, args, nil, true)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	var once sync.Once
	commit = func(ctx context.Context) ([]eventstore.AppendResult, error) {
		err := errors.New("pgstore: held append already ended")
		once.Do(func() { err = tx.Commit(ctx) })
		if err != nil {
			return nil, err
		}
		h.appended.notify()
		return res, nil
	}
	abort = func() {
		once.Do(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	}
	return commit, abort, nil
}

// newTestPool returns a pool on a fresh, migrated database.
func newTestPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return pgtest.NewPool(tb, pgtest.NewDatabase(tb))
}

func TestStore(t *testing.T) {
	pool := newTestPool(t)
	// The suite's cases run in parallel and may meet a fully busy machine:
	// a bound of 1 min per append (not the default 5 s, tested on its own
	// below) keeps a slow append from passing for a failed one.
	storetest.Run(t, func(t *testing.T) eventstore.Store { return heldStore{New(pool, WithAppendTimeout(time.Minute))} })
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func event(typ string) eventstore.EventData {
	return eventstore.EventData{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, Data: []byte(`{"a":1}`)}
}

func TestPostgres(t *testing.T) {
	pool := newTestPool(t)
	s := New(pool)

	t.Run("an event id stored in another stream is a conflict that names the stream", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		first, second := "ids-"+uuid.NewString(), "ids-"+uuid.NewString()
		e := event("Shared")
		if _, err := s.Append(ctx, first, eventstore.NoStream(), e); err != nil {
			t.Fatalf("Append(%s, no_stream) = %v, want nil", first, err)
		}
		for _, expected := range []eventstore.ExpectedRevision{eventstore.NoStream(), eventstore.Any()} {
			_, err := s.Append(ctx, second, expected, e)
			var conflict *eventstore.RevisionConflictError
			if !errors.As(err, &conflict) || conflict.Actual != -1 || conflict.Stream != second {
				t.Fatalf("Append(%s, %s) = %v, want a *RevisionConflictError with Actual -1", second, expected, err)
			}
			if !strings.Contains(err.Error(), first) {
				t.Errorf("Append(%s, %s) = %q, want the message to name %s", second, expected, err, first)
			}
		}
		if _, err := s.ReadStream(ctx, second, 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Errorf("ReadStream(%s) = %v, want ErrStreamNotFound", second, err)
		}
	})

	t.Run("one event id raced into many streams lands in exactly one", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		const streams = 8
		e := event("Raced")
		errs := make([]error, streams)
		names := make([]string, streams)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range streams {
			names[i] = "race-" + uuid.NewString()
			wg.Go(func() {
				<-start
				_, errs[i] = s.Append(ctx, names[i], eventstore.Any(), e)
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		for i, err := range errs {
			var conflict *eventstore.RevisionConflictError
			switch {
			case err == nil:
				winners++
			case errors.As(err, &conflict) && conflict.Actual == -1:
			default:
				t.Errorf("Append(%s, any) = %v, want nil or a *RevisionConflictError with Actual -1", names[i], err)
			}
		}
		if winners != 1 {
			t.Errorf("Append of one id to %d streams succeeded %d times, want 1", streams, winners)
		}
	})

	t.Run("invalid appends are refused without a revision conflict", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		good := event("Good")
		tests := []struct {
			name   string
			stream string
			events []eventstore.EventData
		}{
			{"no events", "invalid-" + uuid.NewString(), nil},
			{"an empty stream name", "", []eventstore.EventData{good}},
			{"an id that is not a UUID", "invalid-" + uuid.NewString(), []eventstore.EventData{{ID: "order-1", Type: "T"}}},
			{"an id twice in one batch", "invalid-" + uuid.NewString(), []eventstore.EventData{good, good}},
			{"an empty type", "invalid-" + uuid.NewString(), []eventstore.EventData{{ID: uuid.NewString()}}},
		}
		for _, tt := range tests {
			_, err := s.Append(ctx, tt.stream, eventstore.Any(), tt.events...)
			if err == nil || errors.Is(err, eventstore.ErrWrongExpectedRevision) {
				t.Errorf("Append with %s = %v, want a validation error", tt.name, err)
			}
		}
	})

	t.Run("read all refuses a limit below one", func(t *testing.T) {
		t.Parallel()
		if _, err := s.ReadAll(testContext(t), eventstore.Position{}, 0); err == nil {
			t.Errorf("ReadAll(0/0, 0) = nil error, want an error")
		}
	})

	t.Run("an append that waits too long for its stream times out as a deadline", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		stream := "timeout-" + uuid.NewString()
		_, abort, err := heldStore{s}.HoldOpenAppend(ctx, stream, eventstore.NoStream(), event("Held"))
		if err != nil {
			t.Fatalf("HoldOpenAppend(%s) = %v, want nil", stream, err)
		}
		defer abort()
		quick := New(pool, WithAppendTimeout(100*time.Millisecond))
		began := time.Now()
		_, err = quick.Append(ctx, stream, eventstore.Any(), event("Blocked"))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, eventstore.ErrWrongExpectedRevision) {
			t.Errorf("Append(%s) behind a held append = %v, want an error matching context.DeadlineExceeded", stream, err)
		}
		if waited := time.Since(began); waited > 5*time.Second {
			t.Errorf("Append(%s) behind a held append took %v, want about 100ms", stream, waited)
		}
	})

	t.Run("horizon lag counts committed events held back by an older transaction", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		_, abort, err := heldStore{s}.HoldOpenAppend(ctx, "lag-"+uuid.NewString(), eventstore.NoStream(), event("Held"))
		if err != nil {
			t.Fatalf("HoldOpenAppend = %v, want nil", err)
		}
		defer abort()
		if _, err := s.Append(ctx, "lag-"+uuid.NewString(), eventstore.NoStream(), event("Later"), event("Later")); err != nil {
			t.Fatalf("Append = %v, want nil", err)
		}
		lag, err := s.HorizonLag(ctx)
		if err != nil {
			t.Fatalf("HorizonLag() = %v, want nil", err)
		}
		if lag.Events < 2 || lag.Age <= 0 {
			t.Errorf("HorizonLag() = %+v, want at least 2 events and a positive age", lag)
		}
	})

	t.Run("read stream returns an empty page past the end of a live stream", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		stream := "page-" + uuid.NewString()
		if _, err := s.Append(ctx, stream, eventstore.NoStream(), event("One")); err != nil {
			t.Fatalf("Append(%s) = %v, want nil", stream, err)
		}
		got, err := s.ReadStream(ctx, stream, 1<<63, 10)
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("ReadStream(%s, 2^63, 10) = %v, %v, want an empty slice", stream, got, err)
		}
	})
}
