package providersim

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
)

// PaymentIntent statuses (https://docs.stripe.com/payments/paymentintents/lifecycle).
const (
	statusRequiresPaymentMethod = "requires_payment_method"
	statusRequiresConfirmation  = "requires_confirmation"
	statusRequiresAction        = "requires_action"
	statusSucceeded             = "succeeded"
	statusCanceled              = "canceled"
	statusFailed                = "failed" // of a charge
)

// Event types the simulator emits (https://docs.stripe.com/api/events/types).
const (
	eventSucceeded      = "payment_intent.succeeded"
	eventPaymentFailed  = "payment_intent.payment_failed"
	eventRequiresAction = "payment_intent.requires_action"
	eventCanceled       = "payment_intent.canceled"
	eventChargeRefunded = "charge.refunded"
)

// maxAmount is the largest amount Stripe takes (eight digits,
// https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts).
const maxAmount = 99_999_999

// returnURLMessage is Stripe's refusal of a confirmation whose redirects
// are not ruled out and that has no return_url.
const returnURLMessage = "A `return_url` must be specified because this Payment Intent is configured to automatically accept the payment methods enabled in the Dashboard, some of which may require a full page redirect to succeed. If you do not want to accept redirect-based payment methods, set `automatic_payment_methods[enabled]` to `true` and `automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and Payment Intents."

var (
	createIntentSpec = spec{
		scalars: set("amount", "currency", "payment_method", "confirm", "description", "return_url", "capture_method"),
		hashes:  map[string]map[string]bool{"metadata": nil, "automatic_payment_methods": set("enabled", "allow_redirects")},
		arrays:  set("payment_method_types", "expand"),
	}
	retrieveIntentSpec = spec{arrays: set("expand")}
	cancelIntentSpec   = spec{scalars: set("cancellation_reason"), arrays: set("expand")}
)

// createInput is a validated POST /v1/payment_intents.
type createInput struct {
	amount        int64
	currency      string // lower case
	paymentMethod string // "" or a name of the table; never stored
	confirm       bool
	description   string
	metadata      map[string]string
	apm           *AutomaticPaymentMethods // nil with payment_method_types
	expandCharge  bool
}

// createPaymentIntent is POST /v1/payment_intents
// (https://docs.stripe.com/api/payment_intents/create).
func (s *Server) createPaymentIntent(w http.ResponseWriter, r *http.Request) {
	s.servePost(w, r, createIntentSpec, s.buildCreate)
}

func (s *Server) buildCreate(p params) (*operation, *apiError) {
	in, e := parseCreate(p)
	if e != nil {
		return nil, e
	}
	b := behaviourOf(in.paymentMethod)
	s.mu.Lock()
	forced := slices.Contains(s.faults.DeclineTokens, in.paymentMethod) && in.paymentMethod != ""
	s.mu.Unlock()
	if forced {
		b = behaviourDecline
	}
	if in.paymentMethod != "" && b == behaviourUnknown {
		// Stripe names the id; the simulator does not echo a payment method.
		return nil, &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeInvalidRequest, Code: codeResourceMissing,
			Param: "payment_method", Message: "No such PaymentMethod."}}
	}
	op := &operation{}
	if in.confirm {
		switch b {
		case behaviourErrorBeforeCommit:
			op.failBeforeCommit = true
		case behaviourErrorAfterCommit:
			op.failAfterCommit = true
		case behaviourTimeoutAfterCommit:
			op.dropAfterCommit = true
		case behaviourSlow:
			op.extra = s.cfg.SlowDelay
		}
	}
	op.commit = func(key string) (change, *apiError) { return s.newIntentLocked(in, b, key), nil }
	return op, nil
}

// parseCreate validates the parameters of a create as Stripe does.
func parseCreate(p params) (createInput, *apiError) {
	var in createInput
	amount, ok, e := p.intParam("amount")
	switch {
	case e != nil:
		return in, e
	case !ok:
		return in, missingParam("amount")
	case amount < 1:
		return in, invalidParam("amount", codeParameterInvalidInteger, "This value must be greater than or equal to 1.")
	case amount > maxAmount:
		return in, invalidParam("amount", codeAmountTooLarge, "Amount must be no more than 99999999 in minor units.")
	}
	in.amount = amount
	cur, ok := p.scalar["currency"]
	if !ok {
		return in, missingParam("currency")
	}
	if len(cur) != 3 || strings.Trim(strings.ToLower(cur), "abcdefghijklmnopqrstuvwxyz") != "" {
		return in, invalidParam("currency", "", "Invalid currency: "+cur+". Stripe currently supports these currencies: three-letter ISO 4217 codes.")
	}
	in.currency = strings.ToLower(cur)
	if v, ok := p.scalar["confirm"]; ok {
		if in.confirm, e = boolValue("confirm", v); e != nil {
			return in, e
		}
	}
	if v, ok := p.scalar["capture_method"]; ok {
		if e := enumValue("capture_method", v, "automatic", "automatic_async"); e != nil {
			return in, e
		}
	}
	in.paymentMethod = p.scalar["payment_method"]
	in.description = p.scalar["description"]
	if in.metadata, e = p.metadataParam(); e != nil {
		return in, e
	}
	if in.apm, e = parseAPM(p); e != nil {
		return in, e
	}
	expand, e := p.expandParam("latest_charge")
	if e != nil {
		return in, e
	}
	in.expandCharge = expand["latest_charge"]
	if !in.confirm {
		return in, nil
	}
	if in.paymentMethod == "" {
		return in, invalidParam("payment_method", codeUnexpectedState,
			"You cannot confirm this PaymentIntent because it's missing a payment method. To confirm the PaymentIntent, provide a payment_method.")
	}
	redirectsRuledOut := in.apm == nil || !in.apm.Enabled || in.apm.AllowRedirects == "never"
	if !redirectsRuledOut && p.scalar["return_url"] == "" {
		return in, invalidParam("", "", returnURLMessage)
	}
	return in, nil
}

