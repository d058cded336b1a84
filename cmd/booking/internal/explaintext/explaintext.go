// Package explaintext is the text of `booking intents explain`: an actor's
// intents under an idempotency key, as GET /v1/intents answers them
// (httpapi.IntentsDocument), written for an operator, and the error the
// command ends with when there is none.
package explaintext

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
)

// ErrNoIntent is wrapped by the error NoIntent returns: the event store
// holds no live intent of the actor under the key. `booking intents
// explain` exits 1 with it (a lookup that found nothing), never 0.
var ErrNoIntent = errors.New("no intent")

// NoIntent returns nil when doc has an intent, and otherwise an error
// wrapping ErrNoIntent that names what was looked up: the actor, the key
// (quoted, as it was parsed from --key) and the operations whose intent
// streams were read (commands.Operations), with the reasons a key has
// none: never recorded by this actor, or past its retention.
func NoIntent(actor, key string, doc httpapi.IntentsDocument) error {
	if len(doc.Items) > 0 {
		return nil
	}
	return fmt.Errorf("%w of actor %q under Idempotency-Key %q (looked up the intent streams of %s): "+
		"never recorded by this actor (keys are per actor) or past its retention (--intent-retention)",
		ErrNoIntent, actor, key, strings.Join(commands.Operations, ", "))
}

// Print writes doc for a human: one block per intent — its operation and
// intent stream, when it was recorded and expires, its correlation_id, its
// fingerprint, target and outcome — then its timeline (one line per event:
// position, time, step, stream@revision and the event's members as
// name=value, each name the member of the same name in the JSON document,
// so event_id is the event's id and request_id, client_request_id and
// causation_id its lineage), payment attempts and refunds. It writes
// nothing for a document without intents (see NoIntent).
func Print(w io.Writer, doc httpapi.IntentsDocument) {
	for i, x := range doc.Items {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  (%s)\n", x.Operation, x.Stream)
		fmt.Fprintf(w, "  recorded        %s, expires %s (service clock)\n", x.RecordedAt.Format(time.RFC3339Nano), x.ExpiresAt.Format(time.RFC3339))
		if x.CorrelationID != "" {
			fmt.Fprintf(w, "  correlation_id  %s (the service's id of the request that recorded the intent)\n", x.CorrelationID)
		}
		fmt.Fprintf(w, "  fingerprint     %s (canonical form v%d)\n", x.Fingerprint, x.CanonicalVersion)
		fmt.Fprintf(w, "  target          %s %s (%s)\n", x.Target.Kind, x.Target.ID, x.Target.Path)
		out := fmt.Sprintf("%s, %s → a repeat is answered %d", x.Outcome.State, x.Outcome.Result, x.Outcome.Status)
		if x.Outcome.Code != "" && x.Outcome.Code != x.Outcome.Result {
			out += " " + x.Outcome.Code
		}
		fmt.Fprintf(w, "  outcome         %s\n", out)
		fmt.Fprintln(w, "  timeline")
		for _, t := range x.Timeline {
			fmt.Fprintf(w, "    %-13s %s  %-26s %s@%d  %s\n", t.Position, t.At.Format("15:04:05.000"), t.Step, t.Stream, t.Revision, entryMembers(t))
		}
		for _, p := range x.Payments {
			fmt.Fprintf(w, "  attempt %d       key %s: %s", p.Attempt, p.ProviderKey, p.Outcome)
			if p.ChargeID != "" {
				fmt.Fprintf(w, " (charge %s)", p.ChargeID)
			}
			fmt.Fprintf(w, "; %d unknown outcome(s), %d lease takeover(s), %d reconciliation(s); positions %s\n",
				p.Unknown, p.LeaseTakeovers, len(p.Reconciliations), strings.Join(p.Positions, " "))
			for _, r := range p.Reconciliations {
				fmt.Fprintf(w, "                  reconciled at %s by %s: %s %s\n", r.Position, r.ObservedBy, r.Outcome, r.ChargeID)
			}
		}
		for _, r := range x.Refunds {
			fmt.Fprintf(w, "  refund          %d %s of charge %s (%s, key %s): %s\n", r.Amount.Amount, r.Amount.Currency, r.ChargeID, r.Reason, r.Key, r.Status)
		}
	}
}

// entryMembers returns the members of t an operator reads on a timeline
// line, as space-separated name=value pairs named as in the JSON document
// (commands.TimelineEntry); empty members are left out.
func entryMembers(t commands.TimelineEntry) string {
	var d []string
	add := func(k, v string) {
		if v != "" {
			d = append(d, k+"="+v)
		}
	}
	if t.Attempt > 0 {
		add("attempt", fmt.Sprint(t.Attempt))
	}
	add("provider_key", t.ProviderKey)
	add("executor", t.Executor)
	if t.LeaseUntil != nil {
		add("lease_until", t.LeaseUntil.Format(time.RFC3339Nano))
	}
	add("charge_id", t.ChargeID)
	add("refund_key", t.RefundKey)
	add("observed_by", t.ObservedBy)
	add("code", t.Code)
	add("reason", t.Reason)
	add("resource_id", t.ResourceID)
	add("event_id", t.EventID)
	add("request_id", t.RequestID)
	add("client_request_id", t.ClientRequestID)
	add("causation_id", t.CausationID)
	return strings.Join(d, " ")
}
