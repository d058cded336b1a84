package main

import (
	"testing"
)

// TestParseLines: the lines make bench reads from go test -bench and from
// the statement-budget tests, and the report's medians, ranges and verdicts.
func TestParseLines(t *testing.T) {
	m := benchRE.FindStringSubmatch("BenchmarkAppendNewStreams/clients=1-2   \t   20000\t    123 ns/op\t  812.5 events/s\t 0.9123 x_of_raw_insert\t 890.1 raw_inserts/s")
	if m == nil || m[1] != "BenchmarkAppendNewStreams/clients=1" {
		t.Fatalf("benchRE = %q, want the name without the GOMAXPROCS suffix", m)
	}
	if m := benchRE.FindStringSubmatch("BenchmarkRelay-2 1 5 relay/raw"); m == nil || m[1] != "BenchmarkRelay" {
		t.Errorf("benchRE(relay) = %q", m)
	}
	got := statementsRE.FindAllStringSubmatch("    x_test.go:12: statements per booking: request path 11.5\n    y_test.go:9: statements per booking: whole service 28\n"+
		"    x_test.go:13: commits per booking: request path 5.05\n", -1)
	if len(got) != 3 || got[0][1] != "statements" || got[0][2] != "request path" || got[0][3] != "11.5" ||
		got[1][2] != "whole service" || got[1][3] != "28" || got[2][1] != "commits" || got[2][3] != "5.05" {
		t.Errorf("statementsRE = %q", got)
	}
	if s := medRange([]float64{3, 1, 2}, "%.0f"); s != "2 (1–3)" {
		t.Errorf("medRange = %q, want 2 (1–3)", s)
	}
	if s := medRange([]float64{0.5}, "%.1f"); s != "0.5" {
		t.Errorf("medRange(one) = %q, want 0.5", s)
	}
	for _, c := range []struct {
		r    row
		want string
	}{
		{row{ratio: []float64{0.2, 0.31, 0.4}, goalMin: 0.3}, "met"},
		{row{ratio: []float64{0.2, 0.29, 0.4}, goalMin: 0.3}, "**not met**"},
		{row{value: []float64{140, 160, 150}, goalMax: 150}, "met"},
		{row{value: []float64{151}, goalMax: 150}, "**not met**"},
		{row{}, "not measured"},
	} {
		if got := c.r.met(); got != c.want {
			t.Errorf("met(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}

// TestParseServiceMemory: the collector's cycles from /metrics and the
// heap from a debug=1 heap profile, as the service's admin listener
// serves them; and the steady rows' ratios and verdicts.
func TestParseServiceMemory(t *testing.T) {
	metrics := "# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"0\"} 1.2e-05\ngo_gc_duration_seconds_sum 0.0123\ngo_gc_duration_seconds_count 417\ngo_goroutines 52\n"
	if n, err := parseGCCycles(metrics); err != nil || n != 417 {
		t.Errorf("parseGCCycles = %v, %v; want 417", n, err)
	}
	if _, err := parseGCCycles("go_goroutines 52\n"); err == nil {
		t.Errorf("parseGCCycles(no count) = nil error, want one")
	}
	heap := "heap profile: 12: 3456 [789: 101112] @ heap/1048576\n...\n\n# runtime.MemStats\n# Alloc = 30000000\n# HeapAlloc = 31000000\n# HeapSys = 60000000\n# HeapInuse = 40000000\n# NumGC = 9\n"
	if h, err := parseHeap(heap); err != nil || h.inuse != 40e6 || h.live != 31e6 {
		t.Errorf("parseHeap = %+v, %v; want in use 40e6, live 31e6", h, err)
	}
	if _, err := parseHeap("# HeapAlloc = 1\n"); err == nil {
		t.Errorf("parseHeap(no HeapInuse) = nil error, want one")
	}
	e := &env{}
	st := e.addSteadyRows("external", true)
	for i, rate := range []float64{100, 95, 89} {
		st.record(i+1, rate, 5, 0.8, heapStats{inuse: float64(40+i) * 1e6, live: 30e6})
	}
	st.finish()
	if st.rate.met() != "**not met**" || st.rate.value[0] != 0.89 {
		t.Errorf("third at 0.89 of the first: %v %s, want not met", st.rate.value, st.rate.met())
	}
	if st.heap.met() != "met" || st.gc.met() != "met" {
		t.Errorf("heap %v (%s), collections %v (%s); want both met", st.heap.ratio, st.heap.met(), st.gc.value, st.gc.met())
	}
	quick := e.addSteadyRows("dev mode", true)
	quick.record(1, 100, 5, 3, heapStats{inuse: 40e6, live: 30e6})
	quick.finish()
	if quick.rate.met() != "not measured" || quick.heap.met() != "–" || quick.gc.met() != "**not met**" {
		t.Errorf("one repetition: rate %s, heap %s, collections %s; want not measured, –, not met (3/s)", quick.rate.met(), quick.heap.met(), quick.gc.met())
	}
}

// TestKeptSection: the hand-written section of BENCHMARKS.md survives a
// run, whether it ends the file or another section follows it, and a report
// without it keeps nothing.
func TestKeptSection(t *testing.T) {
	sec := "## How the figures came about\n\n- P1: 0.61 when migration 00008 landed.\n"
	for report, want := range map[string]string{
		"# Benchmarks\n\n## Method\n\nx\n\n" + sec:                  sec,
		"# Benchmarks\n\n" + sec + "\n## Method\n\nx\n":             sec,
		"# Benchmarks\n\n" + sec + "\n\n\n":                         sec,
		"# Benchmarks\n\n## Method\n\nHow the figures came about\n": "",
		"": "",
	} {
		if got := keptSection(report); got != want {
			t.Errorf("keptSection(%q) = %q, want %q", report, got, want)
		}
	}
}
