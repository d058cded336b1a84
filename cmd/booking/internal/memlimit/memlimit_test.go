package memlimit

import (
	"bytes"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

// TestApplyMemoryLimit: without GOMEMLIMIT the service gets its default
// soft limit (none with the simulator or NATS in the process); with
// GOMEMLIMIT set, or a limit already in force, the runtime's is kept. Each
// case reports the limit in force and where it came from, and logs both.
func TestApplyMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	unset := func(string) (string, bool) { return "", false }
	env := func(v string) func(string) (string, bool) {
		return func(name string) (string, bool) { return v, name == "GOMEMLIMIT" }
	}
	for _, tt := range []struct {
		name     string
		lookup   func(string) (string, bool)
		embedded bool
		runtime  int64 // the limit in force before (as the runtime read GOMEMLIMIT)
		want     Limit
		wantLog  string
	}{
		{"the simulator or NATS in the process", unset, true, math.MaxInt64,
			Limit{Bytes: math.MaxInt64, From: "default"},
			`level=INFO msg="memory limit" limit=off from=default` + "\n"},
		{"an external provider and NATS", unset, false, math.MaxInt64,
			Limit{Bytes: defaultMemoryLimit, From: "default"},
			`level=INFO msg="memory limit" limit=119MiB bytes=124780544 from=default` + "\n"},
		{"GOMEMLIMIT set", env("1GiB"), true, 1 << 30,
			Limit{Bytes: 1 << 30, From: "GOMEMLIMIT", Env: "1GiB"},
			`level=INFO msg="memory limit" limit=1GiB bytes=1073741824 from=GOMEMLIMIT GOMEMLIMIT=1GiB` + "\n"},
		{"GOMEMLIMIT in bytes", env("100000000"), false, 100000000,
			Limit{Bytes: 100000000, From: "GOMEMLIMIT", Env: "100000000"},
			`level=INFO msg="memory limit" limit=100000000B bytes=100000000 from=GOMEMLIMIT GOMEMLIMIT=100000000` + "\n"},
		{"GOMEMLIMIT=off", env("off"), true, math.MaxInt64,
			Limit{Bytes: math.MaxInt64, From: "GOMEMLIMIT", Env: "off"},
			`level=INFO msg="memory limit" limit=off from=GOMEMLIMIT GOMEMLIMIT=off` + "\n"},
		{"a limit in force", unset, true, 1 << 30,
			Limit{Bytes: 1 << 30, From: "runtime"},
			`level=INFO msg="memory limit" limit=1GiB bytes=1073741824 from=runtime` + "\n"},
	} {
		debug.SetMemoryLimit(tt.runtime)
		got := Apply(tt.lookup, tt.embedded)
		if got != tt.want || debug.SetMemoryLimit(-1) != tt.want.Bytes {
			t.Errorf("%s: Apply = %+v (runtime %d), want %+v", tt.name, got, debug.SetMemoryLimit(-1), tt.want)
		}
		var buf bytes.Buffer
		got.Log(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})))
		if buf.String() != tt.wantLog {
			t.Errorf("%s: logged %q, want %q", tt.name, buf.String(), tt.wantLog)
		}
	}
	if got := format(0); got != "0B" || format(3<<40) != "3TiB" {
		t.Errorf("format(0) = %q, (3 TiB) = %q", got, format(3<<40))
	}
}

// TestDerivedMemoryLimit: the default is the live heap, one second of
// allocation at P2's rate and the runtime's own memory, rounded up to a
// MiB.
func TestDerivedMemoryLimit(t *testing.T) {
	least := int64(boundedLiveHeap + p2BookingsPerSecond*allocPerBooking + runtimeOverhead)
	if defaultMemoryLimit < least || defaultMemoryLimit >= least+1<<20 || defaultMemoryLimit%(1<<20) != 0 {
		t.Errorf("limit = %d, want %d (live %d + %d/s × %d + runtime %d) rounded up to a MiB",
			defaultMemoryLimit, least, boundedLiveHeap, p2BookingsPerSecond, allocPerBooking, runtimeOverhead)
	}
}
