package kurrentdb

import "testing"

// The current revision of a WrongExpectedVersion reaches client v4's
// callers only in this message text (AppendToStream formats it); pinning
// the client version keeps the format, and this test notices a change.
func TestParseActual(t *testing.T) {
	tests := []struct {
		msg    string
		want   int64
		wantOK bool
	}{
		{"[ErrorCodeWrongExpectedVersion] an append request failed the optimistic concurrency on the server: wrong expected version: expecting '5' but got '0'", 0, true},
		{"wrong expected version: expecting 'no_stream' but got '12'", 12, true},
		{"wrong expected version: expecting 'stream_exists' but got 'no_stream'", -1, true},
		{"wrong expected version: expecting '1' but got '9223372036854775806'", 9223372036854775806, true},
		{"wrong expected version", 0, false},
		{"wrong expected version: expecting '1' but got 'x'", 0, false},
		{"wrong expected version: expecting '1' but got '-3'", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseActual(tt.msg)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseActual(%q) = %d, %v, want %d, %v", tt.msg, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"esdb://admin:changeit@host:2113?tls=true": "esdb://admin:xxxxx@host:2113?tls=true",
		"kurrentdb://a:b@h1:2113,h2:2113":          "kurrentdb://a:xxxxx@h1:2113,h2:2113",
		"esdb://host:2113?tls=false":               "esdb://host:2113?tls=false",
		"esdb+discover://u:p%40ss@cluster.example": "esdb+discover://u:xxxxx@cluster.example",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
