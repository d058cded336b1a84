package httpapi

import (
	"testing"
	"time"
)

func TestDuplicateMember(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want string
		dup  bool
	}{
		{`{"a":1,"b":2}`, "", false},
		{`{"a":1,"a":2}`, "a", true},
		{`{"a":{"b":1,"b":2}}`, "b", true},
		{`{"a":{"b":1},"b":2}`, "", false},
		{`{"a":[{"x":1},{"x":2}],"x":3}`, "", false},
		{`{"a":"b","b":"a"}`, "", false},
		{`{"p":{"token":"t"},"q":{"token":"t"}}`, "", false},
		{`{"a":[1,"a"],"a":0}`, "a", true},
	}
	for _, tt := range tests {
		got, dup := duplicateMember([]byte(tt.body))
		if got != tt.want || dup != tt.dup {
			t.Errorf("duplicateMember(%s) = %q, %v, want %q, %v", tt.body, got, dup, tt.want, tt.dup)
		}
	}
}

func TestParseTimestamp(t *testing.T) {
	t.Parallel()
	want := time.Date(2027, 1, 2, 10, 0, 0, 0, time.UTC)
	for _, s := range []string{
		"2027-01-02T10:00:00Z", "2027-01-02t10:00:00z", "2027-01-02t10:00:00Z", "2027-01-02T10:00:00z",
		"2027-01-02t11:00:00+01:00", "2027-01-02t10:00:00.000z",
	} {
		if got, err := parseTimestamp(s); err != nil || !got.Equal(want) {
			t.Errorf("parseTimestamp(%q) = %v, %v, want %v", s, got, err, want)
		}
	}
	for _, s := range []string{
		"", "t", "z", "2027-01-02", "2027-01-02 10:00:00Z", "2027-01-02x10:00:00z", "2027-01-02t10:00:00",
		"2027-01-02t10:00:00zz", "2027-01-02tt10:00:00z", "2027-01-02t10:00:00+01:00z", "2027-01-02T24:00:00Z",
	} {
		if got, err := parseTimestamp(s); err == nil {
			t.Errorf("parseTimestamp(%q) = %v, want an error", s, got)
		}
	}
}
