package kurrentdb_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// realURLEnv names the variable with the connection string of a real
// KurrentDB server to run the conformance suite against.
const realURLEnv = "BOOKING_TEST_KURRENTDB_URL"

// conformant adds to a Store the conformance suite's statement of why
// KurrentDB cannot take the cases that hold an append open.
type conformant struct{ *kurrentdb.Store }

var _ storetest.HoldOpenUnsupported = conformant{}

// HoldOpenUnsupported implements storetest.HoldOpenUnsupported.
func (conformant) HoldOpenUnsupported() string {
	return "KurrentDB has no client-visible transactions: an append is one request that its single writer " +
		"commits whole, in log order, and readers see only committed (replicated) records; " +
		"TestFaults/\"a subscriber never passes an append that is not replicated yet\" checks the same " +
		"guarantee with the double holding replication back"
}

var _ storetest.MultiAppendNotAtomic = conformant{}

// MultiAppendNotAtomic implements storetest.MultiAppendNotAtomic.
func (conformant) MultiAppendNotAtomic() string {
	return "KurrentDB client v4 has no atomic multi-stream append: AppendMulti appends part by part, so a call " +
		"that fails or is cut short can leave its first parts written; repeating the call (the service's " +
		"recovery repeats interrupted work with the same event ids) writes the rest, which the case " +
		"\"a multi-stream append cut short is completed by its repeat\" checks"
}

// doubleBin is the double's command, built once by TestMain.
var doubleBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kurrentdb-double-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if doubleBin, err = kurrentdbtest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// newStore returns a Store on url, closed when tb ends.
func newStore(tb testing.TB, url string, opts ...kurrentdb.Option) *kurrentdb.Store {
	tb.Helper()
	s, err := kurrentdb.New(url, opts...)
	if err != nil {
		tb.Fatalf("kurrentdb.New(%s) = %v", url, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestStore runs the conformance suite on the double run as its own
// process, one per case, as a real server would be: on a busy machine the
// race-instrumented client and server sharing this process, and cases
// sharing a log (ReadAll with a limit of 1 pages through every other case's
// events), were too slow. TestKurrentDB covers stores sharing a log.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		p := kurrentdbtest.StartProcess(t, doubleBin, "")
		return conformant{newStore(t, p.URL())}
	}, storetest.WithoutClock())
}

