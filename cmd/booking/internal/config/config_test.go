package config

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
)

// validServe returns a Serve that Validate accepts, with the
// documented defaults.
func validServe() Serve {
	return Serve{DatabaseURL: "postgres://localhost/booking", HTTPAddr: "127.0.0.1:8080", AdminAddr: "127.0.0.1:9091",
		HTTPLimits: HTTPLimits{HTTPReadTimeout: 15 * time.Second, HTTPReadHeaderTimeout: 5 * time.Second, HTTPWriteTimeout: 30 * time.Second,
			HTTPIdleTimeout: 2 * time.Minute, HTTPMaxHeaderBytes: 64 << 10, HTTPMaxConns: 1024,
			WebhookTimeout: 15 * time.Second, WebhookConcurrency: 16},
		EventStore: "postgres", DataDir: ".data", ProviderSimAddr: "127.0.0.1:8090", NATSAddr: "127.0.0.1:4222", APITokens: "alice=tok-alice",
		IntentRetention: 24 * time.Hour, IntentLease: 5 * time.Second, ReservationHold: 10 * time.Minute,
		PaymentLease: 30 * time.Second, ProviderTimeout: 10 * time.Second, ProviderWindow: 24 * time.Hour,
		PaymentDeadline: 15 * time.Minute, RecoveryInterval: 30 * time.Second, InUseWait: 2 * time.Second,
		NATSDuplicateWindow: 10 * time.Minute, ShutdownTimeout: 15 * time.Second, RetryBudgetRate: 20, RetryBudgetBurst: 40, Log: Log{LogFormat: "text", LogLevel: "info"},
		Auth: Auth{Mode: authTokens, JWTAdminScope: "booking:admin"}}
}

// jwtAuth switches c to BOOKING_AUTH=jwt with valid settings.
func jwtAuth(c *Serve) {
	c.Auth = Auth{Mode: authJWT, JWTIssuer: "https://idp.example.com/", JWTAudience: "booking",
		JWKSURL: "https://idp.example.com/.well-known/jwks.json", JWTAdminScope: "booking:admin"}
}

func TestServeConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (func() *Serve { c := validServe(); return &c }()).Validate(); err != nil {
		t.Fatalf("Validate() of the defaults = %v, want nil", err)
	}
	tests := []struct {
		name    string
		mod     func(*Serve)
		wantVar string
	}{
		{"A zero read timeout is refused.", func(c *Serve) { c.HTTPReadTimeout = 0 }, "BOOKING_HTTP_READ_TIMEOUT"},
		{"A negative read timeout is refused.", func(c *Serve) { c.HTTPReadTimeout = -time.Second }, "BOOKING_HTTP_READ_TIMEOUT"},
		{"An unknown log format is refused.", func(c *Serve) { c.LogFormat = "logfmt" }, "BOOKING_LOG_FORMAT"},
		{"An empty log format is refused.", func(c *Serve) { c.LogFormat = "" }, "BOOKING_LOG_FORMAT"},
		{"An unknown log level is refused.", func(c *Serve) { c.LogLevel = "trace" }, "BOOKING_LOG_LEVEL"},
		{"A token with a space is refused.", func(c *Serve) { c.APITokens = "alice=tok alice" }, "BOOKING_API_TOKENS"},
		{"An unknown role is refused.", func(c *Serve) { c.APITokens = "alice=tok:root" }, "BOOKING_API_TOKENS"},
		{"A real provider without master keys is refused.", func(c *Serve) {
			c.ProviderURL, c.ProviderWebhookSecret = "https://provider.invalid", "whsec"
		}, "BOOKING_MASTER_KEYS"},
		{"An event store that is neither postgres nor KurrentDB is refused.", func(c *Serve) { c.EventStore = "mysql://x" }, "BOOKING_EVENT_STORE"},
		{"A KurrentDB connection string the client cannot parse is refused.", func(c *Serve) {
			c.EventStore = "esdb://host:2113?tls=maybe"
		}, "BOOKING_EVENT_STORE"},
		{"An API address whose port does not parse is refused.", func(c *Serve) { c.HTTPAddr = "127.0.0.1:http0" }, "BOOKING_HTTP_ADDR"},
		{"An admin address whose port is out of range is refused.", func(c *Serve) { c.AdminAddr = "localhost:99999" }, "BOOKING_ADMIN_ADDR"},
		{"An admin address without a port is refused.", func(c *Serve) { c.AdminAddr = "localhost" }, "BOOKING_ADMIN_ADDR"},
		{"A zero header timeout is refused.", func(c *Serve) { c.HTTPReadHeaderTimeout = 0 }, "BOOKING_HTTP_READ_HEADER_TIMEOUT"},
		{"A write timeout below the longest wait is refused.", func(c *Serve) { c.HTTPWriteTimeout = 10 * time.Second }, "BOOKING_HTTP_WRITE_TIMEOUT"},
		{"A write timeout that leaves no room after the in-use wait is refused.", func(c *Serve) {
			c.HTTPWriteTimeout, c.InUseWait = 20*time.Second, 10*time.Second
		}, "BOOKING_HTTP_WRITE_TIMEOUT"},
		{"A zero idle timeout is refused.", func(c *Serve) { c.HTTPIdleTimeout = 0 }, "BOOKING_HTTP_IDLE_TIMEOUT"},
		{"A header limit below 4 KiB is refused.", func(c *Serve) { c.HTTPMaxHeaderBytes = 1000 }, "BOOKING_HTTP_MAX_HEADER_BYTES"},
		{"A connection limit below 1 is refused.", func(c *Serve) { c.HTTPMaxConns = 0 }, "BOOKING_HTTP_MAX_CONNS"},
		{"A zero webhook timeout is refused.", func(c *Serve) { c.WebhookTimeout = 0 }, "BOOKING_WEBHOOK_TIMEOUT"},
		{"A webhook timeout that leaves the write timeout no room to answer is refused.", func(c *Serve) { c.WebhookTimeout = 26 * time.Second }, "BOOKING_WEBHOOK_TIMEOUT"},
		{"A webhook concurrency below 1 is refused.", func(c *Serve) { c.WebhookConcurrency = 0 }, "BOOKING_WEBHOOK_CONCURRENCY"},
		{"An embedded NATS address whose port does not parse is refused.", func(c *Serve) { c.NATSAddr = "127.0.0.1:nats0" }, "BOOKING_NATS_ADDR"},
		{"A dev-mode simulator address whose port does not parse is refused.", func(c *Serve) { c.ProviderSimAddr = "127.0.0.1:-1" }, "BOOKING_PROVIDER_SIM_ADDR"},
		{"An unknown BOOKING_AUTH is refused.", func(c *Serve) { c.Auth.Mode = "oidc" }, "BOOKING_AUTH"},
		{"Static tokens without BOOKING_API_TOKENS are refused.", func(c *Serve) { c.APITokens = "" }, "BOOKING_API_TOKENS"},
		{"JWT without an issuer is refused.", func(c *Serve) { jwtAuth(c); c.Auth.JWTIssuer = "" }, "BOOKING_JWT_ISSUER"},
		{"JWT with an issuer that is not a URI is refused.", func(c *Serve) { jwtAuth(c); c.Auth.JWTIssuer = "my-idp" }, "BOOKING_JWT_ISSUER"},
		{"JWT with an issuer with a fragment is refused.", func(c *Serve) { jwtAuth(c); c.Auth.JWTIssuer = "https://idp/#x" }, "BOOKING_JWT_ISSUER"},
		{"JWT without an audience is refused.", func(c *Serve) { jwtAuth(c); c.Auth.JWTAudience = "" }, "BOOKING_JWT_AUDIENCE"},
		{"JWT without a key set URL is refused.", func(c *Serve) { jwtAuth(c); c.Auth.JWKSURL = "" }, "BOOKING_JWKS_URL"},
		{"JWT with an http key set URL on another host is refused.", func(c *Serve) {
			jwtAuth(c)
			c.Auth.JWKSURL = "http://idp.example.com/jwks.json"
		}, "BOOKING_JWKS_URL"},
		{"JWT with an admin scope of two words is refused.", func(c *Serve) { jwtAuth(c); c.Auth.JWTAdminScope = "booking admin" }, "BOOKING_JWT_ADMIN_SCOPE"},
		{"Both provider key variables are refused.", func(c *Serve) {
			c.Secrets.ProviderAPIKey, c.Secrets.ProviderAPIKeyFile = "sk_1", "/run/secrets/provider"
		}, "BOOKING_PROVIDER_API_KEY"},
		{"Stripe's API (a Stripe key, no URL) without a webhook secret is refused.", func(c *Serve) {
			c.Secrets.StripeSecretKey, c.Secrets.MasterKeysFile = "sk_test_1", "/run/secrets/master-keys"
		}, "BOOKING_PROVIDER_WEBHOOK_SECRET"},
		{"Stripe's API without master keys is refused.", func(c *Serve) {
			c.Secrets.StripeSecretKey, c.ProviderWebhookSecret = "sk_test_1", "whsec_1"
		}, "BOOKING_MASTER_KEYS"},
		{"Stripe's API host as BOOKING_PROVIDER_URL without a key is refused.", func(c *Serve) {
			c.ProviderURL, c.ProviderWebhookSecret, c.Secrets.MasterKeysFile = "https://api.stripe.com", "whsec_1", "/run/secrets/master-keys"
		}, "BOOKING_STRIPE_SECRET_KEY"},
		{"A Stripe key and its older name together are refused.", func(c *Serve) {
			c.Secrets.StripeSecretKey, c.Secrets.ProviderAPIKey = "sk_1", "sk_1"
		}, "BOOKING_STRIPE_SECRET_KEY"},
		{"A negative clock skew is refused.", func(c *Serve) { c.ProviderClockSkew = -time.Second }, "BOOKING_PROVIDER_CLOCK_SKEW"},
		{"An admin address on the API's address is refused.", func(c *Serve) { c.AdminAddr = "127.0.0.1:8080" }, "BOOKING_ADMIN_ADDR"},
		{"An embedded NATS address on the API's port of every address is refused.", func(c *Serve) {
			c.HTTPAddr, c.NATSAddr = ":4222", "127.0.0.1:4222"
		}, "BOOKING_NATS_ADDR"},
		{"A dev-mode simulator address on the admin port is refused.", func(c *Serve) { c.ProviderSimAddr = "0.0.0.0:9091" }, "BOOKING_PROVIDER_SIM_ADDR"},
		{"A duplicate window within the relay's fail-over time of a short recovery interval is refused.", func(c *Serve) {
			c.RecoveryInterval, c.NATSDuplicateWindow = time.Second, 3*time.Second
		}, "BOOKING_NATS_DUPLICATE_WINDOW"},
		{"An empty data directory is refused while the embedded NATS server or dev mode needs it.", func(c *Serve) { c.DataDir = "" }, "BOOKING_DATA_DIR"},
		{"A zero shutdown timeout is refused.", func(c *Serve) { c.ShutdownTimeout = 0 }, "BOOKING_SHUTDOWN_TIMEOUT"},
		{"A negative shutdown timeout is refused.", func(c *Serve) { c.ShutdownTimeout = -time.Second }, "BOOKING_SHUTDOWN_TIMEOUT"},
		{"A retry budget rate of NaN is refused.", func(c *Serve) { c.RetryBudgetRate = math.NaN() }, "BOOKING_RETRY_BUDGET_RATE"},
		{"An infinite retry budget rate is refused.", func(c *Serve) { c.RetryBudgetRate = math.Inf(1) }, "BOOKING_RETRY_BUDGET_RATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validServe()
			tt.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.wantVar) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantVar)
			}
		})
	}
	// JWT needs no BOOKING_API_TOKENS, and an http key set URL on a
	// loopback host is accepted.
	c := validServe()
	jwtAuth(&c)
	c.APITokens = ""
	c.Auth.JWKSURL = "http://127.0.0.1:8081/jwks.json"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with BOOKING_AUTH=jwt = %v, want nil", err)
	}
	// An address that is not used is not checked: the embedded NATS
	// server's with an external one, the simulator's with a real provider.
	c = validServe()
	c.NATSURL, c.NATSAddr = "nats://nats.internal:4222", "unused"
	c.ProviderURL, c.ProviderWebhookSecret, c.ProviderSimAddr = "https://provider.invalid", "whsec", "unused"
	c.DataDir = ""                                        // used by neither
	c.Secrets.MasterKeysFile = "/run/secrets/master-keys" // read at start, not by Validate
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with external NATS and provider and their unused addresses invalid = %v, want nil", err)
	}
	// Listeners on one port of different hosts, on any free port (0), or
	// on an address the configuration does not use are no conflict.
	c = validServe()
	c.HTTPAddr, c.AdminAddr, c.ProviderSimAddr = "127.0.0.1:8080", "127.0.0.2:8080", "127.0.0.1:0"
	c.NATSURL, c.NATSAddr = "nats://nats.internal:4222", "127.0.0.1:8080"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with listeners on distinct addresses = %v, want nil", err)
	}
	c = validServe()
	c.HTTPAddr, c.AdminAddr, c.NATSAddr, c.ProviderSimAddr = "127.0.0.1:0", "127.0.0.1:0", ":0", "127.0.0.1:0"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with every listener on port 0 = %v, want nil", err)
	}
	// A simulator URL alone starts without a key; a Stripe key alone
	// selects Stripe's API (no simulator address is checked).
	c = validServe()
	c.ProviderURL, c.ProviderWebhookSecret, c.Secrets.MasterKeysFile = "http://127.0.0.1:8090", "any secret", "/run/secrets/master-keys"
	if err := c.Validate(); err != nil || c.DevMode() {
		t.Errorf("Validate() with a simulator URL and no key = %v (dev %v), want nil, not dev", err, c.DevMode())
	}
	c = validServe()
	c.Secrets.StripeSecretKey, c.ProviderWebhookSecret, c.Secrets.MasterKeysFile = "sk_test_1", "whsec_1", "/run/secrets/master-keys"
	c.ProviderSimAddr = "unused"
	if err := c.Validate(); err != nil || c.DevMode() {
		t.Errorf("Validate() with a Stripe key = %v (dev %v), want nil, not dev", err, c.DevMode())
	}
	c = validServe()
	c.Secrets.ProviderAPIKey = "sk_test_alias"
	if err := c.Validate(); err != nil || !c.DevMode() {
		t.Errorf("Validate() with BOOKING_PROVIDER_API_KEY alone = %v (dev %v), want nil, dev mode", err, c.DevMode())
	}
}

