package config

import (
	"context"
	"log/slog"
	"strings"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/cmd/booking/internal/identity"
)

// Auth is how `booking serve` authenticates callers: static bearer
// tokens (BOOKING_API_TOKENS, the default and what `make run` uses) or
// JSON Web Tokens of one OpenID Connect or OAuth 2.0 issuer, verified
// against its key set (package identity says how, and the actor id each
// way yields).
type Auth struct {
	Mode          string `name:"auth" env:"BOOKING_AUTH" default:"tokens" help:"How callers authenticate: tokens (BOOKING_API_TOKENS) or jwt (BOOKING_JWT_ISSUER, BOOKING_JWT_AUDIENCE, BOOKING_JWKS_URL)."`
	JWTIssuer     string `name:"jwt-issuer" env:"BOOKING_JWT_ISSUER" help:"With --auth=jwt: the only accepted iss claim, an absolute URI without '#' (the issuer identifier of the identity provider)."`
	JWTAudience   string `name:"jwt-audience" env:"BOOKING_JWT_AUDIENCE" help:"With --auth=jwt: a value the token's aud claim must contain (this API's identifier at the provider)."`
	JWKSURL       string `name:"jwks-url" env:"BOOKING_JWKS_URL" help:"With --auth=jwt: the issuer's JSON Web Key Set (its jwks_uri); https://, or http:// on a loopback host. Fetched at start, every 15 minutes and on an unknown kid (at most once a minute)."`
	JWTAdminScope string `name:"jwt-admin-scope" env:"BOOKING_JWT_ADMIN_SCOPE" default:"booking:admin" help:"With --auth=jwt: the scope (in the scope or scp claim) that makes the caller an admin."`
}

// Authentication modes of BOOKING_AUTH.
const (
	authTokens = "tokens"
	authJWT    = "jwt"
)

// Validate checks the settings of the chosen mode, with apiTokens the
// value of BOOKING_API_TOKENS; the error names the variable at fault.
func (a Auth) Validate(apiTokens string) error {
	switch a.Mode {
	case authTokens:
		if apiTokens == "" {
			return configerr.New("BOOKING_API_TOKENS", "required with BOOKING_AUTH=tokens: name=token[:admin],...")
		}
		if _, err := ParseTokens(apiTokens); err != nil {
			return configerr.New("BOOKING_API_TOKENS", "%v", err)
		}
	case authJWT:
		if err := identity.CheckIssuer(a.JWTIssuer); err != nil {
			return configerr.New("BOOKING_JWT_ISSUER", "%v", err)
		}
		if a.JWTAudience == "" {
			return configerr.New("BOOKING_JWT_AUDIENCE", "required with BOOKING_AUTH=jwt: the value this API's tokens carry in aud")
		}
		if err := identity.CheckJWKSURL(a.JWKSURL); err != nil {
			return configerr.New("BOOKING_JWKS_URL", "%v", err)
		}
		if err := identity.CheckScope(a.JWTAdminScope); err != nil {
			return configerr.New("BOOKING_JWT_ADMIN_SCOPE", "%v", err)
		}
	default:
		return configerr.New("BOOKING_AUTH", "must be tokens or jwt, not %q", a.Mode)
	}
	return nil
}

// ignored returns the settings the chosen mode does not read, as a
// sentence for the start log (empty when there are none): with jwt,
// BOOKING_API_TOKENS; with tokens, any BOOKING_JWT_* or BOOKING_JWKS_URL.
func (a Auth) ignored(apiTokens string) string {
	var names []string
	if a.Mode == authJWT && apiTokens != "" {
		names = append(names, "BOOKING_API_TOKENS")
	}
	if a.Mode == authTokens {
		for _, s := range []struct{ name, value string }{
			{"BOOKING_JWT_ISSUER", a.JWTIssuer}, {"BOOKING_JWT_AUDIENCE", a.JWTAudience}, {"BOOKING_JWKS_URL", a.JWKSURL},
		} {
			if s.value != "" {
				names = append(names, s.name)
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	return strings.Join(names, ", ") + " ignored with BOOKING_AUTH=" + a.Mode
}

// Authenticator returns the authenticator of the validated settings and
// logs the mode (and any setting it ignores). A JWT authenticator fetches
// the key set now and refreshes it until ctx ends.
func (a Auth) Authenticator(ctx context.Context, apiTokens string, log *slog.Logger) (identity.Authenticator, error) {
	if msg := a.ignored(apiTokens); msg != "" {
		log.Warn(msg)
	}
	if a.Mode != authJWT {
		tokens, err := ParseTokens(apiTokens)
		if err != nil {
			return nil, configerr.New("BOOKING_API_TOKENS", "%v", err)
		}
		log.Info("authentication", "mode", authTokens, "tokens", len(tokens))
		return identity.Tokens(tokens), nil
	}
	j, err := identity.NewJWT(ctx, identity.JWTConfig{Issuer: a.JWTIssuer, Audience: a.JWTAudience, JWKSURL: a.JWKSURL,
		AdminScope: a.JWTAdminScope, Logger: log.With("component", "jwt")})
	if err != nil {
		return nil, configerr.New("BOOKING_AUTH", "%v", err)
	}
	log.Info("authentication", "mode", authJWT, "issuer", a.JWTIssuer, "audience", a.JWTAudience, "jwks_url", a.JWKSURL,
		"admin_scope", a.JWTAdminScope, "signing_keys", j.Keys(ctx))
	return j, nil
}
