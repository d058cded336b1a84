package test

// The OpenAPI document is the contract: every answer the end-to-end suite
// receives from booking serve's API, and every request it sends that is
// answered 2xx, is validated against cmd/booking/internal/httpapi/openapi.yaml
// by github.com/pb33f/libopenapi-validator in strict mode (an undocumented
// status, header or body member is a failure). The check sits in the
// transport of the server's HTTP client (contractTransport), so every
// request of the suite goes through it: the client helpers (server.send and
// everything built on it) and the invariant check (audit.Check, which is
// given that client). Not checked, because they are not the API:
// the provider simulator (its own host, /_sim/…), the fault-injection
// control /_test/… and the document itself, /openapi.yaml; and the start-up
// poll of /healthz (waitHealthy, which uses its own client before the
// service is up). Connections written by hand (the slow-body tests) are not
// HTTP clients and are not checked.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/retrysafe/booking/internal/apicontract"
)

// openAPIPath is the API's description, relative to this package.
var openAPIPath = filepath.Join("..", "cmd", "booking", "internal", "httpapi", "openapi.yaml")

var contract struct {
	once sync.Once
	c    *apicontract.Checker
	err  error
}

// contractChecker returns the checker of the API's OpenAPI document, built once.
func contractChecker() (*apicontract.Checker, error) {
	contract.once.Do(func() {
		spec, err := os.ReadFile(openAPIPath)
		if err == nil {
			contract.c, err = apicontract.New(spec)
		}
		if err != nil {
			contract.err = fmt.Errorf("%s: %w", openAPIPath, err)
		}
	})
	return contract.c, contract.err
}

// contractTransport is an http.RoundTripper that validates what goes
// through base against the OpenAPI document and reports each violation with
// t.Errorf (safe from any goroutine while the test runs). Requests to
// skipHosts (the simulator's host:port) pass unchecked.
type contractTransport struct {
	t    testing.TB
	base http.RoundTripper
	// skipHosts are hosts whose answers are not the API's (the simulator).
	skipHosts []string
}

// RoundTrip sends req through base, then validates the answer (and, when it
// is 2xx, the request) against the document. The answer's body is read in
// full and handed on unchanged.
func (ct *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := ct.base
	if base == nil {
		base = http.DefaultTransport
	}
	skip := apicontract.Skipped(req.URL.Path)
	for _, h := range ct.skipHosts {
		if req.URL.Host == h {
			skip = true
		}
	}
	if skip {
		return base.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	res, err := base.RoundTrip(req)
	if err != nil {
		return res, err
	}
	raw, err := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return res, nil // the caller sees the short body; nothing to validate
	}
	if problems := validateExchange(req, reqBody, res, raw); len(problems) > 0 {
		ct.t.Errorf("OpenAPI contract (%s): %s %s answered %d:\n  %s\n  body: %s", openAPIPath, req.Method, req.URL.RequestURI(),
			res.StatusCode, strings.Join(problems, "\n  "), clip(raw, 600))
	}
	return res, nil
}

// validateExchange returns the violations of the document by one exchange
// (apicontract.Checker.Check).
func validateExchange(req *http.Request, reqBody []byte, res *http.Response, resBody []byte) []string {
	c, err := contractChecker()
	if err != nil {
		return []string{"cannot load the document: " + err.Error()}
	}
	return c.Check(req, reqBody, res, resBody)
}

func clip(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// validated returns a client like c whose transport checks the contract
// (contractTransport), for requests sent with a client of their own.
func (s *server) validated(c *http.Client) *http.Client {
	if _, ok := c.Transport.(*contractTransport); ok {
		return c
	}
	cc := *c
	cc.Transport = &contractTransport{t: s.t, base: c.Transport, skipHosts: []string{s.simAddr}}
	return &cc
}

// CloseIdleConnections closes the idle connections of the base transport
// (http.Client.CloseIdleConnections calls it).
func (ct *contractTransport) CloseIdleConnections() {
	if c, ok := ct.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
