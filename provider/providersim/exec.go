package providersim

import (
	"net/http"
	"time"
)

// operation is a validated POST, ready to execute.
type operation struct {
	// failBeforeCommit answers 500 without executing, using up no fault
	// (tok_error_before_commit).
	failBeforeCommit bool
	// failAfterCommit and dropAfterCommit add to the faults' plan
	// (tok_error_after_commit, tok_timeout_after_commit).
	failAfterCommit, dropAfterCommit bool
	// extra is processing time beyond the latency fault (tok_slow).
	extra time.Duration
	// check, called with s.mu held before executing, refuses a request
	// whose objects do not exist (404): validation, so nothing is saved.
	check func() *apiError
	// commit, called with s.mu held, decides the change. An *apiError is a
	// refusal that saves nothing; a change may hold a saved refusal.
	// key is the request's Idempotency-Key ("" without one).
	commit func(key string) (change, *apiError)
}

// change is what an executed request commits: the objects it creates or
// replaces, its answer and the webhook events it causes.
type change struct {
	intent *intent
	charge *Charge
	refund *Refund
	status int
	body   []byte
	events []pendingEvent
}

// pendingEvent is a webhook event to emit once the change is committed.
type pendingEvent struct {
	typ    string
	object any // a snapshot: *PaymentIntent or *Charge
}

// servePost runs an idempotent POST on endpoint: it reads the parameters
// against sp, validates them with build (400, saved under no key), claims
// the Idempotency-Key, waits the processing time, then commits. What it
// committed is saved under the key (with a 500 instead when the plan
// fails after commit) and answered, or the connection is dropped.
func (s *Server) servePost(w http.ResponseWriter, r *http.Request, sp spec, build func(params) (*operation, *apiError)) {
	endpoint := r.Method + " " + r.URL.Path
	key, fp, op, e := validatePost(w, r, endpoint, sp, build)
	if e != nil {
		s.applyLatency()
		writeError(w, e)
		return
	}
	if s.claimOrAnswer(w, key, endpoint, fp) {
		s.execute(w, key, endpoint, fp, w.Header().Get(headerRequestID), op)
	}
}

// validatePost reads and validates a POST: its key, its parameters (the
// fingerprint the key's first request is compared with) and the operation.
func validatePost(w http.ResponseWriter, r *http.Request, endpoint string, sp spec, build func(params) (*operation, *apiError)) (string, [32]byte, *operation, *apiError) {
	key, e := idempotencyKey(r)
	if e != nil {
		return "", [32]byte{}, nil, e
	}
	p, e := readParams(w, r, sp)
	if e != nil {
		return "", [32]byte{}, nil, e
	}
	op, e := build(p)
	return key, p.fingerprint(endpoint), op, e
}

// execute runs op under the claimed key ("" for none).
func (s *Server) execute(w http.ResponseWriter, key, endpoint string, fp [32]byte, reqID string, op *operation) {
	saved := false
	defer func() {
		if !saved {
			s.release(key)
		}
	}()
	s.mu.Lock()
	if op.check != nil {
		if e := op.check(); e != nil {
			latency := s.latencyLocked()
			s.mu.Unlock()
			s.sleep(latency)
			writeError(w, e)
			return
		}
	}
	var p plan
	if op.failBeforeCommit {
		p = plan{latency: s.latencyLocked(), errorBeforeCommit: true}
	} else {
		p = s.planLocked()
		p.errorAfterCommit = p.errorAfterCommit || op.failAfterCommit
		p.dropAfterCommit = p.dropAfterCommit || op.dropAfterCommit
	}
	s.mu.Unlock()

	if !s.sleep(p.latency + op.extra) {
		writeError(w, serverError(http.StatusServiceUnavailable, closingMessage))
		return
	}
	if p.errorBeforeCommit {
		writeError(w, serverError(http.StatusInternalServerError, unknownErrorMessage))
		return
	}
	status, body, evs, e := s.commit(key, endpoint, fp, reqID, op, p)
	if e != nil {
		writeError(w, e)
		return
	}
	saved = true
	s.dispatch(evs...)
	if p.dropAfterCommit {
		dropConnection(w)
		return
	}
	writeRaw(w, status, body)
}

