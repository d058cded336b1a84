package providersim

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/retrysafe/booking/provider"
)

// Payment tokens with a fixed meaning, like a card network's test cards
// (the README's first session uses them). A token that is one of
// these followed by "_" and anything (for example "tok_visa_42") behaves the
// same, so tests can use distinct tokens.
const (
	TokenVisa               = "tok_visa"                 // succeeds
	TokenDecline            = "tok_decline"              // 402 card_declined, failed charge recorded
	TokenErrorBeforeCommit  = "tok_error_before_commit"  // always 500, nothing recorded, key not used up
	TokenTimeoutAfterCommit = "tok_timeout_after_commit" // charge succeeds, connection dropped without answer
	TokenSlow               = "tok_slow"                 // succeeds after Config.SlowDelay
)

const (
	maxBodyBytes              = 1 << 20
	declineMessage            = "Your card was declined."
	declineCode               = "generic_decline"
	endpointCharges           = "POST /v1/charges"
	endpointRefunds           = "POST /v1/refunds"
	headerContentType         = "Content-Type"
	contentTypeJSON           = "application/json"
	unknownTokenMessage       = "No such payment token."
	sweepEvery                = 256 // key inserts between sweeps of expired keys
	closingMessage            = "The simulator is shutting down; the request was not executed."
	errorBeforeCommitMessage  = "An error occurred while processing the request; nothing was charged."
	notSavedMessage           = "An error occurred while saving the request; it was not executed."
	keyInUseMessage           = "There is currently another in-progress request using this Idempotency-Key. Retry later."
	idempotencyMismatchPrefix = "Keys for idempotent requests can only be used with the same parameters they were first used with."
)

// keyEntry is the state of an idempotency key: in flight, or done with the
// stored answer, which repeats replay until expires (simulator clock).
type keyEntry struct {
	fingerprint [32]byte
	inFlight    bool
	status      int
	body        []byte
	committed   time.Time // simulator clock
	expires     time.Time // committed + Config.Retention
	chargeID    string    // the charge created under the key (charges endpoint)
	refundID    string    // the refund created under the key (refunds endpoint)
}

type claimResult int

const (
	claimed claimResult = iota
	claimReplay
	claimMismatch
	claimInUse
)

// errBody is the "error" object of an error answer.
type errBody struct {
	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message,omitempty"`
	Param       string `json:"param,omitempty"`
	Charge      string `json:"charge,omitempty"`
}

type errEnvelope struct {
	Error  errBody          `json:"error"`
	Charge *provider.Charge `json:"charge,omitempty"`
}

func fingerprint(endpoint string, canonical []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(endpoint))
	h.Write([]byte{0})
	h.Write(canonical)
	var fp [32]byte
	copy(fp[:], h.Sum(nil))
	return fp
}

// claim looks the key up: a live entry is replayed, refused as a mismatch or
// as in use; otherwise the key is marked in flight for the caller.
func (s *Server) claim(key string, fp [32]byte) (keyEntry, claimResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.liveKeyLocked(key); ok {
		switch {
		case e.fingerprint != fp:
			return keyEntry{}, claimMismatch
		case e.inFlight:
			return keyEntry{}, claimInUse
		default:
			return *e, claimReplay
		}
	}
	s.keys[key] = &keyEntry{fingerprint: fp, inFlight: true}
	return keyEntry{}, claimed
}

// liveKeyLocked returns the key's entry unless it has expired, in which case
// it is forgotten.
func (s *Server) liveKeyLocked(key string) (*keyEntry, bool) {
	e, ok := s.keys[key]
	if !ok {
		return nil, false
	}
	if !e.inFlight && !s.nowLocked().Before(e.expires) {
		delete(s.keys, key)
		return nil, false
	}
	return e, true
}

// release forgets an in-flight key whose request did not commit.
func (s *Server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; ok && e.inFlight {
		delete(s.keys, key)
	}
}

// newEntryLocked returns the committed answer of a key, stamped now.
func (s *Server) newEntryLocked(fp [32]byte, status int, body []byte, now time.Time) *keyEntry {
	return &keyEntry{fingerprint: fp, status: status, body: body, committed: now, expires: now.Add(s.cfg.Retention)}
}

