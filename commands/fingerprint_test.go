package commands

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/text/unicode/norm"

	"github.com/retrysafe/booking/domain"
)

// fpShow is the fixed command of the pinned fingerprint.
var fpShow = ScheduleShowCommand{
	Name:     "Café Concert",
	StartsAt: time.Date(2030, 6, 1, 19, 30, 0, 0, time.UTC),
	Capacity: 120,
	Price:    domain.Money{Amount: 2500, Currency: "EUR"},
}

const (
	// fpShowCanonical is the RFC 8785 canonical form, version 1, of fpShow.
	fpShowCanonical = `{"cmd":{"capacity":120,"name":"Café Concert","price":{"amount":2500,"currency":"EUR"},"starts_at":"2030-06-01T19:30:00Z"},"op":"POST /v1/shows","v":1}`
	// fpShowHex is the SHA-256 of fpShowCanonical (computed outside Go). It
	// must never change: stored intents carry it, and a change would turn
	// every retry of a stored intent into a 422.
	fpShowHex = "759f1e4049cee3dd977004e8d607be810e5cfd71e1011fcbc093ceb98762da62"
	// fpReserveHex is the fingerprint of {show_id, quantity: 2} under
	// OpReserveSeats (computed outside Go).
	fpReserveHex = "3886537ca9a1ba1546707035879273971309e7a9daa496f39b8103f6ef86f0fb"
	fpShowID     = "0190f5a0-7c3e-7d21-9a4b-3c5d6e7f8a90"
)

func mustFingerprint(t *testing.T, version int, op string, cmd map[string]any) string {
	t.Helper()
	fp, err := Fingerprint(version, op, cmd)
	if err != nil {
		t.Fatalf("Fingerprint(%d, %q, %v) error = %v", version, op, cmd, err)
	}
	return fp
}

func TestFingerprintIsPinned(t *testing.T) {
	t.Parallel()
	if got := sha256.Sum256([]byte(fpShowCanonical)); hex.EncodeToString(got[:]) != fpShowHex {
		t.Fatalf("the test's pinned hex is not the SHA-256 of its canonical form")
	}
	tests := []struct {
		name string
		op   string
		cmd  map[string]any
		want string
	}{
		{"A scheduled show's command has its pinned fingerprint.", OpScheduleShow, fpShow.Canonical(), fpShowHex},
		{"A reservation's command has its pinned fingerprint.", OpReserveSeats, ReserveSeatsCommand{ShowID: fpShowID, Quantity: 2}.Canonical(), fpReserveHex},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := mustFingerprint(t, CanonicalVersion, tt.op, tt.cmd); got != tt.want {
				t.Errorf("Fingerprint(%d, %q, %v) = %s, want %s", CanonicalVersion, tt.op, tt.cmd, got, tt.want)
			}
		})
	}
}

func TestFingerprintIsStable(t *testing.T) {
	t.Parallel()
	first := mustFingerprint(t, CanonicalVersion, OpScheduleShow, fpShow.Canonical())
	for range 50 {
		// Maps iterate in random order; the fingerprint must not.
		if got := mustFingerprint(t, CanonicalVersion, OpScheduleShow, fpShow.Canonical()); got != first {
			t.Fatalf("Fingerprint(...) = %s, then %s for the same command", first, got)
		}
	}
	if len(first) != 64 || strings.ToLower(first) != first {
		t.Errorf("Fingerprint(...) = %q, want 64 lowercase hex digits", first)
	}
	if CanonicalVersion != 1 {
		t.Errorf("CanonicalVersion = %d, want 1 (update this test with the new form's pinned values)", CanonicalVersion)
	}
}

