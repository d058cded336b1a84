package pgtest

import (
	"fmt"
	"runtime"
	"testing"
)

// recordingTB records Skipf and Fatalf instead of ending the test, and ends
// the goroutine as the real ones do.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestServerURLWithoutTheVariable(t *testing.T) {
	tests := []struct {
		name, ci    string
		skip, fatal bool
	}{
		{name: "outside CI the test is skipped", ci: "", skip: true},
		{name: "with CI=false the test is skipped", ci: "false", skip: true},
		{name: "with CI=true the test fails", ci: "true", fatal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvURL, "")
			t.Setenv("CI", tt.ci)
			r := &recordingTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				ServerURL(r)
			}()
			<-done
			if tt.skip && r.skipped != "missing "+EnvURL {
				t.Errorf("ServerURL() skipped with %q, want %q", r.skipped, "missing "+EnvURL)
			}
			if (r.failed != "") != tt.fatal {
				t.Errorf("ServerURL() failed with %q, want failure %v", r.failed, tt.fatal)
			}
		})
	}
}

func TestWithDatabase(t *testing.T) {
	tests := []struct{ server, want string }{
		{"postgres://u@127.0.0.1:5432/postgres?sslmode=disable", "postgres://u@127.0.0.1:5432/booking_x?sslmode=disable"},
		{"postgresql://u@h/", "postgresql://u@h/booking_x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname=booking_x"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.server, "booking_x")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v, want %q, nil", tt.server, got, err, tt.want)
		}
	}
}