// commit decides op's change, saves it with the key's answer (state file
// first, if any) and applies it. It returns the answer and the events to
// deliver, or the refusal that saved nothing.
func (s *Server) commit(key, endpoint string, fp [32]byte, reqID string, op *operation, p plan) (int, []byte, []*Event, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, e := op.commit(key)
	if e != nil {
		return 0, nil, nil, e
	}
	status, body := c.status, c.body
	if p.errorAfterCommit {
		fail := serverError(http.StatusInternalServerError, unknownErrorMessage)
		status, body = fail.status, fail.body()
	}
	rec := c.record()
	var entry *keyEntry
	if key != "" {
		now := s.nowLocked()
		entry = &keyEntry{endpoint: endpoint, fingerprint: fp, status: status, body: body, requestID: reqID,
			committed: now, expires: now.Add(s.cfg.Retention)}
		rec.Key = newKeyRecord(key, entry)
	}
	if err := s.persistLocked(rec); err != nil {
		s.log.Error("request not committed: the state file could not be written", "endpoint", endpoint, "idempotency_key", key, "err", err)
		return 0, nil, nil, serverError(http.StatusInternalServerError, notSavedMessage)
	}
	s.applyLocked(c)
	if entry != nil {
		s.storeLocked(key, entry)
	}
	s.logCommit(c, endpoint, key, status)
	return status, body, s.newEventsLocked(c.events, reqID, key), nil
}

// record is the state file's line for the change (without a key).
func (c change) record() record {
	var r record
	if c.intent != nil {
		r.Intent = newIntentRecord(c.intent)
	}
	if c.charge != nil {
		ch := *c.charge
		r.Charge = &ch
	}
	if c.refund != nil {
		re := *c.refund
		r.Refund = &re
	}
	return r
}

// applyLocked stores the change's objects: new ones at the end, known ids
// replaced.
func (s *Server) applyLocked(c change) {
	if ch := c.charge; ch != nil {
		s.chargeByID[ch.ID] = ch
	}
	if it := c.intent; it != nil {
		if old := s.intentByID[it.pi.ID]; old != nil {
			*old = *it
		} else {
			cp := *it
			s.intents = append(s.intents, &cp)
			s.intentByID[cp.pi.ID] = &cp
		}
	}
	if re := c.refund; re != nil {
		s.refunds = append(s.refunds, re)
		s.refundByID[re.ID] = re
	}
}

// logCommit logs a committed change (never a payment method or a client
// secret).
func (s *Server) logCommit(c change, endpoint, key string, status int) {
	attrs := []any{"endpoint", endpoint, "idempotency_key", key, "status_code", status}
	if it := c.intent; it != nil {
		attrs = append(attrs, "payment_intent", it.pi.ID, "status", it.pi.Status, "amount", it.pi.Amount,
			"order_id", it.pi.Metadata["order_id"], "attempt", it.pi.Metadata["attempt"])
	}
	if re := c.refund; re != nil {
		attrs = append(attrs, "refund", re.ID, "refunded", re.Amount, "payment_intent", re.PaymentIntent)
	}
	s.log.Info("provider simulator commit", attrs...)
}

// serveGet answers a GET: it reads the parameters against sp, waits the
// latency fault, and answers what answer returns (called with s.mu held).
func (s *Server) serveGet(w http.ResponseWriter, r *http.Request, sp spec, answer func(params) (any, *apiError)) {
	p, e := readParams(w, r, sp)
	s.applyLatency()
	if e != nil {
		writeError(w, e)
		return
	}
	s.mu.Lock()
	v, e := answer(p)
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) applyLatency() {
	s.mu.Lock()
	latency := s.latencyLocked()
	s.mu.Unlock()
	s.sleep(latency)
}