func TestStoreOnRealServer(t *testing.T) {
	url := os.Getenv(realURLEnv)
	if url == "" {
		t.Skipf("missing %s (no KurrentDB server to run against)", realURLEnv)
	}
	s := newStore(t, url)
	if err := s.Ping(testContext(t)); err != nil {
		t.Fatalf("Ping() = %v", err)
	}
	storetest.Run(t, func(t *testing.T) eventstore.Store { return conformant{s} }, storetest.WithoutClock())
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newEvents(n int) []eventstore.EventData {
	out := make([]eventstore.EventData, n)
	for i := range out {
		out[i] = eventstore.EventData{
			ID: uuid.Must(uuid.NewV7()).String(), Type: "Tested",
			Data: fmt.Appendf(nil, `{"i":%d}`, i), Metadata: []byte(`{"actor":"t"}`),
		}
	}
	return out
}

// ownEvents reads the whole log with ReadAll and returns the events of the
// streams whose names start with prefix.
func ownEvents(t testing.TB, ctx context.Context, s eventstore.Store, prefix string) []eventstore.RecordedEvent {
	t.Helper()
	var (
		out   []eventstore.RecordedEvent
		after eventstore.Position
	)
	for {
		page, err := s.ReadAll(ctx, after, 100)
		if err != nil {
			t.Fatalf("ReadAll(%s, 100) = %v", after, err)
		}
		if len(page) == 0 {
			return out
		}
		for _, e := range page {
			if strings.HasPrefix(e.Stream, prefix) {
				out = append(out, e)
			}
			after = e.Position
		}
	}
}

// recorder collects what a SubscribeAll delivers for streams with a prefix.
type recorder struct {
	prefix string
	mu     sync.Mutex
	events []eventstore.RecordedEvent
	all    []eventstore.Position // every delivered position, in order
	wake   chan struct{}
	done   chan error
	cancel context.CancelFunc
}

// watchStore opens a store on url that retries with backoff from lo to hi
// and logs to the returned handler, and subscribes to its log from the
// start for the streams named prefix…; it returns them with the test's
// context.
func watchStore(t *testing.T, url string, lo, hi time.Duration, prefix string) (*kurrentdb.Store, context.Context, *recorder, *countingHandler) {
	t.Helper()
	logs := &countingHandler{}
	s := newStore(t, url, kurrentdb.WithBackoff(lo, hi), kurrentdb.WithLogger(slog.New(logs)))
	ctx := testContext(t)
	return s, ctx, subscribe(t, ctx, s, eventstore.Position{}, prefix), logs
}

func subscribe(t *testing.T, ctx context.Context, s eventstore.Store, after eventstore.Position, prefix string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{prefix: prefix, wake: make(chan struct{}, 1), done: make(chan error, 1), cancel: cancel}
	go func() {
		r.done <- s.SubscribeAll(ctx, after, func(_ context.Context, batch []eventstore.RecordedEvent) error {
			r.mu.Lock()
			for _, e := range batch {
				r.all = append(r.all, e.Position)
				if strings.HasPrefix(e.Stream, r.prefix) {
					r.events = append(r.events, e)
				}
			}
			r.mu.Unlock()
			select {
			case r.wake <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; !errors.Is(err, context.Canceled) {
			t.Errorf("SubscribeAll = %v, want context.Canceled after cancel", err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := 1; i < len(r.all); i++ {
			if !r.all[i-1].Less(r.all[i]) {
				t.Errorf("SubscribeAll delivered %s after %s, want strictly increasing positions", r.all[i], r.all[i-1])
			}
		}
	})
	return r
}

func (r *recorder) snapshot() []eventstore.RecordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventstore.RecordedEvent(nil), r.events...)
}

// waitFor waits until at least n events were delivered and returns them.
func (r *recorder) waitFor(t *testing.T, ctx context.Context, n int) []eventstore.RecordedEvent {
	t.Helper()
	for {
		if got := r.snapshot(); len(got) >= n {
			return got
		}
		select {
		case <-r.wake:
		case err := <-r.done:
			r.done <- err
			t.Fatalf("SubscribeAll ended with %v after %d of %d events", err, len(r.snapshot()), n)
		case <-ctx.Done():
			t.Fatalf("SubscribeAll delivered %d of %d events before %v", len(r.snapshot()), n, ctx.Err())
		}
	}
}

func TestConnectionStrings(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		wantErr string // substring; empty means accepted
	}{
		{"esdb single node", "esdb://127.0.0.1:2113?tls=false", ""},
		{"esdb cluster seeds", "esdb://admin:changeit@node1:2113,node2:2113,node3:2113?tls=true", ""},
		{"esdb+discover", "esdb+discover://cluster.example.com:2113", ""},
		{"kurrentdb is rewritten to esdb", "kurrentdb://admin:changeit@127.0.0.1:2113?tls=false", ""},
		{"kurrentdb+discover", "kurrentdb+discover://cluster.example.com", ""},
		{"another scheme", "postgres://user:secret@host/db", "want esdb://"},
		{"a bad setting", "kurrentdb://user:secret@127.0.0.1:2113?tls=maybe", "tls"},
		{"no host", "esdb://", "host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := kurrentdb.New(tt.url)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New(%s) = %v, want nil", tt.url, err)
				}
				s.Close()
				if !kurrentdb.IsConnectionString(tt.url) {
					t.Errorf("IsConnectionString(%s) = false, want true", tt.url)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New(%s) = %v, want an error mentioning %q", tt.url, err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("New(%s) error %q shows the password", tt.url, err)
			}
		})
	}
	if kurrentdb.IsConnectionString("postgres") {
		t.Errorf("IsConnectionString(postgres) = true, want false")
	}
}

