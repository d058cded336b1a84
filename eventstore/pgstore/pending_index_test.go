package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/domain/domaintest"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/fanout"
	"github.com/retrysafe/booking/eventstore/logindex"
	"github.com/retrysafe/booking/eventstore/pgcoord"
	"github.com/retrysafe/booking/eventstore/storetest"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// referencePendingSQL is the SQL that listed the pending streams of a rule
// with n obligations before the log index did: it groups the events of the
// category's streams by stream and keeps a stream without an ending event
// ($3) or with an obligation open. It stays here as the reference the
// index is compared with.
func referencePendingSQL(n int) string {
	var b strings.Builder
	b.WriteString(`
SELECT stream
FROM events
WHERE stream LIKE $1 AND stream > $2
GROUP BY stream
HAVING count(*) FILTER (WHERE type = ANY($3::text[])) = 0`)
	for i := range n {
		p := 4 + 4*i
		fmt.Fprintf(&b, `
    OR NOT coalesce(array_agg(DISTINCT convert_from(data, 'UTF8')::jsonb ->> $%[2]d::text)
                    FILTER (WHERE type = ANY($%[1]d::text[]) AND convert_from(data, 'UTF8')::jsonb ->> $%[2]d::text IS NOT NULL), '{}')
        <@ coalesce(array_agg(DISTINCT convert_from(data, 'UTF8')::jsonb ->> $%[4]d::text)
                    FILTER (WHERE type = ANY($%[3]d::text[]) AND convert_from(data, 'UTF8')::jsonb ->> $%[4]d::text IS NOT NULL), '{}')`,
			p, p+1, p+2, p+3)
	}
	fmt.Fprintf(&b, `
ORDER BY stream
LIMIT $%d`, 4+4*n)
	return b.String()
}

// referencePending runs referencePendingSQL: a page of the ids of the
// rule's pending streams after after.
func referencePending(ctx context.Context, pool *pgxpool.Pool, rule eventstore.PendingRule, after string, limit int) ([]string, error) {
	from := ""
	if after != "" {
		from = rule.Category + after
	}
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(rule.Category) + "%"
	args := []any{like, from, rule.Ends}
	for _, o := range rule.Owed {
		args = append(args, o.Opens, o.OpenMember, o.Closes, o.CloseMember)
	}
	args = append(args, limit)
	rows, err := pool.Query(ctx, referencePendingSQL(len(rule.Owed)), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var stream string
		if err := rows.Scan(&stream); err != nil {
			return nil, err
		}
		ids = append(ids, strings.TrimPrefix(stream, rule.Category))
	}
	return ids, rows.Err()
}

// randomLog appends random events to a PostgreSQL log: order events in
// revision order (randomOrderEvent) to a few orders, alone or two orders in
// one transaction, claims and intents.
type randomLog struct {
	t     *testing.T
	store *Store
	r     *rand.Rand
	ids   []string
	revs  map[string]int
}

// event returns a new event of a random order and its stream, and counts
// its revision.
func (l *randomLog) event() (string, eventstore.EventData) {
	id := l.ids[l.r.IntN(len(l.ids))]
	e := domaintest.RandomOrderEvent(l.r, id, l.revs[id])
	l.revs[id]++
	return domain.OrderStream(id), l.encode(e)
}

func (l *randomLog) encode(e domain.Event) eventstore.EventData {
	d, err := eventstore.Encode(uuid.Must(uuid.NewV7()).String(), e, eventstore.Metadata{OccurredAt: time.Now()})
	if err != nil {
		l.t.Fatal(err)
	}
	return d
}

// round appends one to six random appends.
func (l *randomLog) round(ctx context.Context) {
	one := func(stream string, d ...eventstore.EventData) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any(), Events: d}
	}
	for range 1 + l.r.IntN(6) {
		var parts []eventstore.StreamAppend
		switch k := l.r.IntN(10); {
		case k < 6:
			parts = append(parts, one(l.event()))
		case k < 8: // two orders in one transaction
			s1, d1 := l.event()
			s2, d2 := l.event()
			parts = []eventstore.StreamAppend{one(s1, d1), one(s2, d2)}
			if s1 == s2 {
				parts = []eventstore.StreamAppend{one(s1, d1, d2)}
			}
		case k < 9:
			parts = append(parts, one(domain.ClaimStream(l.ids[l.r.IntN(len(l.ids))]), l.encode(domain.OrderClaimed{})))
		default:
			parts = append(parts, one(domain.CategoryIntent+uuid.NewString(), l.encode(domain.OrderClaimed{})))
		}
		if _, err := l.store.AppendMulti(ctx, parts...); err != nil {
			l.t.Fatal(err)
		}
	}
}

// heldRound holds an order's append open while another order's commits
// and ix reads the log, then commits it: the index must not skip it.
func (l *randomLog) heldRound(ctx context.Context, ix *logindex.Index) {
	held, d := l.event()
	commit, _, err := heldStore{l.store}.HoldOpenAppend(ctx, held, eventstore.Any(), d)
	if err != nil {
		l.t.Fatal(err)
	}
	stream := held
	for stream == held { // the held append holds its stream's lock
		if stream, d = l.event(); stream == held {
			l.revs[strings.TrimPrefix(stream, domain.CategoryOrder)]--
		}
	}
	if _, err := l.store.Append(ctx, stream, eventstore.Any(), d); err != nil {
		l.t.Fatal(err)
	}
	if _, err := ix.Pending(ctx, "", 100); err != nil {
		l.t.Fatal(err)
	}
	if _, err := commit(ctx); err != nil {
		l.t.Fatal(err)
	}
}

