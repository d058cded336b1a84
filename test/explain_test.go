package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// explainItem is one intent of GET /v1/intents.
type explainItem struct {
	Operation string `json:"operation"`
	Target    struct {
		Kind, ID string
	} `json:"target"`
	Outcome struct {
		State  string `json:"state"`
		Result string `json:"result"`
		Status int    `json:"status"`
	} `json:"outcome"`
	Fingerprint      string `json:"fingerprint"`
	CanonicalVersion int    `json:"canonical_version"`
	CorrelationID    string `json:"correlation_id"`
	Timeline         []struct {
		Step, Event, Stream, Position string
		ObservedBy                    string `json:"observed_by"`
		Attempt                       int    `json:"attempt"`
		RequestID                     string `json:"request_id"`
		ClientRequestID               string `json:"client_request_id"`
		CausationID                   string `json:"causation_id"`
		EventID                       string `json:"event_id"`
	} `json:"timeline"`
	Payments []struct {
		Attempt         int    `json:"attempt"`
		ProviderKey     string `json:"provider_key"`
		Outcome         string `json:"outcome"`
		Unknown         int    `json:"unknown_outcomes"`
		Reconciliations []struct {
			Outcome    string `json:"outcome"`
			ObservedBy string `json:"observed_by"`
		} `json:"reconciliations"`
	} `json:"payments"`
}

// explain answers GET /v1/intents?key=key for token's actor (200 required).
func (s *server) explain(t testing.TB, token, key string) []explainItem {
	t.Helper()
	r := s.do(t, "GET", "/v1/intents?key="+url.QueryEscape(key), token, "", nil)
	wantStatus(t, r, http.StatusOK)
	var doc struct{ Items []explainItem }
	if err := json.Unmarshal(r.Body, &doc); err != nil || doc.Items == nil {
		t.Fatalf("%s: want {\"items\": [...]} (%v)", r, err)
	}
	return doc.Items
}

// steps returns the timeline's steps.
func (it explainItem) steps() []string {
	var out []string
	for _, e := range it.Timeline {
		out = append(out, e.Step)
	}
	return out
}

func hasStep(it explainItem, step string) bool {
	for _, s := range it.steps() {
		if s == step {
			return true
		}
	}
	return false
}