// TestServeConfigEventStores: BOOKING_EVENT_STORE accepts postgres and the
// KurrentDB connection strings of every scheme, single node and cluster.
func TestServeConfigEventStores(t *testing.T) {
	t.Parallel()
	for _, es := range []string{"postgres", "kurrentdb://127.0.0.1:2113?tls=false", "esdb://admin:changeit@127.0.0.1:2113?tls=false",
		"esdb://admin:changeit@node1:2113,node2:2113,node3:2113?nodePreference=leader", "esdb+discover://admin:changeit@cluster.example:2113",
		"kurrentdb+discover://cluster.example:2113"} {
		c := validServe()
		c.EventStore = es
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with BOOKING_EVENT_STORE=%s = %v, want nil", es, err)
		}
	}
	c := validServe()
	c.EventStore = "esdb://admin:secret-pw@host:2113?tls=maybe"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("Validate() with a bad connection string = %v; want an error without the password", err)
	}
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	got, err := ParseTokens(" alice=tok-alice , bob=dGVzdA==,admin=tok.admin_~+/:admin,alice=tok-alice-2 ")
	if err != nil {
		t.Fatalf("ParseTokens() error = %v", err)
	}
	want := map[string]actor{"tok-alice": {ID: "alice"}, "dGVzdA==": {ID: "bob"}, "tok.admin_~+/": {ID: "admin", Admin: true}, "tok-alice-2": {ID: "alice"}}
	if len(got) != len(want) {
		t.Fatalf("ParseTokens() = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("ParseTokens()[%q] = %v, want %v", k, got[k], v)
		}
	}
	for _, s := range []string{"", ",", "alice", "alice=", "=tok", "al ice=tok", "alice=to ken", "alice=tök", "alice=tok:root",
		"alice=tok:admin:x", "alice=to=ken", "alice=tok,bob=tok", "a:b=tok", strings.Repeat("a", maxActorLength+1) + "=tok",
		"a=t1,,b=t2", "a=t1,", ",a=t1", "a=t1, ,b=t2", "a=t1:admin,a=t2"} {
		if _, err := ParseTokens(s); err == nil {
			t.Errorf("ParseTokens(%q) = nil error, want a refusal", s)
		}
	}
	if _, err := ParseTokens("a=t1,,b=t2"); err == nil || err.Error() != "entry 2 is empty (two commas in a row, or a leading or trailing comma)" {
		t.Errorf("ParseTokens(a=t1,,b=t2) error = %v, want entry 2 named empty", err)
	}
	// The part after ':' may be part of a token that holds a colon: never echoed.
	if _, err := ParseTokens("alice=s3cr3t:PASSWORD42"); err == nil || strings.Contains(err.Error(), "PASSWORD42") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("ParseTokens(alice=s3cr3t:PASSWORD42) error = %v, want a refusal that shows no part of the token", err)
	}
}

