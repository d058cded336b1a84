package tick

import (
	"context"
	"testing"
	"time"
)

func TestEveryStopsWhenFReturnsFalse(t *testing.T) {
	calls := 0
	Every(t.Context(), time.Millisecond, func() bool {
		calls++
		return calls < 3
	})
	if calls != 3 {
		t.Errorf("Every called f %d times, want 3", calls)
	}
}

// TestEveryStopsWhenContextIsDone: f cancels the context on its second
// call and outlasts the period, so a tick is due with the context done;
// Every returns without a third call.
func TestEveryStopsWhenContextIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	Every(ctx, time.Millisecond, func() bool {
		calls++
		if calls == 2 {
			cancel()
			time.Sleep(5 * time.Millisecond) // a tick comes due meanwhile
		}
		return true
	})
	if calls != 2 {
		t.Errorf("Every called f %d times after its context was cancelled, want 2", calls)
	}
}

func TestSleepWaitsOrStopsWithTheContext(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
}
