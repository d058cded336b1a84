package identity

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/retrysafe/booking/internal/jwttest"
)

const (
	testIssuer   = "https://idp.example.test/"
	testAudience = "booking-api"
)

// now is the clock of every test authenticator.
var now = time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)

// claimsFor returns valid claims for sub: the test issuer and audience,
// issued a minute ago, expiring in an hour.
func claimsFor(sub string) jwt.MapClaims {
	return jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "sub": sub,
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()}
}

// with returns a copy of c with kv (name, value pairs) set; a nil value
// deletes the claim.
func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func mustJWT(t *testing.T, jwks *jwttest.JWKS, mod ...func(*JWTConfig)) *JWT {
	t.Helper()
	cfg := JWTConfig{Issuer: testIssuer, Audience: testAudience, JWKSURL: jwks.URL, AdminScope: "booking:admin",
		Now: func() time.Time { return now }}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := NewJWT(ctx, cfg)
	if err != nil {
		t.Fatalf("NewJWT = %v", err)
	}
	return a
}

// TestJWTAcceptsRS256AndES256: a token signed by a key of the set, RSA or
// ECDSA, is the actor "<iss>#<sub>"; admin only with the admin scope, read
// from scope (space-separated) or scp (a string or an array).
func TestJWTAcceptsRS256AndES256(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := jwttest.NewRSA(t, "rsa-1"), jwttest.NewEC(t, "ec-1")
	a := mustJWT(t, jwttest.NewJWKS(t, rsaKey, ecKey))
	for _, tt := range []struct {
		name  string
		token string
		want  Actor
	}{
		{"RS256 without scopes", rsaKey.Sign(t, claimsFor("alice")), Actor{ID: testIssuer + "#alice"}},
		{"ES256 with other scopes", ecKey.Sign(t, with(claimsFor("bob"), "scope", "openid booking:read")), Actor{ID: testIssuer + "#bob"}},
		{"scope with the admin scope", rsaKey.Sign(t, with(claimsFor("root"), "scope", "openid booking:admin")), Actor{ID: testIssuer + "#root", Admin: true}},
		{"scp string with the admin scope", ecKey.Sign(t, with(claimsFor("root"), "scp", "booking:admin email")), Actor{ID: testIssuer + "#root", Admin: true}},
		{"scp array with the admin scope", ecKey.Sign(t, with(claimsFor("root"), "scp", []string{"email", "booking:admin"})), Actor{ID: testIssuer + "#root", Admin: true}},
		{"a scope that only contains the admin scope's text", rsaKey.Sign(t, with(claimsFor("eve"), "scope", "booking:administrator")), Actor{ID: testIssuer + "#eve"}},
		{"aud as an array", rsaKey.Sign(t, with(claimsFor("alice"), "aud", []string{"other", testAudience})), Actor{ID: testIssuer + "#alice"}},
		{"exp within the leeway", rsaKey.Sign(t, with(claimsFor("alice"), "exp", now.Add(-10*time.Second).Unix())), Actor{ID: testIssuer + "#alice"}},
	} {
		got, err := a.Authenticate(context.Background(), tt.token)
		if err != nil || got != tt.want {
			t.Errorf("%s: Authenticate = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// TestJWTRefusals: each way a token can be wrong is refused with a reason
// that names the check, never the token's content.
func TestJWTRefusals(t *testing.T) {
	t.Parallel()
	key, other := jwttest.NewRSA(t, "k1"), jwttest.NewRSA(t, "not-published")
	ecKey := jwttest.NewEC(t, "ec-1")
	a := mustJWT(t, jwttest.NewJWKS(t, key, ecKey))
	good := claimsFor("alice")
	wrongKid := jwttest.NewRSA(t, "k1") // the published kid, another key
	for _, tt := range []struct {
		name, token, reason string
	}{
		{"expired", key.Sign(t, with(good, "exp", now.Add(-time.Hour).Unix())), "it has expired (exp)"},
		{"without exp", key.Sign(t, with(good, "exp", nil)), "it lacks a required claim"},
		{"not yet valid", key.Sign(t, with(good, "nbf", now.Add(time.Hour).Unix())), "it is not valid yet (nbf)"},
		{"issued in the future", key.Sign(t, with(good, "iat", now.Add(time.Hour).Unix())), "it was issued in the future (iat)"},
		{"wrong issuer", key.Sign(t, with(good, "iss", "https://evil.example.test/")), "its issuer (iss) is not the trusted one"},
		{"issuer differing in a trailing slash", key.Sign(t, with(good, "iss", strings.TrimSuffix(testIssuer, "/"))), "its issuer (iss) is not the trusted one"},
		{"without issuer", key.Sign(t, with(good, "iss", nil)), "it lacks a required claim"},
		{"wrong audience", key.Sign(t, with(good, "aud", "another-api")), "its audience (aud) does not include this service"},
		{"without audience", key.Sign(t, with(good, "aud", nil)), "it lacks a required claim"},
		{"unknown key", other.Sign(t, good), "it is not signed by a key of the issuer's key set"},
		{"the published kid on another key", wrongKid.Sign(t, good), "its signature does not verify"},
		{"alg none", jwttest.Unsigned(t, "k1", good), "its algorithm (alg) is not one of RS256"},
		{"HS256 signed with the public key", key.SignHMACWithPublicKey(t, good), "its algorithm (alg) is not one of RS256"},
		{"HS256 signed with the EC public key", ecKey.SignHMACWithPublicKey(t, good), "its algorithm (alg) is not one of RS256"},
		{"without sub", key.Sign(t, with(good, "sub", nil)), "it has no subject (sub)"},
		{"empty sub", key.Sign(t, with(good, "sub", "")), "it has no subject (sub)"},
		{"sub with a control character", key.Sign(t, with(good, "sub", "al\nice")), "its subject (sub) must be 1 to 255 bytes"},
		{"sub too long", key.Sign(t, with(good, "sub", strings.Repeat("s", 256))), "its subject (sub) must be 1 to 255 bytes"},
		{"not a JWT", "tok-alice", "it is not a well-formed JWT"},
		{"a tampered payload", tamper(t, key.Sign(t, good)), "its signature does not verify"},
	} {
		got, err := a.Authenticate(context.Background(), tt.token)
		var r *Refusal
		if !errors.As(err, &r) || !strings.HasPrefix(r.Reason, tt.reason) {
			t.Errorf("%s: Authenticate = %+v, %v; want a refusal %q", tt.name, got, err, tt.reason)
			continue
		}
		if strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "evil") {
			t.Errorf("%s: the refusal %q quotes the token", tt.name, err)
		}
	}
}

// tamper swaps the payload of a signed token for another subject's,
// keeping the header and signature.
func tamper(t *testing.T, token string) string {
	parts := strings.Split(token, ".")
	parts[1] = strings.Split(jwttest.Unsigned(t, "", claimsFor("mallory")), ".")[1]
	return strings.Join(parts, ".")
}

// TestJWTKeyRotation: the provider replaces its key during the run; a
// token of the new key is accepted at once (an unknown kid fetches the set
// again), the withdrawn key's tokens are refused from then on, and tokens
// with made-up key ids fetch the set at most once per UnknownKeyGap.
func TestJWTKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := jwttest.NewRSA(t, "2027-01"), jwttest.NewEC(t, "2027-02")
	jwks := jwttest.NewJWKS(t, oldKey)
	a := mustJWT(t, jwks, func(c *JWTConfig) { c.UnknownKeyGap = time.Hour })
	ctx := context.Background()
	if got, err := a.Authenticate(ctx, oldKey.Sign(t, claimsFor("alice"))); err != nil || got.ID != testIssuer+"#alice" {
		t.Fatalf("before the rotation: Authenticate(old key) = %+v, %v", got, err)
	}
	if n := jwks.Fetches(); n != 1 {
		t.Errorf("key set fetched %d times before the rotation, want 1 (at start)", n)
	}

	jwks.Publish(t, newKey) // the rotation: the old key is withdrawn
	if got, err := a.Authenticate(ctx, newKey.Sign(t, claimsFor("alice"))); err != nil || got.ID != testIssuer+"#alice" {
		t.Fatalf("after the rotation: Authenticate(new key) = %+v, %v; want accepted without a restart", got, err)
	}
	if _, err := a.Authenticate(ctx, oldKey.Sign(t, claimsFor("alice"))); err == nil {
		t.Errorf("after the rotation: Authenticate(withdrawn key) accepted")
	}
	if n := jwks.Fetches(); n != 2 {
		t.Errorf("key set fetched %d times after the rotation, want 2", n)
	}
	for i := 0; i < 5; i++ {
		if _, err := a.Authenticate(ctx, jwttest.NewEC(t, "made-up").Sign(t, claimsFor("mallory"))); err == nil {
			t.Fatal("a token of an unknown key was accepted")
		}
	}
	if n := jwks.Fetches(); n != 2 {
		t.Errorf("5 tokens with made-up key ids fetched the key set %d times in all, want still 2 (one fetch per UnknownKeyGap)", n)
	}
}

// TestJWTPeriodicRefreshDropsWithdrawnKey: a key the provider withdrew
// stops being accepted after the next periodic fetch, without any token
// of a new key.
func TestJWTPeriodicRefreshDropsWithdrawnKey(t *testing.T) {
	t.Parallel()
	k1, k2 := jwttest.NewEC(t, "k1"), jwttest.NewEC(t, "k2")
	jwks := jwttest.NewJWKS(t, k1, k2)
	a := mustJWT(t, jwks, func(c *JWTConfig) { c.RefreshInterval = 50 * time.Millisecond })
	tok := k1.Sign(t, claimsFor("alice"))
	if _, err := a.Authenticate(context.Background(), tok); err != nil {
		t.Fatalf("Authenticate(k1) = %v", err)
	}
	jwks.Publish(t, k2)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := a.Authenticate(context.Background(), tok); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("k1 still accepted 30 s after it was withdrawn (%d fetches)", jwks.Fetches())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := a.Authenticate(context.Background(), k2.Sign(t, claimsFor("alice"))); err != nil {
		t.Errorf("Authenticate(k2) = %v after k1 was withdrawn", err)
	}
}

// TestJWTStartsBeforeItsProvider: an unreachable key set does not stop
// NewJWT; tokens are refused meanwhile, and accepted once a fetch works.
func TestJWTStartsBeforeItsProvider(t *testing.T) {
	t.Parallel()
	key := jwttest.NewRSA(t, "k1")
	jwks := jwttest.NewJWKS(t) // serves an empty set: no key yet
	a := mustJWT(t, jwks)
	if n := a.Keys(context.Background()); n != 0 {
		t.Fatalf("Keys = %d, want 0", n)
	}
	tok := key.Sign(t, claimsFor("alice"))
	jwks.Publish(t, key)
	if got, err := a.Authenticate(context.Background(), tok); err != nil || got.ID != testIssuer+"#alice" {
		t.Errorf("Authenticate once the key is published = %+v, %v", got, err)
	}
}

// TestActorIDsOfTwoIssuersDiffer: the same subject of two issuers is two
// actors, and no JWT actor id can be a static token's name (those have no
// ':').
func TestActorIDsOfTwoIssuersDiffer(t *testing.T) {
	t.Parallel()
	a, b := ActorID("https://a.example/", "alice"), ActorID("https://b.example/", "alice")
	if a == b {
		t.Errorf("ActorID of two issuers = %q for both", a)
	}
	// An issuer never has '#' (CheckIssuer), so the id splits back at its
	// first '#' into the issuer and a subject that may hold '#' itself.
	if err := CheckIssuer("https://a.example/#x"); err == nil {
		t.Errorf("CheckIssuer accepted an issuer with '#'")
	}
	if iss, sub, _ := strings.Cut(ActorID("https://a.example/", "x#y"), "#"); iss != "https://a.example/" || sub != "x#y" {
		t.Errorf("ActorID split back into %q, %q", iss, sub)
	}
	if !strings.Contains(a, ":") {
		t.Errorf("ActorID %q has no ':'", a)
	}
}

// TestCheckJWKSURLAndIssuer: https anywhere, http only on loopback.
func TestCheckJWKSURLAndIssuer(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"https://idp.example.com/.well-known/jwks.json", "http://127.0.0.1:8081/jwks", "http://localhost/jwks", "http://[::1]:9/k", "http://127.9.9.9/k"} {
		if err := CheckJWKSURL(u); err != nil {
			t.Errorf("CheckJWKSURL(%q) = %v, want nil", u, err)
		}
	}
	for _, u := range []string{"", "http://idp.example.com/jwks", "http://10.0.0.1/jwks", "ftp://idp.example.com/jwks", "idp.example.com/jwks", "https://"} {
		if err := CheckJWKSURL(u); err == nil {
			t.Errorf("CheckJWKSURL(%q) = nil, want a refusal", u)
		}
	}
	for _, iss := range []string{"https://idp.example.com/", "https://login.example.com/tenant/v2.0", "urn:example:idp"} {
		if err := CheckIssuer(iss); err != nil {
			t.Errorf("CheckIssuer(%q) = %v, want nil", iss, err)
		}
	}
	for _, iss := range []string{"", "idp", "https://idp.example.com/#frag", "https://idp example.com/", strings.Repeat("h", 300)} {
		if err := CheckIssuer(iss); err == nil {
			t.Errorf("CheckIssuer(%q) = nil, want a refusal", iss)
		}
	}
}
