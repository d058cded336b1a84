package providersim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
)

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	unrecognized := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, obj: ErrorObject{Type: typeInvalidRequest,
			Message: "Unrecognized request URL (" + r.Method + ": " + r.URL.Path + ")."}})
	}
	r.NotFound(unrecognized)
	r.MethodNotAllowed(unrecognized)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Route("/v1", func(r chi.Router) {
		r.Use(requestID)
		r.Use(s.authenticate)
		r.NotFound(unrecognized)
		r.MethodNotAllowed(unrecognized)
		r.Post("/payment_intents", s.createPaymentIntent)
		r.Get("/payment_intents", s.listPaymentIntents)
		r.Get("/payment_intents/search", s.searchPaymentIntents)
		r.Get("/payment_intents/{id}", s.getPaymentIntent)
		r.Post("/payment_intents/{id}/cancel", s.cancelPaymentIntent)
		r.Post("/refunds", s.createRefund)
		r.Get("/refunds", s.listRefunds)
		r.Get("/refunds/{id}", s.getRefund)
	})
	r.Route("/_sim", func(r chi.Router) {
		r.Get("/charges", s.simCharges)
		r.Post("/payment_intents/{id}/authenticate", s.simAuthenticate)
		r.Get("/in-flight", s.simInFlight)
		r.Get("/refunds", s.simRefunds)
		r.Get("/events", s.simEvents)
		r.Post("/events/{id}/resend", s.simResend)
		r.Get("/webhooks", s.simWebhooks)
		r.Get("/faults", s.simGetFaults)
		r.Post("/faults", s.simPostFaults)
		r.Delete("/faults", s.simDeleteFaults)
		r.Get("/clock", s.simGetClock)
		r.Post("/clock", s.simPostClock)
		r.Delete("/clock", s.simDeleteClock)
		r.Post("/reset", s.simReset)
	})
	return r
}

// requestID sets a Request-Id header on every answer, Stripe-Version, and
// echoes the Idempotency-Key, as Stripe does
// (https://docs.stripe.com/api/request_ids). It does not wrap the
// ResponseWriter, so handlers can still hijack the connection.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(headerRequestID, newID("req_"))
		w.Header().Set("Stripe-Version", APIVersion)
		if key := r.Header.Get(headerIdempotencyKey); key != "" && r.Method == http.MethodPost {
			w.Header().Set(headerIdempotencyKey, key)
		}
		next.ServeHTTP(w, r)
	})
}

// simCharges answers GET /_sim/charges: {"charges":[SimCharge…]}, one per
// PaymentIntent in creation order.
func (s *Server) simCharges(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Charges []SimCharge `json:"charges"`
	}{s.Charges()})
}

// Charges returns the /_sim/charges view of every PaymentIntent, in
// creation order. PaymentIntents are kept forever; only idempotency keys
// expire.
func (s *Server) Charges() []SimCharge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneAll(s.intents, s.simChargeLocked)
}

// PaymentIntents returns a copy of every PaymentIntent in creation order,
// latest_charge not expanded.
func (s *Server) PaymentIntents() []PaymentIntent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneAll(s.intents, func(it *intent) PaymentIntent { return clonePI(it.pi) })
}

// authenticateBody is the body of POST /_sim/payment_intents/{id}/authenticate.
type authenticateBody struct {
	Outcome string `json:"outcome"` // "succeed" or "fail"
}

// simAuthenticate answers POST /_sim/payment_intents/{id}/authenticate
// {"outcome":"succeed"|"fail"}: 200 with the PaymentIntent, 404 when it
// does not exist, 400 for another outcome or a PaymentIntent not in
// requires_action (payment_intent_unexpected_state).
func (s *Server) simAuthenticate(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var b authenticateBody
	if err := decodeStrict(body, &b); err != nil || b.Outcome != "succeed" && b.Outcome != "fail" {
		writeError(w, invalidParam("outcome", "", `authenticate: send {"outcome":"succeed"} or {"outcome":"fail"}`))
		return
	}
	pi, e := s.finishAuthentication(chi.URLParam(r, "id"), b.Outcome == "succeed")
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, pi)
}

