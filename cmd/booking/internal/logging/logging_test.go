package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands"
)

// TestNew: the JSON format writes one object a line at the level and above,
// with the context's attributes on every line logged with it; bad values are
// refused listing the accepted ones.
func TestNew(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := New(&buf, "JSON", "warn")
	if err != nil {
		t.Fatalf("New(json, warn) = %v", err)
	}
	ctx := WithAttrs(context.Background(), slog.String("request_id", "r-1"))
	log.InfoContext(ctx, "dropped")
	log.With("component", "x").WarnContext(ctx, "kept", "n", 1)
	log.Error("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("line %q is not JSON: %v", lines[0], err)
	}
	if first["msg"] != "kept" || first["request_id"] != "r-1" || first["component"] != "x" {
		t.Errorf("first line = %v, want msg kept with request_id r-1 and component x", first)
	}
	if strings.Contains(lines[1], "request_id") {
		t.Errorf("a line logged without the context carries a request id: %s", lines[1])
	}
	if h := Handler(log.Handler()); h != log.Handler() {
		t.Error("Handler(a wrapped handler) wrapped it again")
	}

	buf.Reset()
	text, err := New(&buf, "text", "debug")
	if err != nil {
		t.Fatal(err)
	}
	text.DebugContext(ctx, "hello")
	if got := buf.String(); !strings.Contains(got, "level=DEBUG msg=hello request_id=r-1") {
		t.Errorf("text line = %q, want level=DEBUG msg=hello request_id=r-1", got)
	}

	for _, bad := range [][2]string{{"xml", "info"}, {"text", "verbose"}, {"text", "info+2"}, {"", "info"}} {
		if _, err := New(&buf, bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "want one of") {
			t.Errorf("New(%q, %q) = %v, want an error listing the accepted values", bad[0], bad[1], err)
		}
	}
}

// TestCorrelationIsTheRequestID: a line logged with a context that carries
// only a commands correlation id (a background job finishing what a request
// caused) gets it as request_id; request attributes win over it, once.
func TestCorrelationIsTheRequestID(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := New(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	job := commands.WithCorrelationID(context.Background(), "req-9")
	log.InfoContext(job, "job line")
	req := WithAttrs(job, slog.String("request_id", "req-9"))
	log.InfoContext(req, "request line")
	log.InfoContext(context.Background(), "plain line")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("logged %d lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"req-9", "req-9", ""} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %q: %v", lines[i], err)
		}
		if got, _ := m["request_id"].(string); got != want {
			t.Errorf("line %d request_id = %q, want %q (%s)", i, got, want, lines[i])
		}
		if n := strings.Count(lines[i], `"request_id"`); want != "" && n != 1 {
			t.Errorf("line %d has request_id %d times: %s", i, n, lines[i])
		}
	}
}
