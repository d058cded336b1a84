package notify

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgcoord"
)

func TestSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stream, typ, want string
		public            bool
	}{
		{"order-0193", "OrderConfirmed", "booking.v1.order.0193.order_confirmed", true},
		{"show-ab", "SeatsHeld", "booking.v1.show.ab.seats_held", true},
		{"reservation-r1", "ReservationHeld", "booking.v1.reservation.r1.reservation_held", true},
		{"order-o1", "PaymentOutcomeUnknown", "booking.v1.order.o1.payment_outcome_unknown", true},
		{"order-o1", "PaymentActionRequired", "booking.v1.order.o1.payment_action_required", true},
		{"reservation-order-r1", "OrderClaimed", "", false},
		{"intent-abc", "IntentRecorded", "", false},
		{"order-", "OrderPlaced", "", false},
		{"orders-x", "OrderPlaced", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.stream+" "+tt.typ, func(t *testing.T) {
			t.Parallel()
			got, ok, err := Subject(tt.stream, tt.typ)
			if err != nil || ok != tt.public || got != tt.want {
				t.Errorf("Subject(%q, %q) = %q, %v, %v, want %q, %v, nil", tt.stream, tt.typ, got, ok, err, tt.want, tt.public)
			}
		})
	}
	if _, _, err := Subject("order-a.b", "OrderPlaced"); err == nil {
		t.Error("Subject of an id with a dot: no error, want one")
	}
	for in, want := range map[string]string{"OrderConfirmed": "order_confirmed", "SeatsHeld": "seats_held", "HTTPFailed": "http_failed", "Order2Placed": "order2_placed"} {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPublicData(t *testing.T) {
	t.Parallel()
	got, err := PublicData(domain.TypeOrderPlaced, []byte(`{"order_id":"o","private":{"payment_token":"tok"},"amount":{"amount":1}}`))
	if err != nil || bytes.Contains(got, []byte("tok")) || !bytes.Contains(got, []byte(`"order_id":"o"`)) {
		t.Errorf("PublicData = %s, %v; want order_id kept and private removed", got, err)
	}
	// A payment waiting for the customer's action is published without its
	// sealed client secret and next action.
	got, err = PublicData(domain.TypePaymentActionRequired, []byte(`{"order_id":"o","attempt":1,"payment_id":"pi_1","private":{"sealed_action":"AVp8"}}`))
	if err != nil || bytes.Contains(got, []byte("sealed_action")) || !bytes.Contains(got, []byte(`"payment_id":"pi_1"`)) {
		t.Errorf("PublicData(PaymentActionRequired) = %s, %v; want payment_id kept and private removed", got, err)
	}
	in := []byte(`{"order_id":"o"}`)
	if got, err := PublicData(domain.TypeOrderConfirmed, in); err != nil || !bytes.Equal(got, in) {
		t.Errorf("PublicData(%s) = %s, %v, want it unchanged", in, got, err)
	}
	if _, err := PublicData(domain.TypeOrderConfirmed, []byte(`["private"]`)); err == nil {
		t.Error("PublicData of a non-object mentioning private: no error, want one")
	}
	if _, err := PublicData(domain.TypePaymentAttemptStarted, []byte(`["order_id"]`)); err == nil {
		t.Error("PublicData of a PaymentAttemptStarted that is not an object: no error, want one")
	}
}

// TestNewMessageRequestID: an event's correlation id is its message's
// Booking-Request-Id header; an event without one has no such header.
func TestNewMessageRequestID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ meta, want string }{
		{`{"correlation_id":"req-1","actor":"alice"}`, "req-1"},
		{`{"actor":"alice"}`, ""},
	} {
		e := eventstore.RecordedEvent{ID: uuid.NewString(), Stream: "order-" + uuid.NewString(), Type: "OrderPlaced",
			Data: []byte(`{}`), Metadata: []byte(c.meta)}
		msg, ok, err := NewMessage(e)
		if err != nil || !ok {
			t.Fatalf("NewMessage(%s) = %v, %v", c.meta, ok, err)
		}
		vs := msg.Header.Values(HeaderRequestID)
		if (c.want == "" && len(vs) != 0) || (c.want != "" && (len(vs) != 1 || vs[0] != c.want)) {
			t.Errorf("NewMessage with metadata %s: %s = %q, want %q", c.meta, HeaderRequestID, vs, c.want)
		}
	}
}

