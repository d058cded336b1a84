package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/cmd/booking/internal/logging"
	"github.com/retrysafe/booking/commands"
)

// TestRequestID: every request gets a new server id (UUIDv7); a client's
// X-Request-Id is kept only when it is one value matching
// ^[A-Za-z0-9._:-]{1,128}$. The answer carries exactly one X-Request-Id —
// the client's kept id, else the server's; the commands layer gets both
// ids; the access line carries the server id as request_id and the kept
// client id as client_request_id, and never a refused value.
func TestRequestID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 128)
	for _, tt := range []struct {
		name string
		sent []string
		keep bool
	}{
		{"letters, digits, dot, underscore, colon and dash are kept", []string{"req-1.abc_XYZ:9"}, true},
		{"128 characters are kept", []string{long}, true},
		{"no header makes one", nil, false},
		{"129 characters are replaced", []string{long + "a"}, false},
		{"a space is replaced", []string{"req 1"}, false},
		{"a quote is replaced", []string{`x"},"level":"error","msg":"forged`}, false},
		{"a slash is replaced", []string{"req/1"}, false},
		{"a tilde is replaced", []string{"req~1"}, false},
		{"a control character is replaced", []string{"req\x01"}, false},
		{"a newline at the end is replaced", []string{"req\n"}, false},
		{"non-ASCII is replaced", []string{"réq"}, false},
		{"an empty value is replaced", []string{""}, false},
		{"two headers are replaced", []string{"a", "b"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			log, err := logging.New(&logs, "json", "info")
			if err != nil {
				t.Fatal(err)
			}
			f := &fakeService{outcome: commands.Outcome{Replayed: true}}
			h := httpapi.New(httpapi.Config{Tokens: map[string]httpapi.Actor{tokAlice: {ID: "alice"}},
				RetryBudgetRate: 1000, RetryBudgetBurst: 1000}, f, f, log)
			req := httptest.NewRequest("POST", "/v1/reservations", strings.NewReader(resBody))
			req.Header.Set("Authorization", "Bearer "+tokAlice)
			req.Header.Set("Idempotency-Key", "k1")
			req.Header.Set("Content-Type", "application/json")
			for _, v := range tt.sent {
				req.Header.Add(httpapi.HeaderRequestID, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("POST /v1/reservations = %d %s, want 201", rec.Code, rec.Body)
			}
			if vs := rec.Header().Values(httpapi.HeaderRequestID); len(vs) != 1 {
				t.Fatalf("%s = %q, want exactly one value", httpapi.HeaderRequestID, vs)
			}
			id := rec.Header().Get(httpapi.HeaderRequestID)
			if u, err := uuid.Parse(f.ids.Server); err != nil || u.Version() != 7 {
				t.Errorf("server id handed to the commands layer = %q, want a new UUIDv7", f.ids.Server)
			}
			wantClient := ""
			if tt.keep {
				wantClient = tt.sent[0]
				if id != tt.sent[0] {
					t.Errorf("%s = %q, want the client's %q", httpapi.HeaderRequestID, id, tt.sent[0])
				}
			} else if id != f.ids.Server {
				t.Errorf("%s = %q, want the server's id %q", httpapi.HeaderRequestID, id, f.ids.Server)
			}
			if f.ids.Client != wantClient {
				t.Errorf("client id handed to the commands layer = %q, want %q", f.ids.Client, wantClient)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("logged %d lines, want one access line:\n%s", len(lines), logs.String())
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"msg": "http request", "method": "POST", "route": "/v1/reservations", "status": 201.0,
				"actor": "alice", "replayed": true, "request_id": f.ids.Server}
			if tt.keep {
				want["client_request_id"] = tt.sent[0]
			} else if _, ok := line["client_request_id"]; ok {
				t.Errorf("access log carries client_request_id %v for a refused id", line["client_request_id"])
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("access log %s = %v, want %v (line %s)", k, line[k], v, lines[0])
				}
			}
			for _, v := range tt.sent {
				if !tt.keep && len(v) > 3 && strings.Contains(logs.String(), v) {
					t.Errorf("the refused id %q is in the log: %s", v, logs.String())
				}
			}
			if d, ok := line["duration_ms"].(float64); !ok || d < 0 {
				t.Errorf("access log duration_ms = %v, want a duration", line["duration_ms"])
			}
		})
	}
}

// TestRequestIDInProblemAndLogs: a refused request's problem labels its
// ids as its log lines do — request_id is the server's UUIDv7, the
// request_id of the internal error's line and of the access line;
// client_request_id is the client's kept id, absent when it sent none or
// an invalid one — while X-Request-Id echoes the client's kept id, else
// the server's.
func TestRequestIDInProblemAndLogs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, sent, client string
	}{
		{"a kept client id", "trace-42", "trace-42"},
		{"no client id", "", ""},
		{"a refused client id", "trace 42", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			log, err := logging.New(&logs, "json", "info")
			if err != nil {
				t.Fatal(err)
			}
			f := &fakeService{err: errInternal}
			h := httpapi.New(httpapi.Config{Tokens: map[string]httpapi.Actor{tokAlice: {ID: "alice"}},
				RetryBudgetRate: 1000, RetryBudgetBurst: 1000}, f, f, log)
			req := httptest.NewRequest("GET", "/v1/orders/"+resID, nil)
			req.Header.Set("Authorization", "Bearer "+tokAlice)
			if tt.sent != "" {
				req.Header.Set(httpapi.HeaderRequestID, tt.sent)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var p map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != 500 {
				t.Fatalf("GET /v1/orders/{id} = %d %s, want a 500 problem", rec.Code, rec.Body)
			}
			lines := map[string]map[string]any{}
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var line map[string]any
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("log line %q: %v", l, err)
				}
				msg, _ := line["msg"].(string)
				lines[msg] = line
			}
			access, internal := lines["http request"], lines["internal error"]
			if access == nil || internal == nil {
				t.Fatalf("want an access line and an internal error line, logged:\n%s", logs.String())
			}
			server, _ := access["request_id"].(string)
			if u, err := uuid.Parse(server); err != nil || u.Version() != 7 {
				t.Fatalf("access line request_id = %q, want a UUIDv7", server)
			}
			echo := server
			if tt.client != "" {
				echo = tt.client
			}
			if got := rec.Header().Get(httpapi.HeaderRequestID); got != echo {
				t.Errorf("%s = %q, want %q", httpapi.HeaderRequestID, got, echo)
			}
			for _, doc := range []struct {
				name string
				m    map[string]any
			}{{"problem", p}, {"access line", access}, {"internal error line", internal}} {
				if doc.m["request_id"] != server {
					t.Errorf("%s request_id = %v, want the server's %s", doc.name, doc.m["request_id"], server)
				}
				if c, ok := doc.m["client_request_id"]; tt.client == "" && ok {
					t.Errorf("%s client_request_id = %v, want none", doc.name, c)
				} else if tt.client != "" && c != tt.client {
					t.Errorf("%s client_request_id = %v, want %s", doc.name, c, tt.client)
				}
			}
		})
	}
}

// errInternal is an error the problem mapping answers 500.
var errInternal = errorString("database exploded")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestProbesLogAtDebug: /healthz is logged at debug level only.
func TestProbesLogAtDebug(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := httpapi.New(httpapi.Config{}, nil, nil, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || logs.Len() != 0 {
		t.Errorf("GET /healthz = %d and logged %q at info, want 200 and nothing", rec.Code, logs.String())
	}
}