// Authenticate finishes the customer authentication of a PaymentIntent in
// requires_action, as the customer's client would: succeed moves it to
// succeeded (its charge captured), otherwise to requires_payment_method
// with last_payment_error payment_intent_authentication_failure; either
// sends its webhook event. It returns the PaymentIntent, or an error when
// it does not exist or is not in requires_action.
func (s *Server) Authenticate(id string, succeed bool) (PaymentIntent, error) {
	pi, e := s.finishAuthentication(id, succeed)
	if e != nil {
		return PaymentIntent{}, fmt.Errorf("providersim: %s", e.obj.Message)
	}
	return pi, nil
}

func (s *Server) finishAuthentication(id string, ok bool) (PaymentIntent, *apiError) {
	s.mu.Lock()
	it := s.intentByID[id]
	if it == nil {
		s.mu.Unlock()
		return PaymentIntent{}, notFound("intent", "payment_intent", id)
	}
	if it.pi.Status != statusRequiresAction {
		s.mu.Unlock()
		return PaymentIntent{}, invalidParam("", codeUnexpectedState, "The PaymentIntent has a status of "+it.pi.Status+", not requires_action.")
	}
	pi := *it.pi
	c := change{intent: &intent{pi: &pi, key: it.key, createdAt: it.createdAt}}
	if ok {
		c.charge = succeed(&pi, s.cfg.Now().Unix())
		c.events = []pendingEvent{{eventSucceeded, &pi}}
	} else {
		pi.Status, pi.NextAction, pi.PaymentMethod = statusRequiresPaymentMethod, nil, nil
		pi.LastPaymentError = &ErrorObject{Type: typeInvalidRequest, Code: codeAuthenticationFailure, Message: authenticationFailureMessage}
		c.events = []pendingEvent{{eventPaymentFailed, &pi}}
	}
	if err := s.persistLocked(c.record()); err != nil {
		s.mu.Unlock()
		return PaymentIntent{}, serverError(http.StatusInternalServerError, "The change could not be saved: "+err.Error())
	}
	s.applyLocked(c)
	s.logCommit(c, "POST /_sim/payment_intents/{id}/authenticate", "", http.StatusOK)
	evs := s.newEventsLocked(c.events, "", "")
	out := clonePI(&pi)
	s.mu.Unlock()
	s.dispatch(evs...)
	return out, nil
}

func (s *Server) simInFlight(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		IdempotencyKeys []string `json:"idempotency_keys"`
	}{s.InFlight()})
}

// InFlight returns the idempotency keys of the POSTs received and not yet
// answered, sorted. It is safe for concurrent use.
func (s *Server) InFlight() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for k, e := range s.keys {
		if e.inFlight {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// simRefunds answers GET /_sim/refunds: {"refunds":[refund…]}, Stripe's
// refund objects in creation order.
func (s *Server) simRefunds(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Refunds []Refund `json:"refunds"`
	}{s.Refunds()})
}

// Refunds returns a copy of every refund in creation order.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneAll(s.refunds, cloneRefund)
}

// simEvents answers GET /_sim/events: {"events":[event…]}, each event the
// exact bytes its deliveries send.
func (s *Server) simEvents(w http.ResponseWriter, _ *http.Request) {
	evs := s.Events()
	raw := make([]json.RawMessage, len(evs))
	for i, ev := range evs {
		raw[i] = ev.body
	}
	writeJSON(w, http.StatusOK, struct {
		Events []json.RawMessage `json:"events"`
	}{raw})
}

