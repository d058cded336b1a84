package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// benchAPI returns the API's handler over a fakeService that answers at
// once: what a benchmark of it measures is the HTTP layer alone (routing,
// middleware, authentication, decoding, the answer's encoding).
func benchAPI(f *fakeService) http.Handler {
	cfg := httpapi.Config{
		Tokens:           map[string]httpapi.Actor{tokAlice: {ID: "alice"}},
		RetryBudgetRate:  1e9,
		RetryBudgetBurst: 1 << 30,
		Ready:            func(context.Context) error { return nil },
	}
	return httpapi.New(cfg, f, f, slog.New(slog.DiscardHandler))
}

// benchPost serves POST path with body under a fixed key, b.N times.
func benchPost(b *testing.B, h http.Handler, path, body string, want int) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+tokAlice)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "bench-key-0001")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			b.Fatalf("POST %s = %d, want %d: %s", path, w.Code, want, w.Body)
		}
	}
}

// BenchmarkPostReservation is POST /v1/reservations answered 201.
func BenchmarkPostReservation(b *testing.B) {
	f := &fakeService{outcome: commands.Outcome{}}
	benchPost(b, benchAPI(f), "/v1/reservations", `{"show_id":"`+showID+`","quantity":2}`, http.StatusCreated)
}

// BenchmarkPostOrder is POST /v1/orders answered 201 with a confirmed order.
func BenchmarkPostOrder(b *testing.B) {
	f := &fakeService{}
	f.result.Order, f.result.Final = order(domain.OrderStatusConfirmed, domain.OutcomeSucceeded), true
	benchPost(b, benchAPI(f), "/v1/orders", orderBody, http.StatusCreated)
}

// BenchmarkProblem is a POST refused 400 with a problem document (RFC 9457).
func BenchmarkProblem(b *testing.B) {
	benchPost(b, benchAPI(&fakeService{}), "/v1/reservations", `{"show_id":"`+showID+`","quantity":0}`, http.StatusBadRequest)
}
