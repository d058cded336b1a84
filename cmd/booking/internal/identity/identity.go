// Package identity turns the bearer token of a request (RFC 6750) into the
// actor the service acts for: a stable actor id and whether the actor is an
// admin. Two ways exist, chosen by BOOKING_AUTH: static tokens, each mapped
// to a name (Tokens, for development and small installations), and JSON Web
// Tokens issued by an OpenID Connect or OAuth 2.0 provider and verified
// against its published key set (JWT).
//
// The actor id is what the intent scope (actor, operation, key) and every
// ownership check compare, so it never changes for one caller and never
// names two callers:
//   - static tokens: the token's name in BOOKING_API_TOKENS, 1 to 64
//     printable ASCII characters without space, '=', ',' or ':';
//   - JWT: ActorID(issuer, subject), "<iss>#<sub>". The issuer is an
//     absolute URI without a fragment (so it has a ':' and no '#'): the
//     first '#' splits the id back into its issuer and subject, two issuers'
//     subjects never meet, and no JWT actor id is a static token's name.
package identity

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Actor is an authenticated caller: a stable id (never the token) and
// whether it is an admin.
type Actor struct {
	ID    string
	Admin bool
}

// Authenticator maps a bearer token to its actor. Implementations are safe
// for concurrent use.
type Authenticator interface {
	// Authenticate returns the actor of token (the credentials of
	// "Authorization: Bearer <token>"), or a *Refusal saying why it is not
	// accepted. It may block on ctx (a JWT key set refresh).
	Authenticate(ctx context.Context, token string) (Actor, error)
}

// Refusal is a bearer token that was not accepted. Its Reason is safe to
// show to the client: it names the failed check and never repeats any
// part of the token.
type Refusal struct {
	// Reason says which check failed, such as "it has expired (exp)".
	Reason string
}

// Error returns "the bearer token is not valid: " and the reason.
func (r *Refusal) Error() string { return "the bearer token is not valid: " + r.Reason }

// Tokens is the static authenticator: each token maps to its actor
// (BOOKING_API_TOKENS). A token must match exactly.
type Tokens map[string]Actor

// Authenticate returns the actor of token, or a *Refusal when no such
// token is configured.
func (t Tokens) Authenticate(_ context.Context, token string) (Actor, error) {
	a, ok := t[token]
	if !ok {
		return Actor{}, &Refusal{Reason: "no such token"}
	}
	return a, nil
}

// MaxSubject bounds the sub claim of a JWT, in bytes: OpenID Connect Core
// §2 allows at most 255 ASCII characters.
const MaxSubject = 255

// MaxIssuer bounds BOOKING_JWT_ISSUER, in bytes.
const MaxIssuer = 255

// ActorID returns the actor id of a JWT's subject from issuer:
// issuer + "#" + subject. issuer holds no '#' (CheckIssuer), so the id
// splits back at its first '#'.
func ActorID(issuer, subject string) string { return issuer + "#" + subject }

// validSubject reports whether sub may be part of an actor id: 1 to
// MaxSubject bytes of UTF-8 text without control characters (it is shown
// in logs and in `booking intents explain --actor`).
func validSubject(sub string) bool {
	if sub == "" || len(sub) > MaxSubject || !utf8.ValidString(sub) {
		return false
	}
	return strings.IndexFunc(sub, unicode.IsControl) < 0
}
