package commands

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore"
)

func pos(n uint64) eventstore.Position { return eventstore.Position{Commit: n, Prepare: n} }

// TestSchedule_ShortHoldIsNotBlockedByALongerOneBeforeIt pins the fix for
// head-of-line blocking: jobs run by due time, and the checkpoint stays before
// the oldest pending job so a restart re-reads it.
func TestSchedule_ShortHoldIsNotBlockedByALongerOneBeforeIt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	job := func(context.Context) error { return nil }
	s := newSchedule(pos(0))
	s.add(pos(1), t0.Add(10*time.Minute), job) // long hold first
	s.add(pos(2), time.Time{}, nil)            // an event with no job
	s.add(pos(3), t0.Add(3*time.Second), job)  // short hold after it

	due := s.due(t0.Add(5 * time.Second))
	if len(due) != 1 || !due[0].due.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("due(t0+5s) = %d jobs, want only the short hold", len(due))
	}
	s.finish(due[0])
	if got := s.checkpoint(); got != pos(0) {
		t.Errorf("checkpoint() = %v, want %v (before the long hold, still pending)", got, pos(0))
	}
	if next, ok := s.next(); !ok || !next.Equal(t0.Add(10*time.Minute)) {
		t.Errorf("next() = %v, %v, want the long hold's due time", next, ok)
	}
	long := s.due(t0.Add(10 * time.Minute))
	if len(long) != 1 {
		t.Fatalf("due(t0+10m) = %d jobs, want 1", len(long))
	}
	s.finish(long[0])
	if got := s.checkpoint(); got != pos(3) {
		t.Errorf("checkpoint() = %v, want %v (everything read is done)", got, pos(3))
	}
}

func TestSchedule_RetriedJobKeepsTheCheckpointBeforeIt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	job := func(context.Context) error { return nil }
	s := newSchedule(pos(5))
	s.add(pos(6), t0, job)
	s.add(pos(7), t0, job)
	due := s.due(t0)
	if len(due) != 2 {
		t.Fatalf("due = %d, want 2", len(due))
	}
	s.retry(due[0], t0.Add(time.Second))
	s.finish(due[1])
	want := due[0].prev
	if got := s.checkpoint(); got != want {
		t.Errorf("checkpoint() = %v, want %v (the failed job's predecessor)", got, want)
	}
	if len(s.due(t0)) != 0 {
		t.Errorf("a retried job is due again before its retry time")
	}
}

// TestSchedule_HeapTakesDueJobsInOrderAndKeepsTheCheckpoint: with many
// jobs in random due order, due returns exactly the jobs due, earliest
// first, and the checkpoint stays before the oldest job not finished.
func TestSchedule_HeapTakesDueJobsInOrderAndKeepsTheCheckpoint(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	job := func(context.Context) error { return nil }
	s := newSchedule(pos(0))
	const n = 1000
	r := rand.New(rand.NewPCG(1, 2))
	dues := make([]time.Time, n)
	for i := range n {
		dues[i] = t0.Add(time.Duration(r.IntN(600)) * time.Second)
		s.add(pos(uint64(i+1)), dues[i], job)
	}
	taken := 0
	for _, at := range []time.Duration{0, 100 * time.Second, 300 * time.Second, 599 * time.Second} {
		now := t0.Add(at)
		due := s.due(now)
		want := 0
		for _, d := range dues {
			if !now.Before(d) {
				want++
			}
		}
		if taken+len(due) != want {
			t.Fatalf("due(t0+%s) = %d jobs (%d before), want %d in all", at, len(due), taken, want)
		}
		for i, it := range due {
			if now.Before(it.due) || (i > 0 && it.due.Before(due[i-1].due)) {
				t.Fatalf("due(t0+%s)[%d] is due %s: not due, or before the job ahead of it", at, i, it.due)
			}
		}
		taken += len(due)
		for _, it := range due {
			s.finish(it)
		}
		// The checkpoint is the position before the first job still pending.
		wantCP := pos(n)
		for i, d := range dues {
			if now.Before(d) {
				wantCP = pos(uint64(i))
				break
			}
		}
		if got := s.checkpoint(); got != wantCP {
			t.Fatalf("checkpoint() after t0+%s = %v, want %v", at, got, wantCP)
		}
	}
	if taken != n {
		t.Fatalf("%d of %d jobs were due by the last due time", taken, n)
	}
	if _, ok := s.next(); ok {
		t.Errorf("next() reports a pending job after every job finished")
	}
}

// TestSchedule_SettleFinishesAWaitingJobWithoutRunningIt: a keyed job that
// an event makes moot (an order claimed the reservation) leaves the heap and
// no longer holds the checkpoint back; a job the runner has taken is left to
// finish as usual.
func TestSchedule_SettleFinishesAWaitingJobWithoutRunningIt(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	job := func(context.Context) error { return nil }
	s := newSchedule(pos(0))
	s.addKeyed(pos(1), "r1", t0.Add(time.Minute), job)
	s.addKeyed(pos(2), "r2", t0, job)
	s.add(pos(3), time.Time{}, nil)
	s.settle("r1")
	s.settle("unknown") // no such job: nothing happens
	if got := s.checkpoint(); got != pos(1) {
		t.Errorf("checkpoint() = %v, want %v (before r2, still pending)", got, pos(1))
	}
	taken := s.due(t0)
	if len(taken) != 1 || taken[0].key != "r2" {
		t.Fatalf("due(t0) = %d jobs, want only r2", len(taken))
	}
	s.settle("r2") // taken by the runner: it finishes it
	if got := s.checkpoint(); got != pos(1) {
		t.Errorf("checkpoint() after settling a running job = %v, want %v", got, pos(1))
	}
	s.finish(taken[0])
	if got := s.checkpoint(); got != pos(3) {
		t.Errorf("checkpoint() = %v, want %v (nothing pending)", got, pos(3))
	}
	if _, ok := s.next(); ok {
		t.Errorf("next() reports a waiting job, want none (r1 settled)")
	}
	if len(s.keyed) != 0 {
		t.Errorf("keyed holds %d jobs after all finished, want 0", len(s.keyed))
	}
}