// maskSecrets returns s with every letter and digit of each entry's token
// part (after the first '=') replaced by another of its class (rot13,
// digits +5), except an exact role "admin" and the role that would turn into
// it: an input with other secrets of the same shape.
func maskSecrets(s string) string {
	entries := strings.Split(s, ",")
	for i, e := range entries {
		name, secret, ok := strings.Cut(e, "=")
		if !ok {
			continue
		}
		tok, role, hasRole := strings.Cut(secret, ":")
		tok = strings.Map(rot, tok)
		if hasRole {
			if r := strings.TrimSpace(role); r != "admin" && r != "nqzva" {
				role = strings.Map(rot, role)
			}
			tok += ":" + role
		}
		entries[i] = name + "=" + tok
	}
	return strings.Join(entries, ",")
}

func rot(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z':
		return 'a' + (r-'a'+13)%26
	case r >= 'A' && r <= 'Z':
		return 'A' + (r-'A'+13)%26
	case r >= '0' && r <= '9':
		return '0' + (r-'0'+5)%10
	}
	return r
}

// FuzzParseTokens: an accepted BOOKING_API_TOKENS maps valid bearer tokens
// (RFC 6750 b64token) to valid actor names and re-reads the same from its
// own formatting; the answer never depends on what the secrets are, only on
// their shape — the same error message, or the same actors — so no error
// can show any part of a token.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"alice=dev-alice-token,bob=dev-bob-token,admin=dev-admin-token:admin", "alice=s3cr3t:PASSWORD42",
		" a = b ", "alice=tok,bob=tok", "alice=tok:admin:x", "x=dGVzdA==", "=", ",,", "alice=tok:nqzva", "bob=abc\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTokens(s)
		masked := maskSecrets(s)
		got2, err2 := ParseTokens(masked)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("ParseTokens(%q) = %v\nParseTokens(%q) = %v\nwant the same answer for secrets of the same shape", s, err, masked, err2)
		}
		if err != nil {
			return
		}
		actors := func(m map[string]actor) []actor {
			var out []actor
			for _, a := range m {
				out = append(out, a)
			}
			slices.SortFunc(out, func(a, b actor) int {
				if c := strings.Compare(a.ID, b.ID); c != 0 {
					return c
				}
				return b2i(a.Admin) - b2i(b.Admin)
			})
			return out
		}
		if !slices.Equal(actors(got), actors(got2)) {
			t.Fatalf("ParseTokens(%q) actors %v, with other secrets %v", s, actors(got), actors(got2))
		}
		var entries []string
		for tok, a := range got {
			if !validBearer(tok) || !validActor(a.ID) {
				t.Fatalf("ParseTokens(%q) accepted token %q for actor %q", s, tok, a.ID)
			}
			e := a.ID + "=" + tok
			if a.Admin {
				e += ":admin"
			}
			entries = append(entries, e)
		}
		again, err := ParseTokens(strings.Join(entries, ","))
		if err != nil || len(again) != len(got) {
			t.Fatalf("ParseTokens(formatting of ParseTokens(%q)) = %v, %v; want %v", s, again, err, got)
		}
		for tok, a := range got {
			if again[tok] != a {
				t.Fatalf("ParseTokens(formatting of ParseTokens(%q))[%q] = %v, want %v", s, tok, again[tok], a)
			}
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestServeConfigEventStoreErrorListsEveryScheme: the refusal of an
// unknown BOOKING_EVENT_STORE lists every accepted scheme.
func TestServeConfigEventStoreErrorListsEveryScheme(t *testing.T) {
	t.Parallel()
	c := validServe()
	c.EventStore = "mysql://x"
	err := c.Validate()
	for _, want := range []string{"postgres", "kurrentdb://", "kurrentdb+discover://", "esdb://", "esdb+discover://"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() with BOOKING_EVENT_STORE=mysql://x = %v, want it to list %s", err, want)
		}
	}
}

