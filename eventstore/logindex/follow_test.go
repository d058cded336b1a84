package logindex_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/domain/domaintest"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/logindex"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// followSeeds is how many random logs TestFollowMatchesCalls runs per
// backend (go test -args -follow.seeds=N for a longer search).
var followSeeds = flag.Int("follow.seeds", 2, "random logs per backend in TestFollowMatchesCalls")

// switchGate is a Subscriber over a log reader that passes batches only
// while it is open (shut, a delivery waits) and records the position
// Follow's fn applied up to in the current subscription.
type switchGate struct {
	sub        logindex.Subscriber
	mu         sync.Mutex
	pass       chan struct{} // closed while open
	open       bool
	subscribed bool
	last       eventstore.Position
}

func newSwitchGate(sub logindex.Subscriber) *switchGate {
	g := &switchGate{sub: sub, pass: make(chan struct{}), open: true}
	close(g.pass)
	return g
}

// set opens or shuts the gate.
func (g *switchGate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case open && !g.open:
		close(g.pass)
	case !open && g.open:
		g.pass = make(chan struct{})
	}
	g.open = open
}

// reset forgets the subscription (a follower is about to start).
func (g *switchGate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.subscribed, g.last = false, eventstore.Position{}
}

func (g *switchGate) SubscribeAll(ctx context.Context, after eventstore.Position, fn func(context.Context, []eventstore.RecordedEvent) error) error {
	g.mu.Lock()
	g.subscribed, g.last = true, after
	g.mu.Unlock()
	return g.sub.SubscribeAll(ctx, after, func(ctx context.Context, batch []eventstore.RecordedEvent) error {
		g.mu.Lock()
		pass := g.pass
		g.mu.Unlock()
		select {
		case <-pass:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := fn(ctx, batch)
		g.mu.Lock()
		g.last = batch[len(batch)-1].Position
		g.mu.Unlock()
		return err
	})
}

// reached reports an error until the subscription applied up to pos.
func (g *switchGate) reached(pos eventstore.Position) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.subscribed || g.last.Less(pos) {
		return fmt.Errorf("the follower applied up to %s, not %s yet", g.last, pos)
	}
	return nil
}

// following is an Index with its follower running.
type following struct {
	ix     *logindex.Index
	cancel context.CancelFunc
	done   chan error
}

// lastReadable returns the position of the last event ReadAll returns.
func lastReadable(t *testing.T, s eventstore.Store) eventstore.Position {
	t.Helper()
	var pos eventstore.Position
	for {
		evs, err := s.ReadAll(context.Background(), pos, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return pos
		}
		pos = evs[len(evs)-1].Position
	}
}

// TestFollowMatchesCalls runs random logs (orders, intents old and new,
// claims) with two indexes side by side: one whose follower applies the
// log through the shared log reader (a small window, so the follower also
// catches up from the store; delivery held back at random, the follower
// restarted at random) and one that reads the log only at its calls. After
// every round both are asked the same calls — Pending, Tracked,
// EventCount, PurgeStreams (in random order, so either truncates first),
// graceful restarts from their snapshots (Save, then a new index) — and
// answer alike, and Pending matches an index that reads the whole log
// once. Half the seeds also restart both from their last periodic snapshot
// without Save (a crash): from then on only the answers that do not depend
// on when a snapshot was taken are compared (Pending, the orders tracked).
// Every few rounds the test lets the follower apply the whole log and
// checks that a call then reads no event from the store.
func TestFollowMatchesCalls(t *testing.T) {
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for seed := range *followSeeds {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { followMatchesCalls(t, newStore(t), uint64(seed), nil) })
			}
		})
	}
	// On the KurrentDB double, with faults between rounds: every
	// connection dropped (the follower's subscription resubscribes; a call
	// may fail and is repeated) and system events written, which neither
	// ReadAll nor the subscription hands out.
	t.Run("kurrentdb-faults", func(t *testing.T) {
		t.Parallel()
		for seed := range *followSeeds {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				srv, s := startDouble(t)
				followMatchesCalls(t, s, uint64(seed), func(r *rand.Rand) {
					if r.IntN(2) == 0 {
						srv.DropConnections()
					}
					for range r.IntN(3) {
						if _, err := srv.AppendSystemEvent("$stats-test", "$statsCollected", []byte(`{}`)); err != nil {
							t.Fatal(err)
						}
					}
				})
			})
		}
	})
}

