package identity

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Algorithms are the JWS algorithms (RFC 7518 §3.1, RFC 8037) a token may
// be signed with: RSA, RSA-PSS, ECDSA and Ed25519. Neither "none" nor an
// HMAC algorithm is ever accepted, so a token cannot be "signed" with
// nothing or with the public key as an HMAC secret.
var Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Defaults of JWTConfig's zero values.
const (
	// DefaultLeeway is the clock skew allowed on exp, nbf and iat.
	DefaultLeeway = 30 * time.Second
	// DefaultRefreshInterval is how often the key set is fetched again,
	// so that a key the provider withdrew stops being accepted.
	DefaultRefreshInterval = 15 * time.Minute
	// DefaultUnknownKeyGap is the least time between two fetches caused by
	// a token whose key id (kid) is not in the cached key set: a rotated
	// key is picked up at once, and tokens with made-up key ids cannot
	// make the service hammer the provider.
	DefaultUnknownKeyGap = time.Minute
	// DefaultFetchTimeout bounds one fetch of the key set.
	DefaultFetchTimeout = 10 * time.Second
)

// JWTConfig configures a JWT authenticator. Issuer, Audience and JWKSURL
// are required; the zero value of every other field is its default.
type JWTConfig struct {
	// Issuer is the only accepted iss claim (BOOKING_JWT_ISSUER), compared
	// exactly; see CheckIssuer.
	Issuer string
	// Audience must be one of the token's aud values (BOOKING_JWT_AUDIENCE).
	Audience string
	// JWKSURL is the provider's JSON Web Key Set (RFC 7517 §5), such as the
	// jwks_uri of its OpenID Connect discovery document (BOOKING_JWKS_URL);
	// see CheckJWKSURL.
	JWKSURL string
	// AdminScope is the scope that makes an actor an admin
	// (BOOKING_JWT_ADMIN_SCOPE); empty: nobody is.
	AdminScope string
	// Now is the clock exp, nbf and iat are checked against; nil: the
	// system clock.
	Now func() time.Time
	// Leeway is the clock skew allowed on exp, nbf and iat; 0: DefaultLeeway.
	Leeway time.Duration
	// RefreshInterval, UnknownKeyGap and FetchTimeout: see the defaults.
	RefreshInterval, UnknownKeyGap, FetchTimeout time.Duration
	// Logger receives a line per failed fetch of the key set; nil: none.
	Logger *slog.Logger
}

// JWT authenticates JSON Web Tokens (RFC 7519) signed by a key of one
// issuer's key set. Keys are cached; the set is fetched again every
// RefreshInterval and when a token names a key id the cache does not
// have (at most once per UnknownKeyGap), so the provider can rotate its
// keys without a restart. Safe for concurrent use.
type JWT struct {
	issuer     string
	adminScope string
	parser     *jwt.Parser
	keys       keyfunc.Keyfunc
}

// NewJWT returns the authenticator of cfg after a first fetch of the key
// set. A failed first fetch is logged, not returned: tokens are refused
// until a later fetch succeeds (the service can start before its identity
// provider). Its background refresh ends with ctx. Returns an error for a
// configuration that CheckIssuer or CheckJWKSURL refuses, or an empty
// Audience.
func NewJWT(ctx context.Context, cfg JWTConfig) (*JWT, error) {
	if err := CheckIssuer(cfg.Issuer); err != nil {
		return nil, err
	}
	if err := CheckJWKSURL(cfg.JWKSURL); err != nil {
		return nil, err
	}
	if cfg.Audience == "" {
		return nil, errors.New("an audience is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fetchTimeout := or(cfg.FetchTimeout, DefaultFetchTimeout)
	client := &http.Client{Timeout: fetchTimeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("stopped after 5 redirects")
		}
		return CheckJWKSURL(req.URL.String())
	}}
	keys, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:            client,
		HTTPTimeout:       fetchTimeout,
		RateLimitWaitMax:  fetchTimeout,
		RefreshInterval:   or(cfg.RefreshInterval, DefaultRefreshInterval),
		RefreshUnknownKID: rate.NewLimiter(rate.Every(or(cfg.UnknownKeyGap, DefaultUnknownKeyGap)), 1),
		RefreshErrorHandlerFunc: func(u string) func(ctx context.Context, err error) {
			return func(ctx context.Context, err error) {
				log.WarnContext(ctx, "could not fetch the JWT signing keys (BOOKING_JWKS_URL); tokens signed by keys not yet cached are refused until a fetch succeeds",
					"url", u, "err", err)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(Algorithms), jwt.WithIssuer(cfg.Issuer), jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(or(cfg.Leeway, DefaultLeeway)),
	}
	if cfg.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(cfg.Now))
	}
	return &JWT{issuer: cfg.Issuer, adminScope: cfg.AdminScope, parser: jwt.NewParser(opts...), keys: keys}, nil
}

// Keys returns how many signing keys the cache holds now.
func (j *JWT) Keys(ctx context.Context) int {
	all, err := j.keys.Storage().KeyReadAll(ctx)
	if err != nil {
		return 0
	}
	return len(all)
}

// claims are the claims the service reads: the registered ones and the
// scopes, from scope (RFC 8693 §4.2: space-separated) or scp (a string of
// the same form, or an array of scopes, as some providers send it).
type claims struct {
	jwt.RegisteredClaims
	Scope string `json:"scope,omitempty"`
	Scp   any    `json:"scp,omitempty"`
}

