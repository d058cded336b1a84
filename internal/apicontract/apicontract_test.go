package apicontract

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestStrictModeCatchesUndocumentedMembersOfOpenSchemas: the document's
// answers are open to additions (no additionalProperties: false, so
// generated clients survive a new field), yet the checker still reports a
// member the document does not declare, and a problem code the answer does
// not list.
func TestStrictModeCatchesUndocumentedMembersOfOpenSchemas(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../../cmd/booking/internal/httpapi/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	const show = `{"id":"0190b3a4-7c3e-7f00-8000-000000000001","name":"Concert","starts_at":"2030-06-01T20:00:00Z",` +
		`"capacity":10,"available":10,"price":{"amount":4500,"currency":"EUR"}`
	for _, tt := range []struct {
		name, ct string
		status   int
		body     string
		want     string // "" when the exchange is valid
	}{
		{"a documented show", "application/json", 200, show + `}`, ""},
		{"an undocumented member", "application/json", 200, show + `,"surprise":1}`, "surprise"},
		{"an undocumented member of a nested object", "application/json", 200,
			strings.Replace(show, `"currency":"EUR"`, `"currency":"EUR","cents":true`, 1) + `}`, "cents"},
		{"a listed problem code", "application/problem+json", 404,
			`{"type":"https://booking.invalid/problems/show-not-found","title":"Not Found","status":404,"code":"show-not-found"}`, ""},
		{"a problem code the answer does not list", "application/problem+json", 404,
			`{"type":"https://booking.invalid/problems/order-not-found","title":"Not Found","status":404,"code":"order-not-found"}`, "show-not-found"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/v1/shows/0190b3a4-7c3e-7f00-8000-000000000001", nil)
		req.Header.Set("Authorization", "Bearer tok")
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", tt.ct)
		rec.Header().Set("X-Request-Id", "r1")
		rec.WriteHeader(tt.status)
		rec.WriteString(tt.body)
		got := strings.Join(c.Check(req, nil, rec.Result(), []byte(tt.body)), "\n")
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s: Check = %q, want %s", tt.name, got, map[bool]string{true: "no violation", false: "a violation naming " + tt.want}[tt.want == ""])
		}
	}
}