// followRun is one random log of TestFollowMatchesCalls: the store, the
// two indexes (f follows the log reader through gate, plain only reads at
// its calls) and what the log holds so far.
type followRun struct {
	t                       *testing.T
	s                       eventstore.Store
	r                       *rand.Rand
	at                      time.Time
	c                       *clock
	counting                *countingStore
	followSnaps, plainSnaps *memSnapshots
	every                   int
	gate                    *switchGate
	f                       *following
	plain                   *logindex.Index
	ids                     []string
	revs                    map[string]int
	intents                 []string
}

// followMatchesCalls runs one random log of TestFollowMatchesCalls on s;
// fault, if not nil, is called at random between appends.
func followMatchesCalls(t *testing.T, s eventstore.Store, seed uint64, fault func(r *rand.Rand)) {
	r := rand.New(rand.NewPCG(seed, 47))
	at := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	run := &followRun{t: t, s: s, r: r, at: at, c: &clock{now: at}, counting: &countingStore{Store: s},
		followSnaps: &memSnapshots{}, plainSnaps: &memSnapshots{}, every: 1 + r.IntN(20),
		gate: newSwitchGate(fanout.New(s, fanout.Config{BatchSize: 1 + r.IntN(5), MaxEvents: 4 + r.IntN(30), RetryMin: time.Millisecond})),
		ids:  make([]string, 12), revs: map[string]int{}}
	for i := range run.ids {
		run.ids[i] = fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
	}
	run.f, run.plain = run.start(run.newFollow()), run.newPlain()
	defer func() { run.stop(run.f) }()
	loose := false // a crash restart happened: snapshots of different positions were loaded
	for round := range 50 {
		run.gate.set(r.IntN(3) != 0)
		for range 1 + r.IntN(8) {
			run.appendRandom()
			if fault != nil && r.IntN(3) == 0 {
				fault(r)
			}
		}
		readable(t, s)
		if run.step(round, seed%2 == 1) {
			loose = true
		}
		compareIndexes(t, round, s, run.c, run.f.ix, run.plain, loose)
	}
}

// newFollow returns a following index (on the counting store) that loads
// its last snapshot.
func (run *followRun) newFollow() *logindex.Index {
	return logindex.New(run.counting, run.c, domaintest.OrderRule(), domain.CategoryIntent, logindex.WithSnapshots(run.followSnaps, run.every))
}

// newPlain returns a call-only index that loads its last snapshot.
func (run *followRun) newPlain() *logindex.Index {
	return logindex.New(run.s, run.c, domaintest.OrderRule(), domain.CategoryIntent, logindex.WithSnapshots(run.plainSnaps, run.every))
}

// start runs ix's follower through the gate.
func (run *followRun) start(ix *logindex.Index) *following {
	run.gate.reset()
	fctx, cancel := context.WithCancel(context.Background())
	f := &following{ix: ix, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- ix.Follow(fctx, run.gate) }()
	return f
}

// stop ends f's follower and checks it returned context.Canceled.
func (run *followRun) stop(f *following) {
	f.cancel()
	if err := <-f.done; !errors.Is(err, context.Canceled) {
		run.t.Fatalf("Follow returned %v, want context.Canceled", err)
	}
}

// appendRandom appends one or two events of an order, an intent (new, or
// on an intent stream already written) that occurred two hours ago or now,
// or a claim.
func (run *followRun) appendRandom() {
	r := run.r
	var stream string
	var data []eventstore.EventData
	encode := func(e domain.Event, occurred time.Time) {
		d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), e, eventstore.Metadata{OccurredAt: occurred})
		if err != nil {
			run.t.Fatal(err)
		}
		data = append(data, d)
	}
	switch k := r.IntN(10); {
	case k < 6:
		id := run.ids[r.IntN(len(run.ids))]
		stream = domain.OrderStream(id)
		for range 1 + r.IntN(2) {
			encode(domaintest.RandomOrderEvent(r, id, run.revs[id]), run.at)
			run.revs[id]++
		}
	case k < 9:
		stream = domain.CategoryIntent + uuid.NewString()
		if len(run.intents) > 0 && r.IntN(2) == 0 {
			stream = run.intents[r.IntN(len(run.intents))]
		} else {
			run.intents = append(run.intents, stream)
		}
		encode(domain.OrderClaimed{}, []time.Time{run.at.Add(-2 * time.Hour), run.at}[r.IntN(2)])
	default:
		stream = domain.ClaimStream(run.ids[r.IntN(len(run.ids))])
		encode(domain.OrderClaimed{}, run.at)
	}
	if _, err := run.s.Append(context.Background(), stream, eventstore.Any(), data...); err != nil {
		run.t.Fatal(err)
	}
}