// storeLocked records the committed answer of key.
func (s *Server) storeLocked(key string, e *keyEntry) {
	e.inFlight = false
	s.keys[key] = e
	s.inserts++
	if s.inserts >= sweepEvery {
		s.inserts = 0
		now := s.nowLocked()
		for k, v := range s.keys {
			if !v.inFlight && !now.Before(v.expires) {
				delete(s.keys, k)
			}
		}
	}
}

// requireKey returns the request's Idempotency-Key, or answers 400.
func requireKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get(provider.HeaderIdempotencyKey)
	valid := key != "" && len(key) <= provider.MaxKeyLength
	for i := 0; valid && i < len(key); i++ {
		valid = key[i] >= 0x20 && key[i] <= 0x7e
	}
	if !valid {
		writeError(w, http.StatusBadRequest, errBody{
			Type:    provider.TypeInvalidRequestError,
			Code:    "idempotency_key_invalid",
			Message: "An Idempotency-Key header of 1 to 255 printable ASCII characters is required.",
			Param:   provider.HeaderIdempotencyKey,
		})
		return "", false
	}
	return key, true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: "The request body could not be read."})
		return nil, false
	}
	return body, true
}

// invalidMessage strips the package prefix from a parse or validation error.
func invalidMessage(err error) string {
	return strings.TrimPrefix(err.Error(), provider.ErrInvalidRequest.Error()+": ")
}

// tokenMeaning returns the fixed token tok stands for, or "".
func tokenMeaning(tok string) string {
	for _, t := range []string{TokenVisa, TokenDecline, TokenErrorBeforeCommit, TokenTimeoutAfterCommit, TokenSlow} {
		if tok == t || strings.HasPrefix(tok, t+"_") {
			return t
		}
	}
	return ""
}

// beginPost runs the steps common to both POST endpoints up to the claim: it
// answers the request itself (and returns false) unless the key was claimed.
func (s *Server) beginPost(w http.ResponseWriter, key string, fp [32]byte) bool {
	if inUse, latency := s.takeInUse409(); inUse {
		s.sleep(latency)
		writeKeyInUse(w)
		return false
	}
	entry, res := s.claim(key, fp)
	if res == claimed {
		return true
	}
	s.mu.Lock()
	latency := s.latencyLocked()
	s.mu.Unlock()
	s.sleep(latency)
	switch res {
	case claimReplay:
		w.Header().Set(provider.HeaderIdempotentReplayed, "true")
		writeRaw(w, entry.status, entry.body)
	case claimMismatch:
		writeError(w, http.StatusBadRequest, errBody{
			Type:    provider.TypeIdempotencyError,
			Message: idempotencyMismatchPrefix + " This request's parameters differ from the first request with this key.",
		})
	case claimInUse:
		writeKeyInUse(w)
	}
	return false
}

func writeKeyInUse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusConflict, errBody{Type: provider.TypeIdempotencyKeyInUse, Message: keyInUseMessage})
}

// execute sleeps the planned latency plus extra, then reports whether the
// request may commit; otherwise it has answered (500 for an injected error,
// 503 when the server is closing).
func (s *Server) execute(w http.ResponseWriter, p plan, extra time.Duration) bool {
	if !s.sleep(p.latency + extra) {
		writeError(w, http.StatusServiceUnavailable, errBody{Type: provider.TypeAPIError, Message: closingMessage})
		return false
	}
	if p.errorBeforeCommit {
		writeError(w, http.StatusInternalServerError, errBody{Type: provider.TypeAPIError, Message: errorBeforeCommitMessage})
		return false
	}
	return true
}

// openPost starts an idempotent POST on endpoint: it requires the
// Idempotency-Key, reads the body, parses it with parse (400 if it does not
// parse) and begins the key with the request's fingerprint (beginPost). ok
// is false when it has answered. Otherwise the key is in flight: the caller
// commits it or releases it (releaseUnless).
func openPost[R interface{ Body() []byte }](s *Server, w http.ResponseWriter, r *http.Request, endpoint string, parse func([]byte) (R, error)) (key string, fp [32]byte, req R, ok bool) {
	if key, ok = requireKey(w, r); !ok {
		return key, fp, req, false
	}
	body, ok := readBody(w, r)
	if !ok {
		return key, fp, req, false
	}
	req, err := parse(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: invalidMessage(err)})
		return key, fp, req, false
	}
	fp = fingerprint(endpoint, req.Body())
	return key, fp, req, s.beginPost(w, key, fp)
}

