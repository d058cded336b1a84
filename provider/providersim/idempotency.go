package providersim

import (
	"net/http"
	"time"
)

// Stripe's idempotency (https://docs.stripe.com/api/idempotent_requests):
// every POST may carry an Idempotency-Key of at most 255 characters. Once
// the endpoint began executing, the status and body of the answer are
// saved under the key — 500s included — and a repeat with the key replays
// them (header Idempotent-Replayed: true). A repeat is compared with the
// first request: other parameters, or another endpoint, are 400
// idempotency_error. A request that failed validation, or that met a
// concurrent request with the key (409), is not saved and may be retried.
// Keys are pruned once Config.Retention old on the simulator's clock;
// then the same key starts a new request.

const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
	headerRequestID      = "Request-Id"
	maxKeyLength         = 255
	maxBodyBytes         = 1 << 20
	sweepEvery           = 256 // key inserts between sweeps of expired keys
	keyInUseMessage      = "There is currently another in-progress request using this Idempotency-Key. Retry after some time."
)

// keyEntry is the state of an idempotency key: in flight, or saved with
// its answer, which repeats replay until expires (simulator clock).
type keyEntry struct {
	endpoint    string
	fingerprint [32]byte
	inFlight    bool
	status      int
	body        []byte
	requestID   string    // the first request's Request-Id
	committed   time.Time // simulator clock
	expires     time.Time // committed + Config.Retention
}

type claimResult int

const (
	claimed claimResult = iota
	claimReplay
	claimMismatch
	claimOtherEndpoint
	claimInUse
)

// claim looks the key up: a live entry is replayed, refused as a
// mismatch or as in use; otherwise the key is marked in flight for the
// caller, who saves it (storeLocked) or releases it.
func (s *Server) claim(key, endpoint string, fp [32]byte) (keyEntry, claimResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.liveKeyLocked(key); ok {
		switch {
		case e.endpoint != endpoint:
			return *e, claimOtherEndpoint
		case e.fingerprint != fp:
			return keyEntry{}, claimMismatch
		case e.inFlight:
			return keyEntry{}, claimInUse
		default:
			return *e, claimReplay
		}
	}
	s.keys[key] = &keyEntry{endpoint: endpoint, fingerprint: fp, inFlight: true}
	return keyEntry{}, claimed
}

// liveKeyLocked returns the key's entry unless it has expired, in which
// case it is forgotten.
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

// release forgets an in-flight key whose request saved nothing.
func (s *Server) release(key string) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; ok && e.inFlight {
		delete(s.keys, key)
	}
}

// storeLocked saves the answer e of key, sweeping expired keys now and then.
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

// idempotencyKey returns the request's Idempotency-Key ("" without one),
// or a 400 when it is longer than Stripe allows.
func idempotencyKey(r *http.Request) (string, *apiError) {
	key := r.Header.Get(headerIdempotencyKey)
	if len(key) > maxKeyLength {
		return "", invalidParam("", "", "Keys for idempotent requests can only be at most 255 characters long.")
	}
	return key, nil
}

// claimOrAnswer claims key for the request, or answers it: a replay of
// the saved answer, a 400 idempotency_error, or a 409. It reports whether
// the caller may execute (and then owns the key).
func (s *Server) claimOrAnswer(w http.ResponseWriter, key, endpoint string, fp [32]byte) bool {
	if inUse, latency := s.takeInUse409(); inUse {
		s.sleep(latency)
		writeKeyInUse(w)
		return false
	}
	if key == "" {
		return true
	}
	entry, res := s.claim(key, endpoint, fp)
	if res == claimed {
		return true
	}
	s.applyLatency()
	switch res {
	case claimReplay:
		w.Header().Set(headerReplayed, "true")
		w.Header().Set("Original-Request", entry.requestID)
		writeRaw(w, entry.status, entry.body)
	case claimMismatch:
		writeError(w, &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '" +
				key + "' if you meant to execute a different request."}})
	case claimOtherEndpoint:
		writeError(w, &apiError{status: http.StatusBadRequest, obj: ErrorObject{Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used for the same endpoint they were first used for ('" + entry.endpoint +
				"' vs '" + endpoint + "'). Try using a key other than '" + key + "' if you meant to execute a different request."}})
	case claimInUse:
		writeKeyInUse(w)
	}
	return false
}

// writeKeyInUse answers a request that met a concurrent request with its
// key: 409, code idempotency_key_in_use (https://docs.stripe.com/error-codes#idempotency-key-in-use).
// Stripe's error-code list names the code; the simulator gives it type
// invalid_request_error, the type of Stripe's request errors.
func writeKeyInUse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, &apiError{status: http.StatusConflict, obj: ErrorObject{Type: typeInvalidRequest, Code: codeIdempotencyKeyInUse, Message: keyInUseMessage}})
}
