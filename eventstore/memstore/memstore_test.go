package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/memstore"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// noHoldOpen is a memstore whose appends cannot be held open.
type noHoldOpen struct{ *memstore.Store }

var _ storetest.HoldOpenUnsupported = noHoldOpen{}

// HoldOpenUnsupported implements storetest.HoldOpenUnsupported.
func (noHoldOpen) HoldOpenUnsupported() string {
	return "memstore has no transactions: an append takes its log position and becomes visible under one lock, so no reader can see a later position before an earlier one commits"
}

// hostClock is a memstore.Clock on the host's clock, standing in for the
// database clock.
type hostClock struct{}

// Now implements memstore.Clock.
func (hostClock) Now(context.Context) (time.Time, error) { return time.Now(), nil }

// TestConformance runs the eventstore conformance suite against memstore,
// one shared store as pgstore's cases share one database. With a clock set
// (SetClock) memstore reports it in AppendResult.Now, as pgstore does.
func TestConformance(t *testing.T) {
	m := memstore.New()
	m.SetClock(hostClock{})
	s := noHoldOpen{m}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return s })
}

// TestConformanceWithoutClock runs the suite on a memstore without a clock,
// which leaves AppendResult.Now zero.
func TestConformanceWithoutClock(t *testing.T) {
	s := noHoldOpen{memstore.New()}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return s }, storetest.WithoutClock())
}
