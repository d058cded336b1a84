package commands

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/retrysafe/booking/domain"
)

// jcsString serializes s as RFC 8785 §3.2.2.2 does (ECMAScript
// JSON.stringify): '"' and '\' escaped, the short escapes \b \t \n \f \r,
// other control characters as \u00xx (lower-case hex), everything else as
// is. An oracle written apart from the jcs library.
func jcsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// FuzzFingerprint: version 1 of the fingerprint of a show command is the
// SHA-256 of its RFC 8785 form with the name in NFC, written out here
// without the jcs library; the name's normalization form (NFC, NFD, as
// sent), the number types of a decoded event (float64) and the start's
// time zone do not change it; another name (after NFC) does; the command
// keeps the name as sent.
func FuzzFingerprint(f *testing.F) {
	f.Add("Café Concert", "Cafe\u0301 Concert", int64(1_906_000_000), int16(120), int64(120), int64(2500), "EUR")
	f.Add("a\"b\\c\n\u2028<&>\x7f", "a", int64(0), int16(0), int64(1), int64(1), "USD")
	f.Add("\u1e9b\u0323", "\u1e9b\u0323", int64(253_402_300_799), int16(-600), int64(1_000_000), int64(450_359_962_737_049), "JPY")
	f.Add("ﬁ \U0001F3B5", "fi \U0001F3B5", int64(1), int16(1), int64(9_007_199_254_740_991), int64(-9_007_199_254_740_991), "")
	f.Fuzz(func(t *testing.T, name, other string, unix int64, offsetMin int16, capacity, amount int64, currency string) {
		if !utf8.ValidString(name) || !utf8.ValidString(other) || !utf8.ValidString(currency) {
			return // the HTTP layer refuses bodies that are not UTF-8
		}
		const maxSafe = 1<<53 - 1
		if capacity > maxSafe || capacity < -maxSafe || amount > maxSafe || amount < -maxSafe {
			return // the HTTP layer refuses integers beyond ±(2^53−1)
		}
		unix = ((unix % 253_402_300_800) + 253_402_300_800) % 253_402_300_800
		at := time.Unix(unix, 0).In(time.FixedZone("", int(offsetMin)%1440*60))
		cmd := ScheduleShowCommand{Name: name, StartsAt: at, Capacity: int(capacity), Price: domain.Money{Amount: amount, Currency: currency}}
		if got := cmd.Canonical()["name"]; got != name {
			t.Fatalf("Canonical() name = %q, want it as sent %q", got, name)
		}
		canon := `{"cmd":{"capacity":` + strconv.FormatInt(capacity, 10) + `,"name":` + jcsString(norm.NFC.String(name)) +
			`,"price":{"amount":` + strconv.FormatInt(amount, 10) + `,"currency":` + jcsString(norm.NFC.String(currency)) +
			`},"starts_at":"` + at.UTC().Format(time.RFC3339Nano) + `"},"op":"POST /v1/shows","v":1}`
		sum := sha256.Sum256([]byte(canon))
		want := hex.EncodeToString(sum[:])
		fp := mustFingerprint(t, 1, OpScheduleShow, cmd.Canonical())
		if fp != want {
			t.Fatalf("Fingerprint(%+v) = %s, want SHA-256 of %s = %s", cmd, fp, canon, want)
		}
		for _, variant := range []map[string]any{
			normalizeJSON(cmd.Canonical()),
			ScheduleShowCommand{Name: norm.NFD.String(name), StartsAt: at.UTC(), Capacity: cmd.Capacity, Price: cmd.Price}.Canonical(),
			ScheduleShowCommand{Name: norm.NFC.String(name), StartsAt: at, Capacity: cmd.Capacity, Price: cmd.Price}.Canonical(),
		} {
			if got := mustFingerprint(t, 1, OpScheduleShow, variant); got != fp {
				t.Fatalf("Fingerprint(%v) = %s, want %s as for %+v", variant, got, fp, cmd)
			}
		}
		changed := cmd
		changed.Name = other
		same := norm.NFC.String(other) == norm.NFC.String(name)
		if got := mustFingerprint(t, 1, OpScheduleShow, changed.Canonical()); (got == fp) != same {
			t.Fatalf("Fingerprint with name %q = %s, with %q = %s; want equal exactly when their NFC forms are", name, fp, other, got)
		}
		if len(domain.DiffFields(nfcCommand(normalizeJSON(cmd.Canonical())), nfcCommand(normalizeJSON(changed.Canonical())))) != 0 == same {
			t.Fatalf("DiffFields(name %q, name %q) disagrees with their NFC forms being equal (%v)", name, other, same)
		}
	})
}
