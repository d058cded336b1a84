package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestOpenAPIDescribesEveryRoute fails when a route is added without being
// described in openapi.yaml.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	a := &api{metrics: nopHandler{}, webhooks: nopHandler{}}
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

// TestMethodNotAllowedHasAllow: a 405 must carry Allow (RFC 9110 §15.5.6).
func TestMethodNotAllowedHasAllow(t *testing.T) {
	a := &api{metrics: nopHandler{}, webhooks: nopHandler{}}
	rec := httptest.NewRecorder()
	a.routes().ServeHTTP(rec, httptest.NewRequest("DELETE", "/v1/shows", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") == "" {
		t.Errorf("DELETE /v1/shows = %d with Allow %q, want 405 with Allow", rec.Code, rec.Header().Get("Allow"))
	}
}
