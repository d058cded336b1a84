package test

// The provider simulator seen through its /_sim control API.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
)

// simGet reads GET {SimURL}path into v and fails the test unless it
// answers 200 with JSON.
func (s *server) simGet(t testing.TB, path string, v any) {
	t.Helper()
	r := s.simDo(t, "GET", path, nil, nil)
	wantStatus(t, r, http.StatusOK)
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// simCharge is an entry of GET /_sim/charges.
type simCharge = audit.Charge

// chargeSummary counts the simulator's PaymentIntents (GET /_sim/charges):
// succeeded ones, failed ones (declined: requires_payment_method, or
// canceled), and the rest (requires_action, processing).
type chargeSummary struct {
	Succeeded, Failed, Waiting int
	Net                        int64 // succeeded amounts net of refunds
	All                        []simCharge
}

func (c chargeSummary) String() string {
	return fmt.Sprintf("%d succeeded, %d failed, %d waiting, net %d", c.Succeeded, c.Failed, c.Waiting, c.Net)
}

// charges returns the simulator's PaymentIntents (GET /_sim/charges).
func (s *server) charges(t testing.TB) chargeSummary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all, err := audit.Charges(ctx, s.client, s.SimURL)
	if err != nil {
		t.Fatalf("simulator charges: %v", err)
	}
	return summarize(all)
}

// summarize counts PaymentIntents.
func summarize(charges []simCharge) chargeSummary {
	sum := chargeSummary{All: charges}
	for _, c := range charges {
		switch c.Status {
		case "succeeded":
			sum.Succeeded++
			sum.Net += c.Amount - c.RefundedAmount
		case "requires_payment_method", "canceled":
			sum.Failed++
		default:
			sum.Waiting++
		}
	}
	return sum
}

// simDo makes a request to the simulator and fails the test on a transport
// error. Requests to its provider API (/v1) carry the API key it requires.
func (s *server) simDo(t testing.TB, method, path string, body any, header map[string]string) *resp {
	t.Helper()
	c := call{Method: method, Path: s.SimURL + path, Body: body, Header: header}
	if strings.HasPrefix(path, "/v1/") {
		c.Token = s.providerKey
	}
	return s.doCall(t, c)
}

// simFaults merges faults into the simulator's (POST /_sim/faults).
func (s *server) simFaults(t testing.TB, faults map[string]any) {
	t.Helper()
	wantStatus(t, s.simDo(t, "POST", "/_sim/faults", faults, nil), http.StatusOK)
}

// simAdvance moves the simulator's clock forward (POST /_sim/clock).
func (s *server) simAdvance(t testing.TB, d string) {
	t.Helper()
	wantStatus(t, s.simDo(t, "POST", "/_sim/clock", map[string]any{"advance": d}, nil), http.StatusOK)
}

// simEvent is an entry of GET /_sim/events: a Stripe event, whose
// data.object is a PaymentIntent (or, for charge.refunded, a charge).
type simEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object struct {
			ID       string            `json:"id"`
			Status   string            `json:"status"`
			Metadata map[string]string `json:"metadata"`
		} `json:"object"`
	} `json:"data"`
	raw json.RawMessage
}

// simEvents returns the simulator's events with their exact bytes (the body
// the simulator delivers is the event's JSON encoding).
func (s *server) simEvents(t testing.TB) []simEvent {
	t.Helper()
	var out struct {
		Events []json.RawMessage `json:"events"`
	}
	s.simGet(t, "/_sim/events", &out)
	evs := make([]simEvent, len(out.Events))
	for i, raw := range out.Events {
		if err := json.Unmarshal(raw, &evs[i]); err != nil {
			t.Fatalf("GET /_sim/events: %v", err)
		}
		evs[i].raw = raw
	}
	return evs
}

// simEventOf returns the simulator's event of type typ about object
// chargeID (a PaymentIntent's id).
func (s *server) simEventOf(t testing.TB, typ, chargeID string) simEvent {
	t.Helper()
	var found *simEvent
	if !eventually(30*time.Second, func() bool {
		for _, e := range s.simEvents(t) {
			if e.Type == typ && e.Data.Object.ID == chargeID {
				found = &e
				return true
			}
		}
		return false
	}) {
		t.Fatalf("GET /_sim/events: no %s event for %s", typ, chargeID)
	}
	return *found
}

// simDelivery is an entry of GET /_sim/webhooks.
type simDelivery struct {
	EventID    string    `json:"event_id"`
	Type       string    `json:"type"`
	Copy       int       `json:"copy"`
	Attempt    int       `json:"attempt"`
	StatusCode int       `json:"status_code"`
	At         time.Time `json:"at"`
	Delivered  bool      `json:"delivered"`
}

