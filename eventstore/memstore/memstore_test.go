package memstore_test

import (
	"testing"

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

// TestConformance runs the eventstore conformance suite against memstore,
// one shared store as pgstore's cases share one database.
func TestConformance(t *testing.T) {
	s := noHoldOpen{memstore.New()}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return s })
}
