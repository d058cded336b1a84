package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// The fuzz targets of the HTTP layer's parsers of outside input. Each
// asserts properties of what it accepts, not only that it does not panic;
// `make fuzz` runs them, and plain `go test` runs their seeds and the corpus
// in testdata/fuzz as regression tests.

// codeOf returns the problem code of an HTTP-layer error, or "".
func codeOf(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Code
	}
	return ""
}

// sfQuote returns k as an RFC 8941 sf-string.
func sfQuote(k string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

// FuzzIdempotencyKey: an accepted Idempotency-Key is 1 to 255 printable
// ASCII characters and not blank; a bare value is the key itself; the key
// quoted as an sf-string reads back as the same key; every refusal is 400
// idempotency-key-invalid; every bare printable value of the right length is
// accepted.
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b\\c"`, `"abc`, `"ab"c"`, `"a\b"`, "", " ", `""`, `"  "`,
		"clé", "a\tb", strings.Repeat("k", 255), strings.Repeat("k", 256), `"` + strings.Repeat("k", 255) + `"`, `\"`, `"\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := parseKeyValue(v)
		if err != nil {
			if codeOf(err) != codeKeyInvalid || statusOf(err) != 400 {
				t.Fatalf("parseKeyValue(%q) error = %v (status %d), want 400 %s", v, err, statusOf(err), codeKeyInvalid)
			}
			if !strings.HasPrefix(v, `"`) && len(v) >= 1 && len(v) <= maxKeyLength && strings.TrimSpace(v) != "" && printableASCII(v) {
				t.Fatalf("parseKeyValue(%q) = %v, want the bare printable value accepted", v, err)
			}
			return
		}
		if len(k) < 1 || len(k) > maxKeyLength || strings.TrimSpace(k) == "" || !printableASCII(k) {
			t.Fatalf("parseKeyValue(%q) = %q: want 1 to %d printable ASCII characters, not blank", v, k, maxKeyLength)
		}
		if !strings.HasPrefix(v, `"`) && k != v {
			t.Fatalf("parseKeyValue(%q) = %q, want the bare value itself", v, k)
		}
		if again, err := parseKeyValue(sfQuote(k)); err != nil || again != k {
			t.Fatalf("parseKeyValue(%s) = %q, %v; want %q (the quoted form of the same key)", sfQuote(k), again, err, k)
		}
		if !strings.HasPrefix(k, `"`) {
			if bare, err := parseKeyValue(k); err != nil || bare != k {
				t.Fatalf("parseKeyValue(%q) = %q, %v; want the bare key %q to be the same key", k, bare, err, k)
			}
		}
	})
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// surrogateEscape matches a JSON escape of a UTF-16 surrogate;
// replacementEscape one of U+FFFD.
var (
	surrogateEscape   = regexp.MustCompile(`\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}`)
	replacementEscape = regexp.MustCompile(`\\u[fF][fF][fF][dD]`)
)

// replacementsIn counts U+FFFD in raw, literal or escaped.
func replacementsIn(raw []byte) int {
	return bytes.Count(raw, []byte("\uFFFD")) + len(replacementEscape.FindAll(raw, -1))
}

