package config

import (
	"fmt"
	"strings"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
)

// actor is an authenticated caller (httpapi.Actor).
type actor = httpapi.Actor

// maxActorLength bounds an actor name of BOOKING_API_TOKENS, in bytes.
const maxActorLength = 64

// ParseTokens parses BOOKING_API_TOKENS: comma-separated name=token or
// name=token:admin entries (spaces around an entry are ignored). The name
// is the stable actor id: 1 to 64 printable ASCII characters other than
// space, '=', ',' and ':'. The token is an RFC 6750 §2.1 b64token (letters,
// digits, "-._~+/", then optional trailing "="), as a client sends it in
// Authorization: Bearer. A token may appear once; a name may have several
// tokens (rotation: clients move to the new token while the old one still
// works), all with the same role. An empty entry (",,", or a leading or
// trailing comma) is refused: it is more likely a token lost in editing
// than meant. Errors name the entry by its position or actor name and never
// contain any part of a token.
func ParseTokens(s string) (map[string]httpapi.Actor, error) {
	out := map[string]actor{}
	admin := map[string]bool{} // the role of each name seen
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			if strings.TrimSpace(s) == "" {
				break // no entries at all: "no tokens" below
			}
			return nil, fmt.Errorf("entry %d is empty (two commas in a row, or a leading or trailing comma)", i+1)
		}
		name, tok, ok := strings.Cut(entry, "=")
		if !ok || name == "" || tok == "" {
			return nil, fmt.Errorf("entry %d: want name=token[:admin]", i+1)
		}
		if !validActor(name) {
			return nil, fmt.Errorf("entry %d: the name must have 1 to %d printable ASCII characters other than space, '=', ',' and ':'", i+1, maxActorLength)
		}
		a := actor{ID: name}
		if t, role, ok := strings.Cut(tok, ":"); ok {
			if role != "admin" {
				// The part after ':' is not echoed: it may be part of a token.
				return nil, fmt.Errorf("entry for %q: the only role is admin (name=token:admin)", name)
			}
			tok, a.Admin = t, true
		}
		if !validBearer(tok) {
			return nil, fmt.Errorf("entry for %q: the token must be an RFC 6750 b64token (letters, digits, -._~+/ and trailing =)", name)
		}
		if _, dup := out[tok]; dup {
			return nil, fmt.Errorf("entry for %q: token used twice", name)
		}
		if was, seen := admin[name]; seen && was != a.Admin {
			return nil, fmt.Errorf("entry for %q: another token of the same name has another role (every token of a name is :admin, or none)", name)
		}
		admin[name] = a.Admin
		out[tok] = a
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	return out, nil
}

// validActor reports whether name may be an actor name of BOOKING_API_TOKENS.
func validActor(name string) bool {
	if name == "" || len(name) > maxActorLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' || c == '=' || c == ',' || c == ':' {
			return false
		}
	}
	return true
}

// validBearer reports whether tok is a b64token (RFC 6750 §2.1):
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func validBearer(tok string) bool {
	body := strings.TrimRight(tok, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return false
		}
	}
	return true
}