// showFromBody builds ScheduleShowCommand from a JSON body the way
// cmd/booking does: numbers decoded exactly (UseNumber) and compared by
// value, times parsed as RFC 3339.
func showFromBody(t *testing.T, body string) ScheduleShowCommand {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding %q: %v", body, err)
	}
	integer := func(v any) int64 {
		r, ok := new(big.Rat).SetString(string(v.(json.Number)))
		if !ok || !r.IsInt() {
			t.Fatalf("%v is not an integer", v)
		}
		return r.Num().Int64()
	}
	starts, err := time.Parse(time.RFC3339Nano, m["starts_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	price := m["price"].(map[string]any)
	return ScheduleShowCommand{Name: m["name"].(string), StartsAt: starts, Capacity: int(integer(m["capacity"])),
		Price: domain.Money{Amount: integer(price["amount"]), Currency: price["currency"].(string)}}
}

func TestFingerprintIgnoresPropertyOrderAndWhitespace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
	}{
		{"The body in field order gives the pinned fingerprint.",
			`{"name":"Café Concert","starts_at":"2030-06-01T19:30:00Z","capacity":120,"price":{"amount":2500,"currency":"EUR"}}`},
		{"The body with its properties reversed gives the pinned fingerprint.",
			`{"price":{"currency":"EUR","amount":2500},"capacity":120,"starts_at":"2030-06-01T19:30:00Z","name":"Café Concert"}`},
		{"The body with whitespace everywhere gives the pinned fingerprint.",
			"\n\t{ \"capacity\" :\t120 ,\r\n  \"name\" : \"Café Concert\",\n\"price\" : {  \"amount\" : 2500 , \"currency\" : \"EUR\" } ,\"starts_at\":\"2030-06-01T19:30:00Z\"   }\n"},
		{"The body with numbers written as 120.0 and 25e2 gives the pinned fingerprint.",
			`{"name":"Café Concert","starts_at":"2030-06-01T19:30:00Z","capacity":120.0,"price":{"amount":25e2,"currency":"EUR"}}`},
		{"The body with the same instant in another offset gives the pinned fingerprint.",
			`{"name":"Café Concert","starts_at":"2030-06-01T21:30:00+02:00","capacity":120,"price":{"amount":2500,"currency":"EUR"}}`},
		{"The body with the name in NFD gives the pinned fingerprint (NFC inside the fingerprint).",
			`{"name":"Cafe\u0301 Concert","starts_at":"2030-06-01T19:30:00Z","capacity":120,"price":{"amount":2500,"currency":"EUR"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := showFromBody(t, tt.body)
			if got := mustFingerprint(t, CanonicalVersion, OpScheduleShow, cmd.Canonical()); got != fpShowHex {
				t.Errorf("Fingerprint(%q built as a command) = %s, want %s", tt.body, got, fpShowHex)
			}
		})
	}
}

// TestFingerprintOfRawJSONIgnoresOrderAndWhitespace fingerprints decoded
// bodies directly: JCS makes property order, whitespace and number spelling
// irrelevant even without building a command.
func TestFingerprintOfRawJSONIgnoresOrderAndWhitespace(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{"show_id":"` + fpShowID + `","quantity":2}`,
		`{"quantity":2,"show_id":"` + fpShowID + `"}`,
		"{\n  \"quantity\" : 2.0,\n  \"show_id\" : \"" + fpShowID + "\"\n}",
		`{"quantity":2e0,"show_id":"` + fpShowID + `"}`,
		`{"quantity":0.2e1,"show_id":"` + fpShowID + `"}`,
	}
	for _, useNumber := range []bool{false, true} {
		for _, body := range bodies {
			dec := json.NewDecoder(bytes.NewReader([]byte(body)))
			if useNumber {
				dec.UseNumber()
			}
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if got := mustFingerprint(t, CanonicalVersion, OpReserveSeats, m); got != fpReserveHex {
				t.Errorf("Fingerprint(decoded %q, UseNumber %t) = %s, want %s", body, useNumber, got, fpReserveHex)
			}
		}
	}
}

