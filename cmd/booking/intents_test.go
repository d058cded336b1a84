package main

import (
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
)

// TestPrintExplanations: the text of `booking intents explain` names the
// request that recorded the intent and, on each timeline line, the request
// behind the event (the service's id and the client's), with times of the
// service clock as the explanation carries them.
func TestPrintExplanations(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 5, 20, 10, 3, 7, 0, time.UTC)
	x := commands.IntentExplanation{Operation: commands.OpPlaceOrder, Stream: "intent-x", RecordedAt: at, ExpiresAt: at.Add(24 * time.Hour),
		CorrelationID: "0197c000-0000-7000-8000-00000000000a",
		Outcome:       commands.IntentOutcome{State: commands.OutcomeSucceeded, Result: "confirmed"},
		Timeline: []commands.TimelineEntry{{Step: "intent_recorded", Stream: "intent-x", Position: "1/1", At: at,
			RequestID: "0197c000-0000-7000-8000-00000000000a", ClientRequestID: "checkout-7"}}}
	var b strings.Builder
	printExplanations(&b, "alice", httpapi.ExplainDocument([]commands.IntentExplanation{x}))
	for _, want := range []string{
		"recorded     2030-05-20T10:03:07Z, expires 2030-05-21T10:03:07Z (service clock)",
		"request      0197c000-0000-7000-8000-00000000000a",
		"10:03:07.000  intent_recorded",
		"request=0197c000-0000-7000-8000-00000000000a client_request=checkout-7",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("booking intents explain printed:\n%s\nwant a line with %q", b.String(), want)
		}
	}
}