// TestRelayPublishesEachEventOnce: every public event once, in log order,
// with its headers, no secrets; the checkpoint reaches the head; a restart
// publishes nothing again.
func TestRelayPublishesEachEventOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string) {
		e, w := newEnvWithOrders(t, url, time.Minute, 20)
		r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
		run := start(t, e.ctx, r.Run)
		waitFor(t, 60*time.Second, "all events published", func() bool { return e.streamCount(t) == w.publicCount() })
		w.appendOrders(t, e.ctx, e.store, 10) // while running
		head := w.lastPosition()
		waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
		run.stop(t)
		e.checkStreamOnce(t)
		for _, m := range e.readStream(t) {
			if bytes.Contains(m.raw, []byte(secretToken)) || bytes.Contains(m.raw, []byte(`"private"`)) {
				t.Fatalf("message %d publishes a secret: %s", m.seq, m.raw)
			}
			if m.payload.ID != m.header.Get(HeaderMsgID) || m.payload.Position != m.header.Get(HeaderPosition) || m.payload.OccurredAt.IsZero() {
				t.Fatalf("message %d: payload %+v does not match headers %v", m.seq, m.payload, m.header)
			}
		}
		st, err := LoadRelayState(e.ctx, e.pool, DefaultRelayName)
		if err != nil || st.Checkpoint != head || !st.LeaseUntil.Before(time.Now().Add(time.Second)) {
			t.Fatalf("relay state after shutdown = %+v, %v; want checkpoint %s and the lease released", st, err, head)
		}

		// A restart (another instance) takes over at once and publishes
		// nothing again: once it has published one more order's events
		// appended after it took over, it has published those only.
		r2 := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
		run2 := start(t, e.ctx, r2.Run)
		waitFor(t, 60*time.Second, "second relay leads", func() bool { return r2.Stats().Leads == 1 })
		before := w.publicCount()
		w.appendOrders(t, e.ctx, e.store, 1)
		head = w.lastPosition()
		waitFor(t, 60*time.Second, "second relay's checkpoint at the new head", func() bool { return r2.Stats().Checkpoint == head })
		run2.stop(t)
		if s := r2.Stats(); s.Published != int64(w.publicCount()-before) || s.Duplicates != 0 {
			t.Fatalf("restarted relay published %d, duplicates %d; want %d (the new order's events only), 0", s.Published, s.Duplicates, w.publicCount()-before)
		}
		e.checkStreamOnce(t)
	})
}

// killedRelay runs a relay that never saves its checkpoint and dies (no
// save, no release) once it has published want new messages.
func killedRelay(t *testing.T, e *env, cfg RelayConfig, want int, noChain bool) *Relay {
	t.Helper()
	var killed atomic.Bool
	r := NewRelay(e.store, e.pool, e.nc, cfg)
	r.noChain = noChain
	r.beforeSave = func(eventstore.Position) hookAction {
		if killed.Load() {
			return hookDie
		}
		return hookSkip
	}
	run := start(t, e.ctx, r.Run)
	// Counted by the stream, not by the relay's acks: a relay that restarted
	// on a late ack resumes after what the stream holds and never counts it.
	waitFor(t, 60*time.Second, "all events published", func() bool { return e.streamCount(t) == want })
	killed.Store(true)
	run.stop(t)
	st, err := LoadRelayState(e.ctx, e.pool, cfg.withDefaults().Name)
	if err != nil || !st.Checkpoint.IsZero() {
		t.Fatalf("killed relay's state = %+v, %v; want the checkpoint never saved", st, err)
	}
	return r
}