// releaseUnless releases key unless *committed; deferred by a handler that
// began key, it frees the key of a request that ends without committing.
func (s *Server) releaseUnless(key string, committed *bool) {
	if !*committed {
		s.release(key)
	}
}

// answerCommitted answers a committed request: it dispatches ev to the
// webhook endpoint, then writes status and body, or drops the connection
// when the plan loses the answer after the commit.
func (s *Server) answerCommitted(w http.ResponseWriter, p plan, ev *event, status int, body []byte) {
	s.dispatch(ev)
	if p.dropAfterCommit {
		dropConnection(w)
		return
	}
	writeRaw(w, status, body)
}

// createCharge is POST /v1/charges.
func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	key, fp, req, ok := openPost(s, w, r, endpointCharges, provider.ParseChargeRequest)
	if !ok {
		return
	}
	committed := false
	defer s.releaseUnless(key, &committed)

	if err := req.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Message: invalidMessage(err)})
		return
	}
	s.mu.Lock()
	declined := containsToken(s.faults.DeclineTokens, req.Token)
	meaning := tokenMeaning(req.Token)
	if meaning == "" && !declined {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, errBody{
			Type:    provider.TypeInvalidRequestError,
			Code:    provider.CodeResourceMissing,
			Message: unknownTokenMessage,
			Param:   "token",
		})
		return
	}
	var p plan
	if meaning == TokenErrorBeforeCommit && !declined {
		// Fails anyway: use up no fault count.
		p = plan{latency: s.latencyLocked(), errorBeforeCommit: true}
	} else {
		p = s.planLocked()
	}
	s.mu.Unlock()

	var extra time.Duration
	switch meaning {
	case TokenDecline:
		declined = true
	case TokenTimeoutAfterCommit:
		p.dropAfterCommit = true
	case TokenSlow:
		extra = s.cfg.SlowDelay
	}
	if !s.execute(w, p, extra) {
		return
	}

	status, answer, ev, err := s.commitCharge(key, fp, req, declined)
	if err != nil {
		s.log.Error("charge not committed: the state file could not be written", "idempotency_key", key, "err", err)
		writeError(w, http.StatusInternalServerError, errBody{Type: provider.TypeAPIError, Message: notSavedMessage})
		return
	}
	committed = true
	s.answerCommitted(w, p, ev, status, answer)
}

func containsToken(tokens []string, tok string) bool {
	for _, t := range tokens {
		if t == tok {
			return true
		}
	}
	return false
}

// commitCharge records the charge and the key's answer (in the state file
// first, if any), and returns the answer and the event to deliver. If the
// state file cannot be written it returns the error and records nothing.
func (s *Server) commitCharge(key string, fp [32]byte, req provider.ChargeRequest, declined bool) (int, []byte, *event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowLocked()
	meta := make(map[string]string, len(req.Metadata))
	for k, v := range req.Metadata {
		meta[k] = v
	}
	ch := &provider.Charge{
		ID:             newID("ch_"),
		Object:         "charge",
		Amount:         req.Amount,
		Currency:       req.Currency,
		Status:         provider.StatusSucceeded,
		IdempotencyKey: key,
		Metadata:       meta,
		Description:    req.Description,
		Created:        now.Unix(),
	}
	if declined {
		ch.Status = provider.StatusFailed
		ch.FailureCode = provider.CodeCardDeclined
		ch.FailureMessage = declineMessage
	}
	status, answer, evType := http.StatusOK, encodeJSON(ch), provider.EventChargeSucceeded
	if declined {
		snapshot := cloneCharge(ch)
		status, evType = http.StatusPaymentRequired, provider.EventChargeFailed
		answer = encodeJSON(errEnvelope{
			Error: errBody{
				Type:        provider.TypeCardError,
				Code:        provider.CodeCardDeclined,
				DeclineCode: declineCode,
				Message:     declineMessage,
				Charge:      ch.ID,
			},
			Charge: &snapshot,
		})
	}
	entry := s.newEntryLocked(fp, status, answer, now)
	entry.chargeID = ch.ID
	saved := cloneCharge(ch)
	if err := s.persistLocked(record{Charge: &saved, Key: newKeyRecord(key, entry)}); err != nil {
		return 0, nil, nil, err
	}
	s.charges = append(s.charges, ch)
	s.chargeByID[ch.ID] = ch
	s.storeLocked(key, entry)
	s.log.Info("charge committed", "charge", ch.ID, "idempotency_key", key, "amount", ch.Amount, "currency", ch.Currency, "status", ch.Status, "order_id", meta[provider.MetadataOrderID], "attempt", meta[provider.MetadataAttempt])
	return status, answer, s.newEventLocked(evType, ch), nil
}

