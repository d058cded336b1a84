package httpapi

// The HTTP half of the idempotency contract (draft-ietf-httpapi-idempotency-key-header),
// in one file; the other half, the intent and its decisions, is in package
// commands. Every state-changing POST except webhooks:
//
//   - must carry one Idempotency-Key: an RFC 8941 sf-string ("abc") is
//     unescaped first, so "abc" and abc are one key; missing, repeated,
//     empty, blank, longer than 255 characters or outside printable ASCII is
//     400 idempotency-key-invalid, and nothing is recorded (parseIdempotencyKey);
//   - is scoped to (actor id, METHOD route-template, key): request builds
//     that envelope, and commands fingerprints the typed command under it;
//   - is answered, when it repeats an intent, with the intent's first final
//     outcome and Idempotent-Replayed: true (markReplayed), and a refusal
//     recorded on the intent the same way (idempotencyHeaders);
//   - waits for the payment outcome of POST /v1/orders up to the RFC 7240
//     Prefer: wait budget (preferWait), answered with Preference-Applied;
//     a pending outcome is 202 with Location and Retry-After;
//   - gets 409 idempotency-key-in-use with Retry-After while the first
//     request with its key is still executing, and 422
//     idempotency-key-reused when the key came with a different request
//     (the problem names the differing fields, never their values).

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// Header names of the contract.
const (
	headerKey        = "Idempotency-Key"
	headerReplayed   = "Idempotent-Replayed"
	headerPrefer     = "Prefer"
	headerApplied    = "Preference-Applied"
	headerRetryAfter = "Retry-After"
)

// maxKeyLength is the longest Idempotency-Key accepted, in characters.
const maxKeyLength = 255

// parseIdempotencyKey returns the Idempotency-Key of r
// (draft-ietf-httpapi-idempotency-key-header §2.1): exactly one header,
// whose value parseKeyValue accepts. Errors are Invalid with code
// idempotency-key-invalid.
func parseIdempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values(headerKey)
	if len(vals) == 0 {
		return "", badKey("the Idempotency-Key header is required on this request")
	}
	if len(vals) > 1 {
		return "", badKey("send exactly one Idempotency-Key header")
	}
	return parseKeyValue(vals[0])
}

func badKey(msg string) error {
	return httpError(domain.Invalid, codeKeyInvalid, msg, "Idempotency-Key")
}

// ParseKey returns the idempotency key v names under the API's rules for
// one Idempotency-Key header value and the key query parameter of
// GET /v1/intents (draft-ietf-httpapi-idempotency-key-header §2.1, RFC 8941
// sf-string): an sf-string ("abc") is unescaped, a bare value taken as it
// is. A missing (empty), blank, over-255-character or non-printable-ASCII
// key is a *domain.Error of kind Invalid and code idempotency-key-invalid
// whose message says what is wrong (so `booking intents explain --key`
// refuses what the API refuses).
func ParseKey(v string) (string, error) {
	return parseKeyValue(v)
}

// parseKeyValue returns the key of one Idempotency-Key header value: an
// RFC 8941 sf-string ("abc", with \" and \\ as its only escapes) is
// unescaped; a bare value is taken as it is, so "abc" and abc are the same
// key. Missing, empty, blank, longer than 255 characters or outside
// printable ASCII is an Invalid error with code idempotency-key-invalid.
// Keys are case-sensitive and never truncated.
func parseKeyValue(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", badKey("the Idempotency-Key must be printable ASCII")
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
					return "", badKey(`the quoted Idempotency-Key has an invalid escape (only \" and \\ are allowed)`)
				}
				b.WriteByte(v[i+1])
				i++
			case c == '"':
				if i != len(v)-1 {
					return "", badKey("the quoted Idempotency-Key has characters after its closing quote")
				}
				closed = true
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return "", badKey("the quoted Idempotency-Key lacks its closing quote")
		}
		v = b.String()
	}
	if v == "" {
		return "", badKey("the Idempotency-Key must not be empty")
	}
	if strings.TrimSpace(v) == "" {
		return "", badKey("the Idempotency-Key must not be blank")
	}
	if len(v) > maxKeyLength {
		return "", badKey(fmt.Sprintf("the Idempotency-Key must have at most %d characters", maxKeyLength))
	}
	return v, nil
}

