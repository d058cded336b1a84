package providersim

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// Messages of a refused API key, as Stripe words them (without ever
// echoing the key that was sent).
const (
	missingKeyMessage = "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
	invalidKeyMessage = "Invalid API Key provided."
)

// authenticate refuses a /v1 request that does not carry Config.APIKey as
// Stripe's API takes it (https://docs.stripe.com/api/authentication):
// "Authorization: Bearer <key>", or HTTP Basic with the key as the user
// name (the password is ignored; Stripe's examples send none). Refused
// requests get 401 with an invalid_request_error body and
// WWW-Authenticate, before anything runs: nothing executes, no key is
// used up. Keys are compared in constant time, as SHA-256 digests so their
// lengths do not leak either. Without Config.APIKey every request passes.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := sha256.Sum256([]byte(s.cfg.APIKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := apiKey(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="Stripe"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, obj: ErrorObject{Type: typeInvalidRequest, Message: missingKeyMessage}})
			return
		}
		got := sha256.Sum256([]byte(key))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="Stripe", error="invalid_token"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, obj: ErrorObject{Type: typeInvalidRequest, Message: invalidKeyMessage}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// apiKey returns the key of a Bearer or Basic Authorization header.
func apiKey(r *http.Request) (string, bool) {
	scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Bearer") && cred != "":
		return cred, true
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return "", false
		}
		user, _, _ := strings.Cut(string(raw), ":")
		return user, user != ""
	}
	return "", false
}