func (s *Server) simResend(w http.ResponseWriter, r *http.Request) {
	if err := s.Resend(chi.URLParam(r, "id")); err != nil {
		writeError(w, &apiError{status: http.StatusNotFound, obj: ErrorObject{Type: typeInvalidRequest, Code: codeResourceMissing, Message: err.Error()}})
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) simWebhooks(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Deliveries []Delivery `json:"deliveries"`
	}{s.Deliveries()})
}

func (s *Server) simGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

// simPostFaults merges the body into the current faults: fields present in
// the body replace the current values, absent fields stay.
func (s *Server) simPostFaults(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	f, err := s.mergeFaults(body)
	if err != nil {
		writeError(w, invalidParam("", "", "faults: "+err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// mergeFaults decodes body over the current faults and sets the result,
// atomically; it returns the new faults.
func (s *Server) mergeFaults(body []byte) (Faults, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults.clone()
	if err := decodeStrict(body, &f); err != nil {
		return Faults{}, err
	}
	if err := f.Validate(); err != nil {
		return Faults{}, err
	}
	s.setFaultsLocked(f)
	return f.clone(), nil
}

func (s *Server) simDeleteFaults(w http.ResponseWriter, _ *http.Request) {
	s.ResetFaults()
	writeJSON(w, http.StatusOK, s.Faults())
}

// clockBody is the body of POST /_sim/clock and the answer of the clock
// endpoints.
type clockBody struct {
	Now     string `json:"now,omitempty"`     // RFC 3339
	Advance string `json:"advance,omitempty"` // Go duration, e.g. "25h"
	Offset  string `json:"offset,omitempty"`  // answer only: simulator clock − base clock
}

func (s *Server) clockAnswer(w http.ResponseWriter) {
	s.mu.Lock()
	now, offset := s.nowLocked(), s.offset
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, clockBody{Now: now.UTC().Format(time.RFC3339Nano), Offset: offset.String()})
}

func (s *Server) simGetClock(w http.ResponseWriter, _ *http.Request) { s.clockAnswer(w) }

func (s *Server) simPostClock(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var c clockBody
	if err := decodeStrict(body, &c); err != nil || c.Offset != "" || (c.Now == "" && c.Advance == "") {
		writeError(w, invalidParam("", "", `clock: send {"advance":"<Go duration>"} or {"now":"<RFC 3339>"}`))
		return
	}
	var at time.Time
	var by time.Duration
	var err error
	if c.Now != "" {
		if at, err = time.Parse(time.RFC3339Nano, c.Now); err != nil {
			writeError(w, invalidParam("now", "", "clock: now must be an RFC 3339 time"))
			return
		}
	}
	if c.Advance != "" {
		if by, err = time.ParseDuration(c.Advance); err != nil {
			writeError(w, invalidParam("advance", "", "clock: advance must be a Go duration such as 25h"))
			return
		}
	}
	err = s.moveClock(func(off time.Duration) time.Duration {
		if c.Now != "" {
			off = at.Sub(s.cfg.Now())
		}
		return off + by
	})
	if err != nil {
		writeStateError(w, err)
		return
	}
	s.clockAnswer(w)
}

func (s *Server) simDeleteClock(w http.ResponseWriter, _ *http.Request) {
	if err := s.moveClock(func(time.Duration) time.Duration { return 0 }); err != nil {
		writeStateError(w, err)
		return
	}
	s.clockAnswer(w)
}

func (s *Server) simReset(w http.ResponseWriter, _ *http.Request) {
	if err := s.reset(); err != nil {
		writeStateError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeStateError answers a change of the control API that could not be
// saved in the state file (and was not made).
func writeStateError(w http.ResponseWriter, err error) {
	writeError(w, serverError(http.StatusInternalServerError, "The change could not be saved: "+err.Error()))
}

// readBody reads a control request's body (at most 1 MiB), or answers 400.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, invalidParam("", "", "The request body could not be read."))
		return nil, false
	}
	return body, true
}

// decodeStrict decodes one JSON object, refusing unknown fields.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
