package kurrentdb

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/retrysafe/booking/eventstore"
)

// The current revision of a WrongExpectedVersion reaches client v4's
// callers only in this message text (AppendToStream formats it); pinning
// the client version keeps the format, and this test notices a change.
func TestParseActual(t *testing.T) {
	tests := []struct {
		msg    string
		want   int64
		wantOK bool
	}{
		{"[ErrorCodeWrongExpectedVersion] an append request failed the optimistic concurrency on the server: wrong expected version: expecting '5' but got '0'", 0, true},
		{"wrong expected version: expecting 'no_stream' but got '12'", 12, true},
		{"wrong expected version: expecting 'stream_exists' but got 'no_stream'", -1, true},
		{"wrong expected version: expecting '1' but got '9223372036854775806'", 9223372036854775806, true},
		{"wrong expected version", 0, false},
		{"wrong expected version: expecting '1' but got 'x'", 0, false},
		{"wrong expected version: expecting '1' but got '-3'", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseActual(tt.msg)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseActual(%q) = %d, %v, want %d, %v", tt.msg, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"esdb://admin:changeit@host:2113?tls=true": "esdb://admin:xxxxx@host:2113?tls=true",
		"kurrentdb://a:b@h1:2113,h2:2113":          "kurrentdb://a:xxxxx@h1:2113,h2:2113",
		"esdb://host:2113?tls=false":               "esdb://host:2113?tls=false",
		"esdb+discover://u:p%40ss@cluster.example": "esdb+discover://u:xxxxx@cluster.example",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConnLogsOutageOnceThenConnected: while the server is down the client
// is replaced after every failed call; the first replacement is logged at
// WARN, the next ones at DEBUG only; after two clients in a row could not
// connect the server is known unreachable (calls fail fast, one probe a
// second); the first call that succeeds logs "connected" at INFO, once,
// and a new outage warns again.
func TestConnLogsOutageOnceThenConnected(t *testing.T) {
	cfg, err := parseConnectionString("esdb://127.0.0.1:1?tls=false&maxDiscoverAttempts=2&discoveryInterval=10") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	c := &conn{cfg: *cfg, logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	defer c.close()
	ctx := context.Background()
	fail := func(ctx context.Context, c *esdb.Client) error { // no node reachable: the client is replaced
		_, err := c.ReadStream(ctx, "s", esdb.ReadStreamOptions{}, 1)
		return err
	}
	ok := func(context.Context, *esdb.Client) error { return nil }
	count := func(s string) int { return strings.Count(logs.String(), s) }
	for range 5 {
		if err := c.call(ctx, fail); err == nil {
			t.Fatal("a call to an unreachable server returned nil")
		}
	}
	if n, w := count("replacing the client"), count("level=WARN"); n != 1 || w != 1 {
		t.Errorf("5 replacements while down: %d logged (%d at WARN), want 1 at WARN:\n%s", n, w, logs.String())
	}
	if !c.unreachable() {
		t.Error("unreachable() = false after the replacements")
	}
	c.mu.Lock()
	c.lastProbe = time.Time{} // the next call is a probe
	c.mu.Unlock()
	for range 2 {
		if err := c.call(ctx, ok); err != nil {
			t.Fatal(err)
		}
	}
	if n := count("level=INFO msg=\"kurrentdb: connected\""); n != 1 || c.unreachable() {
		t.Errorf("after 2 successful calls: %d \"connected\" at INFO (want 1), unreachable %v:\n%s", n, c.unreachable(), logs.String())
	}
	if err := c.call(ctx, fail); err == nil {
		t.Fatal("a panicking call returned nil")
	}
	if w := count("level=WARN"); w != 2 {
		t.Errorf("a new outage: %d warnings in all, want 2:\n%s", w, logs.String())
	}
}

// TestResubscribeLogRateLimited: while the server stays down, the first
// resubscription of a subscription is logged at INFO and the next ones,
// within the rate limit's interval (an hour here), at DEBUG only, each
// with its attempt number, until the reconnect window passes.
func TestResubscribeLogRateLimited(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s, err := New("esdb://127.0.0.1:1?tls=false&maxDiscoverAttempts=2&discoveryInterval=10", // nothing listens on port 1
		WithBackoff(time.Millisecond, 5*time.Millisecond), WithReconnectWindow(2*time.Second),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.resubscribeLogInterval = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = s.SubscribeAll(ctx, eventstore.Position{}, func(context.Context, []eventstore.RecordedEvent) error {
		t.Error("an unreachable server delivered events")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "unreachable for over 2s") {
		t.Fatalf("SubscribeAll with the server down = %v, want it to give up after the reconnect window", err)
	}
	var info, debug []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, `msg="kurrentdb: subscription to $all dropped, resubscribing"`) {
			continue
		}
		switch {
		case strings.Contains(l, "level=INFO"):
			info = append(info, l)
		case strings.Contains(l, "level=DEBUG"):
			debug = append(debug, l)
		default:
			t.Errorf("resubscription logged at neither INFO nor DEBUG: %s", l)
		}
	}
	if len(info) != 1 || !strings.Contains(info[0], " attempt=1 suppressed=0 ") {
		t.Errorf("INFO resubscription lines = %q, want one, for attempt 1", info)
	}
	if len(debug) == 0 {
		t.Fatalf("no resubscription at DEBUG: the server was retried once only in 2s:\n%s", logs.String())
	}
	for i, l := range debug {
		if want := fmt.Sprintf(" attempt=%d ", i+2); !strings.Contains(l, want) {
			t.Errorf("DEBUG resubscription line %d = %q, want%s", i+1, l, want)
		}
	}
}

// TestAgainKeepsTryingWhileTheClientIsReplaced: past its attempts, a call
// that failed with a transient error (here cut off by its client's
// replacement, as calls in flight are while a cluster changes leader) is
// tried again within the failover window while the client is being
// replaced and nothing has answered since; not once the server is known
// unreachable, nor when no client was replaced, nor past the window, nor
// for an error that will not pass or a client that panicked.
func TestAgainKeepsTryingWhileTheClientIsReplaced(t *testing.T) {
	cut := status.Error(codes.Canceled, "grpc: the client connection is closing")
	for _, tt := range []struct {
		name     string
		down     bool
		failures int
		since    time.Duration
		err      error
		want     bool
	}{
		{"replaced, nothing answered since", true, 0, time.Second, cut, true},
		{"replaced after a client could not connect", true, 1, time.Second, cut, true},
		{"known unreachable", true, 2, time.Second, cut, false},
		{"no client replaced", false, 0, time.Second, cut, false},
		{"past the failover window", true, 0, 11 * time.Second, cut, false},
		{"an error that will not pass", true, 0, time.Second, fmt.Errorf("bad request"), false},
		{"a client that panicked", true, 0, time.Second, &clientPanicError{value: "unexpected reply"}, false},
	} {
		s := &Store{conn: &conn{down: tt.down, failures: tt.failures}, failoverWindow: 10 * time.Second}
		if got := s.again(context.Background(), 3, 3, time.Now().Add(-tt.since), tt.err); got != tt.want {
			t.Errorf("%s: again after the last attempt = %v, want %v", tt.name, got, tt.want)
		}
	}
	s := &Store{conn: &conn{}, failoverWindow: 10 * time.Second}
	if !s.again(context.Background(), 1, 3, time.Now(), cut) {
		t.Error("again within the attempts = false, want true")
	}
}
