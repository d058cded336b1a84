package providersim

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/retrysafe/booking/provider"
)

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, errBody{Type: provider.TypeInvalidRequestError, Code: "unrecognized_url", Message: "Unrecognized request URL."})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, errBody{Type: provider.TypeInvalidRequestError, Code: "method_not_allowed", Message: "Method not allowed."})
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Route("/v1", func(r chi.Router) {
		r.Use(requestID)
		r.Use(s.authenticate)
		r.Post("/charges", s.createCharge)
		r.Get("/charges", s.listCharges)
		r.Get("/charges/{id}", s.getCharge)
		r.Post("/refunds", s.createRefund)
		r.Get("/refunds", s.listRefunds)
		r.Get("/refunds/{id}", s.getRefund)
	})
	r.Route("/_sim", func(r chi.Router) {
		r.Get("/charges", s.simCharges)
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

// requestID sets a Request-Id header on every answer, and echoes the
// Idempotency-Key, as Stripe does. It does not wrap the ResponseWriter, so
// handlers can still hijack the connection.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(provider.HeaderRequestID, newID("req_"))
		if key := r.Header.Get(provider.HeaderIdempotencyKey); key != "" {
			w.Header().Set(provider.HeaderIdempotencyKey, key)
		}
		next.ServeHTTP(w, r)
	})
}

// SimCharge is an entry of GET /_sim/charges.
type SimCharge struct {
	ID             string            `json:"id"`
	IdempotencyKey string            `json:"idempotency_key"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         provider.Status   `json:"status"`
	RefundedAmount int64             `json:"refunded_amount"`
	Metadata       map[string]string `json:"metadata"`
}

func (s *Server) simCharges(w http.ResponseWriter, _ *http.Request) {
	charges := s.Charges()
	out := make([]SimCharge, len(charges))
	for i, c := range charges {
		out[i] = SimCharge{
			ID:             c.ID,
			IdempotencyKey: c.IdempotencyKey,
			Amount:         c.Amount,
			Currency:       c.Currency,
			Status:         c.Status,
			RefundedAmount: c.RefundedAmount,
			Metadata:       c.Metadata,
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Charges []SimCharge `json:"charges"`
	}{out})
}

// simInFlight answers GET /_sim/in-flight: {"idempotency_keys": [...]}, the
// keys of charge and refund requests received and not yet answered, sorted,
// so a test can wait until a request is at the provider.
func (s *Server) simInFlight(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		IdempotencyKeys []string `json:"idempotency_keys"`
	}{s.InFlight()})
}

// InFlight returns the idempotency keys of the charge and refund requests
// received and not yet answered, sorted. It is safe for concurrent use.
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

func (s *Server) simRefunds(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Refunds []provider.Refund `json:"refunds"`
	}{s.Refunds()})
}

func (s *Server) simEvents(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Events []provider.Event `json:"events"`
	}{s.Events()})
}

func (s *Server) simResend(w http.ResponseWriter, r *http.Request) {
	if err := s.Resend(chi.URLParam(r, "id")); err != nil {
		writeError(w, http.StatusNotFound, errBody{Type: provider.TypeInvalidRequestError, Code: provider.CodeResourceMissing, Message: err.Error()})
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
		writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: "faults: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// mergeFaults decodes body over the current faults and sets the result,
// atomically; it returns the new faults.
func (s *Server) mergeFaults(body []byte) (Faults, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	f.DeclineTokens = slices.Clone(f.DeclineTokens)
	if err := decodeStrict(body, &f); err != nil {
		return Faults{}, err
	}
	if err := f.Validate(); err != nil {
		return Faults{}, err
	}
	s.setFaultsLocked(f)
	f.DeclineTokens = slices.Clone(f.DeclineTokens)
	return f, nil
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
		writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: `clock: send {"advance":"<Go duration>"} or {"now":"<RFC 3339>"}`})
		return
	}
	var at time.Time
	var by time.Duration
	var err error
	if c.Now != "" {
		if at, err = time.Parse(time.RFC3339Nano, c.Now); err != nil {
			writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: "clock: now must be an RFC 3339 time", Param: "now"})
			return
		}
	}
	if c.Advance != "" {
		if by, err = time.ParseDuration(c.Advance); err != nil {
			writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: "clock: advance must be a Go duration such as 25h", Param: "advance"})
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
	writeError(w, http.StatusInternalServerError, errBody{Type: provider.TypeAPIError, Message: "The change could not be saved: " + err.Error()})
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
