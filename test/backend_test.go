package test

// The event store backend of the suite. By default booking serve runs on
// PostgreSQL. With BOOKING_TEST_BACKEND=kurrentdb every server of the suite
// runs on KurrentDB instead: the KurrentDB server double
// (eventstore/kurrentdb/kurrentdbtest, its cmd/kurrentdb-double) runs as a
// separate process per test, booking serve gets BOOKING_EVENT_STORE pointing
// at it, and the tests read the log through the kurrentdb store, so every
// count of events is taken from the same log the service wrote. PostgreSQL
// still holds read models, checkpoints, leases and the clock. `make
// test-kurrentdb` runs the end-to-end scenarios listed there this way, on a
// three-node cluster double (BOOKING_TEST_KURRENTDB_NODES=3, gossip seeds in
// BOOKING_EVENT_STORE) whose leader the harness stops once during each test
// (BOOKING_TEST_KURRENTDB_ELECTION=1, electMidRun): the scenario's own
// checks and its final invariant audit hold through the election.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/internal/tick"
)

// backendEnv selects the suite's event store backend: "postgres" (empty)
// or "kurrentdb".
const backendEnv = "BOOKING_TEST_BACKEND"

// nodesEnv sets the number of nodes of the KurrentDB double (default 1);
// electionEnv, set to 1, makes the harness stop the leader once during each
// test that does not keep it (Options.KeepLeader).
const (
	nodesEnv    = "BOOKING_TEST_KURRENTDB_NODES"
	electionEnv = "BOOKING_TEST_KURRENTDB_ELECTION"
)

// electionDelay is how long the double's cluster goes without a leader
// after the harness stops it (KurrentDB's LeaderElectionTimeoutMs).
const electionDelay = time.Second

// onKurrentDB reports whether the suite runs booking serve on KurrentDB.
func onKurrentDB() bool { return os.Getenv(backendEnv) == "kurrentdb" }

// doubleBin is the KurrentDB double's binary TestMain built (only on KurrentDB).
var doubleBin string

// buildBackend builds what the backend needs into dir (TestMain).
func buildBackend(dir string) error {
	switch b := os.Getenv(backendEnv); b {
	case "", "postgres":
		return nil
	case "kurrentdb":
		bin, err := kurrentdbtest.Build(dir)
		if err != nil {
			return err
		}
		doubleBin = bin
		return nil
	default:
		return fmt.Errorf("%s=%q: want postgres or kurrentdb", backendEnv, b)
	}
}

// startBackend starts the test's KurrentDB double (on KurrentDB; nothing on
// PostgreSQL), keeping its log in a file so it survives a restart of the
// double. The double is killed when t ends, after the server's cleanups
// registered later. It sets s.eventStore.
func (s *server) startBackend(t *testing.T) {
	t.Helper()
	if !onKurrentDB() {
		return
	}
	nodes := 1
	if v := os.Getenv(nodesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of nodes, 1 or more", nodesEnv, v)
		}
		nodes = n
	}
	s.kdb = kurrentdbtest.StartProcessWith(t, doubleBin, kurrentdbtest.ProcessOptions{
		DataFile: filepath.Join(t.TempDir(), "kurrentdb.log"), Nodes: nodes, ElectionDelay: electionDelay,
	})
	s.eventStore = s.kdb.URL()
	t.Logf("booking serve runs on KurrentDB (the double at %s, %d node(s))", s.eventStore, nodes)
	if nodes > 1 && os.Getenv(electionEnv) == "1" && !s.opts.KeepLeader {
		s.electMidRun(t)
	}
}

// electMidRun stops the double's leader once, in the middle of the test:
// when the service has written a few records, or 5 s after the start at
// the latest; the others elect a new leader after the election delay, and
// 2 s later the stopped node starts again and follows. It gives up quietly
// if the double stops answering (a test that kills it) and ends with the
// test.
func (s *server) electMidRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		st, err := s.kdb.Status()
		if err != nil {
			return
		}
		base, deadline := st.Records, time.Now().Add(5*time.Second)
		for {
			if tick.Sleep(ctx, 100*time.Millisecond) != nil {
				return
			}
			if st, err = s.kdb.Status(); err != nil {
				return
			}
			if st.Records >= base+20 || time.Now().After(deadline) {
				break
			}
		}
		stopped, err := s.kdb.StopLeader()
		if err != nil {
			return
		}
		t.Logf("harness: stopped the KurrentDB leader (node %d) after %d records; an election follows", stopped, st.Records)
		if tick.Sleep(ctx, electionDelay+2*time.Second) != nil {
			return
		}
		if err := s.kdb.StartNode(stopped); err == nil {
			st, _ := s.kdb.Status()
			t.Logf("harness: node %d started again; the leader is node %d", stopped, st.Leader)
		}
	}()
}

// openLog returns the event log the service writes, read through
// eventstore.Store: pgstore on the test database, or the kurrentdb store on
// the test's double (closed when t ends).
func openLog(t testing.TB, db *pgxpool.Pool, eventStore string) eventstore.Store {
	if eventStore == "" {
		return pgstore.New(db)
	}
	s, err := kurrentdb.New(eventStore)
	if err != nil {
		t.Fatalf("kurrentdb.New(%s): %v", eventStore, err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("the KurrentDB double does not answer: %v", err)
	}
	return s
}

// skipOnKurrentDB skips a test that is about PostgreSQL as the event store
// when the suite runs on KurrentDB.
func skipOnKurrentDB(t *testing.T, why string) {
	t.Helper()
	if onKurrentDB() {
		t.Skipf("%s=kurrentdb: %s", backendEnv, why)
	}
}
