package providersim

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/retrysafe/booking/provider"
)

// Messages of a refused API key, as Stripe words them (without ever
// echoing the key that was sent).
const (
	missingKeyMessage = "You did not provide an API key. Provide your API key in the Authorization header, using Bearer auth (Authorization: Bearer YOUR_SECRET_KEY)."
	invalidKeyMessage = "Invalid API Key provided."
)

// authenticate refuses a /v1 request without "Authorization: Bearer
// <Config.APIKey>" when the simulator has a key: 401 with a Stripe-like
// invalid_request_error body and WWW-Authenticate (RFC 6750 §3), before
// anything runs (no key is used up, nothing is charged). Keys are compared
// in constant time, as SHA-256 digests so their lengths do not leak either.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := sha256.Sum256([]byte(s.cfg.APIKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		scheme, key, _ := strings.Cut(auth, " ")
		if auth == "" || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="provider-sim"`)
			writeError(w, http.StatusUnauthorized, errBody{Type: provider.TypeInvalidRequestError, Message: missingKeyMessage})
			return
		}
		got := sha256.Sum256([]byte(strings.TrimSpace(key)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="provider-sim", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, errBody{Type: provider.TypeInvalidRequestError, Message: invalidKeyMessage})
			return
		}
		next.ServeHTTP(w, r)
	})
}
