package test

// The event store backend of the suite. By default booking serve runs on
// PostgreSQL. With BOOKING_TEST_BACKEND=kurrentdb every server of the suite
// runs on KurrentDB instead: the KurrentDB server double
// (eventstore/kurrentdb/kurrentdbtest, its cmd/kurrentdb-double) runs as a
// separate process per test, booking serve gets BOOKING_EVENT_STORE pointing
// at it, and the tests read the log through the kurrentdb store, so every
// count of events is taken from the same log the service wrote. PostgreSQL
// still holds read models, checkpoints, leases and the clock. `make
// test-kurrentdb` runs the end-to-end scenarios listed there this way.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/pgstore"
)

// backendEnv selects the suite's event store backend: "postgres" (empty)
// or "kurrentdb".
const backendEnv = "BOOKING_TEST_BACKEND"

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
	s.kdb = kurrentdbtest.StartProcess(t, doubleBin, filepath.Join(t.TempDir(), "kurrentdb.log"))
	s.eventStore = s.kdb.URL()
	t.Logf("booking serve runs on KurrentDB (the double at %s)", s.eventStore)
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
