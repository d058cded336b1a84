package commands

import (
	"context"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// The service clock of one request. Every decision uses the database clock
// (Clock), never the host's; but reading it is a round trip, and a booking
// decides a dozen times. So a request reads it once and carries the reading:
// later decisions take the reading plus the time elapsed since on the host's
// monotonic clock, the same way the payment send fence already holds a lease
// end. A reading is anchored at the moment its answer arrived, so the
// extrapolation never runs ahead of the database clock and trails it by no
// more than that answer's way back — less than a fresh SELECT now() trails
// by the time a decision uses it. The lease, expiry and fence decisions,
// and their margins, are thus what they were with a read before each.
//
// An append that reports the store's clock (eventstore.AppendResult.Now, on
// PostgreSQL the now() of the appending statement) renews the reading at no
// cost, when its whole round trip took at most maxAppendClockTrip (its now()
// is its transaction's start, so a slow append would trail); a store that
// reports none (KurrentDB, whose clock is not the service's) leaves it, and
// the request reads the clock at most once more per maxReadingAge. A reading
// is dropped at every fault point when test hooks are installed (a test may
// move its clock while a request is parked there), and is used for at most
// maxReadingAge, so a step of the database host's clock reaches a
// long-running payment within that time.

// maxReadingAge bounds how long one reading of the clock is extrapolated.
const maxReadingAge = time.Second

// maxAppendClockTrip is the longest round trip of an append whose reported
// clock renews a request's reading.
const maxAppendClockTrip = 50 * time.Millisecond

// clockReading is one request's reading of the service clock: db is the
// clock's value, at the host's monotonic instant the reading stands for.
// Safe for concurrent use (a request shares it with the payment it drives in
// the background).
type clockReading struct {
	mu sync.Mutex
	db time.Time
	at time.Time
}

type clockKey struct{}

// withClockReading returns ctx carrying a new, empty clock reading, unless
// ctx carries one already (a use case called from another keeps its
// caller's).
func withClockReading(ctx context.Context) context.Context {
	if _, ok := ctx.Value(clockKey{}).(*clockReading); ok {
		return ctx
	}
	return context.WithValue(ctx, clockKey{}, &clockReading{})
}

func readingOf(ctx context.Context) *clockReading {
	r, _ := ctx.Value(clockKey{}).(*clockReading)
	return r
}

// now returns the reading extrapolated to the present, or false when there
// is none young enough.
func (r *clockReading) now() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.db.IsZero() {
		return time.Time{}, false
	}
	age := time.Since(r.at)
	if age < 0 || age > maxReadingAge {
		return time.Time{}, false
	}
	return r.db.Add(age), true
}

// set records that the clock read db no later than the host instant at
// (when its answer arrived); a reading older than the one held is ignored.
func (r *clockReading) set(db, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.db.IsZero() && at.Before(r.at) {
		return
	}
	r.db, r.at = db.UTC(), at
}

func (r *clockReading) drop() {
	r.mu.Lock()
	r.db, r.at = time.Time{}, time.Time{}
	r.mu.Unlock()
}

// now returns the service clock: the request's reading extrapolated (see
// above), or a fresh read of the database clock, which then becomes the
// request's reading. A failed read is Unavailable (503), never a result.
func (h *Handler) now(ctx context.Context) (time.Time, error) {
	r := readingOf(ctx)
	if r != nil {
		if t, ok := r.now(); ok {
			return t, nil
		}
	}
	t, err := h.clock.Now(ctx)
	if err != nil {
		return time.Time{}, unavailable(err)
	}
	if r != nil {
		r.set(t, time.Now())
	}
	return t.UTC(), nil
}

// noteAppendClock renews ctx's reading from an append that reports the
// store's clock; sent is when that append was sent, and its answer arrived
// just now.
func noteAppendClock(ctx context.Context, res eventstore.AppendResult, sent time.Time) {
	if res.Now.IsZero() {
		return
	}
	at := time.Now()
	if at.Sub(sent) > maxAppendClockTrip {
		return
	}
	if r := readingOf(ctx); r != nil {
		r.set(res.Now, at)
	}
}