// createRefund is POST /v1/refunds.
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	key, fp, req, ok := openPost(s, w, r, endpointRefunds, provider.ParseRefundRequest)
	if !ok {
		return
	}
	committed := false
	defer s.releaseUnless(key, &committed)
	s.mu.Lock()
	p := s.planLocked()
	s.mu.Unlock()
	if !s.execute(w, p, 0) {
		return
	}
	re, ch, status, refusal, err := s.commitRefund(key, fp, req)
	if err != nil {
		s.log.Error("refund not committed: the state file could not be written", "idempotency_key", key, "err", err)
		writeError(w, http.StatusInternalServerError, errBody{Type: provider.TypeAPIError, Message: notSavedMessage})
		return
	}
	if refusal != nil {
		writeError(w, status, *refusal)
		return
	}
	committed = true
	s.answerCommitted(w, p, ch, http.StatusOK, re)
}

// commitRefund validates the refund against the charge's current state and
// records it (in the state file first, if any); on refusal it returns the
// status and error and records nothing. If the state file cannot be written
// it returns the error and records nothing.
func (s *Server) commitRefund(key string, fp [32]byte, req provider.RefundRequest) ([]byte, *event, int, *errBody, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.chargeByID[req.Charge]
	invalid := func(status int, code, msg, param string) ([]byte, *event, int, *errBody, error) {
		return nil, nil, status, &errBody{Type: provider.TypeInvalidRequestError, Code: code, Message: msg, Param: param}, nil
	}
	remaining := int64(0)
	if ok {
		remaining = ch.Amount - ch.RefundedAmount
	}
	amount := req.Amount
	if amount == 0 {
		amount = remaining
	}
	switch {
	case req.Charge == "":
		return invalid(http.StatusBadRequest, "parameter_missing", "A charge id is required.", "charge")
	case !ok:
		return invalid(http.StatusNotFound, provider.CodeResourceMissing, "No such charge.", "charge")
	case req.Amount < 0:
		return invalid(http.StatusBadRequest, "parameter_invalid_integer", "The amount must be a positive integer.", "amount")
	case ch.Status != provider.StatusSucceeded:
		return invalid(http.StatusBadRequest, provider.CodeChargeNotRefundable, "Only a succeeded charge can be refunded.", "charge")
	case remaining == 0:
		return invalid(http.StatusBadRequest, provider.CodeChargeAlreadyRefunded, "The charge has already been refunded.", "charge")
	case amount > remaining:
		return invalid(http.StatusBadRequest, provider.CodeAmountTooLarge, "The refund amount is greater than the unrefunded amount of the charge.", "amount")
	}
	now := s.nowLocked()
	re := &provider.Refund{
		ID:             newID("re_"),
		Object:         "refund",
		Amount:         amount,
		Currency:       ch.Currency,
		Charge:         ch.ID,
		Status:         provider.StatusSucceeded,
		IdempotencyKey: key,
		Created:        now.Unix(),
	}
	answer := encodeJSON(re)
	entry := s.newEntryLocked(fp, http.StatusOK, answer, now)
	entry.refundID = re.ID
	updated := cloneCharge(ch)
	updated.RefundedAmount += amount
	updated.Refunded = updated.RefundedAmount == updated.Amount
	saved := *re
	if err := s.persistLocked(record{Refund: &saved, Charge: &updated, Key: newKeyRecord(key, entry)}); err != nil {
		return nil, nil, 0, nil, err
	}
	ch.RefundedAmount, ch.Refunded = updated.RefundedAmount, updated.Refunded
	s.refunds = append(s.refunds, re)
	s.refundByID[re.ID] = re
	s.storeLocked(key, entry)
	s.log.Info("refund committed", "refund", re.ID, "charge", ch.ID, "idempotency_key", key, "amount", amount, "refunded_amount", ch.RefundedAmount)
	return answer, s.newEventLocked(provider.EventChargeRefunded, ch), 0, nil, nil
}

