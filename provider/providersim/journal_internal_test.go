package providersim

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/retrysafe/booking/provider"
)

// TestCommitThatCannotBeSavedAnswers500AndRecordsNothing: when the state
// file cannot be written (here /dev/full: ENOSPC, and the write cannot be
// cut off either), the charge is not made, the key is not used up, every
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

	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/v1/charges",
			bytes.NewReader(provider.NewChargeRequest(1500, "EUR", TokenVisa, "o1", 1).Body()))
		req.Header.Set(provider.HeaderIdempotencyKey, "order-o1-1")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.Code
	}
	for i := range 2 {
		if code := post(); code != http.StatusInternalServerError {
			t.Fatalf("POST /v1/charges #%d with an unwritable state file = %d, want 500", i+1, code)
		}
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d charges after failed saves, want 0", n)
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
		t.Fatalf("%d charges after a restart, want 0", n)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err != nil {
		t.Fatal(err)
	}
}
