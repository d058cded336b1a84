package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrysafe/booking/domain"
)

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 64 << 10

// maxSafeInt is 2^53−1, the largest integer every JSON implementation holds exactly.
const maxSafeInt = 1<<53 - 1

// body is a decoded JSON object whose fields are taken one by one with their
// types checked; unknown fields are reported by done.
type body struct {
	m    map[string]any
	used map[string]bool
	path string
	err  error
	// missing lists the required fields (with path) found absent, in the
	// order they were taken; errMissing says the first error, err, is the
	// first of them, so done can name them all.
	missing    []string
	errMissing bool
}

// maxJSONDepth bounds the nesting of a request body's objects and arrays;
// the API's bodies nest two levels deep.
const maxJSONDepth = 32

// Codes of request bodies that cannot be taken.
const (
	codeInvalidJSON    = "invalid-json"
	codeInvalidUTF8    = "invalid-utf8"
	codeRequestTimeout = "request-timeout"
	codeInvalidBody    = "invalid-body"
)

// decodeBody reads r's JSON object body strictly: a JSON media type (or
// none), no content coding (RFC 9110 §8.4: 415 for one the server does not
// accept), at most maxBodyBytes, read within the server's read timeout (see
// lingerAfterBodyTimeout), then decodeJSON.
func decodeBody(r *http.Request) (*body, error) {
	for _, ce := range r.Header.Values("Content-Encoding") {
		if c := strings.TrimSpace(ce); c != "" && !strings.EqualFold(c, "identity") {
			return nil, httpError(domain.UnsupportedMedia, codeUnsupportedMedia, "the body must not be content-coded (Content-Encoding "+strconv.Quote(c)+"): send it as is")
		}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, httpError(domain.UnsupportedMedia, codeUnsupportedMedia, "the body must be application/json, or a JSON structured-syntax type such as application/merge-patch+json (RFC 6839)")
		}
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, bodyReadError(err)
	}
	if len(raw) > maxBodyBytes {
		return nil, httpError(domain.TooLarge, codeBodyTooLarge, fmt.Sprintf("the body must be at most %d bytes", maxBodyBytes))
	}
	return decodeJSON(raw)
}

// bodyReadError is the answer to a request body that could not be read: 408
// request-timeout when the read deadline passed first, else 400.
func bodyReadError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return httpError(domain.Timeout, codeRequestTimeout, "the request body did not arrive in time; send it again, whole")
	}
	return httpError(domain.Invalid, codeInvalidBody, "the body could not be read")
}

// decodeJSON decodes raw as one JSON object (RFC 8259) and refuses what the
// standard decoder would silently accept or alter: text that is not UTF-8
// (RFC 8259 §8.1), including escaped lone surrogates such as "\ud800", is
// invalid-utf8 (encoding/json would turn both into U+FFFD, so two different
// bodies would read the same); a member name twice in one object, nesting
// deeper than maxJSONDepth, or anything after the value is invalid-json.
// Numbers are kept exact (json.Number). All errors are Invalid.
func decodeJSON(raw []byte) (*body, error) {
	if !utf8.Valid(raw) {
		return nil, httpError(domain.Invalid, codeInvalidUTF8, "the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if len(bytes.TrimSpace(raw)) == 0 {
			return nil, httpError(domain.Invalid, codeInvalidJSON, "the body is empty; want a JSON object")
		}
		return nil, httpError(domain.Invalid, codeInvalidJSON, "the body is not valid JSON: "+jsonErr(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, httpError(domain.Invalid, codeInvalidJSON, "the body has data after its JSON value")
	}
	members, err := scanJSONText(raw)
	switch err {
	case errLoneSurrogate:
		return nil, httpError(domain.Invalid, codeInvalidUTF8, `the body has an escaped lone surrogate (such as "\ud800"), which is not a Unicode character`)
	case errTooDeep:
		return nil, httpError(domain.Invalid, codeInvalidJSON, fmt.Sprintf("the body nests objects and arrays deeper than %d levels", maxJSONDepth))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, httpError(domain.Invalid, codeInvalidJSON, "the body must be a JSON object")
	}
	// RFC 8785 and RFC 8259 §4 assume unique member names; "last one wins"
	// would let two different-looking bodies share a fingerprint. A name
	// repeated in one object leaves its map with fewer entries than the text
	// has members; only then is the text searched for the name.
	if members != memberCount(m) {
		if name, dup := duplicateMember(raw); dup {
			return nil, httpError(domain.Invalid, codeInvalidJSON, fmt.Sprintf("the body repeats the member %q", name), name)
		}
	}
	return &body{m: m, used: map[string]bool{}}, nil
}

// Findings of scanJSONText.
var (
	errLoneSurrogate = errors.New("escaped lone surrogate")
	errTooDeep       = errors.New("nested too deep")
)

// scanJSONText checks the text of a JSON document that encoding/json has
// accepted: every \u escape of a surrogate (U+D800–U+DFFF) must be a high
// one followed by an escaped low one (RFC 8259 §7), and objects and arrays
// nest at most maxJSONDepth deep. It returns the number of object members in
// the text (its name separators, RFC 8259 §4) and nil, errLoneSurrogate or
// errTooDeep; on text that is not valid JSON its answer means nothing, but it
// never panics.
func scanJSONText(raw []byte) (members int, err error) {
	depth := 0
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case '{', '[':
				if depth++; depth > maxJSONDepth {
					return members, errTooDeep
				}
			case '}', ']':
				depth--
			case ':':
				members++
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' {
				r, ok := hex4(raw, i+2)
				if !ok {
					return members, nil // not JSON
				}
				i += 5 // at the escape's last hex digit
				switch {
				case r >= 0xdc00 && r <= 0xdfff:
					return members, errLoneSurrogate
				case r >= 0xd800 && r <= 0xdbff:
					if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
						return members, errLoneSurrogate
					}
					lo, ok := hex4(raw, i+3)
					if !ok || lo < 0xdc00 || lo > 0xdfff {
						return members, errLoneSurrogate
					}
					i += 6
				}
			} else {
				i++ // a one-character escape such as \" or \\
			}
		}
	}
	return members, nil
}

