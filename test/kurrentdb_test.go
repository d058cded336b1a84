package test

// Faults of KurrentDB seen by the whole service (make test-kurrentdb): the
// server double, a process of its own, is killed and started again on its
// data file while booking serve follows it, or is not up yet when booking
// serve starts. The store-level versions (and the duplicate append answered
// Aborted, which only the in-process double can inject) are in
// eventstore/kurrentdb/faults_test.go.

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/projections"
)

// requireKurrentDB skips a test that needs the suite to run on KurrentDB.
func requireKurrentDB(t *testing.T) {
	t.Helper()
	if !onKurrentDB() {
		t.Skipf("needs %s=kurrentdb (make test-kurrentdb)", backendEnv)
	}
}

// waitAllCaughtUp waits until every projector's checkpoint and the relay's
// are at the log's head and stream BOOKING holds exactly one message per
// published event, nothing moving meanwhile; it fails the test otherwise.
func (s *server) waitAllCaughtUp(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	var head string
	var cps []string
	relayAt := `SELECT count(*) FROM notify_relays WHERE commit_tx::text || '/' || prepare = $1`
	if !eventually(60*time.Second, func() bool {
		s.settle(t)
		head, cps = s.rbHead(t), s.rbCheckpoints(t)
		if len(cps) != 4 || s.queryInt(t, relayAt, head) != 1 || uint64(s.rbPublished(t)) != rbNATSMsgs(t, js) {
			return false
		}
		for _, cp := range cps {
			if !strings.HasSuffix(cp, " "+head) {
				return false
			}
		}
		return s.rbHead(t) == head && slices.Equal(s.rbCheckpoints(t), cps)
	}) {
		t.Fatalf("not caught up within 60 s: head %s, checkpoints %v, relay at head %d, NATS %d messages for %d published events",
			head, cps, s.queryInt(t, relayAt, head), rbNATSMsgs(t, js), s.rbPublished(t))
	}
}

// connectJS connects to the service's NATS server.
func (s *server) connectJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+s.natsAddr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS: connect to %s: %v", s.natsAddr, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("NATS: jetstream: %v", err)
	}
	return js
}

// TestKurrentDB_RestartMidSubscriptionProjectsAndPublishesEveryEventOnce:
// KurrentDB is killed (SIGKILL) under the live subscriptions of the four
// projectors, the process manager and the relay, and started again on its
// data file; orders placed before and after end confirmed, every read model
// and the relay reach the head, stream BOOKING holds exactly one message per
// published event, and the orders list shows each order once.
func TestKurrentDB_RestartMidSubscriptionProjectsAndPublishesEveryEventOnce(t *testing.T) {
	requireKurrentDB(t)
	t.Parallel()
	s, show, res := mustStartReserved(t, Options{Env: fastEnv(), KeepLeader: true}, 2)
	js := s.connectJS(t)
	first := orderIDOf(t, s.mustOrder(t, tokAlice, newKey(), res, "tok_visa"))
	s.waitAllCaughtUp(t, js)
	before := s.totalEvents(t)

	s.kdb.Kill()
	if err := s.kdb.Start(); err != nil {
		t.Fatalf("start the KurrentDB double again: %v", err)
	}
	// The service may answer 503 until its connection is back: the same
	// key is repeated until it is not.
	key := newKey()
	r, err := s.sendRepeating(context.Background(), call{Method: "POST", Path: "/v1/reservations", Token: tokAlice, Key: keyOf(key),
		Body: map[string]any{"show_id": show, "quantity": 3}})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, r, http.StatusCreated)
	second := orderIDOf(t, s.mustOrder(t, tokAlice, newKey(), r.str("id"), "tok_visa"))
	s.waitAllCaughtUp(t, js)

	if after := s.totalEvents(t); after <= before {
		t.Errorf("log: %d events after the restart, %d before; want more", after, before)
	}
	for _, id := range []string{first, second} {
		g := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
		wantStatus(t, g, http.StatusOK)
		if g.str("status") != "confirmed" {
			t.Errorf("%s: want status confirmed", g)
		}
	}
	s.checkOrders(t, tokAlice, 2, first, second)
	s.checkCharges(t, 2, 0)
	s.wantCount(t, "order-", "OrderPlaced", 2)
	s.wantCount(t, "order-", "OrderConfirmed", 2)
	s.wantAvailable(t, show, 5, "after ordering 2 and 3 of 10")
	l := s.do(t, "GET", "/v1/orders", tokAlice, "", nil)
	wantStatus(t, l, http.StatusOK)
	items, _ := l.get("items").([]any)
	if len(items) != 2 {
		t.Errorf("%s: %d orders listed, want 2 (each once)", l, len(items))
	}
}

