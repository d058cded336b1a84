package httpapi

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi/datamodel/high/base"
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
		{"DELETE", "/v1/shows", "/v1/shows", "GET, HEAD, POST"},
		{"PUT", "/v1/orders/ord_1", "/v1/orders/{id}", "GET, HEAD"},
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

// TestOpenAPIResponsesOpenProblemCodesClosed: clients generated from
// openapi.yaml must keep working when v1 adds a response field, so no
// schema of an answer sets additionalProperties: false (requests stay
// closed: an unknown field is 400 unknown-field); and every problem answer
// of every operation lists the codes it answers as an enum. Undocumented
// members of answers are still caught: the contract tests validate in
// strict mode (internal/apicontract).
func TestOpenAPIResponsesOpenProblemCodesClosed(t *testing.T) {
	doc, err := libopenapi.NewDocument(openAPISpec)
	if err != nil {
		t.Fatal(err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	problems, closedRequests := 0, 0
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Content.FromOldest() {
					if s := mt.Schema.Schema(); s != nil && s.AdditionalProperties != nil && s.AdditionalProperties.IsB() && !s.AdditionalProperties.B {
						closedRequests++
					}
				}
			}
			for status, res := range op.Responses.Codes.FromOldest() {
				where := fmt.Sprintf("%s %s %s", method, path, status)
				for ct, mt := range res.Content.FromOldest() {
					if mt.Schema == nil {
						continue
					}
					s := mt.Schema.Schema()
					if closed := closedSchemas(s, "", map[*base.Schema]bool{}); len(closed) > 0 {
						t.Errorf("%s %s: additionalProperties: false at %v; answers must stay open to additions", where, ct, closed)
					}
					if ct != "application/problem+json" {
						continue
					}
					problems++
					if codes := problemCodes(s); len(codes) == 0 {
						t.Errorf("%s: the problem's code has no enum of the codes it answers", where)
					}
				}
			}
		}
	}
	if problems < 60 || closedRequests < 3 {
		t.Errorf("checked %d problem answers and %d closed request bodies, want the whole document", problems, closedRequests)
	}
}

// closedSchemas returns the locations under s (at) of schemas with
// additionalProperties: false, following properties, items and allOf.
func closedSchemas(s *base.Schema, at string, seen map[*base.Schema]bool) []string {
	if s == nil || seen[s] {
		return nil
	}
	seen[s] = true
	var out []string
	if ap := s.AdditionalProperties; ap != nil && ap.IsB() && !ap.B {
		out = append(out, cmp.Or(at, "/"))
	}
	if s.Properties != nil {
		for name, p := range s.Properties.FromOldest() {
			out = append(out, closedSchemas(p.Schema(), at+"/"+name, seen)...)
		}
	}
	if s.Items != nil && s.Items.IsA() {
		out = append(out, closedSchemas(s.Items.A.Schema(), at+"/items", seen)...)
	}
	for _, p := range s.AllOf {
		out = append(out, closedSchemas(p.Schema(), at, seen)...)
	}
	return out
}

// problemCodes returns the enum of the code property of a problem schema
// (directly or in one of its allOf parts).
func problemCodes(s *base.Schema) []string {
	var out []string
	parts := []*base.Schema{s}
	for _, p := range s.AllOf {
		parts = append(parts, p.Schema())
	}
	for _, p := range parts {
		if p == nil || p.Properties == nil {
			continue
		}
		if code, ok := p.Properties.Get("code"); ok {
			for _, v := range code.Schema().Enum {
				out = append(out, v.Value)
			}
		}
	}
	return out
}

// TestOpenAPILint holds openapi.yaml to the rules of a linter's
// recommended set (Redocly's and Spectral's), checked with libopenapi, the
// library the contract tests validate with: every reference resolves;
// every operation has a unique operationId, a summary, defined tags, its
// path's parameters declared, defined security schemes and (unless it is
// an unauthenticated probe without a body) a 4XX answer; every component
// is used.
func TestOpenAPILint(t *testing.T) {
	doc, err := libopenapi.NewDocument(openAPISpec)
	if err != nil {
		t.Fatal(err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("openapi.yaml does not build (an unresolved reference?): %v", err)
	}
	m := model.Model
	tags := map[string]bool{}
	for _, tag := range m.Tags {
		tags[tag.Name] = true
	}
	schemes := map[string]bool{}
	for name := range m.Components.SecuritySchemes.KeysFromOldest() {
		schemes[name] = true
	}
	ids := map[string]string{}
	ops := 0
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			ops++
			where := method + " " + path
			if op.OperationId == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, dup := ids[op.OperationId]; dup {
				t.Errorf("%s: operationId %q is also %s's", where, op.OperationId, other)
			}
			ids[op.OperationId] = where
			if op.Summary == "" {
				t.Errorf("%s: no summary", where)
			}
			for _, tag := range op.Tags {
				if !tags[tag] {
					t.Errorf("%s: tag %q is not defined", where, tag)
				}
			}
			if len(op.Tags) == 0 {
				t.Errorf("%s: no tag", where)
			}
			declared := map[string]bool{}
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				if p.In == "path" {
					declared[p.Name] = true
				}
			}
			for _, name := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
				if !declared[name[1]] {
					t.Errorf("%s: path parameter %s is not declared", where, name[1])
				}
			}
			for _, req := range op.Security {
				for name := range req.Requirements.KeysFromOldest() {
					if !schemes[name] {
						t.Errorf("%s: security scheme %q is not defined", where, name)
					}
				}
			}
			probe := op.Security != nil && len(op.Security) == 0 && op.RequestBody == nil
			has4xx := false
			for code := range op.Responses.Codes.KeysFromOldest() {
				has4xx = has4xx || strings.HasPrefix(code, "4")
			}
			if !has4xx && !probe {
				t.Errorf("%s: no 4XX answer", where)
			}
		}
	}
	for _, req := range m.Security {
		for name := range req.Requirements.KeysFromOldest() {
			if !schemes[name] {
				t.Errorf("security scheme %q is not defined", name)
			}
		}
	}
	spec := string(openAPISpec)
	used := func(kind, name string) bool { return strings.Contains(spec, `"#/components/`+kind+`/`+name+`"`) }
	c := m.Components
	for _, group := range []struct {
		kind  string
		names func() []string
	}{
		{"schemas", func() []string { return slices.Collect(c.Schemas.KeysFromOldest()) }},
		{"responses", func() []string { return slices.Collect(c.Responses.KeysFromOldest()) }},
		{"parameters", func() []string { return slices.Collect(c.Parameters.KeysFromOldest()) }},
		{"headers", func() []string { return slices.Collect(c.Headers.KeysFromOldest()) }},
	} {
		for _, name := range group.names() {
			if !used(group.kind, name) {
				t.Errorf("component %s/%s is never used", group.kind, name)
			}
		}
	}
	if ops < 13 {
		t.Errorf("linted %d operations, want every one", ops)
	}
}
