package httpapi

import (
	"encoding/base64"
	"math/big"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestDecodeCursorRefusesOtherSpellings(t *testing.T) {
	t.Parallel()
	id := "0190f5a0-7c3e-7d21-9a4b-3c5d6e7f8a90"
	at := time.Date(2030, 6, 1, 19, 30, 0, 500_000_000, time.UTC)
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	good := encodeCursor("s", at, id)
	if gotT, gotID, err := decodeCursor("s", good); err != nil || !gotT.Equal(at) || gotID != id {
		t.Fatalf("decodeCursor(encodeCursor(...)) = %v, %q, %v; want %v, %q", gotT, gotID, err, at, id)
	}
	for name, c := range map[string]string{
		"another list's cursor":      encodeCursor("o", at, id),
		"an offset instead of Z":     enc("s|2030-06-01T21:30:00.5+02:00|" + id),
		"trailing zeros":             enc("s|2030-06-01T19:30:00.500Z|" + id),
		"an upper-case id":           enc("s|2030-06-01T19:30:00.5Z|0190F5A0-7C3E-7D21-9A4B-3C5D6E7F8A90"),
		"a braced id":                enc("s|2030-06-01T19:30:00.5Z|{" + id + "}"),
		"padding":                    base64.URLEncoding.EncodeToString([]byte("s|2030-06-01T19:30:00.5Z|" + id)),
		"not base64":                 "!!",
		"four parts":                 enc("s|2030-06-01T19:30:00.5Z|" + id + "|x"),
		"a time that is not RFC3339": enc("s|yesterday|" + id),
	} {
		if _, _, err := decodeCursor("s", c); err == nil || codeOf(err) != "invalid-request" {
			t.Errorf("decodeCursor(%s) = %v, want 400 invalid-request", name, err)
		}
	}
}

// FuzzListCursor: a cursor is accepted only in the exact form encodeCursor
// writes (so it re-encodes to itself), for its own list only, with a UTC
// time and a lowercase UUID; every time and id encodeCursor is given reads
// back unchanged.
func FuzzListCursor(f *testing.F) {
	id := "0190f5a0-7c3e-7d21-9a4b-3c5d6e7f8a90"
	at := time.Date(2030, 6, 1, 19, 30, 0, 500_000_000, time.UTC)
	f.Add(encodeCursor("s", at, id), int64(1_906_000_000), uint32(0), []byte("0123456789abcdef"))
	f.Add(encodeCursor("o", at, id), int64(0), uint32(999_999_999), []byte{})
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("s|2030-06-01T21:30:00+02:00|"+id)), int64(253_402_300_799), uint32(1), []byte("x"))
	f.Add("!!", int64(-62_135_596_800), uint32(7), []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, c string, unix int64, nanos uint32, idBytes []byte) {
		for _, kind := range []string{"s", "o"} {
			at, gotID, err := decodeCursor(kind, c)
			if err != nil {
				if codeOf(err) != "invalid-request" || statusOf(err) != 400 {
					t.Fatalf("decodeCursor(%q, %q) error = %v, want 400 invalid-request", kind, c, err)
				}
				continue
			}
			if enc := encodeCursor(kind, at, gotID); enc != c {
				t.Fatalf("decodeCursor(%q, %q) = %v, %q, which encodes as %q: want one spelling per cursor", kind, c, at, gotID, enc)
			}
			if u, err := uuid.Parse(gotID); err != nil || u.String() != gotID || at.Location() != time.UTC {
				t.Fatalf("decodeCursor(%q, %q) = %v, %q; want a UTC time and a lowercase UUID", kind, c, at, gotID)
			}
			other := map[string]string{"s": "o", "o": "s"}[kind]
			if _, _, err := decodeCursor(other, c); err == nil {
				t.Fatalf("decodeCursor(%q, %q) accepted list %q's cursor", other, c, kind)
			}
		}
		// Round trip from values: times of years 0001–9999 (RFC 3339), any UUID.
		const minUnix, span = -62_135_596_800, 315_537_897_600 // 0001-01-01 .. 9999-12-31
		at := time.Unix(minUnix+((unix%span)+span)%span, int64(nanos%1_000_000_000)).UTC()
		var raw [16]byte
		copy(raw[:], idBytes)
		id := uuid.UUID(raw).String()
		for _, kind := range []string{"s", "o"} {
			gotT, gotID, err := decodeCursor(kind, encodeCursor(kind, at, id))
			if err != nil || !gotT.Equal(at) || gotID != id {
				t.Fatalf("decodeCursor(encodeCursor(%q, %v, %s)) = %v, %q, %v", kind, at, id, gotT, gotID, err)
			}
		}
	})
}

// FuzzListLimit: a ?limit= value is accepted exactly when it is decimal
// digits worth at least 1, as that value clamped to 200 (an empty value
// too is a 400; an absent one is listLimit's default).
func FuzzListLimit(f *testing.F) {
	for _, s := range []string{"", "1", "50", "200", "201", "0", "-1", "+5", "007", "1e2", " 5", "99999999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseLimit(s)
		v, ok := new(big.Int).SetString(s, 10)
		valid := ok && allDigits(s) && v.Sign() > 0
		if !valid {
			if err == nil || codeOf(err) != "invalid-request" {
				t.Fatalf("parseLimit(%q) = %d, %v; want 400 invalid-request", s, n, err)
			}
			return
		}
		want := maxListLimit
		if v.IsInt64() && v.Int64() < maxListLimit {
			want = int(v.Int64())
		}
		if err != nil || n != want {
			t.Fatalf("parseLimit(%q) = %d, %v; want %d", s, n, err, want)
		}
	})
}