// memberCount returns the number of members in the objects of the decoded
// JSON value v, nested ones included.
func memberCount(v any) int {
	switch v := v.(type) {
	case map[string]any:
		n := len(v)
		for _, e := range v {
			n += memberCount(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range v {
			n += memberCount(e)
		}
		return n
	}
	return 0
}

// hex4 returns the value of the four hex digits at raw[i:i+4].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}

func (b *body) fail(field, msg string) {
	if b.err == nil {
		b.err = httpError(domain.Invalid, "invalid-request", msg, b.path+field)
	}
}

func (b *body) get(field string, required bool) (any, bool) {
	b.used[field] = true
	v, ok := b.m[field]
	if !ok || v == nil {
		if required {
			b.missing = append(b.missing, b.path+field)
			if b.err == nil {
				b.errMissing = true
			}
			b.fail(field, fmt.Sprintf("%s%s is required", b.path, field))
		}
		return nil, false
	}
	return v, true
}

// String returns a required string field exactly as sent: values are stored
// and shown byte for byte; Unicode normalization (NFC) happens only inside
// the fingerprint (commands.Fingerprint).
func (b *body) String(field string) string {
	v, ok := b.get(field, true)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		b.fail(field, fmt.Sprintf("%s%s must be a string", b.path, field))
		return ""
	}
	return s
}

// IntIn returns a required integer field that must lie in [lo, hi].
// Numbers are compared by value (2, 2.0 and 2e0 are the same integer); a
// non-integral number or a string is an error naming the field ("must be an
// integer"), and a value outside [lo, hi] — however far, also beyond
// ±(2^53−1), which no field allows — is an error with rangeMsg, the field's
// own range message. lo and hi lie within ±(2^53−1).
func (b *body) IntIn(field string, lo, hi int64, rangeMsg string) int64 {
	v, ok := b.get(field, true)
	if !ok {
		return 0
	}
	n, ok := v.(json.Number)
	if !ok {
		b.fail(field, fmt.Sprintf("%s%s must be an integer", b.path, field))
		return 0
	}
	i, err := jsonInteger(string(n))
	switch {
	case errors.Is(err, errOutOfRange) || (err == nil && (i < lo || i > hi)):
		b.fail(field, rangeMsg)
		return 0
	case err != nil:
		b.fail(field, fmt.Sprintf("%s%s must be an integer", b.path, field))
		return 0
	}
	return i
}

// Errors of jsonInteger.
var (
	errNotInteger = errors.New("not an integer")
	errOutOfRange = errors.New("integer beyond ±(2^53−1)")
)

// maxExponent bounds the exponents jsonInteger works with: beyond it a
// nonzero number is out of range or not integral whatever its digits (a body
// holds at most maxBodyBytes of them).
const maxExponent = 1 << 20

// jsonInteger returns the value of the JSON number literal s (RFC 8259 §6)
// when it is an integer: "2", "2.0", "2e0" and "20e-1" are all 2. Returns
// errNotInteger for a non-integral value or a malformed literal, and
// errOutOfRange for an integer beyond ±(2^53−1). Its work is linear in
// len(s) whatever the exponent (big.Rat would compute 10^exponent).
func jsonInteger(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, exp, hasExp := s, "", false
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp, hasExp = s[:i], s[i+1:], true
	}
	intPart, frac, hasDot := strings.Cut(mant, ".")
	if !allDigits(intPart) || len(intPart) == 0 || (len(intPart) > 1 && intPart[0] == '0') ||
		(hasDot && (len(frac) == 0 || !allDigits(frac))) {
		return 0, errNotInteger
	}
	e := 0
	if hasExp {
		expNeg := false
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			expNeg, exp = exp[0] == '-', exp[1:]
		}
		if exp == "" || !allDigits(exp) {
			return 0, errNotInteger
		}
		for _, c := range exp {
			if e = e*10 + int(c-'0'); e > maxExponent {
				e = maxExponent
			}
		}
		if expNeg {
			e = -e
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	e -= len(frac)
	if digits == "" {
		return 0, nil // zero, whatever its exponent
	}
	trimmed := strings.TrimRight(digits, "0")
	e += len(digits) - len(trimmed)
	digits = trimmed
	if e < 0 {
		return 0, errNotInteger
	}
	if len(digits)+e > 16 { // 2^53−1 has 16 digits
		return 0, errOutOfRange
	}
	var n int64
	for _, c := range digits {
		n = n*10 + int64(c-'0')
	}
	for range e {
		n *= 10
	}
	if n > maxSafeInt {
		return 0, errOutOfRange
	}
	if neg {
		n = -n
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Time returns a required RFC 3339 timestamp field (parseTimestamp), in UTC.
func (b *body) Time(field string) time.Time {
	s := b.String(field)
	if b.err != nil {
		return time.Time{}
	}
	t, err := parseTimestamp(s)
	if err != nil {
		b.fail(field, fmt.Sprintf("%s%s must be an RFC 3339 timestamp such as 2027-06-01T20:00:00Z", b.path, field))
		return time.Time{}
	}
	return t.UTC()
}

// parseTimestamp parses an RFC 3339 date-time (section 5.6), with or
// without fractional seconds, in any offset. Its "T" separator and "Z"
// offset may be lower case, as the NOTE of section 5.6 allows
// (https://www.rfc-editor.org/rfc/rfc3339#section-5.6); time.Parse accepts
// only upper case. Every timestamp a client sends goes through it.
func parseTimestamp(s string) (time.Time, error) {
	if len(s) > 10 && s[10] == 't' {
		s = s[:10] + "T" + s[11:]
	}
	if n := len(s); n > 0 && s[n-1] == 'z' {
		s = s[:n-1] + "Z"
	}
	return time.Parse(time.RFC3339Nano, s)
}

// Object returns a required nested object field.
func (b *body) Object(field string) *body {
	v, ok := b.get(field, true)
	sub := &body{m: map[string]any{}, used: map[string]bool{}, path: b.path + field + "."}
	if !ok {
		sub.err = b.err
		return sub
	}
	m, ok := v.(map[string]any)
	if !ok {
		b.fail(field, fmt.Sprintf("%s%s must be an object", b.path, field))
		sub.err = b.err
		return sub
	}
	sub.m = m
	return sub
}

// Money returns a required money object {amount, currency}.
func (b *body) Money(field string) domain.Money {
	o := b.Object(field)
	m := domain.Money{Amount: o.IntIn("amount", 1, domain.MaxAmountMinor/domain.MaxSeatsPerHold,
		fmt.Sprintf("%samount must be an integer of minor units from 1 to %d", o.path, domain.MaxAmountMinor/domain.MaxSeatsPerHold)),
		Currency: o.String("currency")}
	if err := o.done(); err != nil && b.err == nil {
		b.err = err
	}
	return m
}

// done reports the first error — when that is a missing required field,
// every missing required field taken, in fields, and any unknown field
// beside them (a misspelt required field is both) — or an unknown field
// (sorted names).
func (b *body) done() error {
	var unknown []string
	for k := range b.m {
		if !b.used[k] {
			unknown = append(unknown, b.path+k)
		}
	}
	sort.Strings(unknown)
	if b.err != nil {
		if !b.errMissing || (len(b.missing) == 1 && len(unknown) == 0) {
			return b.err
		}
		verb := " is required"
		if len(b.missing) > 1 {
			verb = " are required"
		}
		msg := strings.Join(b.missing, ", ") + verb
		if len(unknown) > 0 {
			msg += "; unknown field(s): " + strings.Join(unknown, ", ")
		}
		return httpError(domain.Invalid, "invalid-request", msg, append(slices.Clone(b.missing), unknown...)...)
	}
	if len(unknown) > 0 {
		return httpError(domain.Invalid, "unknown-field", fmt.Sprintf("unknown field(s): %s", strings.Join(unknown, ", ")), unknown...)
	}
	return nil
}

// duplicateMember reports the first object member name that appears twice in
// one object of the (already valid) JSON document raw.
func duplicateMember(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		object bool
		names  map[string]bool
		key    bool // the next string token is a member name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{object: true, names: map[string]bool{}, key: true})
			case '[':
				if top != nil && top.object {
					top.key = true
				}
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.object && top.key {
				if top.names[t] {
					return t, true
				}
				top.names[t] = true
				top.key = false
				continue
			}
			if top != nil && top.object {
				top.key = true
			}
		default:
			if top != nil && top.object {
				top.key = true
			}
		}
	}
}
