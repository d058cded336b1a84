package httpapi

import (
	"math/big"
	"strings"
	"testing"
	"time"
)

func TestWaitPreference(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field   string
		want    time.Duration
		applied bool
	}{
		{"", defaultWait, false},
		{"wait=5", 5 * time.Second, true},
		{"WAIT=5", 5 * time.Second, true},
		{"wait = 5", 5 * time.Second, true},
		{`wait="5"`, 5 * time.Second, true},
		{"wait=0", 0, true},
		{"wait=11", MaxWait, true},
		{"wait=99999999999999999999999", MaxWait, true},
		{"wait=5; foo=bar", 5 * time.Second, true},
		{"respond-async, wait=7", 7 * time.Second, true},
		{"wait=2, wait=9", 2 * time.Second, true},
		{"wait=x, wait=9", defaultWait, false},
		{"wait=-1", defaultWait, false},
		{"wait=1.5", defaultWait, false},
		{"wait", defaultWait, false},
		{`foo="a,wait=9"`, defaultWait, false},
		{`foo; bar="x, wait=9", wait=4`, 4 * time.Second, true},
		{"handling=lenient;wait=9", defaultWait, false},
	}
	for _, tt := range tests {
		got, applied := waitPreference(tt.field)
		if got != tt.want || applied != tt.applied {
			t.Errorf("waitPreference(%q) = %v, %v; want %v, %v", tt.field, got, applied, tt.want, tt.applied)
		}
	}
}

// FuzzPreferWait: whatever the Prefer field, the wait budget is whole
// seconds from 0 to 10 s and the default 3 s unless applied; a wait
// preference placed first decides; a preference (with quoted commas) placed
// before the field changes nothing; wait=N is min(N, 10) seconds for every
// decimal N, parameters after it included.
func FuzzPreferWait(f *testing.F) {
	for _, s := range []string{"wait=5", "respond-async, wait=7", `foo="a,wait=9"`, "wait=5; foo=bar", `wait="3"`, "WAIT = 8",
		"wait=18446744073709551616", "wait=", `wait="`, `x="\"`, ",,,", "wait=2, wait=9", "return=minimal; wait=1"} {
		f.Add(s, "5")
	}
	f.Fuzz(func(t *testing.T, field, digits string) {
		d, applied := waitPreference(field)
		if d < 0 || d > MaxWait || d%time.Second != 0 {
			t.Fatalf("waitPreference(%q) = %v, want whole seconds in [0, %v]", field, d, MaxWait)
		}
		if !applied && d != defaultWait {
			t.Fatalf("waitPreference(%q) = %v not applied, want the default %v", field, d, defaultWait)
		}
		if applied && !strings.Contains(strings.ToLower(field), "wait") {
			t.Fatalf("waitPreference(%q) applied without a wait preference", field)
		}
		if d2, a2 := waitPreference(`respond-async; note="a, wait=9;", ` + field); d2 != d || a2 != applied {
			t.Fatalf("waitPreference(<other preference>, %q) = %v, %v; want %v, %v as without it", field, d2, a2, d, applied)
		}
		if d3, a3 := waitPreference("wait=6, " + field); d3 != 6*time.Second || !a3 {
			t.Fatalf("waitPreference(wait=6, %q) = %v, %v; want the first wait, 6s", field, d3, a3)
		}
		if digits == "" || !allDigits(digits) {
			return
		}
		n, _ := new(big.Int).SetString(digits, 10)
		want := time.Duration(min(n.Int64(), 10)) * time.Second
		if !n.IsInt64() {
			want = MaxWait
		}
		for _, v := range []string{"wait=" + digits, `wait="` + digits + `"`, "wait=" + digits + ";x=" + field} {
			if got, ok := waitPreference(v); got != want || !ok {
				t.Fatalf("waitPreference(%q) = %v, %v; want %v, true", v, got, ok, want)
			}
		}
	})
}
