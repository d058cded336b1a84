package httpapi

import (
	"strings"
)

// preference is one element of a Prefer field (RFC 7240 §2): its name and
// value (unquoted); its parameters are not kept.
type preference struct {
	name, value string
}

// parsePrefer splits a Prefer field value into its preferences (RFC 7240
// §2):
//
//	preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )
//	word       = token / quoted-string
//
// Commas and semicolons inside quoted strings do not split. An element that
// does not start with a token is skipped up to the next comma. It never
// fails: what cannot be read is left out.
func parsePrefer(field string) []preference {
	var out []preference
	s := field
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t,")
		name := leadingToken(s)
		s = s[len(name):]
		var value string
		rest := strings.TrimLeft(s, " \t")
		if strings.HasPrefix(rest, "=") {
			rest = strings.TrimLeft(rest[1:], " \t")
			value, rest = readWord(rest)
			s = rest
		}
		// Skip the parameters (and anything unreadable) up to the next comma
		// outside a quoted string.
		s = skipToComma(s)
		if name != "" {
			out = append(out, preference{name: name, value: value})
		}
	}
	return out
}

// leadingToken returns the RFC 9110 token at the start of s.
func leadingToken(s string) string {
	i := 0
	for i < len(s) && isTokenChar(s[i]) {
		i++
	}
	return s[:i]
}

// readWord reads a token or a quoted-string (unescaped) from the start of s
// and returns it with the rest of s.
func readWord(s string) (string, string) {
	if !strings.HasPrefix(s, `"`) {
		t := leadingToken(s)
		return t, s[len(t):]
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), s[i+1:]
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), "" // unterminated: the rest was the string
}

// skipToComma returns s after the first comma outside a quoted string, or "".
func skipToComma(s string) string {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			return s[i+1:]
		}
	}
	return ""
}

// isTokenChar reports whether c is a tchar of RFC 9110 §5.6.2.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
