package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/domain"
)

// TestHEADAnswersAsGET: HEAD on a GET route is the GET without a body (RFC
// 9110 §9.3.2): the same status and headers, Content-Length included,
// behind the same authentication, with problem answers' headers, counted
// in the metrics as HEAD on the route template. HEAD on a route without
// GET is 405 like any other method. Over a real server, since net/http
// drops a HEAD answer's body.
func TestHEADAnswersAsGET(t *testing.T) {
	t.Parallel()
	type observed struct {
		route, method string
		code          int
	}
	var mu sync.Mutex
	var seen []observed
	f := &fakeService{order: order(domain.OrderStatusConfirmed, domain.OrderStatusConfirmed)}
	cfg := httpapi.Config{
		Tokens:           map[string]httpapi.Actor{tokAlice: {ID: "alice"}},
		RetryBudgetRate:  1000,
		RetryBudgetBurst: 1000,
		Ready:            func(context.Context) error { return nil },
		ObserveRequest: func(route, method string, code int, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, observed{route, method, code})
		},
	}
	srv := httptest.NewServer(httpapi.New(cfg, f, f, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)

	do := func(method, path, token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s %s: read body: %v", method, path, err)
		}
		return res, body
	}

	// awaitObserved waits until the metrics saw a request of method (the
	// access log observes once the handler returned, which may be after the
	// client read the answer) and returns what they saw.
	awaitObserved := func(method string) []observed {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			got := slices.Clone(seen)
			mu.Unlock()
			if slices.ContainsFunc(got, func(o observed) bool { return o.method == method }) || time.Now().After(deadline) {
				return got
			}
		}
	}

	for _, tt := range []struct {
		name, path, token string
		status            int
		route             string
		headers           []string // headers that must be equal on GET and HEAD
	}{
		{"an order is 200", "/v1/orders/" + orderID, tokAlice, 200, "/v1/orders/{id}", []string{"Content-Type", "Content-Length", "Cache-Control"}},
		{"a show is 200", "/v1/shows/" + showID, tokAlice, 200, "/v1/shows/{id}", []string{"Content-Type", "Content-Length"}},
		{"the liveness probe is 200", "/healthz", "", 200, "/healthz", []string{"Content-Type", "Content-Length"}},
		{"no token is 401 with the challenge", "/v1/orders/" + orderID, "", 401, "/v1/orders/{id}",
			[]string{"Content-Type", "Content-Length", "WWW-Authenticate"}},
		{"an unknown token is 401", "/v1/shows", "tok-mallory", 401, "/v1/shows", []string{"Content-Type", "Content-Length", "WWW-Authenticate"}},
		{"an unknown path is 404", "/v2/shows", "", 404, "unmatched", []string{"Content-Type", "Content-Length"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			get, getBody := do(http.MethodGet, tt.path, tt.token)
			awaitObserved(http.MethodGet)
			mu.Lock()
			seen = nil
			mu.Unlock()
			head, headBody := do(http.MethodHead, tt.path, tt.token)
			if get.StatusCode != tt.status || head.StatusCode != tt.status {
				t.Fatalf("GET %s = %d, HEAD = %d; want %d for both", tt.path, get.StatusCode, head.StatusCode, tt.status)
			}
			if len(headBody) != 0 || len(getBody) == 0 {
				t.Errorf("HEAD %s body = %q (want none), GET body %d bytes (want some)", tt.path, headBody, len(getBody))
			}
			if cl := get.Header.Get("Content-Length"); cl != strconv.Itoa(len(getBody)) {
				t.Errorf("GET %s Content-Length = %q, want %d", tt.path, cl, len(getBody))
			}
			for _, h := range tt.headers {
				if g, hd := get.Header.Get(h), head.Header.Get(h); g == "" || g != hd {
					t.Errorf("%s: GET %q, HEAD %q; want the same, non-empty", h, g, hd)
				}
			}
			if tt.status >= 400 && head.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("HEAD %s Content-Type = %q, want application/problem+json", tt.path, head.Header.Get("Content-Type"))
			}
			if got, want := awaitObserved(http.MethodHead), []observed{{tt.route, http.MethodHead, tt.status}}; !slices.Equal(got, want) {
				t.Errorf("HEAD %s observed %v, want %v", tt.path, got, want)
			}
			mu.Lock()
			seen = nil
			mu.Unlock()
		})
	}

	t.Run("HEAD on a POST-only route is 405 with Allow", func(t *testing.T) {
		res, body := do(http.MethodHead, "/v1/orders/"+orderID+"/cancel", tokAlice)
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" || len(body) != 0 {
			t.Errorf("HEAD cancel = %d, Allow %q, body %q; want 405, Allow POST, no body", res.StatusCode, res.Header.Get("Allow"), body)
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	// Two GetOrder and two GetShow: HEAD ran the GET handlers; the 401s
	// reached no service.
	want := []string{"GetOrder", "GetOrder", "GetShow", "GetShow"}
	if !slices.Equal(f.calls, want) {
		t.Errorf("service calls %v, want %v", f.calls, want)
	}
}

// TestProblemTextIsNotHTMLEscaped: a problem's detail reaches the wire as
// written: the 401's `Bearer <token>` is not `\u003ctoken\u003e`.
func TestProblemTextIsNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	cfg := httpapi.Config{Tokens: map[string]httpapi.Actor{tokAlice: {ID: "alice"}}, RetryBudgetRate: 1000, RetryBudgetBurst: 1000,
		Ready: func(context.Context) error { return nil }}
	srv := httptest.NewServer(httpapi.New(cfg, f, f, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	res, err := srv.Client().Get(srv.URL + "/v1/orders/0b8f2c1e-3a7d-4e5f-9a6b-1c2d3e4f5a6b")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte("Bearer <token>")) {
		t.Errorf("GET without a token = %d %s, want 401 with `Bearer <token>` as written", res.StatusCode, body)
	}
}