// compare waits until the log's readable horizon has passed every event
// appended (a write transaction still running anywhere on the server
// holds it back, and with it the index, not the SQL), then compares every
// page of ix.Pending with the SQL's, for a few limits and starts.
func (l *randomLog) compare(ctx context.Context, pool *pgxpool.Pool, ix *logindex.Index, rule eventstore.PendingRule, round int) {
	l.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	storetest.Eventually(l.t, wctx, func() error {
		lag, err := l.store.HorizonLag(wctx)
		if err == nil && lag.Events > 0 {
			err = fmt.Errorf("%d events above the readable horizon", lag.Events)
		}
		return err
	})
	for _, limit := range []int{2, 100} {
		for _, after := range []string{"", l.ids[5]} {
			var got, want []string
			for a := after; ; {
				page, err := ix.Pending(ctx, a, limit)
				if err != nil {
					l.t.Fatalf("round %d: Pending: %v", round, err)
				}
				ref, err := referencePending(ctx, pool, rule, a, limit)
				if err != nil {
					l.t.Fatalf("round %d: reference: %v", round, err)
				}
				got, want = append(got, page...), append(want, ref...)
				if len(ref) < limit || len(page) < limit {
					break
				}
				a = ref[len(ref)-1]
			}
			if diff := cmp.Diff(want, got); diff != "" {
				l.t.Fatalf("round %d, limit %d, after %q: Pending differs from the SQL (-sql +index):\n%s", round, limit, after, diff)
			}
		}
	}
}

// TestPendingIndexMatchesSQL appends random order, claim and intent
// events in rounds, restarts the index from its snapshot now and then,
// purges the intents (deleting events, perhaps the snapshot's last) and
// holds an append open across a round, and after every round compares
// every page of logindex.Index.Pending with the SQL it replaced, on the
// same log.
func TestPendingIndexMatchesSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := New(pool, WithAppendTimeout(time.Minute))
	ctx := context.Background()
	rule := domaintest.OrderRule()
	snaps := pgcoord.NewSnapshots(pool, "logindex-postgres")
	newIndex := func() *logindex.Index {
		return logindex.New(store, pgcoord.NewClock(pool), rule, "", logindex.WithSnapshots(snaps, 7))
	}
	l := &randomLog{t: t, store: store, r: rand.New(rand.NewPCG(1, 2)), ids: make([]string, 14), revs: map[string]int{}}
	for i := range l.ids {
		l.ids[i] = fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
	}
	ix := newIndex()
	for round := range 40 {
		l.round(ctx)
		switch {
		case round%10 == 3:
			l.heldRound(ctx, ix)
		case round%7 == 2: // a graceful restart
			if err := ix.Save(ctx); err != nil {
				t.Fatal(err)
			}
			ix = newIndex()
		case round%7 == 5: // the intents purged, then a crash
			if _, err := store.PurgeStreams(ctx, domain.CategoryIntent, -time.Hour, 1000); err != nil {
				t.Fatal(err)
			}
			ix = newIndex()
		}
		l.compare(ctx, pool, ix, rule, round)
	}
}

// TestPendingIndexFollowingMatchesSQL is TestPendingIndexMatchesSQL with
// the index's follower running through the shared log reader (a small
// window, so it also catches up from the store), restarted with the index
// and now and then alone: an append held open across a round holds the
// follower back as it holds a call, and every page still matches the SQL.
func TestPendingIndexFollowingMatchesSQL(t *testing.T) {
	t.Parallel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { pendingIndexFollowing(t, seed) })
	}
}

func pendingIndexFollowing(t *testing.T, seed uint64) {
	pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
	store := New(pool, WithAppendTimeout(time.Minute))
	ctx := context.Background()
	rule := domaintest.OrderRule()
	snaps := pgcoord.NewSnapshots(pool, "logindex-postgres")
	reader := fanout.New(store, fanout.Config{BatchSize: 3, MaxEvents: 20, RetryMin: time.Millisecond})
	l := &randomLog{t: t, store: store, r: rand.New(rand.NewPCG(seed, 2)), ids: make([]string, 14), revs: map[string]int{}}
	for i := range l.ids {
		l.ids[i] = fmt.Sprintf("00000000-0000-7000-8000-%012d", i)
	}
	var (
		ix     *logindex.Index
		cancel context.CancelFunc
		done   chan error
	)
	follow := func() {
		fctx, c := context.WithCancel(ctx)
		cancel, done = c, make(chan error, 1)
		go func() { done <- ix.Follow(fctx, reader) }()
	}
	stop := func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Follow returned %v, want context.Canceled", err)
		}
	}
	ix = logindex.New(store, pgcoord.NewClock(pool), rule, "", logindex.WithSnapshots(snaps, 1+l.r.IntN(10)))
	follow()
	defer func() { stop() }()
	for round := range 40 {
		l.round(ctx)
		switch k := l.r.IntN(10); {
		case k < 2:
			l.heldRound(ctx, ix)
		case k < 3: // a graceful restart
			if err := ix.Save(ctx); err != nil {
				t.Fatal(err)
			}
			stop()
			ix = logindex.New(store, pgcoord.NewClock(pool), rule, "", logindex.WithSnapshots(snaps, 1+l.r.IntN(10)))
			follow()
		case k < 4: // the intents purged, then a crash
			if _, err := store.PurgeStreams(ctx, domain.CategoryIntent, -time.Hour, 1000); err != nil {
				t.Fatal(err)
			}
			stop()
			ix = logindex.New(store, pgcoord.NewClock(pool), rule, "", logindex.WithSnapshots(snaps, 1+l.r.IntN(10)))
			follow()
		case k < 5: // the follower alone restarts
			stop()
			follow()
		}
		l.compare(ctx, pool, ix, rule, round)
	}
}
