package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84"
)

// urlWriter is the stdout of `booking provider-sim`: it passes on the URL
// of the line "booking: provider simulator on URL" (one Write) and drops
// everything else; it is safe for concurrent writes.
type urlWriter struct {
	once sync.Once
	url  chan string
}

func (w *urlWriter) Write(p []byte) (int, error) {
	if _, after, ok := strings.Cut(string(p), "provider simulator on "); ok {
		w.once.Do(func() { w.url <- strings.TrimSpace(after) })
	}
	return len(p), nil
}

// startProviderSim runs `booking provider-sim --data-dir dir` on a free port
// until the returned stop is called, and returns its URL.
func startProviderSim(t *testing.T, dir string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &urlWriter{url: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"provider-sim", "--addr", "127.0.0.1:0", "--data-dir", dir}, stdout, io.Discard)
	}()
	select {
	case url = <-stdout.url:
	case err := <-done:
		cancel()
		t.Fatalf("booking provider-sim exited: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("booking provider-sim printed no URL within 30 s")
	}
	stopped := false
	return url, func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("booking provider-sim after cancel = %v, want nil", err)
		}
	}
}

// simClient is stripe-go's client for the simulator at url, without
// retries of its own or logging.
func simClient(url string) *stripe.Client {
	return stripe.NewClient("sk_test_unchecked", stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(url), MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
}

func createParams() *stripe.PaymentIntentCreateParams {
	p := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(1500), Currency: stripe.String("eur"),
		PaymentMethod: stripe.String("tok_visa"), Confirm: stripe.Bool(true), PaymentMethodTypes: []*string{stripe.String("card")}}
	p.AddMetadata("order_id", "o1")
	p.SetIdempotencyKey("order-o1-1")
	return p
}

// TestProviderSimCmd_DataDir: `booking provider-sim --data-dir` keeps its
// PaymentIntents and idempotency keys across a restart in
// DIR/provider-sim, and refuses to start on a corrupt state file with a
// message naming the variable and the file.
func TestProviderSimCmd_DataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url, stop := startProviderSim(t, dir)
	t.Cleanup(stop)
	ctx := context.Background()
	first, err := simClient(url).V1PaymentIntents.Create(ctx, createParams())
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	stop()

	url, stop = startProviderSim(t, dir)
	client := simClient(url)
	if got, err := client.V1PaymentIntents.Retrieve(ctx, first.ID, nil); err != nil || got.Amount != 1500 || got.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("Retrieve(%s) after a restart = %+v, %v; want the PaymentIntent", first.ID, got, err)
	}
	again, err := client.V1PaymentIntents.Create(ctx, createParams())
	if err != nil || again.ID != first.ID {
		t.Fatalf("Create() repeat after a restart = %v, %v; want a replay of %s", again, err, first.ID)
	}
	stop()

	state := filepath.Join(dir, "provider-sim", "state.journal")
	if err := os.WriteFile(state, []byte("not a journal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(ctx, []string{"provider-sim", "--addr", "127.0.0.1:0", "--data-dir", dir}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "BOOKING_DATA_DIR") || !strings.Contains(err.Error(), state) {
		t.Fatalf("provider-sim on a corrupt state file = %v, want an error naming BOOKING_DATA_DIR and %s", err, state)
	}
	if err := run(ctx, []string{"provider-sim", "--search-lag=-1s"}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "BOOKING_PROVIDER_SIM_SEARCH_LAG") {
		t.Fatalf("provider-sim --search-lag -1s = %v, want an error naming BOOKING_PROVIDER_SIM_SEARCH_LAG", err)
	}
}