func TestKurrentDB(t *testing.T) {
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
	s := newStore(t, srv.URL())

	t.Run("system names are refused", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		bad := []struct {
			stream string
			events []eventstore.EventData
		}{
			{"$users", newEvents(1)},
			{"$$plain", newEvents(1)},
			{"plain-" + uuid.NewString(), []eventstore.EventData{{ID: uuid.NewString(), Type: "$metadata", Data: []byte(`{}`)}}},
		}
		for _, b := range bad {
			if _, err := s.Append(ctx, b.stream, eventstore.Any(), b.events...); err == nil || errors.Is(err, eventstore.ErrWrongExpectedRevision) {
				t.Errorf("Append(%s, type %s) = %v, want a validation error", b.stream, b.events[0].Type, err)
			}
		}
		if _, err := s.ReadStream(ctx, "$$x", 0, 0); err == nil {
			t.Errorf("ReadStream($$x) = nil error, want a refusal")
		}
		if err := s.Truncate(ctx, "$x", 1); err == nil {
			t.Errorf("Truncate($x) = nil error, want a refusal")
		}
	})

	t.Run("read all, subscribe all and head skip system events", func(t *testing.T) {
		t.Parallel()
		// A log of its own: the test reads ReadAll pages with a limit of 1.
		srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		s, raw := newStore(t, srv.URL()), rawClient(t, srv.URL())
		ctx := testContext(t)
		run := "sys-" + uuid.NewString()
		start, err := s.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sub := subscribe(t, ctx, s, start, run)
		first := newEvents(2)
		storetest.MustAppend(t, ctx, s, run+"-a", eventstore.NoStream(), first...)
		// A page's worth of system events, a $metadata event (from
		// Truncate) and a tombstone ($streamDeleted in a user stream).
		for i := range 70 {
			if _, err := srv.AppendSystemEvent("$stats-"+run, "$statsCollected", fmt.Appendf(nil, `{"i":%d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Truncate(ctx, run+"-a", 1); err != nil {
			t.Fatal(err)
		}
		dead := newEvents(1)
		storetest.MustAppend(t, ctx, s, run+"-dead", eventstore.NoStream(), dead...)
		if _, err := raw.TombstoneStream(ctx, run+"-dead", esdb.TombstoneStreamOptions{ExpectedRevision: esdb.Revision(0)}); err != nil {
			t.Fatal(err)
		}
		head, err := s.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		second := newEvents(1)
		storetest.MustAppend(t, ctx, s, run+"-b", eventstore.NoStream(), second...)

		// Head skipped the tombstone back to the last user event.
		next, err := s.ReadAll(ctx, head, 100)
		if err != nil || len(next) == 0 || next[0].Stream != run+"-b" {
			t.Errorf("ReadAll(Head() before the last append) = %v, %v, want %s-b's event first", next, err, run)
		}
		got := sub.waitFor(t, ctx, 4)
		want := append(append(storetest.IDs(first), storetest.IDs(dead)...), storetest.IDs(second)...)
		if diff := cmp.Diff(want, storetest.IDs(got)); diff != "" {
			t.Errorf("SubscribeAll own events mismatch (-want +got):\n%s", diff)
		}
		for _, e := range got {
			if strings.HasPrefix(e.Type, "$") || strings.HasPrefix(e.Stream, "$") {
				t.Errorf("SubscribeAll delivered system event %s of %s", e.Type, e.Stream)
			}
		}
		// ReadAll with a limit of 1 pages past the 70 system events.
		page, err := s.ReadAll(ctx, got[1].Position, 1)
		if err != nil || len(page) != 1 || page[0].Stream != run+"-dead" {
			t.Errorf("ReadAll(after %s-a's last event, 1) = %v, %v, want the event of %s-dead", run, page, err, run)
		}
	})

	t.Run("a subscription from the zero position starts at the start of the log", func(t *testing.T) {
		t.Parallel()
		own := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		st := newStore(t, own.URL())
		ctx := testContext(t)
		events := newEvents(3)
		storetest.MustAppend(t, ctx, st, "early", eventstore.NoStream(), events...)
		sub := subscribe(t, ctx, st, eventstore.Position{}, "early")
		if diff := cmp.Diff(storetest.IDs(events), storetest.IDs(sub.waitFor(t, ctx, 3))); diff != "" {
			t.Errorf("SubscribeAll(0/0) mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("unavailable answers are retried as the same append", func(t *testing.T) {
		own := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		st := newStore(t, own.URL())
		ctx := testContext(t)
		own.FailNext(kurrentdbtest.MethodAppend, 2, codes.Unavailable, "Server Is Not Ready")
		events := newEvents(2)
		res := storetest.MustAppend(t, ctx, st, "retried", eventstore.NoStream(), events...)
		got, err := st.ReadStream(ctx, "retried", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(storetest.IDs(events), storetest.IDs(got)); diff != "" {
			t.Errorf("ReadStream mismatch (-want +got):\n%s", diff)
		}
		if res.NextRevision != 1 || res.Position != got[1].Position {
			t.Errorf("Append = %+v, want revision 1 at %s", res, got[1].Position)
		}
	})

	t.Run("an unexpected reply that makes the client panic is recovered and retried", func(t *testing.T) {
		own := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
		st := newStore(t, own.URL())
		ctx := testContext(t)
		events := newEvents(2)
		storetest.MustAppend(t, ctx, st, "odd", eventstore.NoStream(), events...)
		own.SendUnexpectedReply(1)
		got, err := st.ReadStream(ctx, "odd", 0, 0)
		if err != nil {
			t.Fatalf("ReadStream after an unexpected reply = %v, want the events", err)
		}
		if diff := cmp.Diff(storetest.IDs(events), storetest.IDs(got)); diff != "" {
			t.Errorf("ReadStream mismatch (-want +got):\n%s", diff)
		}
		own.SendUnexpectedReply(10)
		if _, err := st.ReadStream(ctx, "odd", 0, 0); err == nil || !strings.Contains(err.Error(), "panicked") {
			t.Errorf("ReadStream with only unexpected replies = %v, want the recovered panic", err)
		}
	})

	t.Run("a repeat of events truncation hides succeeds with a zero position", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		stream := "hidden-" + uuid.NewString()
		events := newEvents(2)
		storetest.MustAppend(t, ctx, s, stream, eventstore.NoStream(), events...)
		storetest.MustAppend(t, ctx, s, stream, eventstore.Exact(1), newEvents(1)...)
		if err := s.Truncate(ctx, stream, 2); err != nil {
			t.Fatal(err)
		}
		res := storetest.MustAppend(t, ctx, s, stream, eventstore.NoStream(), events...)
		if want := (eventstore.AppendResult{NextRevision: 1}); res != want {
			t.Errorf("Append(repeat of truncated events) = %+v, want %+v", res, want)
		}
		res = storetest.MustAppend(t, ctx, s, stream, eventstore.Exact(2), newEvents(1)...)
		if res.NextRevision != 3 || res.Position.IsZero() {
			t.Errorf("Append(exact 2) after the truncated repeat = %+v, want revision 3 with a position", res)
		}
	})

	t.Run("a cancelled context ends calls at once", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Append(ctx, "cancelled-"+uuid.NewString(), eventstore.Any(), newEvents(1)...); !errors.Is(err, context.Canceled) {
			t.Errorf("Append with a cancelled context = %v, want context.Canceled", err)
		}
		if _, err := s.ReadStream(ctx, "cancelled", 0, 0); !errors.Is(err, context.Canceled) {
			t.Errorf("ReadStream with a cancelled context = %v, want context.Canceled", err)
		}
		if err := s.SubscribeAll(ctx, eventstore.Position{}, func(context.Context, []eventstore.RecordedEvent) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("SubscribeAll with a cancelled context = %v, want context.Canceled", err)
		}
	})

	t.Run("a closed store refuses calls", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, srv.URL())
		st.Close()
		if _, err := st.ReadStream(testContext(t), "x", 0, 0); !errors.Is(err, kurrentdb.ErrClosed) {
			t.Errorf("ReadStream after Close = %v, want ErrClosed", err)
		}
	})
}

// rawClient returns a silent client library client for url.
func rawClient(t testing.TB, url string) *esdb.Client {
	t.Helper()
	cfg, err := esdb.ParseConnectionString(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = esdb.NoopLogging()
	c, err := esdb.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