// replacementsOf counts U+FFFD in the strings and member names of v.
func replacementsOf(v any) int {
	switch v := v.(type) {
	case string:
		return strings.Count(v, "\uFFFD")
	case map[string]any:
		n := 0
		for k, e := range v {
			n += strings.Count(k, "\uFFFD") + replacementsOf(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range v {
			n += replacementsOf(e)
		}
		return n
	}
	return 0
}

// depthOf returns the deepest nesting of objects and arrays in v.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}

// FuzzDecodeBody: a body is accepted only when it is one JSON object of
// valid UTF-8 with no escaped lone surrogate, no repeated member name and
// at most maxJSONDepth levels; nothing in what is accepted was replaced by
// U+FFFD; the accepted value re-encodes to a body that decodes to the same
// value; every refusal is a 400 invalid-json or invalid-utf8 (invalid-utf8
// whenever the bytes are not UTF-8). The command builders take any accepted
// body without panicking and keep their own limits.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"show_id":"0190f5a0-7c3e-7d21-9a4b-3c5d6e7f8a90","quantity":2}`,
		`{"name":"Caf\u00e9","starts_at":"2030-06-01T19:30:00+02:00","capacity":1e2,"price":{"amount":4.5e3,"currency":"EUR"}}`,
		`{"reservation_id":"0190F5A0-7C3E-7D21-9A4B-3C5D6E7F8A90","payment":{"token":"tok_visa"}}`,
		`{"quantity":1,"quantity":2}`, `{"a":{"b":1,"b":2}}`, `{"a":[{"x":1},{"x":2}],"x":3}`,
		`{"name":"\ud800"}`, `{"name":"\udc00x"}`, `{"name":"\ud83d\ude00"}`, `{"name":"\ud83d\u0041"}`, `{"name":"\\ud800"}`,
		"{\"name\":\"\xff\"}", "{\"name\":\"\xed\xa0\x80\"}", `{"name":"\ufffd"}`, "{\"name\":\"\uFFFD\"}",
		`{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
		`{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`,
		`{"quantity":2} {}`, `[]`, `"x"`, `{"quantity":2.5}`, `{"quantity":9007199254740992}`, `{"quantity":1e999999999}`,
		`{"quantity":-0}`, `{"quantity":20e-1}`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := decodeJSON(raw)
		if err != nil {
			code := codeOf(err)
			if statusOf(err) != 400 || (code != codeInvalidJSON && code != codeInvalidUTF8) {
				t.Fatalf("decodeJSON(%q) error = %v (status %d), want 400 invalid-json or invalid-utf8", raw, err, statusOf(err))
			}
			if !utf8.Valid(raw) && code != codeInvalidUTF8 {
				t.Fatalf("decodeJSON(%q) code = %s, want invalid-utf8 for bytes that are not UTF-8", raw, code)
			}
			if code == codeInvalidUTF8 && utf8.Valid(raw) && !surrogateEscape.Match(raw) {
				t.Fatalf("decodeJSON(%q) = invalid-utf8 for UTF-8 text without a surrogate escape", raw)
			}
			return
		}
		if !utf8.Valid(raw) {
			t.Fatalf("decodeJSON(%q) accepted bytes that are not UTF-8", raw)
		}
		if d := depthOf(b.m); d > maxJSONDepth {
			t.Fatalf("decodeJSON(%q) accepted nesting %d, want at most %d", raw, d, maxJSONDepth)
		}
		if name, dup := duplicateMember(raw); dup {
			t.Fatalf("decodeJSON(%q) accepted the repeated member %q", raw, name)
		}
		if got, in := replacementsOf(b.m), replacementsIn(raw); got > in {
			t.Fatalf("decodeJSON(%q) holds %d U+FFFD, the body only %d: something was replaced", raw, got, in)
		}
		again, err := json.Marshal(b.m)
		if err != nil {
			t.Fatalf("json.Marshal(decodeJSON(%q)) error = %v", raw, err)
		}
		b2, err := decodeJSON(again)
		if err != nil {
			t.Fatalf("decodeJSON(%s), the re-encoding of decodeJSON(%q), error = %v", again, raw, err)
		}
		if !reflect.DeepEqual(b.m, b2.m) {
			t.Fatalf("decodeJSON(%q) = %v, its re-encoding decodes to %v", raw, b.m, b2.m)
		}
		// The command builders on the same body: no panic, their limits hold.
		if cmd, err := reservationCommand(mustDecode(t, raw)); err == nil && (cmd.Quantity < 1 || cmd.Quantity > domain.MaxSeatsPerHold) {
			t.Fatalf("reservationCommand(%q) = %+v, quantity out of 1..%d", raw, cmd, domain.MaxSeatsPerHold)
		}
		if cmd, err := orderCommand(mustDecode(t, raw)); err == nil && (cmd.PaymentToken == "" || len(cmd.PaymentToken) > 255) {
			t.Fatalf("orderCommand(%q) = token of %d bytes, want 1 to 255", raw, len(cmd.PaymentToken))
		}
		if cmd, err := showCommand(mustDecode(t, raw)); err == nil {
			if cmd.Capacity < 1 || cmd.Capacity > domain.MaxCapacity || cmd.StartsAt.Location() != time.UTC {
				t.Fatalf("showCommand(%q) = %+v, want capacity in range and a UTC start", raw, cmd)
			}
			if name, _ := b.m["name"].(string); cmd.Name != name {
				t.Fatalf("showCommand(%q) name = %q, want the name as sent, %q", raw, cmd.Name, name)
			}
		}
	})
}

func mustDecode(t *testing.T, raw []byte) *body {
	t.Helper()
	b, err := decodeJSON(raw)
	if err != nil {
		t.Fatalf("decodeJSON(%q) error = %v on the second call", raw, err)
	}
	return b
}

// FuzzJSONInteger: jsonInteger agrees with exact rational arithmetic
// (math/big) on every JSON number literal whose exponent big.Rat can take,
// refuses everything that is not a JSON number, and never returns a value
// beyond ±(2^53−1).
func FuzzJSONInteger(f *testing.F) {
	for _, s := range []string{"2", "2.0", "2e0", "20e-1", "0.2e1", "-0", "0e999999999999", "1e999999999999", "1e-999999999999",
		"9007199254740991", "9007199254740992", "-9007199254740991", "90071992547409910e-1", "2.5", "1E+2", "01", "1.", ".5",
		"-", "1e", "+1", " 1", "0x10", "100000000000000000000000e-8", "1234567890123456e0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := jsonInteger(s)
		if err == nil && (n > maxSafeInt || n < -maxSafeInt) {
			t.Fatalf("jsonInteger(%q) = %d, beyond ±(2^53−1)", s, n)
		}
		if !isJSONNumber(s) {
			if !errors.Is(err, errNotInteger) {
				t.Fatalf("jsonInteger(%q) = %d, %v; want errNotInteger for what is not a JSON number", s, n, err)
			}
			return
		}
		if e := exponentOf(s); e > 1000 || e < -1000 {
			return // big.Rat would work for seconds (or refuse); the range logic is covered below 1000
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat.SetString(%q) failed on a JSON number", s)
		}
		switch {
		case !r.IsInt():
			if !errors.Is(err, errNotInteger) {
				t.Fatalf("jsonInteger(%q) = %d, %v; want errNotInteger (value %s)", s, n, err, r.FloatString(5))
			}
		case r.Num().CmpAbs(big.NewInt(maxSafeInt)) > 0:
			if !errors.Is(err, errOutOfRange) {
				t.Fatalf("jsonInteger(%q) = %d, %v; want errOutOfRange", s, n, err)
			}
		default:
			if err != nil || n != r.Num().Int64() {
				t.Fatalf("jsonInteger(%q) = %d, %v; want %s", s, n, err, r.Num())
			}
		}
	})
}

// isJSONNumber reports whether s is exactly one JSON number literal.
func isJSONNumber(s string) bool {
	if s == "" || strings.TrimSpace(s) != s || !(s[0] == '-' || s[0] >= '0' && s[0] <= '9') || !json.Valid([]byte(s)) {
		return false
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return false
	}
	_, ok := v.(json.Number)
	return ok
}

// exponentOf returns the exponent of a JSON number literal, saturated at
// ±10^9.
func exponentOf(s string) int {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return 0
	}
	e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
	if err != nil {
		if strings.HasPrefix(s[i+1:], "-") {
			return -1e9
		}
		return 1e9
	}
	return max(-1e9, min(e, 1e9))
}

// Spelling variants of FuzzFingerprintSpelling: each bit of the fuzzed
// selector picks one.
func spellInt(n int64, sel uint64) string {
	if n == 0 {
		return []string{"0", "0.0", "0e0", "-0", "0.000E+7"}[sel%5] // JSON allows no leading zeros
	}
	switch sel % 5 {
	case 1:
		return strconv.FormatInt(n, 10) + ".0"
	case 2:
		return strconv.FormatInt(n, 10) + "e0"
	case 3:
		return strconv.FormatInt(n, 10) + "0e-1"
	case 4:
		if n != 0 && n%100 == 0 {
			return strconv.FormatInt(n/100, 10) + "E+2"
		}
		return strconv.FormatInt(n, 10) + "00E-2"
	}
	return strconv.FormatInt(n, 10)
}

// jsonASCII returns s as a JSON string with every non-ASCII character
// escaped (\uXXXX, surrogate pairs above U+FFFF).
func jsonASCII(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(&b, `\u%04X`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func jsonString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// FuzzFingerprintSpelling: two bodies of POST /v1/shows (and of POST
// /v1/reservations) that differ only in spelling — member order,
// whitespace, 2/2.0/2e0, NFC or NFD and escapes in strings, the offset of
// the start time, the case of a UUID — are both accepted or both refused,
// and give one fingerprint; the name is kept byte for byte as each body sent
// it; changing one value gives another fingerprint.
func FuzzFingerprintSpelling(f *testing.F) {
	f.Add("Café Concert", int64(1_906_000_000), uint32(0), int16(120), int64(120), int64(2500), uint64(0), uint8(0))
	f.Add("Cafe\u0301 \U0001F3B5 <&>", int64(1_906_000_000), uint32(500_000_000), int16(-330), int64(1_000_000), int64(450_359_962_737_049), uint64(12345), uint8(1))
	f.Add("\u1e9b\u0323", int64(253_402_300_799), uint32(999_999_999), int16(-1439), int64(1), int64(1), uint64(1<<63), uint8(2))
	f.Add("ﬁ Å Å", int64(0), uint32(1), int16(1), int64(100), int64(100), uint64(7), uint8(3))
	f.Fuzz(func(t *testing.T, name string, unix int64, nanos uint32, offsetMin int16, capacity, amount int64, sel uint64, change uint8) {
		if !utf8.ValidString(name) {
			return // bodies are UTF-8: FuzzDecodeBody covers the rest
		}
		unix = unix % 253_402_300_800 // years 1970..9999, in RFC 3339's range
		if unix < 0 {
			unix = -unix
		}
		at := time.Unix(unix, int64(nanos%1_000_000_000)).UTC()
		zone := time.FixedZone("", int(offsetMin)%1440*60)
		if y := at.In(zone).Year(); y < 1 || y > 9999 {
			zone = time.UTC
		}
		nfc, nfd := norm.NFC.String(name), norm.NFD.String(name)

		first := fmt.Sprintf(`{"name":%s,"starts_at":%q,"capacity":%d,"price":{"amount":%d,"currency":"EUR"}}`,
			jsonString(nfc), at.Format(time.RFC3339Nano), capacity, amount)
		second := fmt.Sprintf("{ \"price\" : {\"currency\":\"EUR\" ,\n\"amount\": %s} ,\t\"capacity\":%s,\r\n \"starts_at\" : %q, \"name\":%s }",
			spellInt(amount, sel), spellInt(capacity, sel>>3), at.In(zone).Format("2006-01-02T15:04:05.000000000Z07:00"), jsonASCII(nfd))
		a, errA := showCommand(mustDecode(t, []byte(first)))
		b, errB := showCommand(mustDecode(t, []byte(second)))
		if (errA == nil) != (errB == nil) || codeOf(errA) != codeOf(errB) {
			t.Fatalf("showCommand(%s) error = %v\nshowCommand(%s) error = %v\nwant the same answer", first, errA, second, errB)
		}
		if errA != nil {
			return
		}
		if a.Name != nfc || b.Name != nfd {
			t.Fatalf("names %q and %q, want each as sent: %q and %q", a.Name, b.Name, nfc, nfd)
		}
		if !a.StartsAt.Equal(b.StartsAt) || a.StartsAt.Location() != time.UTC || b.StartsAt.Location() != time.UTC {
			t.Fatalf("starts_at %v and %v, want one instant in UTC", a.StartsAt, b.StartsAt)
		}
		fpA := mustFP(t, commands.OpScheduleShow, a.Canonical())
		if fpB := mustFP(t, commands.OpScheduleShow, b.Canonical()); fpA != fpB {
			t.Fatalf("fingerprints differ for\n%s\n%s", first, second)
		}
		other := a
		switch change % 5 {
		case 0:
			other.Name = nfc + "x"
		case 1:
			other.StartsAt = a.StartsAt.Add(time.Nanosecond)
		case 2:
			other.Capacity = a.Capacity%domain.MaxCapacity + 1
		case 3:
			other.Price.Amount = a.Price.Amount + 1
		case 4:
			other.Price.Currency = "USD"
		}
		if mustFP(t, commands.OpScheduleShow, other.Canonical()) == fpA {
			t.Fatalf("changing value %d of %+v left the fingerprint unchanged", change%5, a)
		}

		// A reservation: the UUID's case and the quantity's spelling.
		id := fmt.Sprintf("%08x-%04x-7%03x-8%03x-%012x", uint32(unix), nanos&0xffff, sel&0xfff, (sel>>12)&0xfff, sel>>16&0xffffffffffff)
		q := 1 + int64(sel%domain.MaxSeatsPerHold)
		r1, err1 := reservationCommand(mustDecode(t, []byte(fmt.Sprintf(`{"show_id":%q,"quantity":%d}`, id, q))))
		r2, err2 := reservationCommand(mustDecode(t, []byte(fmt.Sprintf(`{ "quantity" : %s , "show_id" : %q }`, spellInt(q, sel>>7), strings.ToUpper(id)))))
		if err1 != nil || err2 != nil {
			t.Fatalf("reservationCommand(%s, %d) errors %v, %v", id, q, err1, err2)
		}
		if fp1, fp2 := mustFP(t, commands.OpReserveSeats, r1.Canonical()), mustFP(t, commands.OpReserveSeats, r2.Canonical()); fp1 != fp2 {
			t.Fatalf("reservation fingerprints differ: %+v and %+v", r1, r2)
		}
		r3 := r1
		r3.Quantity = r1.Quantity%domain.MaxSeatsPerHold + 1
		if mustFP(t, commands.OpReserveSeats, r3.Canonical()) == mustFP(t, commands.OpReserveSeats, r1.Canonical()) {
			t.Fatalf("quantities %d and %d have one fingerprint", r1.Quantity, r3.Quantity)
		}
	})
}

func mustFP(t *testing.T, op string, cmd map[string]any) string {
	t.Helper()
	fp, err := commands.Fingerprint(commands.CanonicalVersion, op, cmd)
	if err != nil {
		t.Fatalf("Fingerprint(%v) error = %v", cmd, err)
	}
	return fp
}