// waitInFlight waits (up to 60 s) until the simulator is processing a
// request under each of keys (GET /_sim/in-flight): the sends are at the
// provider.
func (s *server) waitInFlight(t testing.TB, keys ...string) {
	t.Helper()
	var out struct {
		Keys []string `json:"idempotency_keys"`
	}
	if !eventually(60*time.Second, func() bool {
		s.simGet(t, "/_sim/in-flight", &out)
		for _, k := range keys {
			if !slices.Contains(out.Keys, k) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("GET /_sim/in-flight = %v after 60 s, want %v in flight", out.Keys, keys)
	}
}

// waitWebhooksDelivered waits (up to 60 s) until the simulator has
// delivered every event it has so far at least once (webhooks must not be
// paused), then until the event store settled.
func (s *server) waitWebhooksDelivered(t testing.TB) {
	t.Helper()
	var missing []string
	if !eventually(60*time.Second, func() bool {
		delivered := map[string]bool{}
		for _, d := range s.simDeliveries(t) {
			if d.Delivered {
				delivered[d.EventID] = true
			}
		}
		missing = missing[:0]
		for _, e := range s.simEvents(t) {
			if !delivered[e.ID] {
				missing = append(missing, e.Type+" "+e.ID)
			}
		}
		return len(missing) == 0
	}) {
		t.Fatalf("GET /_sim/webhooks: events %v not delivered within 60 s", missing)
	}
	s.settle(t)
}

// pauseWebhooks makes the simulator hold its webhooks (resumeWebhooks
// lets them go), so only reconciliation can learn an outcome.
func (s *server) pauseWebhooks(t testing.TB) {
	t.Helper()
	s.simFaults(t, map[string]any{"webhooks_paused": true})
}

// resumeWebhooks lets the simulator deliver its paused webhooks again and
// waits (up to 30 s) until booking serve acknowledged a notice of type typ.
func (s *server) resumeWebhooks(t testing.TB, typ string) {
	t.Helper()
	s.simFaults(t, map[string]any{"webhooks_paused": false})
	if !eventually(30*time.Second, func() bool {
		return slices.ContainsFunc(s.simDeliveries(t), func(d simDelivery) bool { return d.Type == typ && d.Delivered })
	}) {
		t.Errorf("GET /_sim/webhooks: no %s notice acknowledged within 30 s of resuming webhooks: %+v", typ, s.simDeliveries(t))
	}
}

func (s *server) simDeliveries(t testing.TB) []simDelivery {
	t.Helper()
	var out struct {
		Deliveries []simDelivery `json:"deliveries"`
	}
	s.simGet(t, "/_sim/webhooks", &out)
	return out.Deliveries
}

// simRefund is an entry of GET /_sim/refunds: a Stripe refund object.
type simRefund struct {
	ID            string            `json:"id"`
	Amount        int64             `json:"amount"`
	PaymentIntent string            `json:"payment_intent"`
	Status        string            `json:"status"`
	Created       int64             `json:"created"`
	Metadata      map[string]string `json:"metadata"`
}

// simRefunds returns the simulator's refunds (GET /_sim/refunds).
func (s *server) simRefunds(t testing.TB) []simRefund {
	t.Helper()
	var out struct {
		Refunds []simRefund `json:"refunds"`
	}
	s.simGet(t, "/_sim/refunds", &out)
	return out.Refunds
}

// simMakePayment creates and confirms a PaymentIntent at the simulator
// directly, on Stripe's wire (as another client of the account would),
// under a fresh key, with metadata order_id (when not empty), attempt (when
// attempt > 0) and the extra metadata meta, and returns its id (200, or the declined
// one of a 402).
func (s *server) simMakePayment(t testing.TB, token, orderID string, attempt int, amount int64, meta map[string]string) string {
	t.Helper()
	form := url.Values{"amount": {strconv.FormatInt(amount, 10)}, "currency": {strings.ToLower(priceCurrency)},
		"payment_method": {token}, "confirm": {"true"}, "automatic_payment_methods[enabled]": {"true"},
		"automatic_payment_methods[allow_redirects]": {"never"}}
	if orderID != "" {
		form.Set("metadata[order_id]", orderID)
	}
	if attempt > 0 {
		form.Set("metadata[attempt]", strconv.Itoa(attempt))
	}
	for k, v := range meta {
		form.Set("metadata["+k+"]", v)
	}
	req, err := http.NewRequest("POST", s.SimURL+"/v1/payment_intents", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+s.providerKey)
	req.Header.Set("Idempotency-Key", "e2e-foreign-"+newKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ID    string `json:"id"`
		Error struct {
			PaymentIntent struct {
				ID string `json:"id"`
			} `json:"payment_intent"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST /v1/payment_intents: %v", err)
	}
	id := out.ID
	if id == "" {
		id = out.Error.PaymentIntent.ID
	}
	if (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPaymentRequired) || id == "" {
		t.Fatalf("POST /v1/payment_intents: %d, id %q; want 200 or 402 with a PaymentIntent", resp.StatusCode, id)
	}
	return id
}

// signWebhook returns the Stripe-Signature of body at t under secret:
// t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
// (https://docs.stripe.com/webhooks#verify-manually).
func signWebhook(body []byte, t time.Time, secret []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "." + string(body)))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// authenticate finishes payment id's customer authentication at the
// simulator (POST /_sim/payment_intents/{id}/authenticate): succeed, or
// fail.
func (s *server) authenticate(t testing.TB, id string, succeed bool) {
	t.Helper()
	outcome := "fail"
	if succeed {
		outcome = "succeed"
	}
	wantStatus(t, s.simDo(t, "POST", "/_sim/payment_intents/"+id+"/authenticate", map[string]any{"outcome": outcome}, nil), http.StatusOK)
}

// orderMoney counts the simulator's charges of one order (by metadata).
func (s *server) orderMoney(t testing.TB, orderID string) chargeSummary {
	t.Helper()
	var mine []simCharge
	for _, c := range s.charges(t).All {
		if c.Metadata["order_id"] == orderID {
			mine = append(mine, c)
		}
	}
	return summarize(mine)
}