// parseAPM reads automatic_payment_methods and payment_method_types; it
// returns nil when payment_method_types (card only) rules redirects out.
// Without either, automatic payment methods are on with redirects allowed,
// as Stripe defaults them (https://docs.stripe.com/api/payment_intents/create#create_payment_intent-automatic_payment_methods).
func parseAPM(p params) (*AutomaticPaymentMethods, *apiError) {
	types, hasTypes := p.array["payment_method_types"]
	apm, hasAPM := p.hash["automatic_payment_methods"]
	switch {
	case hasTypes && hasAPM:
		return nil, invalidParam("", "", "You may only specify one of these parameters: automatic_payment_methods, payment_method_types.")
	case hasTypes:
		for _, t := range types {
			if t != "card" {
				return nil, invalidParam("payment_method_types", "", "The simulator supports payment_method_types card only, not "+t+".")
			}
		}
		return nil, nil
	case !hasAPM:
		return &AutomaticPaymentMethods{Enabled: true, AllowRedirects: "always"}, nil
	}
	v, ok := apm["enabled"]
	if !ok {
		return nil, missingParam("automatic_payment_methods[enabled]")
	}
	enabled, e := boolValue("automatic_payment_methods[enabled]", v)
	if e != nil {
		return nil, e
	}
	out := &AutomaticPaymentMethods{Enabled: enabled}
	if v, ok := apm["allow_redirects"]; ok {
		if e := enumValue("automatic_payment_methods[allow_redirects]", v, "always", "never"); e != nil {
			return nil, e
		}
		out.AllowRedirects = v
	} else if enabled {
		out.AllowRedirects = "always"
	}
	return out, nil
}

// newIntentLocked creates the PaymentIntent of in and confirms it when
// asked: the change to commit, with its answer and event.
func (s *Server) newIntentLocked(in createInput, b behaviour, key string) change {
	now := s.cfg.Now()
	id := newID("pi_")
	pi := &PaymentIntent{
		ID: id, Object: "payment_intent", Amount: in.amount, AutomaticPaymentMethods: in.apm,
		CaptureMethod: "automatic_async", ClientSecret: id + "_secret_" + newID(""), ConfirmationMethod: "automatic",
		Created: now.Unix(), Currency: in.currency, Description: optStr(in.description),
		Metadata: in.metadata, PaymentMethodTypes: []string{"card"}, Status: statusRequiresPaymentMethod,
	}
	it := &intent{pi: pi, key: key, createdAt: now}
	c := change{intent: it, status: http.StatusOK}
	var pm string
	if in.paymentMethod != "" {
		pm = newID("pm_")
		pi.PaymentMethod = &pm
		pi.Status = statusRequiresConfirmation
	}
	if in.confirm {
		switch b {
		case behaviourDecline:
			return s.declineLocked(c, pm, in.expandCharge)
		case behaviourAuthenticate:
			pi.Status = statusRequiresAction
			pi.NextAction = &NextAction{Type: "use_stripe_sdk",
				UseStripeSDK: map[string]string{"type": "three_d_secure_redirect", "source": newID("src_")}}
			c.events = []pendingEvent{{eventRequiresAction, pi}}
		default:
			c.charge = succeed(pi, now.Unix())
			c.events = []pendingEvent{{eventSucceeded, pi}}
		}
	}
	c.body = encodeJSON(s.renderWithLocked(pi, c.charge, in.expandCharge))
	return c
}

// succeed captures pi's amount: it sets pi succeeded and returns its
// new charge.
func succeed(pi *PaymentIntent, created int64) *Charge {
	ch := &Charge{
		ID: newID("ch_"), Object: "charge", Amount: pi.Amount, AmountCaptured: pi.Amount, Captured: true,
		Created: created, Currency: pi.Currency, Description: pi.Description, Metadata: pi.Metadata,
		Paid: true, PaymentIntent: pi.ID, PaymentMethod: pi.PaymentMethod, Status: statusSucceeded,
	}
	pi.Status, pi.AmountReceived, pi.LatestCharge, pi.NextAction = statusSucceeded, pi.Amount, ch.ID, nil
	return ch
}