// TestExplain_OwnIntentsAreListedAndOthersAreInvisible: one key used by
// alice on a reservation and on an order is two intents, each with its
// timeline and outcome; every entry names the request that caused it (the
// service's id, the correlation id of its intent, with the client's
// X-Request-Id beside it) and its cause; bob, asking for the same key, sees
// none; a missing key is 400.
func TestExplain_OwnIntentsAreListedAndOthersAreInvisible(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	show := s.mustCreateShow(t, 10)
	key := newKey()
	r := s.do(t, "POST", "/v1/reservations", tokAlice, key, map[string]any{"show_id": show, "quantity": 2})
	wantStatus(t, r, http.StatusCreated)
	res := r.str("id")
	oc := orderCall(tokAlice, key, res, "tok_visa")
	oc.Header = map[string]string{"X-Request-Id": "explain-order-1"}
	o := s.doCall(t, oc)
	wantStatus(t, o, http.StatusCreated)

	items := s.explain(t, tokAlice, key)
	if len(items) != 2 {
		t.Fatalf("GET /v1/intents: %d items, want 2 (the reservation and the order)", len(items))
	}
	rv, ov := items[0], items[1]
	if rv.Operation != "POST /v1/reservations" || rv.Target.ID != res || rv.Outcome.State != "succeeded" || rv.Outcome.Status != 201 {
		t.Errorf("reservation intent = %+v, want POST /v1/reservations of %s, succeeded 201", rv, res)
	}
	if got := rv.steps(); len(got) < 2 || got[0] != "intent_recorded" || !hasStep(rv, "reservation_held") {
		t.Errorf("reservation timeline = %v, want intent_recorded … reservation_held", got)
	}
	if ov.Operation != "POST /v1/orders" || ov.Target.ID != o.str("id") || ov.Outcome.State != "succeeded" ||
		ov.Outcome.Result != "confirmed" || ov.Outcome.Status != 201 || ov.CanonicalVersion != 1 || len(ov.Fingerprint) != 64 {
		t.Errorf("order intent = %+v, want POST /v1/orders of %s, succeeded confirmed 201, canonical v1", ov, o.str("id"))
	}
	for _, step := range []string{"intent_recorded", "order_claimed", "order_placed", "payment_attempt_started", "payment_succeeded", "order_confirmed"} {
		if !hasStep(ov, step) {
			t.Errorf("order timeline %v lacks %s", ov.steps(), step)
		}
	}
	if !isUUIDv7(ov.CorrelationID) || rv.CorrelationID == ov.CorrelationID {
		t.Errorf("correlation ids: reservation %q, order %q; want two UUIDv7s of the two requests", rv.CorrelationID, ov.CorrelationID)
	}
	webhookFacts := map[string]int{} // event id -> index, of the facts the webhook recorded
	for i, e := range ov.Timeline {
		if e.ObservedBy == "webhook" {
			webhookFacts[e.EventID] = i
		}
	}
	for _, e := range ov.Timeline {
		if e.CausationID == "" {
			t.Errorf("order timeline: %s at %s has no causation_id", e.Step, e.Position)
		}
		// The webhook is a request of its own: a fact it recorded names it.
		if e.ObservedBy == "webhook" {
			if !isUUIDv7(e.RequestID) || e.RequestID == ov.CorrelationID {
				t.Errorf("order timeline: %s observed by the webhook names request %q, want the webhook's own", e.Step, e.RequestID)
			}
			continue
		}
		// A consequence of a fact the webhook recorded (the erasure after
		// the order's end) carries that request on, as its cause.
		want, wantClient := ov.CorrelationID, "explain-order-1"
		if i, ok := webhookFacts[e.CausationID]; ok {
			want, wantClient = ov.Timeline[i].RequestID, ov.Timeline[i].ClientRequestID
		}
		if e.RequestID != want || e.ClientRequestID != wantClient {
			t.Errorf("order timeline: %s names request %q (client %q), want %s (client %q)",
				e.Step, e.RequestID, e.ClientRequestID, want, wantClient)
		}
	}
	if len(ov.Payments) != 1 || ov.Payments[0].Outcome != "succeeded" || ov.Payments[0].ProviderKey != "order-"+o.str("id")+"-1" {
		t.Errorf("order payments = %+v, want attempt 1 under order-%s-1 succeeded", ov.Payments, o.str("id"))
	} else if rs := ov.Payments[0].Reconciliations; len(rs) > 1 || (len(rs) == 1 && rs[0].ObservedBy != "webhook") {
		// The send's answer and the simulator's webhook race to record the
		// success: the fact is recorded once, by whichever comes first.
		t.Errorf("order reconciliations = %+v, want none, or the webhook's one", rs)
	}

	if items := s.explain(t, tokBob, key); len(items) != 0 {
		t.Errorf("bob's GET /v1/intents for alice's key: %d items, want 0", len(items))
	}
	checkProblem(t, s.do(t, "GET", "/v1/intents", tokAlice, "", nil), http.StatusBadRequest, "idempotency-key-invalid")
}

