// Package apicontract checks HTTP exchanges against the service's OpenAPI
// 3.1 document with github.com/pb33f/libopenapi-validator in strict mode:
// an undocumented status, response header or body member is a violation, as
// is an answer or an accepted request that its schema does not allow. Only
// tests use it: the HTTP adapter's contract test and the end-to-end suite.
package apicontract

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
)

// strictIgnoredHeaders are the headers strict validation does not require
// the document to declare: HTTP's own (framing, caching, content
// negotiation, client identification). It is the library's default list
// without X-Request-Id, which this API documents on every answer.
var strictIgnoredHeaders = []string{
	"content-type", "content-length", "accept", "authorization",
	"user-agent", "host", "connection", "accept-encoding",
	"accept-language", "cache-control", "pragma", "origin",
	"referer", "cookie", "date", "etag", "expires",
	"if-match", "if-none-match", "if-modified-since",
	"last-modified", "transfer-encoding", "vary",
}

// Checker validates exchanges against one document. Safe for concurrent
// use (one exchange is validated at a time).
type Checker struct {
	mu sync.Mutex
	v  validator.Validator
}

// New returns a Checker of the OpenAPI 3.1 document spec (YAML or JSON), or
// the errors that keep the document from building.
func New(spec []byte) (*Checker, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc, config.WithStrictMode(), config.WithStrictIgnoredHeaders(strictIgnoredHeaders...),
		config.WithFormatAssertions(),
		// A webhook's data is the provider's object, and a payment's
		// next_action is Stripe's: not the service's to document.
		config.WithStrictIgnorePaths("$.body.data.**", "$.body.payment.next_action.**"))
	if len(errs) > 0 {
		return nil, fmt.Errorf("%v", errs)
	}
	return &Checker{v: v}, nil
}

// ValidateDocument checks the document itself against the OpenAPI 3.1
// meta-schema and returns one line per violation.
func (c *Checker) ValidateDocument() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, errs := c.v.ValidateDocument()
	var out []string
	for _, e := range errs {
		out = append(out, describe(e))
	}
	return out
}

// Check returns the violations of the document by one exchange: the answer
// res (with body resBody) always, and the request req (with body reqBody)
// when the answer is 2xx — a request the service accepted must be one the
// document allows. A path or method the document does not have is
// accepted only when answered 404 or 405 as problem+json: the router's
// answers to any route. Each line says what is undocumented or wrong, and
// where in the document.
func (c *Checker) Check(req *http.Request, reqBody []byte, res *http.Response, resBody []byte) []string {
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	vres := *res
	vres.Body = io.NopCloser(bytes.NewReader(resBody))
	vres.Request = vreq
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	_, errs := c.v.ValidateHttpResponse(vreq, &vres)
	for _, e := range errs {
		if (e.IsPathMissingError() || e.IsOperationMissingError()) &&
			(res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusMethodNotAllowed) {
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				out = append(out, fmt.Sprintf("answer: %d of an undocumented route is not problem+json (Content-Type %q)", res.StatusCode, ct))
			}
			continue
		}
		out = append(out, "answer: "+describe(e))
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
		_, errs := c.v.ValidateHttpRequestSync(vreq)
		for _, e := range errs {
			out = append(out, "request: "+describe(e))
		}
	}
	return out
}

// Skipped reports whether path is outside the API's contract: the
// fault-injection control (/_test), the provider simulator's control
// (/_sim) and the document itself (/openapi.yaml).
func Skipped(path string) bool {
	return path == "/_test" || strings.HasPrefix(path, "/_test/") || path == "/_sim" || strings.HasPrefix(path, "/_sim/") ||
		path == "/openapi.yaml"
}

// describe formats a validation error.
func describe(e *verrors.ValidationError) string {
	s := e.Message
	if e.Reason != "" && e.Reason != e.Message {
		s += ": " + e.Reason
	}
	for _, f := range e.SchemaValidationErrors {
		loc := f.KeywordLocation
		if loc == "" {
			loc = strings.Join(f.InstancePath, "/")
		}
		s += fmt.Sprintf("\n    - %s (at %s)", f.Reason, loc)
	}
	if e.SpecLine > 0 {
		s += fmt.Sprintf(" [openapi.yaml line %d]", e.SpecLine)
	}
	return s
}