// TestKurrentDB_NotUpAtStartIsReportedThenUsedOnceUp: booking serve started
// while KurrentDB is down says so clearly in its log, answers /readyz and
// requests 503 and records nothing; once the server is up the same request
// succeeds, and an order goes through with every worker connected.
func TestKurrentDB_NotUpAtStartIsReportedThenUsedOnceUp(t *testing.T) {
	requireKurrentDB(t)
	t.Parallel()
	s := mustStart(t, Options{Env: fastEnv(), KeepLeader: true})
	js := s.connectJS(t)
	s.Stop()
	s.kdb.Kill()
	s.Restart()
	if logs := s.logs.String(); !strings.Contains(logs, "KurrentDB is not reachable yet (BOOKING_EVENT_STORE)") {
		t.Errorf("booking serve started without KurrentDB and did not say so; want \"KurrentDB is not reachable yet (BOOKING_EVENT_STORE)\" in its log")
	}
	ready := s.do(t, "GET", "/readyz", "", "", nil)
	wantStatus(t, ready, http.StatusServiceUnavailable)
	if d := ready.str("detail"); d != "the event store (KurrentDB) is unreachable" {
		t.Errorf("/readyz detail with KurrentDB down = %q, want \"the event store (KurrentDB) is unreachable\"", d)
	}
	// Every request answers 503 with Retry-After within about the append
	// timeout (5 s): the store knows KurrentDB is unreachable and does not
	// wait out each retry's connection attempts.
	key := newKey()
	for _, c := range []struct {
		method, path, token, key string
		body                     any
	}{
		{"POST", "/v1/shows", tokAdmin, key, showBody("Concert", 10)},
		{"GET", "/v1/shows/" + uuid.Must(uuid.NewV7()).String(), tokAlice, "", nil},
		{"POST", "/v1/reservations", tokAlice, newKey(), map[string]any{"show_id": uuid.Must(uuid.NewV7()).String(), "quantity": 2}},
		{"POST", "/v1/shows", tokAdmin, key, showBody("Concert", 10)},
	} {
		start := time.Now()
		r := s.do(t, c.method, c.path, c.token, c.key, c.body)
		took := time.Since(start)
		t.Logf("%s %s with KurrentDB down: %d after %s", c.method, c.path, r.Status, took.Round(time.Millisecond))
		wantStatus(t, r, http.StatusServiceUnavailable)
		if r.Header.Get("Retry-After") == "" || took > 5500*time.Millisecond {
			t.Errorf("%s %s with KurrentDB down: 503 after %s, Retry-After %q; want it within 5.5 s, with Retry-After", c.method, c.path, took, r.Header.Get("Retry-After"))
		}
	}

	if err := s.kdb.Start(); err != nil {
		t.Fatalf("start the KurrentDB double: %v", err)
	}
	r, err := s.sendRepeating(context.Background(), call{Method: "POST", Path: "/v1/shows", Token: tokAdmin, Key: keyOf(key),
		Body: showBody("Concert", 10)})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, r, http.StatusCreated)
	if !eventually(60*time.Second, func() bool { return s.do(t, "GET", "/readyz", "", "", nil).Status == http.StatusOK }) {
		t.Errorf("/readyz not 200 within 60 s of KurrentDB coming up")
	}
	show := r.str("id")
	id := orderIDOf(t, s.mustOrder(t, tokAlice, newKey(), s.mustReserve(t, tokAlice, show, 4), "tok_visa"))
	s.waitAllCaughtUp(t, js)
	s.checkPaidOnce(t, id)
	s.wantCount(t, "show-", "ShowScheduled", 1)
	s.wantCount(t, "order-", "OrderConfirmed", 1)
	s.wantAvailable(t, show, 6, "after ordering 4 of 10")
}

