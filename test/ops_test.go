package test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestRequestIDs: with JSON logs, a client's X-Request-Id is echoed, is the
// client_request_id of the events its request appended (the intent's and
// the show's), whose correlation_id is the server's id of the request, and
// both are on the request's access line with method, route template,
// status and actor; a request without one is answered with the server's
// UUIDv7; a repeat carries its own id, not the first request's. Problem
// details label the ids as the access line does: request_id is the server's
// UUIDv7 (the access line's request_id), client_request_id the client's
// kept id, absent when it sent none or an invalid one.
func TestRequestIDs(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: map[string]string{"BOOKING_LOG_FORMAT": "json"}})
	key, body := newKey(), showBody("Concert", 10)
	r := s.doCall(t, call{Method: "POST", Path: "/v1/shows", Token: tokAdmin, Key: keyOf(key), Body: body,
		Header: map[string]string{"X-Request-Id": "e2e-show-1"}})
	if r.Status != 201 || r.Header.Get("X-Request-Id") != "e2e-show-1" {
		t.Fatalf("POST /v1/shows = %d with X-Request-Id %q, want 201 with e2e-show-1", r.Status, r.Header.Get("X-Request-Id"))
	}
	s.waitHorizon(t)
	correlations := map[string]bool{}
	for _, prefix := range []string{"intent-", "show-"} {
		evs := s.logEvents(t, prefix, "")
		if len(evs) != 1 {
			t.Fatalf("%d events on %s streams, want 1", len(evs), prefix)
		}
		m := metaOf(t, evs[0])
		if m.ClientRequestID != "e2e-show-1" || !isUUIDv7(m.CorrelationID) || m.RequestID != m.CorrelationID {
			t.Errorf("%s %s metadata client_request_id %q, correlation_id %q, request_id %q; want e2e-show-1 and the server's UUIDv7 twice",
				evs[0].Stream, evs[0].Type, m.ClientRequestID, m.CorrelationID, m.RequestID)
		}
		correlations[m.CorrelationID] = true
	}

	again := s.doCall(t, call{Method: "POST", Path: "/v1/shows", Token: tokAdmin, Key: keyOf(key), Body: body})
	id := again.Header.Get("X-Request-Id")
	if u, err := uuid.Parse(id); again.Status != 201 || err != nil || u.Version() != 7 {
		t.Errorf("repeat = %d with X-Request-Id %q, want 201 with a new UUIDv7", again.Status, id)
	}
	missing := s.doCall(t, call{Method: "GET", Path: "/v1/shows/" + uuid.Must(uuid.NewV7()).String(), Token: tokAlice,
		Header: map[string]string{"X-Request-Id": "bad id with spaces"}})
	pid := missing.Header.Get("X-Request-Id")
	if missing.Status != 404 || missing.str("request_id") != pid || !isUUIDv7(pid) || missing.get("client_request_id") != nil {
		t.Errorf("GET an unknown show = %d, request_id %q, client_request_id %v, X-Request-Id %q; want 404 with a new UUIDv7 in both and no client_request_id",
			missing.Status, missing.str("request_id"), missing.get("client_request_id"), pid)
	}
	traced := s.doCall(t, call{Method: "GET", Path: "/v1/shows/" + uuid.Must(uuid.NewV7()).String(), Token: tokAlice,
		Header: map[string]string{"X-Request-Id": "e2e-missing-1"}})
	if traced.Status != 404 || traced.Header.Get("X-Request-Id") != "e2e-missing-1" || traced.str("client_request_id") != "e2e-missing-1" {
		t.Errorf("GET an unknown show with X-Request-Id e2e-missing-1 = %d, X-Request-Id %q, client_request_id %q; want 404 with e2e-missing-1 in both",
			traced.Status, traced.Header.Get("X-Request-Id"), traced.str("client_request_id"))
	}

	want := map[string]map[string]any{
		"e2e-show-1":    {"method": "POST", "route": "/v1/shows", "status": 201.0, "actor": "admin", "replayed": false},
		id:              {"method": "POST", "route": "/v1/shows", "status": 201.0, "actor": "admin", "replayed": true},
		pid:             {"method": "GET", "route": "/v1/shows/{id}", "status": 404.0, "actor": "alice"},
		"e2e-missing-1": {"method": "GET", "route": "/v1/shows/{id}", "status": 404.0, "actor": "alice"},
	}
	lines := map[string]map[string]any{}
	if !eventually(30*time.Second, func() bool {
		for _, l := range strings.Split(s.logs.String(), "\n") {
			var line map[string]any
			if json.Unmarshal([]byte(l), &line) != nil || line["msg"] != "http request" {
				continue
			}
			rid, _ := line["request_id"].(string)
			if c, _ := line["client_request_id"].(string); c != "" {
				rid = c // answered with the client's id
			}
			if want[rid] != nil {
				lines[rid] = line
			}
		}
		return len(lines) == len(want)
	}) {
		t.Fatalf("booking serve logged access lines for %d of %d requests:\n%s", len(lines), len(want), tail(s.logs.String(), 4000))
	}
	if srv, _ := lines["e2e-show-1"]["request_id"].(string); len(correlations) != 1 || !correlations[srv] {
		t.Errorf("access line of e2e-show-1: request_id %q, want the events' correlation_id %v", srv, correlations)
	}
	if srv, _ := lines["e2e-missing-1"]["request_id"].(string); !isUUIDv7(srv) || traced.str("request_id") != srv {
		t.Errorf("problem of e2e-missing-1: request_id %q, want its access line's server UUIDv7 %q", traced.str("request_id"), srv)
	}
	for rid, w := range want {
		for k, v := range w {
			if lines[rid][k] != v {
				t.Errorf("access line of %s: %s = %v, want %v (%v)", rid, k, lines[rid][k], v, lines[rid])
			}
		}
	}
}
