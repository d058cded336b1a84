package test

// The API client: requests, answers, problem checks and the fixtures
// every scenario starts from.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// resp is an answer of the API, read in full.
type resp struct {
	Req    string // "POST /v1/orders", for messages
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any // the body decoded, when it is a JSON object
}

// str returns a string member of the JSON body by dotted path ("payment.status").
func (r *resp) str(path string) string {
	v, _ := r.get(path).(string)
	return v
}

// num returns a numeric member of the JSON body by dotted path, or -1.
func (r *resp) num(path string) float64 {
	v, ok := r.get(path).(float64)
	if !ok {
		return -1
	}
	return v
}

func (r *resp) get(path string) any {
	var cur any = r.JSON
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func (r *resp) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// String is the answer as failure messages show it.
func (r *resp) String() string {
	b := strings.TrimSpace(string(r.Body))
	if len(b) > 2000 {
		b = b[:2000] + "…"
	}
	return fmt.Sprintf("%s = %d %s", r.Req, r.Status, b)
}

// call is a request to the API. A nil Key sends no Idempotency-Key header.
type call struct {
	Method, Path string
	Token        string // "" sends no Authorization header
	Key          *string
	Body         any // nil: none; string or []byte: raw; otherwise JSON-encoded
	Header       map[string]string
	Client       *http.Client // default: the server's
}

func keyOf(k string) *string { return &k }

// send makes c without failing the test (safe from any goroutine).
func (s *server) send(ctx context.Context, c call) (*resp, error) {
	var body io.Reader
	switch b := c.Body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(raw)
	}
	url := c.Path
	if !strings.HasPrefix(url, "http") {
		url = s.URL + c.Path
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Key != nil {
		req.Header["Idempotency-Key"] = []string{*c.Key}
	}
	if c.Method == http.MethodPost && strings.HasSuffix(url, "/v1/orders") {
		// A test that is not about the wait budget asks for the longest
		// wait (RFC 7240), so a busy machine never turns its final answer
		// into a 202; a test about the budget sets Prefer itself.
		req.Header.Set("Prefer", "wait=10")
	}
	for k, v := range c.Header {
		req.Header.Set(k, v)
	}
	client := s.client
	if c.Client != nil {
		client = s.validated(c.Client) // checked against the OpenAPI document too
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", c.Method, c.Path, err)
	}
	r := &resp{Req: c.Method + " " + c.Path, Status: res.StatusCode, Header: res.Header, Body: raw}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		r.JSON = m
	}
	return r, nil
}

// retryable reports whether an answer asks the client to repeat the same
// request later: 503 (unavailable, contention) or 409
// idempotency-key-in-use (the first request with the key is still running).
func retryable(r *resp) bool {
	return r.Status == http.StatusServiceUnavailable ||
		(r.Status == http.StatusConflict && r.str("code") == "idempotency-key-in-use")
}

// sendRepeating makes c, repeating it (same key) every 100 ms while the
// answer is retryable, for up to 60 s; it returns the last answer (safe from
// any goroutine).
func (s *server) sendRepeating(ctx context.Context, c call) (*resp, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := s.send(ctx, c)
		if err != nil || !retryable(r) || time.Now().After(deadline) {
			return r, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// doCall makes c and fails the test on a transport error.
func (s *server) doCall(t testing.TB, c call) *resp {
	t.Helper()
	r, err := s.send(context.Background(), c)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Method, c.Path, err)
	}
	return r
}

// do makes a request with a bearer token (none if "") and an
// Idempotency-Key (none if "").
func (s *server) do(t testing.TB, method, path, token, key string, body any) *resp {
	t.Helper()
	c := call{Method: method, Path: path, Token: token, Body: body}
	if key != "" {
		c.Key = keyOf(key)
	}
	return s.doCall(t, c)
}

// wantStatus fails the test unless r has status want.
func wantStatus(t testing.TB, r *resp, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("%s, want %d", r, want)
	}
}

// checkProblem reports (without stopping the test) unless r is an
// application/problem+json answer with status and code and the members
// type, title, status, detail and code. It returns false if the status is
// wrong (further checks of r are moot).
func checkProblem(t testing.TB, r *resp, status int, code string) bool {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s, want %d %s", r, status, code)
		return false
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: Content-Type = %q, want application/problem+json", r.Req, ct)
	}
	if r.JSON == nil {
		t.Errorf("%s: body is not a JSON object", r)
		return true
	}
	for _, m := range []string{"type", "title", "detail", "code"} {
		if r.str(m) == "" {
			t.Errorf("%s: problem member %q missing or empty", r, m)
		}
	}
	if got := r.num("status"); int(got) != status {
		t.Errorf("%s: problem status member = %v, want %d", r, got, status)
	}
	if code != "" && r.str("code") != code {
		t.Errorf("%s: problem code = %q, want %q", r, r.str("code"), code)
	}
	return true
}

// newKey returns a fresh Idempotency-Key.
func newKey() string {
	return "e2e-" + hex.EncodeToString(randomBytes(8))
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return b
}

// showStartsAt is a start time safely in the future.
func showStartsAt() string {
	return time.Now().UTC().Add(30 * 24 * time.Hour).Truncate(time.Second).Format(time.RFC3339)
}

const (
	priceAmount   = 4500
	priceCurrency = "EUR"
)

func showBody(name string, capacity int) map[string]any {
	return map[string]any{"name": name, "starts_at": showStartsAt(), "capacity": capacity,
		"price": map[string]any{"amount": priceAmount, "currency": priceCurrency}}
}