// TestKurrentDB_AnotherBackendWithOldPositionsFailsAtStart: positions
// written on KurrentDB (checkpoints, read models, the relay, stream BOOKING)
// make booking serve on PostgreSQL refuse to start with a message that says
// what to rebuild or reset; once the read models are rebuilt and the
// checkpoints reset, the NATS stream is what it names; and the service
// still starts on KurrentDB and ends consistent.
func TestKurrentDB_AnotherBackendWithOldPositionsFailsAtStart(t *testing.T) {
	requireKurrentDB(t)
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: fastEnv(), KeepLeader: true}, 2)
	js := s.connectJS(t)
	id := orderIDOf(t, s.mustOrder(t, tokAlice, newKey(), res, "tok_visa"))
	s.waitAllCaughtUp(t, js)
	s.Stop()

	onPostgres := func(what string) string {
		t.Helper()
		env := append(s.env(), "BOOKING_EVENT_STORE=postgres")
		p, out := runProc(t, "booking serve on postgres ("+what+")", []string{"serve"}, env, 60*time.Second)
		if p.exitCode() == 0 {
			t.Fatalf("booking serve on postgres with %s: exit 0, want a refusal; output:\n%s", what, out)
		}
		return out.String()
	}
	out := onPostgres("KurrentDB positions")
	for _, want := range []string{"BOOKING_EVENT_STORE", "booking projections rebuild", projections.NameOrders + " (kurrentdb)", "DELETE FROM checkpoints",
		commands.FollowUpsName + " (kurrentdb)", "DELETE FROM notify_relays", "nats stream rm BOOKING"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal on postgres does not say %q:\n%s", want, out)
		}
	}

	// Do what it says for the database: rebuild on PostgreSQL (an empty
	// log there), reset the checkpoints. Stream BOOKING is left.
	rebuild := exec.Command(bookingBin, "projections", "rebuild", "--switch-backend")
	rebuild.Env = append(s.env(), "BOOKING_EVENT_STORE=postgres")
	if b, err := rebuild.CombinedOutput(); err != nil {
		t.Fatalf("booking projections rebuild on postgres: %v\n%s", err, b)
	}
	s.queryInt(t, `WITH c AS (DELETE FROM checkpoints RETURNING 1), r AS (DELETE FROM notify_relays RETURNING 1)
		SELECT (SELECT count(*) FROM c) + (SELECT count(*) FROM r)`)
	out = onPostgres("stream BOOKING filled from KurrentDB")
	if !strings.Contains(out, "stream BOOKING holds") || !strings.Contains(out, "kurrentdb") || !strings.Contains(out, "nats stream rm BOOKING") ||
		!strings.Contains(out, "$BOOKING_DATA_DIR/nats") {
		t.Errorf("refusal on postgres does not name stream BOOKING, its backend and the way out:\n%s", out)
	}

	// Back on KurrentDB: the checkpoints start from the beginning of its
	// log again (the workers are idempotent), the read models are rebuilt
	// live, the relay resumes after the stream's last message.
	s.Restart()
	s.waitAllCaughtUp(t, js)
	s.checkPaidOnce(t, id)
}

// TestKurrentDB_AnotherLogWithOldPositionsFailsAtStart: positions read from
// one KurrentDB log (checkpoints, read models, the relay) make booking
// serve pointed at another, shorter log of the same backend (a fresh
// server, a restored backup) refuse to start, naming every position beyond
// the new log's head and the way out, instead of skipping new events.
func TestKurrentDB_AnotherLogWithOldPositionsFailsAtStart(t *testing.T) {
	requireKurrentDB(t)
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: fastEnv(), KeepLeader: true}, 2)
	js := s.connectJS(t)
	orderIDOf(t, s.mustOrder(t, tokAlice, newKey(), res, "tok_visa"))
	s.waitAllCaughtUp(t, js)
	s.Stop()

	fresh := kurrentdbtest.StartProcess(t, doubleBin, filepath.Join(t.TempDir(), "fresh.log"))
	env := append(s.env(), "BOOKING_EVENT_STORE="+fresh.URL())
	p, out := runProc(t, "booking serve on a fresh KurrentDB", []string{"serve"}, env, 60*time.Second)
	if p.exitCode() == 0 {
		t.Fatalf("booking serve on a fresh KurrentDB with the old positions: exit 0, want a refusal; output:\n%s", out)
	}
	for _, want := range []string{"beyond the head of the event log", "BOOKING_EVENT_STORE", "booking projections rebuild",
		projections.NameOrders + " (", "DELETE FROM checkpoints", commands.FollowUpsName + " (", "DELETE FROM notify_relays",
		"nats stream rm BOOKING", "$BOOKING_DATA_DIR/nats"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("refusal on a fresh KurrentDB does not say %q:\n%s", want, out)
		}
	}
}
