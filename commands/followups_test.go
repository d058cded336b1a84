package commands

import (
	"testing"

	"github.com/retrysafe/booking/eventstore"
)

// TestFollowUpAhead: what a round of the process manager knows of the log
// after each event decides which drives and key statements are moot.
func TestFollowUpAhead(t *testing.T) {
	t.Parallel()
	ev := func(stream, typ string) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{Stream: stream, Type: typ}
	}
	ready := []eventstore.RecordedEvent{
		ev("order-a", "OrderPlaced"),           // 0: confirmed later (ahead)
		ev("order-b", "OrderPlaced"),           // 1: nothing later
		ev("order-c", "OrderPlaced"),           // 2: an attempt started later: not an end
		ev("order-c", "PaymentAttemptStarted"), // 3
		ev("order-d", "OrderConfirmed"),        // 4: cancel requested later
		ev("order-d", "OrderCancelRequested"),  // 5: the last drive of d
	}
	ahead := []eventstore.RecordedEvent{ev("order-a", "PaymentSucceeded"), ev("order-a", "OrderConfirmed")}
	a := newFollowUpAhead(ready, ahead)
	for i, want := range []laterOf{
		{drive: true, ends: true},
		{},
		{},
		{},
		{drive: true, ends: true},
		{},
	} {
		if got := a.at(i, ready[i].Stream); got != want {
			t.Errorf("event %d (%s %s): %+v, want %+v", i, ready[i].Stream, ready[i].Type, got, want)
		}
	}
}