// TestRelayKilledBeforeCheckpoint: a relay killed after publishing and
// before its checkpoint; after a restart the stream holds each event once.
func TestRelayKilledBeforeCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string) {
		t.Run("resume from the stream", func(t *testing.T) {
			e, w := newEnvWithOrders(t, url, time.Minute, 20)
			killedRelay(t, e, testRelayConfig(e), w.publicCount(), false)

			r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
			run := start(t, e.ctx, r.Run)
			head := w.lastPosition()
			waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
			run.stop(t)
			if s := r.Stats(); s.Published != 0 || s.Duplicates != 0 {
				t.Fatalf("restarted relay: %d published, %d duplicate acks; want 0, 0 (it resumes after the stream's last notification)", s.Published, s.Duplicates)
			}
			e.checkStreamOnce(t)
		})
		t.Run("republish inside the duplicate window", func(t *testing.T) {
			e, w := newEnvWithOrders(t, url, time.Minute, 20)
			killedRelay(t, e, testRelayConfig(e), w.publicCount(), true)

			r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
			r.noChain = true // republish everything from the (zero) checkpoint
			run := start(t, e.ctx, r.Run)
			head := w.lastPosition()
			waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
			run.stop(t)
			if s := r.Stats(); s.Published != 0 || s.Duplicates != int64(w.publicCount()) {
				t.Fatalf("restarted relay: %d published, %d duplicate acks; want 0, %d", s.Published, s.Duplicates, w.publicCount())
			}
			e.checkStreamOnce(t)
		})
	})
}

// TestRelayDuplicateWindowExceeded: with the duplicate window shortened and
// exceeded before the restart, a relay that resumes from the stream still
// leaves each event once; one that republishes blindly stores duplicates,
// and the subscriber still applies each event once.
func TestRelayDuplicateWindowExceeded(t *testing.T) {
	const window = testWindow
	forEachBackend(t, func(t *testing.T, url string) {
		t.Run("relay resumes from the stream", func(t *testing.T) {
			e, w := newEnvWithOrders(t, url, window, 10)
			killedRelay(t, e, testRelayConfig(e), w.publicCount(), false)
			time.Sleep(window + time.Second)

			r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
			run := start(t, e.ctx, r.Run)
			head := w.lastPosition()
			waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
			run.stop(t)
			e.checkStreamOnce(t)
		})
		t.Run("subscriber applies each once", func(t *testing.T) {
			e, w := newEnvWithOrders(t, url, window, 10)
			n := w.publicCount()
			killedRelay(t, e, testRelayConfig(e), n, true)
			time.Sleep(window + time.Second)

			r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
			r.noChain = true
			run := start(t, e.ctx, r.Run)
			head := w.lastPosition()
			waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
			run.stop(t)
			if got := e.streamCount(t); got != 2*n {
				t.Fatalf("stream holds %d messages, want %d (every event twice: the window was exceeded)", got, 2*n)
			}

			// The ack wait is far longer than handling a message on a busy
			// machine: no redelivery adds a duplicate of its own.
			s := NewSubscriber(e.js, e.pool, SubscriberConfig{Durable: "window", AckWait: 10 * time.Second, GapDelay: 20 * time.Millisecond, Logger: e.log})
			sub := start(t, e.ctx, s.Run)
			waitFor(t, 60*time.Second, "every message handled", func() bool {
				st := s.Stats()
				return st.Applied+st.Duplicates+st.Stale >= int64(2*n)
			})
			e.waitConsumerDone(t, "window")
			sub.stop(t)
			e.checkApplied(t, "window", w)
			if st := s.Stats(); st.Applied != int64(n) || st.Duplicates != int64(n) {
				t.Fatalf("subscriber stats %+v; want %d applied and %d duplicates", st, n, n)
			}
		})
	})
}

