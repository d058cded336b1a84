package providersim

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommitThatCannotBeSavedAnswers500AndRecordsNothing: when the state
// file cannot be written (here /dev/full: ENOSPC, and the write cannot be
// cut off either), no PaymentIntent is made, the key is not used up, every
// later commit is refused too, and a restart reads a file without it.
func TestCommitThatCannotBeSavedAnswers500AndRecordsNothing(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	dir := t.TempDir()
	s, err := Open(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.mu.Lock()
	s.journal.f.Close()
	s.journal.f = full
	s.mu.Unlock()

	form := url.Values{"amount": {"1500"}, "currency": {"eur"}, "payment_method": {TokenVisa}, "confirm": {"true"},
		"payment_method_types[]": {"card"}}
	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/v1/payment_intents", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(headerIdempotencyKey, "order-o1-1")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.Code
	}
	for i := range 2 {
		if code := post(); code != http.StatusInternalServerError {
			t.Fatalf("POST /v1/payment_intents #%d with an unwritable state file = %d, want 500", i+1, code)
		}
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d PaymentIntents after failed saves, want 0", n)
	}
	s.mu.Lock()
	_, used := s.keys["order-o1-1"]
	s.mu.Unlock()
	if used {
		t.Fatal("the key is used up after a failed save, want it free")
	}
	s.Close()

	s, err = Open(Config{DataDir: dir})
	if err != nil {
		t.Fatalf("Open() after failed saves = %v", err)
	}
	defer s.Close()
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d PaymentIntents after a restart, want 0", n)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err != nil {
		t.Fatal(err)
	}
}