// declineLocked declines c's PaymentIntent as Stripe declines a card:
// a failed charge, the PaymentIntent back in requires_payment_method with
// last_payment_error, and a 402 card_error whose payment_intent is it
// (https://docs.stripe.com/declines).
func (s *Server) declineLocked(c change, pm string, expandCharge bool) change {
	pi := c.intent.pi
	ch := &Charge{
		ID: newID("ch_"), Object: "charge", Amount: pi.Amount, Created: pi.Created, Currency: pi.Currency,
		Description: pi.Description, FailureCode: strPtr(codeCardDeclined), FailureMessage: strPtr(declineMessage),
		Metadata: pi.Metadata, PaymentIntent: pi.ID, PaymentMethod: pi.PaymentMethod, Status: statusFailed,
	}
	method := &PaymentMethod{ID: pm, Object: "payment_method", Type: "card"}
	pi.Status, pi.PaymentMethod, pi.LatestCharge = statusRequiresPaymentMethod, nil, ch.ID
	pi.LastPaymentError = &ErrorObject{Type: typeCard, Code: codeCardDeclined, DeclineCode: declineCodeGeneric,
		Message: declineMessage, Charge: ch.ID, PaymentMethod: method}
	c.charge = ch
	c.status = http.StatusPaymentRequired
	c.body = (&apiError{obj: ErrorObject{Type: typeCard, Code: codeCardDeclined, DeclineCode: declineCodeGeneric,
		Message: declineMessage, Charge: ch.ID, PaymentIntent: s.renderWithLocked(pi, ch, expandCharge), PaymentMethod: method}}).body()
	c.events = []pendingEvent{{eventPaymentFailed, pi}}
	return c
}

// renderWithLocked renders pi with its latest charge expanded when
// expand asks for it; ch is that charge when it is not stored yet.
func (s *Server) renderWithLocked(pi *PaymentIntent, ch *Charge, expand bool) *PaymentIntent {
	out := *pi
	if !expand || pi.LatestCharge == nil {
		return &out
	}
	if ch == nil {
		ch = s.chargeByID[pi.LatestCharge.(string)]
	}
	if ch != nil {
		c := *ch
		out.LatestCharge = &c
	}
	return &out
}

// getPaymentIntent is GET /v1/payment_intents/{id}
// (https://docs.stripe.com/api/payment_intents/retrieve).
func (s *Server) getPaymentIntent(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s.serveGet(w, r, retrieveIntentSpec, func(p params) (any, *apiError) {
		expand, e := p.expandParam("latest_charge")
		if e != nil {
			return nil, e
		}
		it := s.intentByID[id]
		if it == nil {
			return nil, notFound("intent", "payment_intent", id)
		}
		return s.renderWithLocked(it.pi, nil, expand["latest_charge"]), nil
	})
}

// cancellable are the statuses Stripe lets a PaymentIntent be canceled in
// (https://docs.stripe.com/api/payment_intents/cancel).
var cancellable = []string{statusRequiresPaymentMethod, "requires_capture", statusRequiresConfirmation, statusRequiresAction, "processing"}

// cancelPaymentIntent is POST /v1/payment_intents/{id}/cancel. A status
// that forbids it is a 400 payment_intent_unexpected_state: the endpoint
// executed, so that answer is saved under the key.
func (s *Server) cancelPaymentIntent(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s.servePost(w, r, cancelIntentSpec, func(p params) (*operation, *apiError) {
		reason, hasReason := p.scalar["cancellation_reason"]
		if hasReason {
			if e := enumValue("cancellation_reason", reason, "duplicate", "fraudulent", "requested_by_customer", "abandoned"); e != nil {
				return nil, e
			}
		}
		expand, e := p.expandParam("latest_charge")
		if e != nil {
			return nil, e
		}
		missing := func() *apiError {
			if s.intentByID[id] == nil {
				return notFound("intent", "payment_intent", id)
			}
			return nil
		}
		return &operation{check: missing, commit: func(string) (change, *apiError) {
			if e := missing(); e != nil {
				return change{}, e
			}
			return s.cancelLocked(s.intentByID[id], reason, expand["latest_charge"]), nil
		}}, nil
	})
}

func (s *Server) cancelLocked(it *intent, reason string, expandCharge bool) change {
	if !slices.Contains(cancellable, it.pi.Status) {
		e := &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeInvalidRequest, Code: codeUnexpectedState,
			Message: "You cannot cancel this PaymentIntent because it has a status of " + it.pi.Status +
				". Only a PaymentIntent with one of the following statuses may be canceled: " + strings.Join(cancellable, ", ") + ".",
			PaymentIntent: s.renderWithLocked(it.pi, nil, expandCharge)}}
		return change{status: e.status, body: e.body()}
	}
	pi := *it.pi
	canceled := s.cfg.Now().Unix()
	pi.Status, pi.CanceledAt, pi.CancellationReason, pi.NextAction = statusCanceled, &canceled, optStr(reason), nil
	next := &intent{pi: &pi, key: it.key, createdAt: it.createdAt}
	return change{intent: next, status: http.StatusOK, body: encodeJSON(s.renderWithLocked(&pi, nil, expandCharge)),
		events: []pendingEvent{{eventCanceled, &pi}}}
}
