package main

import "testing"

// TestGatewayCounts: the counts line shows 502–504 answers as "503: 70",
// in status order, not in Go's map syntax.
func TestGatewayCounts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		g    map[int]int
		want string
	}{
		{nil, "none"},
		{map[int]int{503: 70}, "503: 70"},
		{map[int]int{504: 2, 502: 1, 503: 70}, "502: 1, 503: 70, 504: 2"},
	} {
		if got := gatewayCounts(tt.g); got != tt.want {
			t.Errorf("gatewayCounts(%v) = %q, want %q", tt.g, got, tt.want)
		}
	}
}
