package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// fannedOut is a fanout.Log over a Store that keeps the Store's test hook
// for holding an append open.
type fannedOut struct {
	*fanout.Log
	held heldStore
}

var _ storetest.HoldOpener = fannedOut{}

// HoldOpenAppend implements storetest.HoldOpener by the wrapped store's.
func (f fannedOut) HoldOpenAppend(ctx context.Context, stream string, expected eventstore.ExpectedRevision, events ...eventstore.EventData) (func(context.Context) (eventstore.AppendResult, error), func(), error) {
	return f.held.HoldOpenAppend(ctx, stream, expected, events...)
}

// TestStoreThroughFanout runs the conformance suite through one fanout.Log
// shared by every case (a window of 32 events), so every subscription of
// the suite — the open-transaction gap cases included — is served by one
// subscription of the store, from memory or by catching up.
func TestStoreThroughFanout(t *testing.T) {
	pool := newTestPool(t)
	s := heldStore{New(pool, WithAppendTimeout(time.Minute))}
	f := fannedOut{fanout.New(s, fanout.Config{MaxEvents: 32, BatchSize: 10}), s}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return f })
}
