package explaintext

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
)

// TestPrint: the text of `booking intents explain` names the intent's
// correlation_id and, on each timeline line, the event's id and lineage
// under the JSON document's member names (event_id, request_id,
// client_request_id, causation_id), so no id is shown under another's
// label, with times of the service clock as the explanation carries them.
func TestPrint(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 5, 20, 10, 3, 7, 0, time.UTC)
	x := commands.IntentExplanation{Operation: commands.OpPlaceOrder, Stream: "intent-x", RecordedAt: at, ExpiresAt: at.Add(24 * time.Hour),
		CorrelationID: "0197c000-0000-7000-8000-00000000000a",
		Outcome:       commands.IntentOutcome{State: commands.OutcomeSucceeded, Result: "confirmed"},
		Timeline: []commands.TimelineEntry{{Step: "intent_recorded", Stream: "intent-x", Position: "1/1", At: at,
			EventID: "5f0c6e1a-0000-5000-8000-000000000001", ChargeID: "pi_1", ResourceID: "ord_1",
			RequestID: "0197c000-0000-7000-8000-00000000000a", ClientRequestID: "checkout-7", CausationID: "0197c000-0000-7000-8000-00000000000a"}}}
	doc := httpapi.ExplainDocument([]commands.IntentExplanation{x})
	var b strings.Builder
	Print(&b, doc)
	for _, want := range []string{
		"recorded        2030-05-20T10:03:07Z, expires 2030-05-21T10:03:07Z (service clock)",
		"correlation_id  0197c000-0000-7000-8000-00000000000a (the service's id of the request that recorded the intent)",
		"10:03:07.000  intent_recorded",
		" charge_id=pi_1 resource_id=ord_1 event_id=5f0c6e1a-0000-5000-8000-000000000001" +
			" request_id=0197c000-0000-7000-8000-00000000000a client_request_id=checkout-7 causation_id=0197c000-0000-7000-8000-00000000000a\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("booking intents explain printed:\n%s\nwant a line with %q", b.String(), want)
		}
	}
	for _, label := range []string{"  request  ", " request=", " client_request=", " charge=", " resource="} {
		if strings.Contains(b.String(), label) {
			t.Errorf("booking intents explain printed:\n%s\nwith the label %q, which is no member of the JSON document", b.String(), label)
		}
	}
	if err := NoIntent("alice", "order-1", doc); err != nil {
		t.Errorf("NoIntent of a document with an intent = %v, want nil", err)
	}
}

// TestNoIntent: a document without intents prints nothing and is an error
// wrapping ErrNoIntent that names the actor, the key and the operations
// looked up.
func TestNoIntent(t *testing.T) {
	t.Parallel()
	doc := httpapi.ExplainDocument(nil)
	var b strings.Builder
	Print(&b, doc)
	if b.Len() != 0 {
		t.Errorf("Print of no intent wrote %q, want nothing (the error says it)", b.String())
	}
	err := NoIntent("bob", `a "b"`, doc)
	if !errors.Is(err, ErrNoIntent) {
		t.Fatalf("NoIntent = %v, want an error wrapping ErrNoIntent", err)
	}
	for _, want := range []string{`no intent of actor "bob" under Idempotency-Key "a \"b\""`, "POST /v1/reservations", "POST /v1/orders/{id}/cancel", "--intent-retention"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NoIntent = %q, want it to name %q", err, want)
		}
	}
}
