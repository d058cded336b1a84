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

	"github.com/retrysafe/booking/provider"
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

// TestProviderSimCmd_DataDir: `booking provider-sim --data-dir` keeps its
// charges across a restart in DIR/provider-sim, and refuses to start on a
// corrupt state file with a message naming the variable and the file.
func TestProviderSimCmd_DataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url, stop := startProviderSim(t, dir)
	t.Cleanup(stop)
	ctx := context.Background()
	first, err := provider.New(url, nil).CreateCharge(ctx, "order-o1-1", provider.NewChargeRequest(1500, "EUR", "tok_visa", "o1", 1))
	if err != nil {
		t.Fatalf("CreateCharge() = %v", err)
	}
	stop()

	url, stop = startProviderSim(t, dir)
	client := provider.New(url, nil)
	if got, err := client.GetCharge(ctx, first.ID); err != nil || got.Amount != 1500 {
		t.Fatalf("GetCharge(%s) after a restart = %+v, %v; want the charge", first.ID, got, err)
	}
	again, err := client.CreateCharge(ctx, "order-o1-1", provider.NewChargeRequest(1500, "EUR", "tok_visa", "o1", 1))
	if err != nil || again.ID != first.ID || !again.Replayed {
		t.Fatalf("CreateCharge() repeat after a restart = %s (replayed %v), %v; want a replay of %s", again.ID, again.Replayed, err, first.ID)
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
}
