package httpapi

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// budget is the per-actor retry budget: a token bucket per actor
// (golang.org/x/time/rate), per process — with N replicas behind a proxy an
// actor gets up to N times it (docs/operations.md says how to size it). It
// is checked before the idempotency layer and never stored as an outcome.
//
// Bound and eviction: a bucket that has filled up again is dropped, since
// a full bucket is what a new one would be: dropping it changes no answer.
// So the buckets held are those of the actors that spent some of their
// budget within the last burst/rate seconds (2 s by default), plus those
// that have filled since the last sweep; a sweep runs when the count
// reaches twice what the last one left (at least sweepFloor), so its cost
// is spread over the buckets added since. Safe for concurrent use.
type budget struct {
	mu        sync.Mutex
	limit     rate.Limit
	burst     int
	buckets   map[string]*rate.Limiter
	nextSweep int
}

// sweepFloor is the fewest buckets at which budget sweeps full ones.
const sweepFloor = 1024

func newBudget(perSecond float64, burst int) *budget {
	return &budget{limit: rate.Limit(perSecond), burst: burst, buckets: map[string]*rate.Limiter{}, nextSweep: sweepFloor}
}

// reserve takes one token of actor's bucket; it returns 0 when allowed, or
// how long to wait before a retry would be.
// The token is taken under b.mu, so a sweep never drops a bucket between
// its lookup and its use (which would hand the actor a fresh one).
func (b *budget) reserve(actorID string) time.Duration {
	return b.reserveAt(actorID, time.Now())
}

func (b *budget) reserveAt(actorID string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.buckets[actorID]
	if l == nil {
		if len(b.buckets) >= b.nextSweep {
			b.sweepLocked(now)
		}
		l = rate.NewLimiter(b.limit, b.burst)
		b.buckets[actorID] = l
	}
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// sweepLocked drops every bucket that is full at now and sets when the
// next sweep runs. The caller holds b.mu.
func (b *budget) sweepLocked(now time.Time) {
	for id, l := range b.buckets {
		if l.TokensAt(now) >= float64(b.burst) {
			delete(b.buckets, id)
		}
	}
	b.nextSweep = max(sweepFloor, 2*len(b.buckets))
}

// size returns the number of buckets held.
func (b *budget) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}