// mustCreateShow creates a show as admin and returns its id.
func (s *server) mustCreateShow(t testing.TB, capacity int) string {
	t.Helper()
	r := s.do(t, "POST", "/v1/shows", tokAdmin, newKey(), showBody("Concert", capacity))
	wantStatus(t, r, http.StatusCreated)
	if r.str("id") == "" || int(r.num("available")) != capacity {
		t.Fatalf("%s: want an id and available %d", r, capacity)
	}
	return r.str("id")
}

// mustReserve holds qty seats of show for the token's actor and returns the
// reservation id.
func (s *server) mustReserve(t testing.TB, token, showID string, qty int) string {
	t.Helper()
	r := s.do(t, "POST", "/v1/reservations", token, newKey(), map[string]any{"show_id": showID, "quantity": qty})
	wantStatus(t, r, http.StatusCreated)
	if r.str("id") == "" || r.str("status") != "held" {
		t.Fatalf("%s: want an id and status held", r)
	}
	return r.str("id")
}

func orderBody(reservationID, token string) map[string]any {
	return map[string]any{"reservation_id": reservationID, "payment": map[string]any{"token": token}}
}

// available returns the show's available seats (GET /v1/shows/{id}).
func (s *server) available(t testing.TB, showID string) int {
	t.Helper()
	r := s.do(t, "GET", "/v1/shows/"+showID, tokAlice, "", nil)
	wantStatus(t, r, http.StatusOK)
	return int(r.num("available"))
}

// orderIDOf returns the order id of an answer to POST /v1/orders: "id" of a
// 201 or 202, "order_id" of a problem that names the order.
func orderIDOf(t testing.TB, r *resp) string {
	t.Helper()
	id := r.str("id")
	if r.Status >= 300 || id == "" {
		id = r.str("order_id")
	}
	if id == "" {
		t.Fatalf("%s: no order id", r)
	}
	return id
}

// mustStartReserved starts booking serve with opts, creates a show of 10
// seats and holds seats of it for alice; it returns the server, the show id
// and the reservation id (the fixture most order scenarios start from).
func mustStartReserved(t *testing.T, opts Options, seats int) (s *server, show, res string) {
	t.Helper()
	s = mustStart(t, opts)
	show = s.mustCreateShow(t, 10)
	return s, show, s.mustReserve(t, tokAlice, show, seats)
}

// orderCall is POST /v1/orders by token's actor under key for reservation
// res, paid with the provider token payToken.
func orderCall(token, key, res, payToken string) call {
	return call{Method: "POST", Path: "/v1/orders", Token: token, Key: keyOf(key), Body: orderBody(res, payToken)}
}

// mustOrder places an order (orderCall) and fails the test unless it is
// answered 201.
func (s *server) mustOrder(t testing.TB, token, key, res, payToken string) *resp {
	t.Helper()
	r := s.doCall(t, orderCall(token, key, res, payToken))
	wantStatus(t, r, http.StatusCreated)
	return r
}

// checkReplayedOrder repeats the order request c and checks that it
// answers 201 with order id, confirmed and Idempotent-Replayed: true.
func (s *server) checkReplayedOrder(t testing.TB, c call, id string) *resp {
	t.Helper()
	r := s.doCall(t, c)
	wantStatus(t, r, http.StatusCreated)
	if r.str("id") != id || !r.replayed() || r.str("status") != "confirmed" {
		t.Errorf("%s: want confirmed order %s with Idempotent-Replayed: true", r, id)
	}
	return r
}

// wantAvailable checks the show's available seats (GET /v1/shows/{id});
// when names the moment for the message ("after the decline"), if any.
func (s *server) wantAvailable(t testing.TB, showID string, want int, when ...string) {
	t.Helper()
	if got := s.available(t, showID); got != want {
		t.Errorf("GET /v1/shows/%s: available = %d%s, want %d", showID, got, note(when), want)
	}
}

// wantReservation checks that GET /v1/reservations/{id} answers 200 with
// status want for alice.
func (s *server) wantReservation(t testing.TB, resID, want string) {
	t.Helper()
	if r := s.do(t, "GET", "/v1/reservations/"+resID, tokAlice, "", nil); r.Status != http.StatusOK || r.str("status") != want {
		t.Errorf("%s, want 200 status %s", r, want)
	}
}

// checkFailedOrder checks a declined order: GET /v1/orders/{id} answers 200
// status failed with no tickets, the show's seats are available again
// (available, within 30 s) and the reservation is released. It returns
// the order's answer.
func (s *server) checkFailedOrder(t testing.TB, id, showID, resID string, available int) *resp {
	t.Helper()
	g := s.do(t, "GET", "/v1/orders/"+id, tokAlice, "", nil)
	wantStatus(t, g, http.StatusOK)
	if g.str("status") != "failed" {
		t.Errorf("%s, want status failed", g)
	}
	if tickets, _ := g.get("tickets").([]any); len(tickets) != 0 {
		t.Errorf("%s: a failed order shows tickets", g)
	}
	if !eventually(30*time.Second, func() bool { return s.available(t, showID) == available }) {
		t.Errorf("GET /v1/shows/%s: available = %d after the decline, want %d", showID, s.available(t, showID), available)
	}
	s.wantReservation(t, resID, "released")
	return g
}

// note is the optional words of a failure message, with a leading space
// ("" when there are none).
func note(words []string) string {
	if len(words) == 0 {
		return ""
	}
	return " " + strings.Join(words, " ")
}
