package httpapi

import (
	"fmt"
	"testing"
	"time"
)

// TestBudgetKeepsOnlyBucketsInUse drives the retry budget past its sweep
// point with 100,000 actors, one request each, 1,000 a second: the buckets
// held stay bounded (only those not yet full again), an actor that spent
// its budget keeps its bucket, and so its refusal, until the bucket has
// filled, and its answers are the same as with nothing forgotten.
func TestBudgetKeepsOnlyBucketsInUse(t *testing.T) {
	t.Parallel()
	b := newBudget(20, 40)
	t0 := time.Unix(1_000_000, 0)
	for i := range 40 {
		if d := b.reserveAt("spender", t0); d != 0 {
			t.Fatalf("request %d of 40 within the burst refused for %s", i+1, d)
		}
	}
	if d := b.reserveAt("spender", t0); d <= 0 {
		t.Fatalf("request 41 of a burst of 40 allowed, want refused")
	}
	most := 0
	for i := range 100_000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		if d := b.reserveAt(fmt.Sprintf("actor-%d", i), now); d != 0 {
			t.Fatalf("the first request of actor-%d refused for %s", i, d)
		}
		most = max(most, b.size())
		if i == 1500 { // 1.5 s on: swept at least once, the spender's bucket not yet full
			b.mu.Lock()
			_, kept := b.buckets["spender"]
			b.mu.Unlock()
			if !kept {
				t.Fatalf("the spender's bucket was dropped before it filled")
			}
			if d := b.reserveAt("spender", now); d != 0 {
				t.Errorf("the spender after 1.5 s (30 tokens back) refused for %s", d)
			}
		}
	}
	if most > 2*sweepFloor {
		t.Errorf("the budget held up to %d buckets, want at most %d (those not full again, swept from %d on)", most, 2*sweepFloor, sweepFloor)
	}
	if n := b.size(); n > 2*sweepFloor {
		t.Errorf("after 100,000 actors the budget holds %d buckets", n)
	}
	// Long after, the spender's bucket is full or gone; either way it has
	// its whole burst again, and no more.
	later := t0.Add(time.Hour)
	for i := range 40 {
		if d := b.reserveAt("spender", later); d != 0 {
			t.Fatalf("an hour later, request %d of 40 refused for %s", i+1, d)
		}
	}
	if d := b.reserveAt("spender", later); d <= 0 {
		t.Errorf("an hour later, request 41 of a burst of 40 allowed, want refused")
	}
}