func TestFingerprintComparesNumbersByValue(t *testing.T) {
	t.Parallel()
	built := ReserveSeatsCommand{ShowID: fpShowID, Quantity: 2}.Canonical()
	if _, ok := built["quantity"].(int64); !ok {
		t.Fatalf("Canonical()[quantity] is a %T, want int64", built["quantity"])
	}
	normalized := normalizeJSON(built)
	if diff := cmp.Diff(map[string]any{"show_id": fpShowID, "quantity": float64(2)}, normalized); diff != "" {
		t.Errorf("normalizeJSON(...) mismatch (-want +got):\n%s", diff)
	}
	tests := []struct {
		name     string
		quantity any
	}{
		{"An int64 2 has the pinned fingerprint.", int64(2)},
		{"An int 2 has the pinned fingerprint.", 2},
		{"A float64 2.0, as JSON decodes it, has the pinned fingerprint.", float64(2.0)},
		{"A json.Number 2.0 has the pinned fingerprint.", json.Number("2.0")},
		{"A json.Number 2e0 has the pinned fingerprint.", json.Number("2e0")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := map[string]any{"show_id": fpShowID, "quantity": tt.quantity}
			if got := mustFingerprint(t, CanonicalVersion, OpReserveSeats, cmd); got != fpReserveHex {
				t.Errorf("Fingerprint(%d, %q, quantity %T %v) = %s, want %s", CanonicalVersion, OpReserveSeats, tt.quantity, tt.quantity, got, fpReserveHex)
			}
		})
	}
	t.Run("A command and its normalized form have one fingerprint.", func(t *testing.T) {
		t.Parallel()
		for _, cmd := range []map[string]any{built, fpShow.Canonical(), PlaceOrderCommand{ReservationID: fpShowID, PaymentToken: "tok"}.Canonical()} {
			a := mustFingerprint(t, CanonicalVersion, "op", cmd)
			if b := mustFingerprint(t, CanonicalVersion, "op", normalizeJSON(cmd)); a != b {
				t.Errorf("Fingerprint(%v) = %s, Fingerprint(normalizeJSON(...)) = %s, want equal", cmd, a, b)
			}
		}
	})
	t.Run("The largest safe integer keeps its value as int64 and float64.", func(t *testing.T) {
		t.Parallel()
		const maxSafe = 1<<53 - 1
		a := mustFingerprint(t, CanonicalVersion, "op", map[string]any{"amount": int64(maxSafe)})
		if b := mustFingerprint(t, CanonicalVersion, "op", map[string]any{"amount": float64(maxSafe)}); a != b {
			t.Errorf("Fingerprint(int64 2^53-1) = %s, Fingerprint(float64 2^53-1) = %s, want equal", a, b)
		}
		if c := mustFingerprint(t, CanonicalVersion, "op", map[string]any{"amount": int64(maxSafe - 1)}); a == c {
			t.Errorf("Fingerprint(2^53-1) = Fingerprint(2^53-2) = %s, want different", a)
		}
	})
}

func TestFingerprintDistinguishesCommands(t *testing.T) {
	t.Parallel()
	base := mustFingerprint(t, CanonicalVersion, OpReserveSeats, map[string]any{"show_id": fpShowID, "quantity": int64(2)})
	tests := []struct {
		name string
		op   string
		cmd  map[string]any
	}{
		{"Another quantity gives another fingerprint.", OpReserveSeats, map[string]any{"show_id": fpShowID, "quantity": int64(3)}},
		{"Another show gives another fingerprint.", OpReserveSeats, map[string]any{"show_id": strings.Replace(fpShowID, "0", "1", 1), "quantity": int64(2)}},
		{"Another operation gives another fingerprint.", OpPlaceOrder, map[string]any{"show_id": fpShowID, "quantity": int64(2)}},
		{"A number written as a string gives another fingerprint.", OpReserveSeats, map[string]any{"show_id": fpShowID, "quantity": "2"}},
		{"An extra field gives another fingerprint.", OpReserveSeats, map[string]any{"show_id": fpShowID, "quantity": int64(2), "note": "x"}},
		{"An extra null field gives another fingerprint.", OpReserveSeats, map[string]any{"show_id": fpShowID, "quantity": int64(2), "note": nil}},
		{"A missing field gives another fingerprint.", OpReserveSeats, map[string]any{"show_id": fpShowID}},
		{"A nested command gives another fingerprint.", OpReserveSeats, map[string]any{"cmd": map[string]any{"show_id": fpShowID, "quantity": int64(2)}}},
		{"A string that differs after NFC gives another fingerprint.",
			OpReserveSeats, map[string]any{"show_id": norm.NFD.String("\u00e9") + fpShowID, "quantity": int64(2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := mustFingerprint(t, CanonicalVersion, tt.op, tt.cmd); got == base {
				t.Errorf("Fingerprint(%d, %q, %v) = %s, the fingerprint of {show_id, quantity 2}; want a different one", CanonicalVersion, tt.op, tt.cmd, got)
			}
		})
	}
	t.Run("Different tokens give different order fingerprints without the token in the command.", func(t *testing.T) {
		t.Parallel()
		a := PlaceOrderCommand{ReservationID: fpShowID, PaymentToken: "tok_visa_4242"}.Canonical()
		b := PlaceOrderCommand{ReservationID: fpShowID, PaymentToken: "tok_visa_4243"}.Canonical()
		if mustFingerprint(t, CanonicalVersion, OpPlaceOrder, a) == mustFingerprint(t, CanonicalVersion, OpPlaceOrder, b) {
			t.Errorf("Fingerprint(...) of two tokens is equal, want different")
		}
		raw, _ := json.Marshal(a)
		if strings.Contains(string(raw), "tok_visa") {
			t.Errorf("PlaceOrderCommand.Canonical() = %s, which contains the payment token", raw)
		}
	})
}

func TestFingerprintRefusesUnknownVersions(t *testing.T) {
	t.Parallel()
	for _, v := range []int{0, -1, CanonicalVersion + 1, 100} {
		got, err := Fingerprint(v, OpScheduleShow, fpShow.Canonical())
		if err == nil || got != "" {
			t.Errorf("Fingerprint(%d, ...) = %q, %v; want \"\" and an error", v, got, err)
			continue
		}
		if !strings.Contains(err.Error(), "unknown canonical form version") {
			t.Errorf("Fingerprint(%d, ...) error = %q, want it to name the unknown version", v, err)
		}
	}
}

func TestFingerprintRefusesNonJSONValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cmd  map[string]any
	}{
		{"A channel is refused.", map[string]any{"x": make(chan int)}},
		{"NaN is refused.", map[string]any{"x": math.NaN()}},
		{"Infinity is refused.", map[string]any{"x": math.Inf(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := Fingerprint(CanonicalVersion, "op", tt.cmd); err == nil {
				t.Errorf("Fingerprint(%v) = %q, nil; want an error", tt.cmd, got)
			}
		})
	}
}

