package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
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

// TestRequestIDInProblemAndLogs: a refused request's problem carries the
// answer's X-Request-Id (the client's kept id), and the internal error's
// log line and the access line carry it as client_request_id beside the
// server's request_id.
func TestRequestIDInProblemAndLogs(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log, err := logging.New(&logs, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeService{err: errInternal}
	h := httpapi.New(httpapi.Config{Tokens: map[string]httpapi.Actor{tokAlice: {ID: "alice"}},
		RetryBudgetRate: 1000, RetryBudgetBurst: 1000}, f, f, log)
	req := httptest.NewRequest("GET", "/v1/orders/"+resID, nil)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set(httpapi.HeaderRequestID, "trace-42")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != 500 {
		t.Fatalf("GET /v1/orders/{id} = %d %s, want a 500 problem", rec.Code, rec.Body)
	}
	if p["request_id"] != "trace-42" || rec.Header().Get(httpapi.HeaderRequestID) != "trace-42" {
		t.Errorf("problem request_id = %v, X-Request-Id %q, want trace-42 in both", p["request_id"], rec.Header().Get(httpapi.HeaderRequestID))
	}
	for _, want := range []string{`msg="internal error"`, `msg="http request" method=GET route=/v1/orders/{id} status=500`} {
		found := false
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, want) {
				found = true
				if !strings.Contains(l, " client_request_id=trace-42") || !regexp.MustCompile(` request_id=[0-9a-f-]{36}( |$)`).MatchString(l) {
					t.Errorf("log line %q lacks client_request_id=trace-42 and a server request_id", l)
				}
			}
		}
		if !found {
			t.Errorf("no log line with %s in:\n%s", want, logs.String())
		}
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
