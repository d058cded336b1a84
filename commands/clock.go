package commands

import (
	"context"
	"sync"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

// The service clock of one process (ARCHITECTURE.md, "Performance", "One
// clock reading per process"). Every decision uses the database clock
// (Clock), never the host's. The Handler keeps one reading of it for the
// whole process, requests and background jobs alike: a decision takes the
// reading plus the time elapsed since on the host's monotonic clock, as the
// payment send fence holds a lease end. A reading is anchored at the moment
// its answer arrived, so the extrapolation never runs ahead of the database
// clock and trails it by no more than that answer's way back — less than a
// read made before the decision trails by the time the decision uses it —
// so the lease, expiry and fence decisions keep their margins. Which
// request or job took the reading makes no difference: the database clock
// is one clock.
//
// An append that reports the store's clock (eventstore.AppendResult.Now, on
// PostgreSQL the now() of the appending statement) renews the reading at no
// cost when its whole round trip took at most maxAppendClockTrip (its now()
// is its transaction's start, so a slow append would trail); so does every
// read of the clock. A store that reports none (KurrentDB, whose clock is
// not the service's) leaves it, and the process reads the clock at most once
// per maxReadingAge while it decides, at most once per request. A reading is
// used for at most maxReadingAge, so a step of the database host's clock
// reaches every decision within that time.
//
// Tests: the reading is dropped at every fault point when the clock is one
// tests move (core.step), since a test may move it while a request is
// parked there; and such a clock (movableClock) counts its moves: a reading
// taken before a move, or whose read or append began before one, is never
// used, so a test that moves its clock between requests sees the move at
// once.

// maxReadingAge bounds how long one reading of the clock is extrapolated.
const maxReadingAge = time.Second

// maxAppendClockTrip is the longest round trip of an append whose reported
// clock renews the process's reading.
const maxAppendClockTrip = 50 * time.Millisecond

// movableClock is a Clock that can jump (a test's settable clock): Moves
// counts its jumps so far. The production clock (PostgreSQL's now()) does
// not implement it.
type movableClock interface {
	Moves() uint64
}

// clockReading is the process's reading of the service clock: db is the
// clock's value at the host's monotonic instant at. Bound: one value per
// Handler; eviction: replaced by any later answer, unused after
// maxReadingAge, dropped by drop or a clock move. Safe for concurrent use.
type clockReading struct {
	mu sync.Mutex
	db time.Time
	at time.Time
	// gen counts drops: a read or an append that began before a drop does
	// not renew the reading.
	gen uint64
	// moves is the clock's move count (movableClock) the reading was
	// taken under.
	moves uint64
}

// clockTicket is taken before a read of the clock or an append: the state
// of drops and clock moves the answer will belong to.
type clockTicket struct {
	gen, moves uint64
}

// ticket returns the ticket of a read or append that begins now, under the
// clock's current move count moves.
func (r *clockReading) ticket(moves uint64) clockTicket {
	r.mu.Lock()
	defer r.mu.Unlock()
	return clockTicket{gen: r.gen, moves: moves}
}

// now returns the reading extrapolated to the present, or false when there
// is none young enough, or it was taken under another move count than tk's.
func (r *clockReading) now(tk clockTicket) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.db.IsZero() || r.moves != tk.moves {
		return time.Time{}, false
	}
	age := time.Since(r.at)
	if age < 0 || age > maxReadingAge {
		return time.Time{}, false
	}
	return r.db.Add(age), true
}

// set records that the clock read db no later than the host instant at
// (when its answer arrived), for a read or append that began with ticket
// tk. It is ignored when a drop came since tk was taken, or when the
// reading held is of a later instant under the same move count.
func (r *clockReading) set(tk clockTicket, db, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tk.gen != r.gen {
		return
	}
	if !r.db.IsZero() && r.moves == tk.moves && at.Before(r.at) {
		return
	}
	r.db, r.at, r.moves = db.UTC(), at, tk.moves
}

// drop forgets the reading, and every read or append in flight.
func (r *clockReading) drop() {
	r.mu.Lock()
	r.db, r.at = time.Time{}, time.Time{}
	r.gen++
	r.mu.Unlock()
}

// clockTicket returns the ticket of a clock read or an append beginning now.
func (h *core) clockTicket() clockTicket {
	var moves uint64
	if m, ok := h.clock.(movableClock); ok {
		moves = m.Moves()
	}
	return h.reading.ticket(moves)
}

// now returns the service clock: the process's reading extrapolated (see
// above), or a fresh read of the database clock, which then becomes the
// reading. A failed read is Unavailable (503), never a result.
func (h *core) now(ctx context.Context) (time.Time, error) {
	tk := h.clockTicket()
	if t, ok := h.reading.now(tk); ok {
		return t, nil
	}
	t, err := h.clock.Now(ctx)
	if err != nil {
		return time.Time{}, unavailable(err)
	}
	h.reading.set(tk, t, time.Now())
	return t.UTC(), nil
}

// noteAppendClock renews the reading from an append that reports the
// store's clock; tk was taken and sent noted right before the append was
// sent, and its answer arrived just now.
func (h *core) noteAppendClock(tk clockTicket, res eventstore.AppendResult, sent time.Time) {
	if res.Now.IsZero() {
		return
	}
	at := time.Now()
	if at.Sub(sent) > maxAppendClockTrip {
		return
	}
	h.reading.set(tk, res.Now, at)
}