func TestFingerprintKeepsCommandsAsSent(t *testing.T) {
	t.Parallel()
	nfd := ScheduleShowCommand{Name: "Cafe\u0301 Concert", StartsAt: fpShow.StartsAt, Capacity: fpShow.Capacity, Price: fpShow.Price}
	cmd := nfd.Canonical()
	if got := mustFingerprint(t, CanonicalVersion, OpScheduleShow, cmd); got != fpShowHex {
		t.Errorf("Fingerprint(NFD name) = %s, want the NFC form's %s", got, fpShowHex)
	}
	if cmd["name"] != "Cafe\u0301 Concert" {
		t.Errorf("Canonical()[name] = %q after Fingerprint, want the NFD name as sent", cmd["name"])
	}
	if got := showCommandOf(cmd); got.Name != nfd.Name || !got.StartsAt.Equal(nfd.StartsAt) || got.Capacity != nfd.Capacity || got.Price != nfd.Price {
		t.Errorf("showCommandOf(Canonical()) = %+v, want %+v", got, nfd)
	}
	if got := showCommandOf(normalizeJSON(cmd)); got.Name != nfd.Name || got.Capacity != nfd.Capacity || got.Price != nfd.Price {
		t.Errorf("showCommandOf(as decoded from the intent event) = %+v, want %+v", got, nfd)
	}
	if fields := diffFieldsNFC(cmd, fpShow.Canonical()); len(fields) != 0 {
		t.Errorf("the differing fields of the NFD and NFC commands = %v, want none", fields)
	}
}

// diffFieldsNFC is the comparison beginIntent makes for a 422.
func diffFieldsNFC(a, b map[string]any) []string {
	return domain.DiffFields(nfcCommand(normalizeJSON(a)), nfcCommand(normalizeJSON(b)))
}

// TestFingerprintRefusesNamesEqualInNFC: an object whose member names differ
// as sent but are equal in NFC has no canonical form (normalizing would keep
// one member by map order), so Fingerprint refuses it; one such name alone
// fingerprints as the name in NFC.
func TestFingerprintRefusesNamesEqualInNFC(t *testing.T) {
	t.Parallel()
	for _, cmd := range []map[string]any{
		{"\u00e9": int64(1), "e\u0301": int64(2)},
		{"x": []any{map[string]any{"e\u0301": "a", "\u00e9": "b"}}},
		{"e\u0301\u0301": nil, "\u00e9\u0301": nil},
	} {
		for i := range 20 {
			if got, err := Fingerprint(CanonicalVersion, "op", cmd); err == nil || !strings.Contains(err.Error(), "equal in NFC") {
				t.Fatalf("Fingerprint(%q) call %d = %q, %v; want an error naming the names equal in NFC", cmd, i+1, got, err)
			}
		}
	}
	nfd, err := Fingerprint(CanonicalVersion, "op", map[string]any{"e\u0301": int64(1), "x": "e\u0301"})
	if err != nil {
		t.Fatal(err)
	}
	if nfc := mustFingerprint(t, CanonicalVersion, "op", map[string]any{"\u00e9": int64(1), "x": "\u00e9"}); nfd != nfc {
		t.Errorf("Fingerprint of an NFD name = %s, of its NFC form %s; want equal", nfd, nfc)
	}
}