// step does one random thing to both indexes after a round's appends: a
// graceful restart, a crash restart (if crashes; it reports that it made
// one), the follower's restart, a purge, or the follower applying the
// whole log before a call that must then read none of it; or nothing.
func (run *followRun) step(round int, crashes bool) (crashed bool) {
	t, ctx, r := run.t, context.Background(), run.r
	switch k := r.IntN(12); {
	case k == 0: // a graceful restart of both
		for _, ix := range []*logindex.Index{run.f.ix, run.plain} {
			if err := ix.Save(ctx); err != nil {
				t.Fatal(err)
			}
		}
		run.stop(run.f)
		run.f, run.plain = run.start(run.newFollow()), run.newPlain()
	case k == 1 && crashes: // both restart from their last periodic snapshot
		run.stop(run.f)
		run.f, run.plain = run.start(run.newFollow()), run.newPlain()
		return true
	case k == 2: // the follower alone restarts
		run.stop(run.f)
		run.f = run.start(run.f.ix)
	case k < 6: // the purge, by either index first
		older := []time.Duration{time.Hour, -time.Hour}[r.IntN(2)]
		order := []*logindex.Index{run.f.ix, run.plain}
		if r.IntN(2) == 0 {
			order[0], order[1] = order[1], order[0]
		}
		// Both read the log first: on a backend whose ReadAll leaves out
		// truncated events, an index that reads them only after the
		// other's purge never counts them, follower or not.
		for _, ix := range order {
			if _, err := ix.EventCount(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, ix := range order {
			if _, err := ix.PurgeStreams(ctx, domain.CategoryIntent, older, 1000); err != nil {
				t.Fatalf("round %d: PurgeStreams: %v", round, err)
			}
		}
	case k < 9: // the follower applies the whole log, then a call reads none of it
		run.gate.set(true)
		head := lastReadable(t, run.s)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		storetest.Eventually(t, wctx, func() error { return run.gate.reached(head) })
		before := run.counting.events()
		if _, err := run.f.ix.Pending(ctx, "", 1000); err != nil {
			t.Fatal(err)
		}
		if n := run.counting.events() - before; n != 0 {
			t.Fatalf("round %d: Pending read %d events after the follower applied the whole log, want 0", round, n)
		}
	}
	return false
}

// compareIndexes asks a following and a call-only index the same calls
// and compares their answers; Pending also with a fresh index's. loose
// leaves out the answers that depend on when each index's snapshot was
// taken (the intents tracked, the count on a backend that deletes).
func compareIndexes(t *testing.T, round int, s eventstore.Store, c *clock, follow, plain *logindex.Index, loose bool) {
	t.Helper()
	ctx := context.Background()
	pending := func(ix *logindex.Index) []string {
		t.Helper()
		got, err := ix.Pending(ctx, "", 1000)
		if err != nil {
			t.Fatalf("round %d: Pending: %v", round, err)
		}
		return got
	}
	want := pending(logindex.New(s, c, domaintest.OrderRule(), domain.CategoryIntent))
	if got := pending(follow); !cmp.Equal(want, got) {
		t.Fatalf("round %d: Pending of the following index (-whole log +following):\n%s", round, cmp.Diff(want, got))
	}
	if got := pending(plain); !cmp.Equal(want, got) {
		t.Fatalf("round %d: Pending of the call-only index (-whole log +calls):\n%s", round, cmp.Diff(want, got))
	}
	fo, fi, err := follow.Tracked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	po, pi, err := plain.Tracked(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fo != po || (!loose && fi != pi) {
		t.Fatalf("round %d: Tracked of the following index = %d orders, %d intents; of the call-only one %d, %d", round, fo, fi, po, pi)
	}
	if loose {
		return
	}
	fc, err := follow.EventCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := plain.EventCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fc != pc {
		t.Fatalf("round %d: EventCount of the following index = %d, of the call-only one %d", round, fc, pc)
	}
}
