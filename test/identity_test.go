package test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/retrysafe/booking/internal/jwttest"
)

// jwtIssuer and jwtAudience are the identity provider of the JWT tests.
const (
	jwtIssuer   = "https://idp.e2e.test/"
	jwtAudience = "booking-e2e"
)

// jwtClaims returns valid claims of sub from iss, expiring in an hour.
func jwtClaims(iss, sub string, kv ...any) jwt.MapClaims {
	c := jwt.MapClaims{"iss": iss, "aud": jwtAudience, "sub": sub,
		"iat": time.Now().Add(-time.Minute).Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// jwtEnv is the environment of booking serve with BOOKING_AUTH=jwt.
func jwtEnv(issuer, jwksURL string) map[string]string {
	return map[string]string{"BOOKING_AUTH": "jwt", "BOOKING_JWT_ISSUER": issuer, "BOOKING_JWT_AUDIENCE": jwtAudience,
		"BOOKING_JWKS_URL": jwksURL}
}

// TestIdentity_JWTActorsKeyRotationAndRefusals: booking serve with
// BOOKING_AUTH=jwt against a key set served over loopback. An admin (the
// booking:admin scope) creates a show and a user reserves and orders as
// "<iss>#<sub>"; the provider rotates its key during the run and the
// user's next token, signed by the new key, is the same actor with no
// restart, while the withdrawn key's tokens are refused. Every malformed
// or forged token is 401 with a problem naming the failed check, and
// records nothing. Restarted with another issuer, the same subject is
// another actor: it cannot see the first one's reservation, and the same
// Idempotency-Key is a new intent.
func TestIdentity_JWTActorsKeyRotationAndRefusals(t *testing.T) {
	t.Parallel()
	oldSigner, newSigner := jwttest.NewRSA(t, "2027-01"), jwttest.NewEC(t, "2027-02")
	jwks := jwttest.NewJWKS(t, oldSigner)
	s := mustStart(t, Options{Env: jwtEnv(jwtIssuer, jwks.URL)})
	if !strings.Contains(s.logs.String(), "BOOKING_API_TOKENS ignored with BOOKING_AUTH=jwt") {
		t.Errorf("booking serve did not warn that BOOKING_API_TOKENS (set by the harness) is ignored:\n%s", tail(s.logs.String(), 4000))
	}
	admin := oldSigner.Sign(t, jwtClaims(jwtIssuer, "ops-1", "scope", "openid booking:admin"))
	alice := oldSigner.Sign(t, jwtClaims(jwtIssuer, "alice", "scp", []string{"booking:read"}))
	bob := oldSigner.Sign(t, jwtClaims(jwtIssuer, "bob"))

	// Admin from the scope claim; a token without it is 403.
	if r := s.do(t, "POST", "/v1/shows", alice, newKey(), showBody("not alice's", 5)); !checkProblem(t, r, http.StatusForbidden, "forbidden") {
		t.Fatal("a token without the admin scope created a show")
	}
	r := s.do(t, "POST", "/v1/shows", admin, newKey(), showBody("Concert", 5))
	wantStatus(t, r, http.StatusCreated)
	show := r.str("id")
	resKey := newKey()
	resBody := map[string]any{"show_id": show, "quantity": 2}
	r = s.do(t, "POST", "/v1/reservations", alice, resKey, resBody)
	wantStatus(t, r, http.StatusCreated)
	res := r.str("id")
	// The actor is the subject, not the token: bob cannot see alice's
	// reservation; alice's repeat with another token of hers replays.
	wantStatus(t, s.do(t, "GET", "/v1/reservations/"+res, bob, "", nil), http.StatusNotFound)
	again := oldSigner.Sign(t, jwtClaims(jwtIssuer, "alice", "jti", "second-token"))
	if r := s.do(t, "POST", "/v1/reservations", again, resKey, resBody); r.Status != http.StatusCreated || r.str("id") != res || !r.replayed() {
		t.Fatalf("%s; want 201 replaying reservation %s (same actor, another token)", r, res)
	}

	// The provider rotates its key while the service runs.
	fetches := jwks.Fetches()
	jwks.Publish(t, newSigner)
	aliceNew := newSigner.Sign(t, jwtClaims(jwtIssuer, "alice"))
	r = s.do(t, "GET", "/v1/reservations/"+res, aliceNew, "", nil)
	if r.Status != http.StatusOK || r.str("id") != res {
		t.Fatalf("%s; want alice's reservation through a token of the rotated key, without a restart", r)
	}
	if got := jwks.Fetches(); got != fetches+1 {
		t.Errorf("the key set was fetched %d times for the rotation, want once", got-fetches)
	}
	if r := s.do(t, "GET", "/v1/reservations/"+res, alice, "", nil); checkProblem(t, r, http.StatusUnauthorized, "unauthorized") {
		wantDetail(t, r, "not signed by a key of the issuer's key set")
	}
	ord := s.mustOrder(t, aliceNew, newKey(), res, "tok_visa")
	if ord.str("status") != "confirmed" {
		t.Fatalf("%s; want confirmed", ord)
	}

	// Every refused token is 401 naming the check, and records nothing.
	intents, holds := s.countType(t, "intent-", ""), s.countType(t, "show-", "SeatsHeld")
	good := jwtClaims(jwtIssuer, "alice")
	for _, tt := range []struct{ name, token, detail string }{
		{"expired", newSigner.Sign(t, jwtClaims(jwtIssuer, "alice", "exp", time.Now().Add(-time.Hour).Unix())), "it has expired (exp)"},
		{"not yet valid", newSigner.Sign(t, jwtClaims(jwtIssuer, "alice", "nbf", time.Now().Add(time.Hour).Unix())), "it is not valid yet (nbf)"},
		{"wrong issuer", newSigner.Sign(t, jwtClaims("https://evil.e2e.test/", "alice")), "its issuer (iss) is not the trusted one"},
		{"wrong audience", newSigner.Sign(t, jwtClaims(jwtIssuer, "alice", "aud", "another-api")), "its audience (aud) does not include this service"},
		{"unknown key", jwttest.NewEC(t, "made-up").Sign(t, good), "not signed by a key of the issuer's key set"},
		{"alg none", jwttest.Unsigned(t, newSigner.KID, good), "its algorithm (alg) is not one of"},
		{"HMAC signed with the public key", newSigner.SignHMACWithPublicKey(t, good), "its algorithm (alg) is not one of"},
		{"without sub", newSigner.Sign(t, jwtClaims(jwtIssuer, "", "sub", nil)), "it has no subject (sub)"},
		{"a static token", tokAlice, "it is not a well-formed JWT"},
	} {
		r := s.do(t, "POST", "/v1/reservations", tt.token, newKey(), resBody)
		if checkProblem(t, r, http.StatusUnauthorized, "unauthorized") {
			wantDetail(t, r, tt.detail)
			if got := r.Header.Get("WWW-Authenticate"); got != `Bearer realm="booking", error="invalid_token"` {
				t.Errorf("%s: WWW-Authenticate = %q", tt.name, got)
			}
		}
	}
	if i, h := s.countType(t, "intent-", ""), s.countType(t, "show-", "SeatsHeld"); i != intents || h != holds {
		t.Errorf("refused tokens appended %d intent events and %d holds, want none", i-intents, h-holds)
	}

	// Another issuer's "alice" is another actor.
	s.Restart(func(o *Options) { o.Env = jwtEnv("https://other-idp.e2e.test/", jwks.URL) })
	otherAlice := newSigner.Sign(t, jwtClaims("https://other-idp.e2e.test/", "alice"))
	s.auditToken = otherAlice
	wantStatus(t, s.do(t, "GET", "/v1/reservations/"+res, otherAlice, "", nil), http.StatusNotFound)
	wantStatus(t, s.do(t, "GET", "/v1/orders/"+orderIDOf(t, ord), otherAlice, "", nil), http.StatusNotFound)
	r = s.do(t, "POST", "/v1/reservations", otherAlice, resKey, resBody)
	if r.Status != http.StatusCreated || r.str("id") == res || r.replayed() {
		t.Errorf("%s; want a new reservation (the same key of another actor is another intent)", r)
	}
	if r := s.do(t, "GET", "/v1/reservations/"+res, aliceNew, "", nil); checkProblem(t, r, http.StatusUnauthorized, "unauthorized") {
		wantDetail(t, r, "its issuer (iss) is not the trusted one")
	}
	r = s.do(t, "GET", "/v1/shows/"+show, otherAlice, "", nil)
	if r.Status != http.StatusOK || int(r.num("available")) != 1 {
		t.Errorf("%s; want available 1 (5 seats, 2 ordered, 2 held by the other issuer's alice)", r)
	}
}

// wantDetail reports unless the problem r's detail contains want.
func wantDetail(t testing.TB, r *resp, want string) {
	t.Helper()
	if !strings.Contains(r.str("detail"), want) {
		t.Errorf("%s: detail %q, want it to contain %q", r, r.str("detail"), want)
	}
}