// TestAuthIgnoredSettings: the settings the chosen mode does not read are
// named in the start log's warning: BOOKING_API_TOKENS with jwt, the JWT
// settings with tokens; the default admin scope is no such setting.
func TestAuthIgnoredSettings(t *testing.T) {
	t.Parallel()
	c := validServe()
	if got := c.Auth.ignored(c.APITokens); got != "" {
		t.Errorf("ignored() of the defaults = %q, want none", got)
	}
	jwtAuth(&c)
	if got, want := c.Auth.ignored(c.APITokens), "BOOKING_API_TOKENS ignored with BOOKING_AUTH=jwt"; got != want {
		t.Errorf("ignored() with jwt and tokens = %q, want %q", got, want)
	}
	if got := c.Auth.ignored(""); got != "" {
		t.Errorf("ignored() with jwt alone = %q, want none", got)
	}
	c.Auth.Mode = authTokens
	if got, want := c.Auth.ignored(c.APITokens), "BOOKING_JWT_ISSUER, BOOKING_JWT_AUDIENCE, BOOKING_JWKS_URL ignored with BOOKING_AUTH=tokens"; got != want {
		t.Errorf("ignored() with tokens and JWT settings = %q, want %q", got, want)
	}
}

// TestAdminAddr: an admin address that is not host:port is a
// configuration error naming BOOKING_ADMIN_ADDR (exit status 2: a
// *configerr.Error); empty turns the admin listener off.
func TestAdminAddr(t *testing.T) {
	t.Parallel()
	c := validServe()
	c.AdminAddr = "localhost"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "BOOKING_ADMIN_ADDR") || !errors.As(err, new(*configerr.Error)) {
		t.Errorf("Validate() with BOOKING_ADMIN_ADDR=localhost = %v, want a configuration error naming it", err)
	}
	c.AdminAddr = ""
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() with BOOKING_ADMIN_ADDR empty (off) = %v, want nil", err)
	}
}
