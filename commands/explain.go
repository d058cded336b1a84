package commands

// Explaining an intent: the durable story of what a request with an
// idempotency key did, read from the event log alone. An actor's key names
// one intent stream per operation (IntentStream), so explaining a key is a
// handful of stream reads — the intent streams, then the few streams their
// target lives in — and never a scan of the log.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Operations lists the intent operations, in the order an explanation
// lists them.
var Operations = []string{OpScheduleShow, OpReserveSeats, OpPlaceOrder, OpCancelOrder}

// Outcome states of an explained intent (IntentOutcome.State).
const (
	OutcomePending   = "pending"   // no final outcome yet: a repeat would wait, or answer 202
	OutcomeSucceeded = "succeeded" // the intent's resource was created (or the cancel accepted and finished)
	OutcomeFailed    = "failed"    // the order was placed and its payment failed (declined, deadline, no attempt)
	OutcomeRejected  = "rejected"  // a definitive refusal recorded on the intent (IntentRejected)
)

// IntentExplanation is the durable timeline of one intent, as
// GET /v1/intents and `booking intents explain` show it. Times are the
// service clock's (the database clock that decides leases and expiry), in
// UTC, taken from the events' occurred_at — never from the event store's
// own stamp (KurrentDB's "created"), whose clock may differ; positions are
// log positions "commit/prepare".
type IntentExplanation struct {
	// Operation is "METHOD route-template", e.g. "POST /v1/orders".
	Operation string `json:"operation"`
	// Stream is the intent stream, "intent-" + hex SHA-256 (see IntentStream).
	Stream string `json:"intent_stream"`
	// KeySHA256 is the hex SHA-256 of the Idempotency-Key (the key itself is not stored).
	KeySHA256 string `json:"key_sha256"`
	// Fingerprint is the hex SHA-256 of the request's canonical form, of
	// version CanonicalVersion (RFC 8785 JCS; see Fingerprint).
	Fingerprint      string `json:"fingerprint"`
	CanonicalVersion int    `json:"canonical_version"`
	// RecordedAt is when the intent was recorded; ExpiresAt when its
	// retention (BOOKING_INTENT_RETENTION) ends and its key starts anew.
	RecordedAt time.Time `json:"recorded_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// CorrelationID is the service's id of the request that recorded the
	// intent: the correlation_id of every event that follows from it.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Target is the resource the intent creates or acts on.
	Target IntentTarget `json:"target"`
	// Outcome is where the intent stands now.
	Outcome IntentOutcome `json:"outcome"`
	// Timeline is every event of the intent and of its target, in log order.
	Timeline []TimelineEntry `json:"timeline"`
	// Payments are an order's payment attempts (orders and cancels only).
	Payments []PaymentAttemptView `json:"payments,omitempty"`
	// Refunds are an order's refunds (orders and cancels only).
	Refunds []RefundView `json:"refunds,omitempty"`
}

// IntentTarget is the resource of an intent: its kind ("show",
// "reservation", "order") and id, and its URL path in the API.
type IntentTarget struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Path string `json:"path"`
}

// IntentOutcome is the outcome of an intent. State is one of OutcomePending,
// OutcomeSucceeded, OutcomeFailed, OutcomeRejected; Result is the domain's
// word for it (the order's first outcome, "created", or the refusal's code);
// Code and Detail are a refusal's or a failure's. Status is the HTTP status a
// repeat of the request is answered with now; the commands layer leaves it 0
// and the HTTP adapter fills it from its one kind→status table (Err, for a
// refusal or failure, carries the kind).
type IntentOutcome struct {
	State      string `json:"state"`
	Result     string `json:"result,omitempty"`
	Status     int    `json:"status"`
	Code       string `json:"code,omitempty"`
	Detail     string `json:"detail,omitempty"`
	ResourceID string `json:"resource_id,omitempty"`
	// Err is the domain error of a refusal or failure (its Kind fixes the
	// status), or a *Rejection; nil otherwise. Not serialized.
	Err error `json:"-"`
}

// TimelineEntry is one event of an intent's story. Step is the event type
// in snake_case ("intent_recorded", "payment_attempt_started",
// "lease_taken_over" for a start of an attempt that already had one, …).
// At is its occurred_at (the service clock). RequestID is the service's
// id of the request that caused the event (it appended it, or caused the
// event it follows from), ClientRequestID that request's own X-Request-Id
// when it sent a valid one, CausationID the event or request that caused
// it (see docs/api.md, "Request ids").
// The optional members are those of the event that matter to an operator:
// leases (Executor, LeaseUntil), payment attempts (Attempt, ProviderKey,
// ChargeID, Amount), facts (Outcome, Code, Reason, ObservedBy: "send",
// "reconciliation" or "webhook"), refunds (RefundKey), statuses.
type TimelineEntry struct {
	Step     string    `json:"step"`
	Event    string    `json:"event"`
	Stream   string    `json:"stream"`
	Revision uint64    `json:"revision"`
	Position string    `json:"position"`
	At       time.Time `json:"at"`
	EventID  string    `json:"event_id"`

	RequestID       string `json:"request_id,omitempty"`
	ClientRequestID string `json:"client_request_id,omitempty"`
	CausationID     string `json:"causation_id,omitempty"`

	Executor    string        `json:"executor,omitempty"`
	LeaseUntil  *time.Time    `json:"lease_until,omitempty"`
	Attempt     int           `json:"attempt,omitempty"`
	ProviderKey string        `json:"provider_key,omitempty"`
	ChargeID    string        `json:"charge_id,omitempty"`
	RefundKey   string        `json:"refund_key,omitempty"`
	Amount      *domain.Money `json:"amount,omitempty"`
	Code        string        `json:"code,omitempty"`
	Reason      string        `json:"reason,omitempty"`
	ObservedBy  string        `json:"observed_by,omitempty"`
	ResourceID  string        `json:"resource_id,omitempty"`
}

// PaymentAttemptView is one payment attempt of an order: its provider
// idempotency key, its outcome ("succeeded", "failed", "unknown",
// "requires_action", or "pending" without a fact yet), the payment
// (ChargeID, a PaymentIntent id), how many times its lease was
// renewed or taken over, and its reconciliations: each provider fact about
// the attempt learned by looking it up (ObservedBy "reconciliation") or
// from a webhook, in log order.
type PaymentAttemptView struct {
	Attempt         int              `json:"attempt"`
	ProviderKey     string           `json:"provider_key"`
	Outcome         string           `json:"outcome"`
	ChargeID        string           `json:"charge_id,omitempty"`
	StartedAt       time.Time        `json:"started_at"`
	LeaseTakeovers  int              `json:"lease_takeovers"`
	Unknown         int              `json:"unknown_outcomes"`
	Reconciliations []Reconciliation `json:"reconciliations"`
	Positions       []string         `json:"positions"`
}

// Reconciliation is a provider fact about an attempt that was not the
// answer to the send: what was found (Outcome), the charge, by whom
// (ObservedBy) and where it is in the log.
type Reconciliation struct {
	Outcome    string    `json:"outcome"`
	ChargeID   string    `json:"charge_id,omitempty"`
	ObservedBy string    `json:"observed_by"`
	At         time.Time `json:"at"`
	Position   string    `json:"position"`
}

// RefundView is one refund of an order: the charge, its provider key
// ("refund-{chargeID}"), why, and whether it succeeded, was refused or is
// still owed ("pending").
type RefundView struct {
	ChargeID string       `json:"charge_id"`
	Key      string       `json:"key"`
	Reason   string       `json:"reason"`
	Amount   domain.Money `json:"amount"`
	Status   string       `json:"status"`
	RefundID string       `json:"refund_id,omitempty"`
}

// ExplainIntents returns the explanations of actor's intents under key, one
// per operation that has a live intent stream, in the order of Operations;
// none (an empty slice) when the actor has none — another actor's intents
// are never read, since the streams are named by the actor. It reads only
// the intent streams and the streams of their targets. Returns an error
// wrapping domain.ErrUnavailable when the store fails. Safe for concurrent
// use.
func (h *Queries) ExplainIntents(ctx context.Context, actor, key string) ([]IntentExplanation, error) {
	out := []IntentExplanation{}
	for _, op := range Operations {
		stream := IntentStream(actor, op, key)
		s, err := h.streams.read(ctx, stream)
		if err != nil {
			return nil, err
		}
		if !s.exists {
			continue
		}
		x, err := h.explain(ctx, op, s)
		if err != nil {
			return nil, err
		}
		if x != nil {
			out = append(out, *x)
		}
	}
	return out, nil
}

// explain builds the explanation of the loaded intent stream s.
func (h *core) explain(ctx context.Context, op string, s *stream) (*IntentExplanation, error) {
	var in domain.Intent
	first := -1
	for i, e := range s.events {
		if _, ok := e.(domain.IntentRecorded); ok && first < 0 {
			first = i
		}
		in.Apply(e)
	}
	if !in.Exists() {
		return nil, nil
	}
	rec := in.Recorded
	x := &IntentExplanation{Operation: op, Stream: s.name, KeySHA256: rec.KeySHA256, Fingerprint: rec.Fingerprint,
		CanonicalVersion: rec.CanonicalVersion, RecordedAt: openedAt(s.records[first])}
	if m, err := eventstore.DecodeMetadata(s.records[first].Metadata); err == nil {
		x.CorrelationID = m.CorrelationID
	}
	x.ExpiresAt = x.RecordedAt.Add(h.cfg.IntentRetention)
	var tl timeline
	tl.add(s)

	switch op {
	case OpScheduleShow:
		x.Target = IntentTarget{Kind: "show", ID: rec.TargetID, Path: "/v1/shows/" + rec.TargetID}
		// The show stream also holds every seat hold: its first event is the
		// intent's commit point.
		if err := tl.read(ctx, h, domain.ShowStream(rec.TargetID), 1, nil); err != nil {
			return nil, err
		}
	case OpReserveSeats:
		x.Target = IntentTarget{Kind: "reservation", ID: rec.TargetID, Path: "/v1/reservations/" + rec.TargetID}
		// SeatsHeld, the commit point, is on the show stream among every
		// other hold; the reservation stream follows from it one for one.
		if err := tl.read(ctx, h, domain.ReservationStream(rec.TargetID), 0, nil); err != nil {
			return nil, err
		}
	case OpPlaceOrder:
		x.Target = IntentTarget{Kind: "order", ID: rec.TargetID, Path: "/v1/orders/" + rec.TargetID}
		if res, _ := rec.Command["reservation_id"].(string); res != "" {
			// The claim stream holds one event: this order's claim (the
			// commit point) or the claim that refused it.
			if err := tl.read(ctx, h, domain.ClaimStream(res), 1, nil); err != nil {
				return nil, err
			}
		}
		if err := tl.read(ctx, h, domain.OrderStream(rec.TargetID), 0, nil); err != nil {
			return nil, err
		}
	case OpCancelOrder:
		id, _ := rec.Command["order_id"].(string)
		x.Target = IntentTarget{Kind: "order", ID: id, Path: "/v1/orders/" + id}
		if id != "" {
			// The order's events from this cancel's first one on.
			started := false
			if err := tl.read(ctx, h, domain.OrderStream(id), 0, func(m eventstore.Metadata) bool {
				started = started || m.Intent == s.name
				return started
			}); err != nil {
				return nil, err
			}
		}
	}
	x.Timeline = tl.entries
	x.Outcome = outcomeOf(op, &in, tl.order, tl.found > 0)
	if tl.order != nil && tl.order.Exists() {
		x.Payments, x.Refunds = paymentsOf(tl.order, tl.entries), refundsOf(tl.order)
	}
	return x, nil
}

// timeline collects the entries of an explanation and folds the order
// stream it reads.
type timeline struct {
	entries []TimelineEntry
	order   *domain.Order
	// found counts the target streams read that exist.
	found int
}

// read adds up to limit (0: all) events of stream name, those for which keep
// (nil: all) is true. A stream that does not exist adds nothing.
func (tl *timeline) read(ctx context.Context, h *core, name string, limit int, keep func(eventstore.Metadata) bool) error {
	recs, err := h.store.ReadStream(ctx, name, 0, limit)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return unavailable(err)
	}
	tl.found++
	s := &stream{name: name, records: recs}
	for _, r := range recs {
		e, err := h.registry.Decode(r.Type, r.Data)
		if err != nil {
			return fmt.Errorf("explain %s@%d: %w", name, r.Revision, err)
		}
		s.events = append(s.events, e.(domain.Event))
	}
	if len(s.events) > 0 {
		if _, ok := s.events[0].(domain.OrderPlaced); ok {
			o := fold[domain.Order](s.events)
			tl.order = &o
		}
	}
	tl.addKept(s, keep)
	return nil
}

func (tl *timeline) add(s *stream) { tl.addKept(s, nil) }

func (tl *timeline) addKept(s *stream, keep func(eventstore.Metadata) bool) {
	attempts := map[int]bool{}
	for i, r := range s.records {
		m, _ := eventstore.DecodeMetadata(r.Metadata)
		if keep != nil && !keep(m) {
			continue
		}
		e := s.events[i]
		te := TimelineEntry{Step: snake(r.Type), Event: r.Type, Stream: r.Stream, Revision: r.Revision,
			Position: r.Position.String(), At: openedAt(r), EventID: r.ID, ObservedBy: m.ObservedBy,
			RequestID: m.RequestID, ClientRequestID: m.ClientRequestID, CausationID: m.CausationID}
		describeEvent(&te, e, attempts)
		tl.entries = append(tl.entries, te)
	}
}

// describeEvent copies the members of e that matter to an operator into te.
// attempts records the attempts already started in this stream, so a later
// start of the same attempt is a lease renewal or takeover.
func describeEvent(te *TimelineEntry, e domain.Event, attempts map[int]bool) {
	lease := func(t time.Time) *time.Time { u := t.UTC(); return &u }
	money := func(m domain.Money) *domain.Money { return &m }
	switch e := e.(type) {
	case domain.IntentRecorded:
		te.Executor, te.LeaseUntil, te.ResourceID = e.Executor, lease(e.LeaseUntil), e.TargetID
	case domain.IntentResumed:
		te.Step = "intent_taken_over"
		te.Executor, te.LeaseUntil = e.Executor, lease(e.LeaseUntil)
	case domain.IntentRejected:
		te.Code, te.Reason, te.ResourceID = e.Code, e.Detail, e.ResourceID
	case domain.OrderClaimed:
		te.ResourceID, te.Amount = e.OrderID, money(e.Amount)
	case domain.ExpiryClaimed:
		te.ResourceID = e.ReservationID
	case domain.ShowScheduled:
		te.ResourceID = e.ShowID
	case domain.ReservationHeld:
		te.ResourceID, te.Amount = e.ReservationID, money(e.Amount)
	case domain.ReservationOrdered:
		te.ResourceID = e.OrderID
	case domain.ReservationReleased:
		te.ResourceID, te.Reason = e.OrderID, e.Reason
	case domain.OrderPlaced:
		te.ResourceID, te.Amount = e.ReservationID, money(e.Amount)
	case domain.PaymentAttemptStarted:
		if attempts[e.Attempt] {
			te.Step = "payment_lease_taken_over"
		}
		attempts[e.Attempt] = true
		te.Attempt, te.ProviderKey, te.Executor, te.LeaseUntil = e.Attempt, e.ProviderKey, e.Owner, lease(e.LeaseUntil)
	case domain.PaymentSucceeded:
		te.Attempt, te.ChargeID, te.Amount = e.Attempt, e.ChargeID, money(e.Amount)
	case domain.PaymentFailed:
		te.Attempt, te.ChargeID, te.Code, te.Reason = e.Attempt, e.ChargeID, e.Code, e.Reason
	case domain.PaymentOutcomeUnknown:
		te.Attempt, te.Reason = e.Attempt, e.Reason
	case domain.PaymentActionRequired:
		te.Attempt, te.ChargeID = e.Attempt, e.PaymentID
	case domain.OrderFailed:
		te.Reason = e.Reason
	case domain.OrderNeedsReview:
		te.Reason = e.Reason
	case domain.RefundRequested:
		te.ChargeID, te.RefundKey, te.Reason, te.Amount = e.ChargeID, e.Key, e.Reason, money(e.Amount)
	case domain.RefundSucceeded:
		te.ChargeID, te.ResourceID, te.Amount = e.ChargeID, e.RefundID, money(e.Amount)
	case domain.RefundRefused:
		te.ChargeID, te.Code, te.Reason = e.ChargeID, e.Code, e.Reason
	}
}

// outcomeOf returns where the intent stands: its recorded refusal, or what
// its target shows.
func outcomeOf(op string, in *domain.Intent, o *domain.Order, committed bool) IntentOutcome {
	if r := in.Rejection; r != nil {
		rej := rejectionOf(r, true)
		return IntentOutcome{State: OutcomeRejected, Result: r.Code, Code: r.Code, Detail: r.Detail, ResourceID: r.ResourceID, Err: rej}
	}
	switch op {
	case OpScheduleShow, OpReserveSeats:
		// Their commit point is their success: the intent either reached it
		// (its target stream exists) or is still before it.
		if !committed {
			return IntentOutcome{State: OutcomePending, Result: "recorded"}
		}
		return IntentOutcome{State: OutcomeSucceeded, Result: "created"}
	case OpPlaceOrder:
		if o == nil || !o.Exists() || o.FirstOutcome == "" {
			return IntentOutcome{State: OutcomePending, Result: domain.OrderStatusPending}
		}
		switch o.FirstOutcome {
		case domain.FailPaymentDeclined:
			return IntentOutcome{State: OutcomeFailed, Result: o.FirstOutcome, Code: domain.ErrPaymentDeclined.Code, Err: domain.ErrPaymentDeclined}
		case domain.FailPaymentDeadline, domain.FailNoAttempt:
			return IntentOutcome{State: OutcomeFailed, Result: o.FirstOutcome, Code: domain.ErrPaymentFailed.Code, Err: domain.ErrPaymentFailed}
		}
		return IntentOutcome{State: OutcomeSucceeded, Result: o.FirstOutcome}
	case OpCancelOrder:
		if o == nil || !o.Exists() || !o.Final() {
			return IntentOutcome{State: OutcomePending, Result: statusOr(o, domain.OrderStatusCancelling)}
		}
		return IntentOutcome{State: OutcomeSucceeded, Result: o.Status}
	}
	return IntentOutcome{State: OutcomePending}
}

func statusOr(o *domain.Order, def string) string {
	if o != nil && o.Status != "" {
		return o.Status
	}
	return def
}

// paymentsOf returns the order's attempts with their reconciliations, taken
// from the timeline's order events.
func paymentsOf(o *domain.Order, entries []TimelineEntry) []PaymentAttemptView {
	out := make([]PaymentAttemptView, 0, len(o.Attempts))
	for _, a := range o.Attempts {
		v := PaymentAttemptView{Attempt: a.N, ProviderKey: a.ProviderKey, Outcome: a.Outcome, ChargeID: a.ChargeID,
			StartedAt: a.StartedAt.UTC(), LeaseTakeovers: a.Takeovers, Reconciliations: []Reconciliation{}, Positions: []string{}}
		if v.Outcome == domain.OutcomeNone {
			v.Outcome = "pending"
		}
		for _, te := range entries {
			if te.Attempt != a.N || te.Stream != domain.OrderStream(o.ID) {
				continue
			}
			v.Positions = append(v.Positions, te.Position)
			switch te.Event {
			case domain.TypePaymentOutcomeUnknown:
				v.Unknown++
			case domain.TypePaymentSucceeded, domain.TypePaymentFailed, domain.TypePaymentActionRequired:
				if te.ObservedBy == ObservedByReconciliation || te.ObservedBy == ObservedByWebhook {
					outcome := domain.OutcomeSucceeded
					switch te.Event {
					case domain.TypePaymentFailed:
						outcome = domain.OutcomeFailed
					case domain.TypePaymentActionRequired:
						outcome = domain.OutcomeRequiresAction
					}
					v.Reconciliations = append(v.Reconciliations, Reconciliation{Outcome: outcome, ChargeID: te.ChargeID,
						ObservedBy: te.ObservedBy, At: te.At, Position: te.Position})
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// refundsOf returns the order's refunds, by charge id.
func refundsOf(o *domain.Order) []RefundView {
	out := []RefundView{}
	for _, r := range o.PendingRefunds() {
		out = append(out, RefundView{ChargeID: r.ChargeID, Key: r.Key, Reason: r.Reason, Amount: r.Amount, Status: "pending"})
	}
	for _, r := range o.Refunds {
		switch {
		case r.Succeeded:
			out = append(out, RefundView{ChargeID: r.ChargeID, Key: r.Key, Reason: r.Reason, Amount: r.Amount, Status: "succeeded", RefundID: r.RefundID})
		case r.Refused:
			out = append(out, RefundView{ChargeID: r.ChargeID, Key: r.Key, Reason: r.Reason, Amount: r.Amount, Status: "refused"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ChargeID < out[j].ChargeID })
	return out
}

// snake returns an event type in snake_case ("PaymentAttemptStarted" →
// "payment_attempt_started").
func snake(s string) string {
	b := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b = append(b, '_')
			}
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b)
}