// TestTwoRelaysAtOnce: a relay whose lease expired without its noticing
// keeps publishing while the standby takes over; the stream still holds
// each event once, and the stale relay cannot move the checkpoint.
//
// Nothing here races the clock: A never renews during the test (as if paused
// between renewals) and its checkpoint saves are skipped until the test has
// seen it publish under B's lease, so B's takeover and A's late publishes
// happen whatever the machine's load; then A's next save is fenced.
func TestTwoRelaysAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, url string) {
		e, w := newEnvWithOrders(t, url, 30*time.Minute, 5) // beyond A's fail-over time

		var holdSaves atomic.Bool
		var skipped atomic.Int64 // saves A skipped while holdSaves was set
		cfgA := testRelayConfig(e)
		cfgA.Owner, cfgA.LeaseTTL, cfgA.RenewEvery = "A", 10*time.Minute, time.Hour
		cfgB := testRelayConfig(e)
		cfgB.Owner, cfgB.LeaseTTL, cfgB.RenewEvery = "B", time.Minute, 200*time.Millisecond
		a := NewRelay(e.store, e.pool, e.nc, cfgA)
		a.beforeSave = func(eventstore.Position) hookAction {
			if holdSaves.Load() {
				skipped.Add(1)
				return hookSkip
			}
			return hookSave
		}
		b := NewRelay(e.store, e.pool, e.nc, cfgB)
		runA := start(t, e.ctx, a.Run)
		waitFor(t, 60*time.Second, "A publishes", func() bool { return a.Stats().Published > 0 })
		runB := start(t, e.ctx, b.Run)

		// Appends keep coming while the lease changes hands.
		actx, stopAppends := context.WithCancel(e.ctx)
		var appends sync.WaitGroup
		var appended atomic.Int64
		appends.Go(func() {
			for actx.Err() == nil {
				w.appendOrders(t, e.ctx, e.store, 2)
				appended.Add(1)
				time.Sleep(5 * time.Millisecond) // pacing only
			}
		})
		waitFor(t, 60*time.Second, "appends under way", func() bool { return appended.Load() >= 2 })
		stA, err := LoadRelayState(e.ctx, e.pool, DefaultRelayName)
		if err != nil || stA.Owner != "A" {
			t.Fatalf("lease = %+v, %v; want A's", stA, err)
		}
		// The lease expires (A is paused, say); B takes it over. A learns
		// nothing until its next checkpoint save.
		holdSaves.Store(true)
		// Saves run one at a time: once A skipped one, no save it began
		// before the flag can still land after B's takeover.
		waitFor(t, 60*time.Second, "A skips a checkpoint save", func() bool { return skipped.Load() > 0 })
		if _, err := e.pool.Exec(e.ctx, `UPDATE notify_relays SET lease_until = now()`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "B leads", func() bool { return b.Stats().Leads == 1 })
		aBefore := a.Stats()
		waitFor(t, 60*time.Second, "A publishes under B's lease", func() bool {
			s := a.Stats()
			return s.Published+s.Duplicates > aBefore.Published+aBefore.Duplicates
		})
		holdSaves.Store(false)
		waitFor(t, 60*time.Second, "A fenced at its next checkpoint save", func() bool { return a.Stats().Fenced >= 1 })
		stopAppends()
		appends.Wait()
		if aAfter := a.Stats(); aAfter.Fenced != 1 {
			t.Fatalf("A before B's takeover %+v, after %+v: want A fenced once", aBefore, aAfter)
		}

		// The stale relay cannot move the checkpoint.
		stale := &lease{pgcoord.NewLeases(e.pool).Held(DefaultRelayName, stA.Token, time.Second)}
		before, _ := LoadRelayState(e.ctx, e.pool, DefaultRelayName)
		if err := stale.saveCheckpoint(e.ctx, eventstore.Position{Commit: 1 << 40}); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale saveCheckpoint = %v, want ErrFenced", err)
		}
		if err := stale.renew(e.ctx); !errors.Is(err, ErrFenced) {
			t.Fatalf("stale renew = %v, want ErrFenced", err)
		}
		after, _ := LoadRelayState(e.ctx, e.pool, DefaultRelayName)
		if after.Checkpoint.Less(before.Checkpoint) || after.Checkpoint == (eventstore.Position{Commit: 1 << 40}) || after.Owner != "B" {
			t.Fatalf("relay state = %+v after the stale update (before %+v); want B's, unmoved by A", after, before)
		}

		head := w.lastPosition()
		waitFor(t, 60*time.Second, "B's checkpoint at head", func() bool { return b.Stats().Checkpoint == head })
		runA.stop(t)
		runB.stop(t)
		if sa, sb := a.Stats(), b.Stats(); sa.Fenced != 1 || sb.Leads != 1 || sb.Fenced != 0 {
			t.Errorf("A: %+v; B: %+v; want A fenced once, B to have led once and never been fenced", sa, sb)
		}
		e.checkStreamOnce(t)
		t.Logf("A: %+v; B: %+v", a.Stats(), b.Stats())
	})
}