// Wait budget of POST /v1/orders (RFC 7240 Prefer: wait): defaultWait
// without a preference; MaxWait is the longest a request may ask for (a
// larger wait=N is clamped to it), which the server's write timeout must
// exceed.
const (
	defaultWait = 3 * time.Second
	MaxWait     = 10 * time.Second
)

// preferWait returns the wait budget of r from its Prefer headers (RFC 7240
// §4.3, wait=delta-seconds), clamped to [0, 10 s], and whether the
// preference was applied (Preference-Applied). Only the first wait
// preference counts (RFC 7240 §2); one whose value is not delta-seconds is
// ignored, leaving the default budget of 3 s.
func preferWait(r *http.Request) (time.Duration, bool) {
	return waitPreference(strings.Join(r.Header.Values(headerPrefer), ","))
}

// applyWait sets req.Wait from r's Prefer: wait and, when the preference
// was applied, answers Preference-Applied: wait=N (RFC 7240 §3).
func applyWait(w http.ResponseWriter, r *http.Request, req *commands.Request) {
	wait, applied := preferWait(r)
	req.Wait = wait
	if applied {
		w.Header().Set(headerApplied, "wait="+strconv.Itoa(int(wait/time.Second)))
	}
}

// waitPreference is preferWait on the combined field value of Prefer.
func waitPreference(field string) (time.Duration, bool) {
	for _, p := range parsePrefer(field) {
		if !strings.EqualFold(p.name, "wait") {
			continue
		}
		if p.value == "" || !allDigits(p.value) {
			return defaultWait, false
		}
		n, err := strconv.ParseUint(p.value, 10, 64)
		if err != nil {
			n = uint64(MaxWait / time.Second) // beyond 2^64: clamped like any large value
		}
		// Clamp before converting, so a huge N cannot overflow.
		return time.Duration(min(n, uint64(MaxWait/time.Second))) * time.Second, true
	}
	return defaultWait, false
}

// request builds the idempotency envelope of a POST: the intent's scope
// (actor id, operation "METHOD route-template", key); the request's ids
// travel in its context (requestID). Errors are those of
// parseIdempotencyKey.
func request(r *http.Request, op string) (commands.Request, error) {
	key, err := parseIdempotencyKey(r)
	if err != nil {
		return commands.Request{}, err
	}
	return commands.Request{Actor: actorFrom(r.Context()).ID, Operation: op, Key: key}, nil
}

// markReplayed sets Idempotent-Replayed: true when out answers a repeat of an
// existing intent (its first final outcome, replayed).
func markReplayed(w http.ResponseWriter, out commands.Outcome) {
	if out.Replayed {
		w.Header().Set(headerReplayed, "true")
	}
}

// setRetryAfter sets Retry-After in whole seconds (RFC 9110 §10.2.3), at least 1.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	w.Header().Set(headerRetryAfter, strconv.Itoa(s))
}

// idempotencyHeaders sets the contract's headers of an error answer:
// Idempotent-Replayed when err is a refusal recorded on the intent and
// answered to a repeat, and Retry-After (the commands layer's estimate) when
// the key is in use. It reports whether Retry-After was set.
func idempotencyHeaders(w http.ResponseWriter, err error) bool {
	var rej *commands.Rejection
	if errors.As(err, &rej) && rej.Replayed {
		w.Header().Set(headerReplayed, "true")
	}
	var inUse *commands.InUseError
	if errors.As(err, &inUse) {
		setRetryAfter(w, inUse.RetryAfter)
		return true
	}
	return false
}