// TestExplain_UnknownPaymentOutcomeThenReconciledShowsEachStep: a charge
// whose answer is lost (tok_timeout_after_commit; webhooks paused, so only
// the reconciler learns it) shows attempt, unknown outcome, reconciliation
// and outcome in the order's explanation.
func TestExplain_UnknownPaymentOutcomeThenReconciledShowsEachStep(t *testing.T) {
	t.Parallel()
	s, _, res := mustStartReserved(t, Options{Env: fastEnv()}, 2)
	s.pauseWebhooks(t)
	key := newKey()
	id := s.mustPlaceOrder(t, key, res, "tok_timeout_after_commit", 10, http.StatusCreated, http.StatusAccepted)
	if g := s.waitStatus(t, id, recoveryBound, "confirmed", "failed", "needs_review"); g.str("status") != "confirmed" {
		t.Fatalf("%s, want confirmed", g)
	}
	items := s.explain(t, tokAlice, key)
	if len(items) != 1 || items[0].Target.ID != id {
		t.Fatalf("GET /v1/intents: %+v, want the one order %s", items, id)
	}
	it := items[0]
	want := []string{"payment_attempt_started", "payment_outcome_unknown", "payment_succeeded", "order_confirmed"}
	next := 0
	for _, e := range it.Timeline {
		if next < len(want) && e.Step == want[next] {
			if e.Step == "payment_succeeded" && e.ObservedBy != "reconciliation" {
				t.Errorf("payment_succeeded at %s observed by %q, want reconciliation", e.Position, e.ObservedBy)
			}
			next++
		}
	}
	if next != len(want) {
		t.Errorf("order timeline %v, want the steps %v in this order", it.steps(), want)
	}
	if len(it.Payments) != 1 {
		t.Fatalf("payments = %+v, want one attempt", it.Payments)
	}
	p := it.Payments[0]
	if p.Outcome != "succeeded" || p.Unknown != 1 || len(p.Reconciliations) != 1 ||
		p.Reconciliations[0].Outcome != "succeeded" || p.Reconciliations[0].ObservedBy != "reconciliation" {
		t.Errorf("attempt = %+v, want succeeded after 1 unknown outcome and 1 reconciliation (succeeded, by reconciliation)", p)
	}
	if it.Outcome.State != "succeeded" || it.Outcome.Status != 201 {
		t.Errorf("outcome = %+v, want succeeded 201", it.Outcome)
	}
	s.resumeWebhooks(t, "payment_intent.succeeded")
	s.settle(t)
}

// explainCLI runs `booking intents explain --actor actor --key key` as its
// own process with only DATABASE_URL and, when the suite runs on KurrentDB,
// BOOKING_EVENT_STORE, and returns its exit status, stdout and stderr.
func (s *server) explainCLI(t testing.TB, actor, key string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bookingBin, "intents", "explain", "--actor", actor, "--key", key)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOOKING_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "DATABASE_URL="+s.dbURL)
	if s.eventStore != "" {
		cmd.Env = append(cmd.Env, "BOOKING_EVENT_STORE="+s.eventStore)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	fmt.Fprintf(s.logs, "=== e2e: booking intents explain --actor %s --key %s (exit %d):\n%s%s", actor, key, code, stdout.String(), stderr.String())
	return code, stdout.String(), stderr.String()
}

// TestExplain_CLIFindsOrExitsOne: `booking intents explain` prints alice's
// reservation intent with its correlation_id (the one GET /v1/intents
// shows) and each event's event_id and request_id under those names, and
// exits 0; for bob, who has no intent under the key, it prints nothing on
// stdout, names the actor and key on stderr and exits 1.
func TestExplain_CLIFindsOrExitsOne(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{})
	show := s.mustCreateShow(t, 10)
	key := newKey()
	r := s.do(t, "POST", "/v1/reservations", tokAlice, key, map[string]any{"show_id": show, "quantity": 1})
	wantStatus(t, r, http.StatusCreated)
	items := s.explain(t, tokAlice, key)
	if len(items) != 1 || !isUUIDv7(items[0].CorrelationID) {
		t.Fatalf("GET /v1/intents: %+v, want the one reservation intent with a correlation_id", items)
	}

	code, out, errOut := s.explainCLI(t, "alice", key)
	if code != 0 {
		t.Fatalf("booking intents explain --actor alice: exit %d, want 0; stderr %q", code, errOut)
	}
	for _, want := range []string{"POST /v1/reservations", "correlation_id  " + items[0].CorrelationID, " event_id=", " request_id=" + items[0].CorrelationID, " causation_id="} {
		if !strings.Contains(out, want) {
			t.Errorf("booking intents explain --actor alice printed:\n%s\nwant %q", out, want)
		}
	}

	code, out, errOut = s.explainCLI(t, "bob", key)
	want := fmt.Sprintf("booking: no intent of actor %q under Idempotency-Key %q", "bob", key)
	if code != 1 || out != "" || !strings.HasPrefix(errOut, want) {
		t.Errorf("booking intents explain --actor bob: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, stderr beginning %q", code, out, errOut, want)
	}
}
