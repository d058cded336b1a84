package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"net/http"
	"sort"
	"strings"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/retrysafe/booking/domain"
)

// maxKeyLength is the longest Idempotency-Key accepted, in characters.
const maxKeyLength = 255

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 64 << 10

// maxSafeInt is 2^53−1, the largest integer every JSON implementation holds exactly.
const maxSafeInt = 1<<53 - 1

// parseIdempotencyKey returns the Idempotency-Key of r
// (draft-ietf-httpapi-idempotency-key-header §2.1: an RFC 8941 sf-string; a
// bare token is accepted as the same key). Missing, repeated, empty, blank,
// longer than 255 characters or outside printable ASCII is an Invalid error
// with code idempotency-key-invalid. Keys are case-sensitive and never
// truncated.
func parseIdempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values("Idempotency-Key")
	bad := func(msg string) error {
		return httpError(domain.Invalid, codeKeyInvalid, msg, "Idempotency-Key")
	}
	if len(vals) == 0 {
		return "", bad("the Idempotency-Key header is required on this request")
	}
	if len(vals) > 1 {
		return "", bad("send exactly one Idempotency-Key header")
	}
	v := vals[0]
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", bad("the Idempotency-Key must be printable ASCII")
		}
	}
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\':
				if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
					return "", bad(`the quoted Idempotency-Key has an invalid escape (only \" and \\ are allowed)`)
				}
				b.WriteByte(v[i+1])
				i++
			case c == '"':
				if i != len(v)-1 {
					return "", bad("the quoted Idempotency-Key has characters after its closing quote")
				}
				closed = true
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return "", bad("the quoted Idempotency-Key lacks its closing quote")
		}
		v = b.String()
	}
	if v == "" {
		return "", bad("the Idempotency-Key must not be empty")
	}
	if strings.TrimSpace(v) == "" {
		return "", bad("the Idempotency-Key must not be blank")
	}
	if len(v) > maxKeyLength {
		return "", bad(fmt.Sprintf("the Idempotency-Key must have at most %d characters", maxKeyLength))
	}
	return v, nil
}

// body is a decoded JSON object whose fields are taken one by one with their
// types checked; unknown fields are reported by done.
type body struct {
	m    map[string]any
	used map[string]bool
	path string
	err  error
}

// decodeBody reads r's JSON object body strictly: a JSON media type (or
// none), at most maxBodyBytes, one object, numbers kept exact.
func decodeBody(r *http.Request) (*body, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, httpError(domain.Invalid, codeUnsupportedMedia, "the body must be application/json")
		}
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, httpError(domain.Invalid, "invalid-body", "the body could not be read")
	}
	if len(raw) > maxBodyBytes {
		return nil, httpError(domain.Invalid, codeBodyTooLarge, fmt.Sprintf("the body must be at most %d bytes", maxBodyBytes))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, httpError(domain.Invalid, "invalid-json", "the body is not valid JSON: "+jsonErr(err))
	}
	if dec.More() {
		return nil, httpError(domain.Invalid, "invalid-json", "the body has data after its JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, httpError(domain.Invalid, "invalid-json", "the body has data after its JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, httpError(domain.Invalid, "invalid-json", "the body must be a JSON object")
	}
	if name, dup := duplicateMember(raw); dup {
		// RFC 8785 and RFC 8259 §4 assume unique member names; "last one wins"
		// would let two different-looking bodies share a fingerprint.
		return nil, httpError(domain.Invalid, "invalid-json", fmt.Sprintf("the body repeats the member %q", name), name)
	}
	return &body{m: m, used: map[string]bool{}}, nil
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
			b.fail(field, fmt.Sprintf("%s%s is required", b.path, field))
		}
		return nil, false
	}
	return v, true
}

// String returns a required string field, NFC-normalized (UAX #15).
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
	return norm.NFC.String(s)
}

// RawString returns a required string field exactly as sent (no
// normalization): for opaque values such as payment tokens.
func (b *body) RawString(field string) string {
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

// Int returns a required integer field. Numbers are compared by value (2,
// 2.0 and 2e0 are the same integer); a non-integral number, a string, or a
// value beyond ±(2^53−1) is an error naming the field.
func (b *body) Int(field string) int64 {
	v, ok := b.get(field, true)
	if !ok {
		return 0
	}
	n, ok := v.(json.Number)
	if !ok {
		b.fail(field, fmt.Sprintf("%s%s must be an integer", b.path, field))
		return 0
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		b.fail(field, fmt.Sprintf("%s%s must be an integer", b.path, field))
		return 0
	}
	i := r.Num()
	if i.CmpAbs(big.NewInt(maxSafeInt)) > 0 {
		b.fail(field, fmt.Sprintf("%s%s must be between -(2^53-1) and 2^53-1", b.path, field))
		return 0
	}
	return i.Int64()
}

// Time returns a required RFC 3339 timestamp field, in UTC.
func (b *body) Time(field string) time.Time {
	s := b.String(field)
	if b.err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		b.fail(field, fmt.Sprintf("%s%s must be an RFC 3339 timestamp such as 2027-06-01T20:00:00Z", b.path, field))
		return time.Time{}
	}
	return t.UTC()
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
	m := domain.Money{Amount: o.Int("amount"), Currency: o.String("currency")}
	if err := o.done(); err != nil && b.err == nil {
		b.err = err
	}
	return m
}

// done reports the first error, or an unknown field (sorted names).
func (b *body) done() error {
	if b.err != nil {
		return b.err
	}
	var unknown []string
	for k := range b.m {
		if !b.used[k] {
			unknown = append(unknown, b.path+k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
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
