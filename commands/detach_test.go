package commands

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type detachKey struct{}

// TestDetachIsWithoutCancelUntilAbandon: a detached context keeps its
// parent's values, has no deadline and is not ended by its parent; its
// children keep their own deadlines; Abandon ends it and every child with
// context.Canceled. Children registered on it start no goroutine of their
// own (detached.AfterFunc), so the request path pays nothing for it.
func TestDetachIsWithoutCancelUntilAbandon(t *testing.T) {
	t.Parallel()
	h := New(Config{}, newMemStore(), newFakeClock(payT0), nil, newTestRegistry(), nil)
	parent, cancelParent := context.WithTimeout(context.WithValue(context.Background(), detachKey{}, "v"), time.Hour)
	d := h.detach(parent)
	cancelParent()

	if got := d.Value(detachKey{}); got != "v" {
		t.Errorf("Value = %v, want the parent's v", got)
	}
	if dl, ok := d.Deadline(); ok {
		t.Errorf("Deadline = %s, want none (the parent's deadline does not reach it)", dl)
	}
	if err := d.Err(); err != nil {
		t.Fatalf("Err = %v after the parent was cancelled, want nil", err)
	}
	select {
	case <-d.Done():
		t.Fatal("Done is closed after the parent was cancelled")
	default:
	}
	short, cancelShort := context.WithTimeout(d, time.Millisecond)
	defer cancelShort()
	<-short.Done()
	if !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Errorf("a child's own deadline: Err = %v, want DeadlineExceeded", short.Err())
	}

	// Children on a detached context start no goroutine each (a context
	// whose Done is not a cancelCtx's and that has no AfterFunc would).
	before := runtime.NumGoroutine()
	const n = 200
	children := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for i := range children {
		children[i], cancels[i] = context.WithTimeout(d, time.Hour)
	}
	if after := runtime.NumGoroutine(); after-before >= n/2 {
		t.Errorf("%d live children of a detached context added %d goroutines, want about none", n, after-before)
	}

	h.Abandon()
	h.Abandon() // safe to call again
	<-d.Done()
	if !errors.Is(d.Err(), context.Canceled) || !errors.Is(context.Cause(d), context.Canceled) {
		t.Errorf("after Abandon: Err = %v, Cause = %v, want Canceled", d.Err(), context.Cause(d))
	}
	for i, c := range children {
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("child %d not ended 30 s after Abandon", i)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Errorf("child %d: Err = %v, want Canceled", i, c.Err())
		}
		cancels[i]()
	}
	if err := h.detach(context.Background()).Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("a context detached after Abandon: Err = %v, want Canceled", err)
	}
}
