package test

// Moving the event log between backends: `booking eventstore copy` from a
// live-built PostgreSQL log to the KurrentDB double and back, with the
// service carrying on on each (replays answer as before, a reservation held
// before the copy is ordered after it, rebuild equals live, NATS holds each
// published event once even after its duplicate window has passed).

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/internal/syncbuf"
)

// copyDigest finds the log digest `booking eventstore copy` prints.
var copyDigest = regexp.MustCompile(`log digest ([0-9a-f]+)`)

// copyLog runs `booking eventstore copy --from from --to to` with the
// service stopped. With kill, a first run in small batches is SIGKILLed at
// its first progress line (during the copy, unless the machine was fast
// enough to finish first: logged). Then it runs to the end, and once more:
// both complete runs must print the same log digest, which it returns.
func (s *server) copyLog(t *testing.T, from, to string, kill bool) string {
	t.Helper()
	args := []string{"eventstore", "copy", "--from", from, "--to", to}
	if kill {
		out := &syncbuf.Buffer{}
		p, err := startProc("booking eventstore copy", append(args, "--batch", "2", "--progress-every", "2"), s.env(), out)
		if err != nil {
			t.Fatal(err)
		}
		if !eventually(60*time.Second, func() bool { return strings.Contains(out.String(), "copied ") || p.hasExited() }) {
			t.Fatalf("booking eventstore copy printed no progress within 60 s:\n%s", out)
		}
		p.signalAndWait(syscall.SIGKILL, 10*time.Second)
		t.Logf("booking eventstore copy SIGKILLed (finished before the kill: %v):\n%s", strings.Contains(out.String(), "log digest"), out)
	}
	var digests []string
	for range 2 {
		var out *syncbuf.Buffer
		// A relay lease the stopped service left is refused until it passes.
		if !eventually(60*time.Second, func() bool {
			var p *proc
			p, out = runProc(t, "booking eventstore copy", args, s.env(), 3*time.Minute)
			return p.exitCode() == 0 || !strings.Contains(out.String(), "booking serve is running")
		}) {
			t.Fatalf("booking eventstore copy refused for 60 s:\n%s", out)
		}
		m := copyDigest.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("booking eventstore copy --from %s --to %s did not verify the copy:\n%s", from, to, out)
		}
		t.Logf("booking eventstore copy:\n%s", out)
		digests = append(digests, m[1])
	}
	if digests[0] != digests[1] {
		t.Errorf("log digests of two complete copies differ: %s, %s", digests[0], digests[1])
	}
	return digests[0]
}

// TestCopy_PostgresToKurrentDBAndBackServiceCarriesOn: a log built by the
// service on PostgreSQL (a show, an order, a reservation still held) is
// copied to KurrentDB, the first run SIGKILLed and the copy resumed; the
// service then runs on KurrentDB: the order's request repeated answers the
// same order, the held reservation is ordered, the read models equal a
// rebuild, and stream BOOKING holds each published event once, after the
// duplicate window has passed. Then the log is copied back to PostgreSQL
// and the service carries on there the same way.
func TestCopy_PostgresToKurrentDBAndBackServiceCarriesOn(t *testing.T) {
	skipOnKurrentDB(t, "it starts on PostgreSQL and moves to KurrentDB itself")
	t.Parallel()
	const window = 10 * time.Second // fastEnv's BOOKING_NATS_DUPLICATE_WINDOW
	bin := kurrentdbtest.BuildCommand(t)
	s, show, res := mustStartReserved(t, Options{Env: fastEnv()}, 2)
	js := s.connectJS(t)
	key := newKey()
	first := orderIDOf(t, s.mustOrder(t, tokAlice, key, res, "tok_visa"))
	held := s.mustReserve(t, tokAlice, show, 3)
	s.waitAllCaughtUp(t, js)

	// carryOn checks the service after a move: the first order's request
	// repeated answers it, a held reservation is ordered, everything
	// catches up with each published event in NATS once, and the log holds
	// orders orders, each paid once.
	carryOn := func(where, hold string, orders int) string {
		t.Helper()
		r := s.doCall(t, orderCall(tokAlice, key, res, "tok_visa"))
		wantStatus(t, r, http.StatusCreated)
		if got := orderIDOf(t, r); got != first {
			t.Errorf("%s: the first order's request repeated answered order %s, want %s", where, got, first)
		}
		id := orderIDOf(t, s.mustOrder(t, tokAlice, newKey(), hold, "tok_visa"))
		s.waitAllCaughtUp(t, js)
		s.checkOrders(t, tokAlice, orders, first, id)
		s.checkCharges(t, orders, 0)
		return id
	}
	// move stops the service, waits out NATS's duplicate window (so a
	// republished event would be stored twice), copies, and restarts on to.
	move := func(from, to string, kdb *kurrentdbtest.Process, kill bool) {
		t.Helper()
		s.Stop()
		stopped := time.Now()
		s.copyLog(t, from, to, kill)
		if wait := window + time.Second - time.Since(stopped); wait > 0 {
			time.Sleep(wait) // a duration to outlast, not a synchronization
		}
		s.kdb, s.eventStore = kdb, ""
		if kdb != nil {
			s.eventStore = kdb.URL()
		}
		s.log = openLog(t, s.db, s.eventStore)
		s.Restart()
	}

	kdb := kurrentdbtest.StartProcess(t, bin, filepath.Join(t.TempDir(), "kurrentdb.log"))
	move("postgres", kdb.URL(), kdb, true)
	second := carryOn("on KurrentDB", held, 2)
	live := s.rbSnapshot(t)
	if code, out := s.rbRebuild(t); code != 0 {
		t.Fatalf("booking projections rebuild on KurrentDB: exit %d\n%s", code, out)
	}
	rbCompare(t, "rebuild on KurrentDB after the copy", live, s.rbSnapshot(t))

	held = s.mustReserve(t, tokAlice, show, 1)
	s.waitAllCaughtUp(t, js)
	move(kdb.URL(), "postgres", nil, false)
	third := carryOn("back on PostgreSQL", held, 3)
	s.checkOrders(t, tokAlice, 3, first, second, third)
	s.wantAvailable(t, show, 4, "after ordering 2, 3 and 1 of 10 across two copies")
}