// Authenticate verifies token and returns its actor: ActorID(issuer,
// sub), an admin when its scopes include the admin scope. A token is
// refused (a *Refusal) unless it is a well-formed JWS signed with one of
// Algorithms by a key of the key set, with iss equal to the issuer, the
// audience among its aud, an exp not past, no nbf or iat in the future
// (each with the leeway), and a sub of 1 to MaxSubject bytes of Unicode text
// (never one that encoding/json read as U+FFFD from a lone surrogate).
func (j *JWT) Authenticate(ctx context.Context, token string) (Actor, error) {
	var c claims
	tok, err := j.parser.ParseWithClaims(token, &c, j.keys.KeyfuncCtx(ctx))
	if err != nil {
		return Actor{}, &Refusal{Reason: refusalReason(tok, err)}
	}
	if c.Subject == "" {
		return Actor{}, &Refusal{Reason: "it has no subject (sub)"}
	}
	if strings.ContainsRune(c.Subject, utf8.RuneError) && !wellFormedPayload(tok.Raw) {
		// encoding/json reads invalid UTF-8 and escaped lone surrogates as
		// U+FFFD: two different subjects would be one actor.
		return Actor{}, &Refusal{Reason: "its claims are not Unicode text (invalid UTF-8, or an escaped lone surrogate such as \\ud800)"}
	}
	if !validSubject(c.Subject) {
		return Actor{}, &Refusal{Reason: fmt.Sprintf("its subject (sub) must be 1 to %d bytes of text without control characters", MaxSubject)}
	}
	return Actor{ID: ActorID(j.issuer, c.Subject), Admin: j.adminScope != "" && slices.Contains(c.scopes(), j.adminScope)}, nil
}

// wellFormedPayload reports whether the payload of the JWS compact form
// token is Unicode text: valid UTF-8 (RFC 8259 §8.1) in which every \u
// escape of a surrogate is a high one followed by an escaped low one
// (RFC 8259 §7). It runs only for a subject that reads as U+FFFD, which
// encoding/json also makes of text that is neither.
func wellFormedPayload(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !utf8.Valid(raw) {
		return false
	}
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a one-character escape such as \" or \\
			continue
		}
		r, ok := hex4(raw, i+2)
		switch {
		case !ok:
			return false
		case r >= 0xdc00 && r <= 0xdfff:
			return false
		case r >= 0xd800 && r <= 0xdbff:
			lo, ok := hex4(raw, i+8)
			if !ok || raw[i+6] != '\\' || raw[i+7] != 'u' || lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		}
		i += 5
	}
	return true
}

// hex4 returns the value of the four hex digits at raw[i:i+4].
func hex4(raw []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 32)
	return rune(n), err == nil
}

// scopes returns the scopes of scope and scp together.
func (c *claims) scopes() []string {
	out := strings.Fields(c.Scope)
	switch v := c.Scp.(type) {
	case string:
		out = append(out, strings.Fields(v)...)
	case []any:
		for _, s := range v {
			if s, ok := s.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// refusalReason names the check that err, ParseWithClaims's error for tok,
// failed; it never quotes the token.
func refusalReason(tok *jwt.Token, err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "it is not a well-formed JWT (RFC 7519)"
	case tok != nil && !slices.Contains(Algorithms, algOf(tok)):
		return "its algorithm (alg) is not one of " + strings.Join(Algorithms, ", ")
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "it is not signed by a key of the issuer's key set (unknown kid)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "its signature does not verify"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "it has expired (exp)"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "it is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "it was issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "its issuer (iss) is not the trusted one"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "its audience (aud) does not include this service"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "it lacks a required claim (exp, iss and aud are required)"
	}
	return "it could not be verified"
}

// algOf returns the alg header of tok ("" when absent or not a string).
func algOf(tok *jwt.Token) string {
	alg, _ := tok.Header["alg"].(string)
	return alg
}

// CheckIssuer returns an error unless iss can be BOOKING_JWT_ISSUER: an
// absolute URI (RFC 3986 §4.3: a scheme, so it contains ':') of at most
// MaxIssuer printable ASCII characters without a fragment, as an OpenID
// Connect issuer identifier is (OpenID Connect Discovery §3). Without '#',
// ActorID stays unambiguous.
func CheckIssuer(iss string) error {
	if iss == "" {
		return errors.New("required: the iss claim of accepted tokens, such as https://idp.example.com/")
	}
	if len(iss) > MaxIssuer {
		return fmt.Errorf("must have at most %d characters", MaxIssuer)
	}
	for i := 0; i < len(iss); i++ {
		if c := iss[i]; c <= ' ' || c > '~' {
			return errors.New("must be printable ASCII without spaces")
		}
	}
	if strings.Contains(iss, "#") {
		return errors.New("must not contain '#' (an issuer identifier has no fragment)")
	}
	u, err := url.Parse(iss)
	if err != nil || u.Scheme == "" {
		return errors.New("must be an absolute URI such as https://idp.example.com/")
	}
	return nil
}

// CheckJWKSURL returns an error unless raw can be BOOKING_JWKS_URL: an
// https URL, or an http URL whose host is a loopback address or
// "localhost" (a key set fetched in clear over a network could be
// replaced by anyone on the path).
func CheckJWKSURL(raw string) error {
	if raw == "" {
		return errors.New("required: the URL of the issuer's JSON Web Key Set (its jwks_uri)")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return errors.New("must be an https:// URL (http:// only for a loopback host)")
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("must be an https:// URL: http:// is accepted only for a loopback host (127.0.0.0/8, ::1, localhost), not %q", u.Hostname())
	}
	return nil
}

// loopback reports whether host is "localhost" or a loopback IP address.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckScope returns an error unless s is one OAuth 2.0 scope token
// (RFC 6749 §3.3: printable ASCII other than space, '"' and '\').
func CheckScope(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return errors.New(`must be one scope: printable ASCII without spaces, '"' or '\'`)
		}
	}
	return nil
}

// or returns d, or def when d is not positive.
func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
