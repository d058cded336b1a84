package kurrentdb_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// TestFaults drives the Store through the faults the double injects and
// counts events exactly: every appended event once in its stream, in $all
// and in a subscription, in order.
func TestFaults(t *testing.T) {
	t.Run("a subscription survives a server restart and resumes from its last event", func(t *testing.T) {
		t.Parallel()
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{DataFile: t.TempDir() + "/log"})
		s, ctx, sub, logs := watchStore(t, srv.URL()+"&maxDiscoverAttempts=3&discoveryInterval=20", 10*time.Millisecond, 100*time.Millisecond, "restart-")
		var want []eventstore.EventData
		for round := range 3 {
			for i := range 5 {
				events := newEvents(2)
				stream := fmt.Sprintf("restart-%d", i)
				expected := eventstore.NoStream()
				if round > 0 {
					expected = eventstore.Exact(eventstore.Revision(2*round - 1))
				}
				storetest.MustAppend(t, ctx, s, stream, expected, events...)
				want = append(want, events...)
			}
			sub.waitFor(t, ctx, len(want))
			if err := srv.Restart(); err != nil {
				t.Fatalf("Restart() = %v", err)
			}
		}
		got := sub.waitFor(t, ctx, len(want))
		if diff := cmp.Diff(storetest.IDs(want), storetest.IDs(got)); diff != "" {
			t.Errorf("events delivered across 3 restarts mismatch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(storetest.IDs(want), storetest.IDs(ownEvents(t, ctx, s, "restart-"))); diff != "" {
			t.Errorf("ReadAll after restarts mismatch (-want +got):\n%s", diff)
		}
		logs.wantResubscribed(t, 3, " across 3 restarts")
	})

	t.Run("a subscription survives the server process killed and started again on its data file", func(t *testing.T) {
		t.Parallel()
		p := kurrentdbtest.StartProcess(t, doubleBin, t.TempDir()+"/log")
		s, ctx, sub, logs := watchStore(t, p.URL(), 10*time.Millisecond, 100*time.Millisecond, "killed-")
		before := newEvents(3)
		storetest.MustAppend(t, ctx, s, "killed-s", eventstore.NoStream(), before...)
		sub.waitFor(t, ctx, 3)
		p.Kill()
		if err := p.Start(); err != nil {
			t.Fatalf("Start() after SIGKILL = %v", err)
		}
		after := newEvents(2)
		storetest.MustAppend(t, ctx, s, "killed-s", eventstore.Exact(2), after...)
		want := append(storetest.IDs(before), storetest.IDs(after)...)
		if diff := cmp.Diff(want, storetest.IDs(sub.waitFor(t, ctx, 5))); diff != "" {
			t.Errorf("SubscribeAll across a SIGKILL mismatch (-want +got):\n%s", diff)
		}
		logs.wantResubscribed(t, 1, "")
	})

	t.Run("a subscription survives dropped connections while events are appended", func(t *testing.T) {
		t.Parallel()
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		s, ctx, sub, logs := watchStore(t, srv.URL(), 5*time.Millisecond, 50*time.Millisecond, "drop-")
		var (
			mu   sync.Mutex
			want = map[string]bool{}
			wg   sync.WaitGroup
		)
		errs := make(chan error, 4)
		firstDrop := make(chan struct{})
		for a := range 4 {
			wg.Go(func() {
				stream := fmt.Sprintf("drop-%d", a)
				for i := range 25 {
					if i == 1 {
						<-firstDrop
					}
					events := newEvents(1)
					expected := eventstore.NoStream()
					if i > 0 {
						expected = eventstore.Exact(eventstore.Revision(i - 1))
					}
					if _, err := s.Append(ctx, stream, expected, events...); err != nil {
						errs <- fmt.Errorf("Append(%s, %s) = %w", stream, expected, err)
						return
					}
					mu.Lock()
					want[events[0].ID] = true
					mu.Unlock()
				}
			})
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		// The first drop comes while every appender waits after its first
		// event; four more while they run, each after some progress.
		sub.waitFor(t, ctx, 4)
		srv.DropConnections()
		close(firstDrop)
	drops:
		for range 4 {
			before := len(sub.snapshot())
			for len(sub.snapshot()) == before {
				select {
				case <-finished:
					break drops
				case <-sub.wake:
				case <-ctx.Done():
					t.Fatalf("no progress after dropping connections: %v", ctx.Err())
				}
			}
			srv.DropConnections()
		}
		<-finished
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := sub.waitFor(t, ctx, 100)
		if len(got) != 100 {
			t.Fatalf("SubscribeAll delivered %d events, want 100", len(got))
		}
		next := map[string]eventstore.Revision{}
		for _, e := range got {
			if !want[e.ID] {
				t.Errorf("SubscribeAll delivered %s, which no append wrote or it came twice", e.ID)
			}
			delete(want, e.ID)
			if e.Revision != next[e.Stream] {
				t.Errorf("%s@%d delivered, want revision %d next", e.Stream, e.Revision, next[e.Stream])
			}
			next[e.Stream] = e.Revision + 1
		}
		if n := len(ownEvents(t, ctx, s, "drop-")); n != 100 {
			t.Errorf("ReadAll holds %d events, want 100 (no duplicates from retried appends)", n)
		}
		logs.wantResubscribed(t, 1, " across 5 dropped connections")
	})

	t.Run("a server that is down at start gives a clear error, then is used once it is up", func(t *testing.T) {
		t.Parallel()
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		addr := srv.Addr()
		// Down, but its port held until Start: a free port could be taken
		// by a parallel test's server, which would then answer the appends
		// meant to fail.
		if err := srv.Hold(); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, srv.URL(), kurrentdb.WithAppendAttempts(2), kurrentdb.WithReadAttempts(1))
		// The client library alone stays broken after a failed start (its
		// connection loop ends for good); this is the trap the Store's
		// supervisor exists for.
		raw := rawClient(t, srv.URL())
		ctx := testContext(t)

		_, err := s.Append(ctx, "early", eventstore.NoStream(), newEvents(1)...)
		if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "outcome unknown") {
			t.Fatalf("Append with the server down = %v, want an error naming %s and an unknown outcome", err, addr)
		}
		if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), addr) {
			t.Fatalf("Ping with the server down = %v, want an error naming %s", err, addr)
		}
		if _, err := raw.AppendToStream(ctx, "early-raw", esdb.AppendToStreamOptions{}, esdb.EventData{EventType: "T", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`)}); err == nil {
			t.Fatalf("raw AppendToStream with the server down = nil error")
		}

		if err := srv.Start(); err != nil {
			t.Fatalf("Start() = %v", err)
		}
		var res eventstore.AppendResult
		storetest.Eventually(t, ctx, func() error {
			var err error
			res, err = s.Append(ctx, "early", eventstore.NoStream(), newEvents(1)...)
			return err
		})
		if res.NextRevision != 0 {
			t.Errorf("Append once the server is up = %+v, want revision 0", res)
		}
		if err := s.Ping(ctx); err != nil {
			t.Errorf("Ping once the server is up = %v", err)
		}
		_, err = raw.AppendToStream(ctx, "early-raw", esdb.AppendToStreamOptions{}, esdb.EventData{EventType: "T", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`)})
		var esErr *esdb.Error
		if !errors.As(err, &esErr) || esErr.Code() != esdb.ErrorCodeConnectionClosed {
			t.Errorf("raw AppendToStream once the server is up = %v, want the sticky ConnectionClosed", err)
		}
	})

	for _, expected := range []eventstore.ExpectedRevision{eventstore.NoStream(), eventstore.Any()} {
		t.Run("an append answered Aborted and its repeat dropped before indexing is resolved without a duplicate, expecting "+expected.String(), func(t *testing.T) {
			t.Parallel()
			srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{WriteTimeout: 100 * time.Millisecond})
			logs := &countingHandler{}
			s := newStore(t, srv.URL(), kurrentdb.WithBackoff(time.Millisecond, 10*time.Millisecond), kurrentdb.WithLogger(slog.New(logs)))
			ctx := testContext(t)
			// The write is not replicated in time (Aborted), the first
			// repeat is dropped (Aborted) and releases replication, the
			// second repeat is recognised.
			srv.HoldIndex(1)
			events := newEvents(3)
			res := storetest.MustAppend(t, ctx, s, "aborted", expected, events...)
			got, err := s.ReadStream(ctx, "aborted", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(storetest.IDs(events), storetest.IDs(got)); diff != "" {
				t.Fatalf("ReadStream mismatch (-want +got):\n%s", diff)
			}
			if want := (eventstore.AppendResult{NextRevision: 2, Position: got[2].Position}); res != want {
				t.Errorf("Append = %+v, want %+v", res, want)
			}
			if diff := cmp.Diff(storetest.IDs(events), storetest.IDs(ownEvents(t, ctx, s, "aborted"))); diff != "" {
				t.Errorf("ReadAll mismatch (-want +got):\n%s", diff)
			}
			if n := logs.count(repeating); n != 2 {
				t.Errorf("Append repeated the append %d times, want 2 (after the Aborted original and the dropped repeat)", n)
			}
		})
	}

	t.Run("an append whose outcome stays unknown fails with a deadline error", func(t *testing.T) {
		t.Parallel()
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{WriteTimeout: 20 * time.Millisecond})
		s := newStore(t, srv.URL(), kurrentdb.WithAppendAttempts(3), kurrentdb.WithBackoff(time.Millisecond, time.Millisecond))
		ctx := testContext(t)
		srv.HoldIndex(0)
		_, err := s.Append(ctx, "unknown", eventstore.NoStream(), newEvents(1)...)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "outcome unknown after 3 attempts") {
			t.Errorf("Append never acknowledged = %v, want an unknown outcome matching context.DeadlineExceeded", err)
		}
		srv.ReleaseIndex()
		got, err := s.ReadStream(ctx, "unknown", 0, 0)
		if err != nil || len(got) != 1 {
			t.Errorf("ReadStream after release = %d events, %v, want the one event written once", len(got), err)
		}
	})

	t.Run("a subscriber never passes an append that is not replicated yet", func(t *testing.T) {
		t.Parallel()
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{WriteTimeout: time.Minute})
		s := newStore(t, srv.URL())
		ctx := testContext(t)
		pre := newEvents(1)
		storetest.MustAppend(t, ctx, s, "held-pre", eventstore.NoStream(), pre...)
		sub := subscribe(t, ctx, s, eventstore.Position{}, "held-")
		sub.waitFor(t, ctx, 1)
		head, err := s.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}

		srv.HoldIndex(0)
		first, second := newEvents(2), newEvents(3)
		results := make(chan error, 2)
		go func() { _, err := s.Append(ctx, "held-a", eventstore.NoStream(), first...); results <- err }()
		storetest.Eventually(t, ctx, func() error { return unindexed(srv, 2) })
		go func() { _, err := s.Append(ctx, "held-b", eventstore.NoStream(), second...); results <- err }()
		storetest.Eventually(t, ctx, func() error { return unindexed(srv, 5) })

		// Written, not replicated: no reader sees either append.
		if page, err := s.ReadAll(ctx, head, 100); err != nil || len(page) != 0 {
			t.Errorf("ReadAll(%s) while held = %d events, %v, want none", head, len(page), err)
		}
		if h, err := s.Head(ctx); err != nil || h != head {
			t.Errorf("Head() while held = %s, %v, want %s", h, err, head)
		}
		if _, err := s.ReadStream(ctx, "held-a", 0, 0); !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Errorf("ReadStream(held-a) while held = %v, want ErrStreamNotFound", err)
		}
		if got := sub.snapshot(); len(got) != 1 {
			t.Errorf("SubscribeAll delivered %d events while held, want 1", len(got))
		}

		srv.ReleaseIndex()
		for range 2 {
			if err := <-results; err != nil {
				t.Errorf("held Append = %v, want nil once replicated", err)
			}
		}
		got := sub.waitFor(t, ctx, 6)
		want := append(append(storetest.IDs(pre), storetest.IDs(first)...), storetest.IDs(second)...)
		if diff := cmp.Diff(want, storetest.IDs(got)); diff != "" {
			t.Errorf("SubscribeAll mismatch (-want +got): the first held append comes first\n%s", diff)
		}
	})
}

