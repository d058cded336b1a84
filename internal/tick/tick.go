// Package tick runs periodic background work (lock pings, lease renewals,
// pruning) until its context ends, so every such loop stops its ticker and
// watches its context the same way.
package tick

import (
	"context"
	"time"
)

// Every calls f every d (d > 0), the first time d after the call, until ctx
// is done or f returns false, and returns then; f is not called once ctx is
// done, even when a tick is due at the same time. f runs on the caller's
// goroutine; a call that takes longer than d delays the next one (ticks are
// dropped, as with time.Ticker).
func Every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil || !f() {
				return
			}
		}
	}
}

// Sleep waits d, or until ctx is done, and returns nil after d or ctx's
// error (context.Canceled or context.DeadlineExceeded) if ctx ends first.
// A d of zero or less returns at once with ctx's error, if any.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