// listCharges is GET /v1/charges?idempotency_key=K&order_id=O&attempt=N: the
// charges matching every given filter, oldest first.
func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	s.applyLatency()
	q := r.URL.Query()
	key, orderID, attempt := q.Get("idempotency_key"), q.Get(provider.MetadataOrderID), q.Get(provider.MetadataAttempt)
	if key == "" && orderID == "" && attempt == "" {
		filterMissing(w, "At least one of idempotency_key, order_id and attempt is required.")
		return
	}
	s.mu.Lock()
	candidates := candidatesLocked(s, key, func(e *keyEntry) string { return e.chargeID }, s.chargeByID, s.charges)
	data := matching(candidates, func(c *provider.Charge) bool {
		return (orderID == "" || c.Metadata[provider.MetadataOrderID] == orderID) &&
			(attempt == "" || c.Metadata[provider.MetadataAttempt] == attempt)
	}, cloneCharge)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list("/v1/charges", data))
}

// getCharge is GET /v1/charges/{id}.
func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "charge", func() map[string]*provider.Charge { return s.chargeByID }, cloneCharge)
}

// candidatesLocked returns what a list request filtered by key looks at:
// all when key is empty, otherwise the object (in byID) that the answer of
// the live idempotency key names (idOf), if any.
func candidatesLocked[T any](s *Server, key string, idOf func(*keyEntry) string, byID map[string]*T, all []*T) []*T {
	if key == "" {
		return all
	}
	if e, ok := s.liveKeyLocked(key); ok && idOf(e) != "" {
		return []*T{byID[idOf(e)]}
	}
	return nil
}

// matching returns copies (made by clone) of the candidates that keep
// accepts, in order; empty, not nil, when none does (a JSON list).
func matching[T any](candidates []*T, keep func(*T) bool, clone func(*T) T) []T {
	out := []T{}
	for _, c := range candidates {
		if keep(c) {
			out = append(out, clone(c))
		}
	}
	return out
}

// getOne answers GET …/{id} with a copy (clone) of the object of that id in
// the map byID returns under the lock; 404 "No such <noun>." when there is
// none.
func getOne[T any](s *Server, w http.ResponseWriter, r *http.Request, noun string, byID func() map[string]*T, clone func(*T) T) {
	s.applyLatency()
	s.mu.Lock()
	var out T
	v, ok := byID()[chi.URLParam(r, "id")]
	if ok {
		out = clone(v)
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, errBody{Type: provider.TypeInvalidRequestError, Code: provider.CodeResourceMissing, Message: "No such " + noun + ".", Param: "id"})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// filterMissing answers a list request that gives none of its filters:
// 400 parameter_missing with message.
func filterMissing(w http.ResponseWriter, message string) {
	writeError(w, http.StatusBadRequest, errBody{Type: provider.TypeInvalidRequestError, Code: "parameter_missing", Message: message})
}

// listRefunds is GET /v1/refunds?idempotency_key=K or ?charge=ch_….
func (s *Server) listRefunds(w http.ResponseWriter, r *http.Request) {
	s.applyLatency()
	q := r.URL.Query()
	key, charge := q.Get("idempotency_key"), q.Get("charge")
	if key == "" && charge == "" {
		filterMissing(w, "At least one of idempotency_key and charge is required.")
		return
	}
	s.mu.Lock()
	candidates := candidatesLocked(s, key, func(e *keyEntry) string { return e.refundID }, s.refundByID, s.refunds)
	data := matching(candidates, func(re *provider.Refund) bool { return charge == "" || re.Charge == charge }, cloneRefund)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list("/v1/refunds", data))
}

// getRefund is GET /v1/refunds/{id}.
func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "refund", func() map[string]*provider.Refund { return s.refundByID }, cloneRefund)
}

// cloneRefund returns a copy of re (a refund has no reference fields).
func cloneRefund(re *provider.Refund) provider.Refund { return *re }

func (s *Server) applyLatency() {
	s.mu.Lock()
	latency := s.latencyLocked()
	s.mu.Unlock()
	s.sleep(latency)
}

type listBody[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

func list[T any](url string, data []T) listBody[T] {
	return listBody[T]{Object: "list", Data: data, URL: url}
}

// dropConnection closes the connection without an answer, as a network
// failure after the provider committed would.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the response instead.
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

func encodeJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("providersim: encode: " + err.Error())
	}
	return b
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set(headerContentType, contentTypeJSON)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeJSON(w http.ResponseWriter, status int, v any) { writeRaw(w, status, encodeJSON(v)) }

func writeError(w http.ResponseWriter, status int, e errBody) {
	writeJSON(w, status, errEnvelope{Error: e})
}
