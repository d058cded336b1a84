package httpapi

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
)

// TestOpenAPIDescribesEveryRoute fails when a route is added without being
// described in openapi.yaml.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	a := &api{webhooks: nopHandler{}}
	router := a.routes().(chi.Routes)
	spec := string(openAPISpec)
	n := 0
	err := chi.Walk(router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if route == "/openapi.yaml" || strings.HasSuffix(route, "/*") {
			return nil
		}
		n++
		if !strings.Contains(spec, "\n  "+route+":\n") {
			t.Errorf("openapi.yaml: route %s %s is not described", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 12 {
		t.Errorf("walked %d routes, want at least 12", n)
	}
}

type nopHandler struct{}

func (nopHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// TestMethodNotAllowedHasAllow: a 405 must carry Allow (RFC 9110 §15.5.6);
// its access line and metrics name the route template its path matched.
func TestMethodNotAllowedHasAllow(t *testing.T) {
	var logs bytes.Buffer
	type observed struct {
		route, method string
		code          int
	}
	var seen []observed
	a := &api{webhooks: nopHandler{}, log: slog.New(slog.NewTextHandler(&logs, nil)),
		observe: func(route, method string, code int, _ time.Duration) {
			seen = append(seen, observed{route, method, code})
		}}
	h := a.routes()
	for _, tt := range []struct{ method, path, route, allow string }{
		{"DELETE", "/v1/shows", "/v1/shows", "GET, POST"},
		{"PUT", "/v1/orders/ord_1", "/v1/orders/{id}", "GET"},
		{"GET", "/v1/orders/ord_1/cancel", "/v1/orders/{id}/cancel", "POST"},
	} {
		logs.Reset()
		seen = nil
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d with Allow %q, want 405 with Allow %q", tt.method, tt.path, rec.Code, rec.Header().Get("Allow"), tt.allow)
		}
		if want := []observed{{tt.route, tt.method, 405}}; !slices.Equal(seen, want) {
			t.Errorf("%s %s observed %v, want %v", tt.method, tt.path, seen, want)
		}
		if want := fmt.Sprintf(`msg="http request" method=%s route=%s status=405`, tt.method, tt.route); !strings.Contains(logs.String(), want) {
			t.Errorf("%s %s logged %q, want a line with %q", tt.method, tt.path, logs.String(), want)
		}
	}
}