// Log messages the fault tests count.
const (
	resubscribing = "kurrentdb: subscription to $all dropped, resubscribing"
	repeating     = "kurrentdb: append outcome unknown, repeating it"
)

// countingHandler is a slog.Handler that counts records by message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[r.Message]++
	return nil
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

// wantResubscribed fails t unless the subscription logged at least want
// resubscriptions; during, appended to the message, says across what.
func (h *countingHandler) wantResubscribed(t *testing.T, want int, during string) {
	t.Helper()
	if n := h.count(resubscribing); n < want {
		t.Errorf("the subscription resubscribed %d times%s, want at least %d", n, during, want)
	}
}

func unindexed(srv *kurrentdbtest.Server, n int) error {
	if got := srv.Unindexed(); got != n {
		return fmt.Errorf("%d records written and not indexed, want %d", got, n)
	}
	return nil
}

// TestUnreachableServerFailsFast: with the server killed, the store learns
// within a few seconds that it is unreachable; from then on every read and
// append fails within about a second (one probe a second, the rest at
// once with ErrUnreachable) instead of every attempt's connection timeout
// in turn, and an append that failed so still reports its outcome
// unknown. Started again, the server is used at the next probe.
func TestUnreachableServerFailsFast(t *testing.T) {
	t.Parallel()
	p := kurrentdbtest.StartProcess(t, doubleBin, t.TempDir()+"/log")
	logs := &countingHandler{}
	s, err := kurrentdb.New(p.URL(), kurrentdb.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	storetest.MustAppend(t, ctx, s, "ff-s", eventstore.NoStream(), newEvents(1)...)
	p.Kill()
	if _, err := s.ReadStream(ctx, "ff-s", 0, 10); err == nil { // learns the outage
		t.Fatal("ReadStream with the server killed = nil error")
	}
	for i := range 6 {
		start := time.Now()
		var err error
		if i%2 == 0 {
			_, err = s.ReadStream(ctx, "ff-s", 0, 10)
		} else {
			_, err = s.Append(ctx, "ff-s", eventstore.Exact(0), newEvents(1)...)
			if err != nil && !strings.Contains(err.Error(), "outcome unknown") {
				t.Errorf("Append while unreachable = %v, want an outcome-unknown error", err)
			}
		}
		if took := time.Since(start); err == nil || took > 2500*time.Millisecond {
			t.Errorf("call %d with the server known unreachable: error %v after %s, want an error within 2.5 s", i, err, took)
		}
	}
	if err := p.Start(); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := s.Append(ctx, "ff-s", eventstore.Any(), newEvents(1)...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Append 60 s after the server started again = %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := logs.count("kurrentdb: connected"); n != 1 {
		t.Errorf("\"kurrentdb: connected\" logged %d times, want 1", n)
	}
}
