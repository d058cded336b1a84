package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// contractAPI is the API of TestHTTPContract's configuration over f.
func contractAPI(f *fakeService) http.Handler {
	return httpapi.New(httpapi.Config{
		Tokens:           map[string]httpapi.Actor{tokAlice: {ID: "alice"}, tokAdmin: {ID: "admin", Admin: true}},
		RetryBudgetRate:  1000,
		RetryBudgetBurst: 1000,
		Ready:            func(context.Context) error { return nil },
	}, f, f, slog.New(slog.DiscardHandler))
}

// problemOf returns rec's answer as a problem document, failing t unless
// it is application/problem+json with status want.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder, want int) map[string]any {
	t.Helper()
	res := rec.Result()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("status = %d %s, want %d", res.StatusCode, raw, want)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q (body %q), want application/problem+json", ct, raw)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("answer %q is not a JSON object: %v", raw, err)
	}
	return doc
}

// A cancel's body is checked the same whether its length is declared
// (Content-Length) or not (chunked, or HTTP/2 without content-length): an
// unknown member is 400 unknown-field and another media type is 415, and
// neither reaches the service.
func TestCancelBodyWithoutContentLengthIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ctype, body, code string
		status                  int
	}{
		{"an unknown member", "application/json", `{"colour":"red"}`, "unknown-field", 400},
		{"not JSON", "application/json", `colour=red`, "invalid-json", 400},
		{"another media type", "text/plain", `{}`, "unsupported-media-type", 415},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeService{}
			r := httptest.NewRequest("POST", "/v1/orders/"+orderID+"/cancel", strings.NewReader(tc.body))
			r.ContentLength = -1 // as a chunked HTTP/1.1 body or an HTTP/2 one without content-length
			r.TransferEncoding = []string{"chunked"}
			r.Header.Set("Content-Type", tc.ctype)
			r.Header.Set("Authorization", "Bearer "+tokAlice)
			r.Header.Set("Idempotency-Key", "c-1")
			rec := httptest.NewRecorder()
			contractAPI(f).ServeHTTP(rec, r)
			doc := problemOf(t, rec, tc.status)
			if doc["code"] != tc.code {
				t.Errorf("code = %v, want %s", doc["code"], tc.code)
			}
			if len(f.calls) != 0 {
				t.Errorf("service calls = %v, want none: a refused request records nothing", f.calls)
			}
		})
	}
}

// A cancel whose undeclared body is empty or an empty object is accepted,
// as with a declared length.
func TestCancelEmptyBodyWithoutContentLengthIsAccepted(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "{}"} {
		f := &fakeService{}
		f.result = commands.OrderResult{Order: order(domain.OrderStatusCancelled, ""), Final: true}
		r := httptest.NewRequest("POST", "/v1/orders/"+orderID+"/cancel", io.NopCloser(strings.NewReader(body)))
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
		r.Header.Set("Authorization", "Bearer "+tokAlice)
		r.Header.Set("Idempotency-Key", "c-1")
		rec := httptest.NewRecorder()
		contractAPI(f).ServeHTTP(rec, r)
		if rec.Code != http.StatusOK || len(f.calls) != 1 || f.calls[0] != "CancelOrder" {
			t.Errorf("body %q: status %d %s, calls %v; want 200 after CancelOrder", body, rec.Code, rec.Body, f.calls)
		}
	}
}

// panickingService panics when asked for a show.
type panickingService struct{ *fakeService }

func (panickingService) GetShow(context.Context, string) (domain.Show, error) { panic("boom") }

// A handler's panic is answered like every other error: 500 problem+json
// with code internal and the request's id (errors are
// application/problem+json).
func TestPanicIsAProblem(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	p := panickingService{f}
	h := httpapi.New(httpapi.Config{Tokens: map[string]httpapi.Actor{tokAlice: {ID: "alice"}}, RetryBudgetRate: 1000, RetryBudgetBurst: 1000},
		p, f, slog.New(slog.DiscardHandler))
	r := httptest.NewRequest("GET", "/v1/shows/"+showID, nil)
	r.Header.Set("Authorization", "Bearer "+tokAlice)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	doc := problemOf(t, rec, http.StatusInternalServerError)
	if doc["code"] != "internal" || doc["request_id"] == nil || doc["request_id"] == "" {
		t.Errorf("problem = %v, want code internal with a request_id", doc)
	}
}

// A query parameter an endpoint reads is refused when its pair does not
// decode (a bad %-escape, or a ';', which net/url does not take as a
// separator): docs/api.md makes anything but a positive integer limit, or a
// cursor not handed out, a 400 naming it, never the default first page.
func TestMalformedQueryParameterIs400NamingIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, field, code string }{
		{"/v1/shows?limit=%zz", "limit", "invalid-request"},
		{"/v1/shows?limit=5;x=1", "limit", "invalid-request"},
		{"/v1/orders?cursor=%zz", "cursor", "invalid-request"},
		{"/v1/intents?key=%zz", "key", "idempotency-key-invalid"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			f := &fakeService{}
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.RawQuery = tc.path[strings.IndexByte(tc.path, '?')+1:]
			r.URL.Path = tc.path[:strings.IndexByte(tc.path, '?')]
			r.RequestURI = tc.path
			r.Header.Set("Authorization", "Bearer "+tokAlice)
			rec := httptest.NewRecorder()
			contractAPI(f).ServeHTTP(rec, r)
			doc := problemOf(t, rec, http.StatusBadRequest)
			if doc["code"] != tc.code {
				t.Errorf("code = %v, want %s", doc["code"], tc.code)
			}
			if fields, _ := doc["fields"].([]any); len(fields) != 1 || fields[0] != tc.field {
				t.Errorf("fields = %v, want [%s]", doc["fields"], tc.field)
			}
			if len(f.calls) != 0 {
				t.Errorf("service calls = %v, want none", f.calls)
			}
		})
	}
}