// TestLeaseFencing: acquisition increments the token; a held lease is not
// taken; an expired one is; the old token can neither renew nor checkpoint.
func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustEmbedded(t), time.Minute)
	l1, err := acquireLease(e.ctx, e.pool, "x", "one", time.Minute)
	if err != nil || l1.Token() != 1 {
		t.Fatalf("acquire = %+v, %v; want token 1", l1, err)
	}
	if _, err := acquireLease(e.ctx, e.pool, "x", "two", time.Minute); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("acquire of a held lease = %v, want ErrLeaseHeld", err)
	}
	if err := l1.saveCheckpoint(e.ctx, eventstore.Position{Commit: 5, Prepare: 7}); err != nil {
		t.Fatal(err)
	}
	if err := l1.saveCheckpoint(e.ctx, eventstore.Position{Commit: 5, Prepare: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `UPDATE notify_relays SET lease_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	l2, err := acquireLease(e.ctx, e.pool, "x", "two", time.Minute)
	if err != nil || l2.Token() != 2 || l2.Checkpoint() != (eventstore.Position{Commit: 5, Prepare: 7}) {
		t.Fatalf("takeover = %+v, %v; want token 2 and checkpoint 5/7 (never moved back)", l2, err)
	}
	if err := l1.saveCheckpoint(e.ctx, eventstore.Position{Commit: 9}); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale checkpoint = %v, want ErrFenced", err)
	}
	if err := l1.renew(e.ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale renew = %v, want ErrFenced", err)
	}
	if err := l2.renew(e.ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := LoadRelayState(e.ctx, e.pool, "x")
	if st.Checkpoint != (eventstore.Position{Commit: 5, Prepare: 7}) || st.Token != 2 || st.Owner != "two" {
		t.Fatalf("state = %+v, want two's token 2 at 5/7", st)
	}
}

// TestRelayForeignStream: a stream whose last message is not in this log
// (left over from another database) is not trusted; publishing starts
// from the checkpoint and each event is published.
func TestRelayForeignStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, mustEmbedded(t), time.Minute)
	foreign := eventstore.RecordedEvent{ID: uuid.NewString(), Stream: "order-" + uuid.NewString(), Type: "OrderPlaced",
		Revision: 0, Position: eventstore.Position{Commit: 1 << 50, Prepare: 1}, Data: []byte(`{}`)}
	msg, _, err := NewMessage(foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(e.ctx, msg); err != nil {
		t.Fatal(err)
	}
	var w workload
	w.appendOrders(t, e.ctx, e.store, 5)
	r := NewRelay(e.store, e.pool, e.nc, testRelayConfig(e))
	run := start(t, e.ctx, r.Run)
	head := w.lastPosition()
	waitFor(t, 60*time.Second, "checkpoint at head", func() bool { return r.Stats().Checkpoint == head })
	run.stop(t)
	if got := r.Stats().Published; got != int64(w.publicCount()) {
		t.Fatalf("published %d, want %d", got, w.publicCount())
	}
}

// TestCheckStream: an external stream is created when missing and refused
// when its duplicate window or subjects differ.
func TestCheckStream(t *testing.T) {
	t.Parallel()
	url := mustEmbedded(t)
	nc := mustConnect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := CheckStream(ctx, js, StreamSpec{Duplicates: time.Minute}); err != nil {
		t.Fatalf("CheckStream on a server without the stream = %v, want it created", err)
	}
	if _, err := CheckStream(ctx, js, StreamSpec{Duplicates: time.Minute}); err != nil {
		t.Fatalf("CheckStream of a matching stream = %v", err)
	}
	var cfgErr *StreamConfigError
	if _, err := CheckStream(ctx, js, StreamSpec{Duplicates: 2 * time.Minute}); !errors.As(err, &cfgErr) || cfgErr.Field != "duplicates" {
		t.Fatalf("CheckStream with another window = %v, want a StreamConfigError on duplicates", err)
	}
	if err := (RelayConfig{}).CheckDuplicateWindow(10 * time.Second); err == nil {
		t.Fatal("CheckDuplicateWindow(10s) with a 15 s lease: no error, want one")
	}
	if err := (RelayConfig{}).CheckDuplicateWindow(DefaultDuplicateWindow); err != nil {
		t.Fatalf("CheckDuplicateWindow(default) = %v", err)
	}
}

// TestStreamExpectations pins the JetStream behaviour the relay's resume
// rests on: de-duplication is checked before Nats-Expected-Last-Msg-Id, so a
// republish inside the window is a duplicate ack; past the window the same
// republish fails its expectation instead of being stored twice.
func TestStreamExpectations(t *testing.T) {
	const window = testWindow // the republish inside it is inside it on a busy machine
	forEachBackend(t, func(t *testing.T, url string) {
		e := newEnv(t, url, window)
		ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
		publish := func(i int) (*jetstream.PubAck, error) {
			m := &nats.Msg{Subject: "booking.v1.order.x.order_placed", Header: nats.Header{HeaderMsgID: {ids[i]}}, Data: []byte("{}")}
			if i > 0 {
				m.Header[headerExpectedLastMsgID] = []string{ids[i-1]}
			} else {
				m.Header[headerExpectedLastSeq] = []string{"0"}
			}
			return e.js.PublishMsg(e.ctx, m)
		}
		for i := range ids {
			if ack, err := publish(i); err != nil || ack.Duplicate {
				t.Fatalf("publish %d = %+v, %v; want stored", i, ack, err)
			}
		}
		if ack, err := publish(1); err != nil || !ack.Duplicate {
			t.Fatalf("republish inside the window = %+v, %v; want a duplicate ack", ack, err)
		}
		time.Sleep(window + 700*time.Millisecond)
		_, err := publish(1)
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeWrongLastMsgID {
			t.Fatalf("republish past the window = %v, want error code %d (wrong last msg id)", err, errCodeWrongLastMsgID)
		}
		if !errors.Is(publishError(err), errStreamMoved) {
			t.Fatalf("publishError(%v) does not match errStreamMoved", err)
		}
		if got := e.streamCount(t); got != len(ids) {
			t.Fatalf("stream holds %d messages, want %d", got, len(ids))
		}
	})
}

func TestWholeEntities(t *testing.T) {
	t.Parallel()
	for subject, want := range map[string]bool{
		"booking.v1.>": true, "booking.v1.order.>": true, "booking.v1.order.*.*": true, "booking.v1.*.abc.*": true,
		"booking.v1.order.*.order_confirmed": false, "booking.v1.*.*.order_placed": false,
	} {
		if got := WholeEntities(subject); got != want {
			t.Errorf("WholeEntities(%q) = %v, want %v", subject, got, want)
		}
	}
}
