package httpapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5/middleware"
)

// A panic after the handler sent its status breaks the answer: the client
// gets an error reading it, never a 200 whose body ends early or carries a
// problem document after the handler's bytes.
func TestRecovererBreaksAnAnswerAlreadyStarted(t *testing.T) {
	t.Parallel()
	a := &api{log: slog.New(slog.DiscardHandler)}
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"items":[`)
		panic("boom")
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.recoverer(inner).ServeHTTP(middleware.NewWrapResponseWriter(w, r.ProtoMajor), r)
	}))
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	if err == nil {
		body, rerr := io.ReadAll(res.Body)
		res.Body.Close()
		if rerr == nil {
			t.Fatalf("answer read whole: status %d, body %q; want a broken answer", res.StatusCode, body)
		}
	}
}
