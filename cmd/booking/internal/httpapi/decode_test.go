package httpapi

import "testing"

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
