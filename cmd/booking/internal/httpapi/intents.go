package httpapi

import (
	"net/http"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// IntentsDocument is the answer of GET /v1/intents?key=K and what
// `booking intents explain --json` prints: the caller's intents under the
// key, one per operation, each with its durable timeline (see
// commands.IntentExplanation). Items is empty, never null, when the actor
// has no intent under the key.
type IntentsDocument struct {
	Items []commands.IntentExplanation `json:"items"`
}

// ExplainDocument returns the document of explanations xs, with each
// outcome's Status filled in: the HTTP status a repeat of the request is
// answered with now — 202 while pending (409 idempotency-key-in-use or 202
// are both "not final"; 202 is the one a repeat gets once the executor's
// lease ended), the operation's success status (201 for the creating POSTs,
// 200 for a cancel), and for a refusal or failure its kind's status from the
// one kind→status table (statusOf).
func ExplainDocument(xs []commands.IntentExplanation) IntentsDocument {
	if xs == nil {
		xs = []commands.IntentExplanation{}
	}
	for i := range xs {
		o := &xs[i].Outcome
		switch {
		case o.Err != nil:
			o.Status = statusOf(o.Err)
		case o.State == commands.OutcomePending:
			o.Status = http.StatusAccepted
		case xs[i].Operation == commands.OpCancelOrder:
			o.Status = http.StatusOK
		default:
			o.Status = http.StatusCreated
		}
	}
	return IntentsDocument{Items: xs}
}

// getIntents answers GET /v1/intents?key=K: the caller's intents under K.
// A missing or invalid key (the Idempotency-Key rules, parseKeyValue) is
// 400 idempotency-key-invalid naming "key".
func (a *api) getIntents(w http.ResponseWriter, r *http.Request) {
	vals, err := queryValues(r, "key")
	if err != nil {
		a.writeError(w, r, httpError(domain.Invalid, codeKeyInvalid, "the key query parameter is not a valid query value (a bad %-escape, or a ';')", "key"))
		return
	}
	if len(vals) != 1 {
		a.writeError(w, r, httpError(domain.Invalid, codeKeyInvalid, "send exactly one key query parameter: the Idempotency-Key to explain", "key"))
		return
	}
	key, err := parseKeyValue(vals[0])
	if err != nil {
		a.writeError(w, r, httpError(domain.Invalid, codeKeyInvalid, "key: "+err.Error(), "key"))
		return
	}
	xs, err := a.svc.ExplainIntents(r.Context(), actorFrom(r.Context()).ID, key)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ExplainDocument(xs))
}
