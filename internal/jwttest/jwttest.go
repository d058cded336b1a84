// Package jwttest is a stand-in identity provider for tests: signing keys,
// a JSON Web Key Set (RFC 7517) served over loopback whose keys a test can
// replace while the service runs (a key rotation), and tokens signed with
// those keys or forged in the ways an attacker would (alg none, HMAC with
// the public key). Only tests use it: the identity package's and the
// end-to-end suite's.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// Key is a signing key with its key id (kid) and JWS algorithm (alg).
type Key struct {
	KID, Alg string
	signer   crypto.Signer
	method   jwt.SigningMethod
}

// NewRSA returns a new 2048-bit RSA key signing with RS256.
func NewRSA(tb testing.TB, kid string) *Key {
	tb.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	return &Key{KID: kid, Alg: "RS256", signer: k, method: jwt.SigningMethodRS256}
}

// NewEC returns a new P-256 key signing with ES256.
func NewEC(tb testing.TB, kid string) *Key {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return &Key{KID: kid, Alg: "ES256", signer: k, method: jwt.SigningMethodES256}
}

// Sign returns a JWS of claims signed with k, with its kid and alg in the
// header.
func (k *Key) Sign(tb testing.TB, claims jwt.MapClaims) string {
	tb.Helper()
	tok := jwt.NewWithClaims(k.method, claims)
	tok.Header["kid"] = k.KID
	s, err := tok.SignedString(k.signer)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// SignHMACWithPublicKey returns claims "signed" with HS256 using k's
// public key (PEM, as served) as the HMAC secret, under k's kid: the
// algorithm confusion attack a verifier must refuse.
func (k *Key) SignHMACWithPublicKey(tb testing.TB, claims jwt.MapClaims) string {
	tb.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.signer.Public())
	if err != nil {
		tb.Fatal(err)
	}
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = k.KID
	s, err := tok.SignedString(secret)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Unsigned returns claims as an unsecured JWT (alg "none", RFC 7519 §6)
// with kid in its header.
func Unsigned(tb testing.TB, kid string, claims jwt.MapClaims) string {
	tb.Helper()
	header, err := json.Marshal(map[string]string{"alg": "none", "typ": "JWT", "kid": kid})
	if err != nil {
		tb.Fatal(err)
	}
	body, err := json.Marshal(claims)
	if err != nil {
		tb.Fatal(err)
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(header) + "." + enc.EncodeToString(body) + "."
}

// JWKS is a key set served over loopback (httptest). Safe for concurrent use.
type JWKS struct {
	// URL is the key set's address, http://127.0.0.1:PORT/jwks.json.
	URL string

	mu      sync.Mutex
	body    []byte
	fetches atomic.Int64
}

// NewJWKS starts serving the public halves of keys; a cleanup stops it.
func NewJWKS(tb testing.TB, keys ...*Key) *JWKS {
	tb.Helper()
	j := &JWKS{}
	j.Publish(tb, keys...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/jwks.json" {
			http.NotFound(w, r)
			return
		}
		j.fetches.Add(1)
		j.mu.Lock()
		body := j.body
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	tb.Cleanup(srv.Close)
	j.URL = srv.URL + "/jwks.json"
	return j
}

// Publish replaces the served key set with the public halves of keys.
func (j *JWKS) Publish(tb testing.TB, keys ...*Key) {
	tb.Helper()
	set := jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{}}
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.signer.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: k.KID, ALG: jwkset.ALG(k.Alg), USE: jwkset.UseSig}})
		if err != nil {
			tb.Fatal(err)
		}
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	body, err := json.Marshal(set)
	if err != nil {
		tb.Fatal(err)
	}
	j.mu.Lock()
	j.body = body
	j.mu.Unlock()
}

// Fetches returns how many times the key set was served.
func (j *JWKS) Fetches() int { return int(j.fetches.Load()) }
