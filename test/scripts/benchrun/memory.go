package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The service's memory and collector over back-to-back P2 repetitions,
// read from its admin listener (BOOKING_ADMIN_ADDR): the Go collector's
// cycles from /metrics (go_gc_duration_seconds_count, one per completed
// cycle) and the heap after a collection forced at the end of each
// repetition from net/http/pprof's heap profile (?gc=1 runs runtime.GC
// first; debug=1 appends runtime.MemStats as "# Name = value" lines).

// adminClient reads the admin listener; a forced collection of a large
// heap and its profile take a few seconds on a busy machine.
var adminClient = &http.Client{Timeout: time.Minute}

// gcCyclesRE is the unlabelled sample of the collector's cycle count.
var gcCyclesRE = regexp.MustCompile(`(?m)^go_gc_duration_seconds_count ([0-9.e+]+)$`)

// memStatRE matches the runtime.MemStats lines of a debug=1 heap profile.
var memStatRE = regexp.MustCompile(`(?m)^# (HeapInuse|HeapAlloc) = (\d+)$`)

// parseGCCycles returns the collector's completed cycles from a /metrics
// body.
func parseGCCycles(body string) (float64, error) {
	m := gcCyclesRE.FindStringSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("no go_gc_duration_seconds_count in /metrics")
	}
	return strconv.ParseFloat(m[1], 64)
}

// heapStats is the heap after a forced collection, in bytes: in use (the
// spans holding objects, HeapInuse) and live (the objects, HeapAlloc).
type heapStats struct{ inuse, live float64 }

// parseHeap reads heapStats from a debug=1 heap profile.
func parseHeap(body string) (heapStats, error) {
	var h heapStats
	found := 0
	for _, m := range memStatRE.FindAllStringSubmatch(body, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return h, err
		}
		if m[1] == "HeapInuse" {
			h.inuse = v
		} else {
			h.live = v
		}
		found++
	}
	if found != 2 {
		return h, fmt.Errorf("no HeapInuse and HeapAlloc in the heap profile")
	}
	return h, nil
}

// adminGet returns the body of GET path on s's admin listener.
func (s *service) adminGet(path string) (string, error) {
	res, err := adminClient.Get(s.admin + path)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: status %d", path, res.StatusCode)
	}
	return string(b), err
}

// gcCycles returns the collector cycles s completed so far.
func (s *service) gcCycles() (float64, error) {
	body, err := s.adminGet("/metrics")
	if err != nil {
		return 0, err
	}
	return parseGCCycles(body)
}

// heapAfterGC forces a collection in s and returns its heap then.
func (s *service) heapAfterGC() (heapStats, error) {
	body, err := s.adminGet("/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return heapStats{}, err
	}
	return parseHeap(body)
}

// steadyRows are the rows of one deployment mode that follow `booking
// serve` over its back-to-back P2 repetitions on one service: the third
// repetition's bookings/s over the first's, the collector's cycles per
// second, and the heap in use after a collection forced at the end of each
// repetition.
type steadyRows struct {
	rate, gc, heap *row
	rates          []float64
}

// addSteadyRows adds the rows of mode ("dev mode", "external …");
// heapGoal sets the heap row's goal (the third repetition's at most 1.1×
// the first's) where the heap must not grow with bookings.
func (e *env) addSteadyRows(mode string, heapGoal bool) *steadyRows {
	r := &steadyRows{
		rate: e.add(&row{id: "P2r", measure: "bookings/s of the third back-to-back P2 repetition over the first's on one service, " + mode,
			goal: "≥ 0.9× (within 10%)", goalMin: 0.9, unit: "x"}),
		gc: e.add(&row{id: "P2g", measure: "garbage collections per second of `booking serve` under P2 load, " + mode,
			goal: "≤ 1.5/s (about once a second)", goalMax: 1.5, unit: "GC/s"}),
		heap: e.add(&row{id: "P2m", measure: "heap in use after a collection forced at the end of each P2 repetition, " + mode + "; ratio: the third's over the first's",
			goal: "–", unit: "MB"}),
	}
	if heapGoal {
		r.heap.goal, r.heap.goalMax = "third ≤ 1.1× first", 1.1
	}
	return r
}

// record adds one repetition: its bookings/s, the service's CPU per
// booking (ms), its collector cycles per second and its heap after the
// forced collection.
func (r *steadyRows) record(rep int, rate, cpuMs, gcPerSec float64, h heapStats) {
	r.rates = append(r.rates, rate)
	r.gc.value = append(r.gc.value, gcPerSec)
	r.heap.value = append(r.heap.value, h.inuse/1e6)
	r.rate.extra = append(r.rate.extra, fmt.Sprintf("rep %d: %.0f bookings/s; service CPU %.1f ms per booking; %.2f collections/s; heap after a forced collection %.1f MB in use, %.1f MB live",
		rep, rate, cpuMs, gcPerSec, h.inuse/1e6, h.live/1e6))
}

// finish sets the ratios once the repetitions are in: the third
// repetition's against the first's. With fewer than three (BENCH_QUICK)
// the rate row is not measured, and the heap row has no ratio and no
// verdict.
func (r *steadyRows) finish() {
	if len(r.rates) >= 3 && r.rates[0] > 0 {
		r.rate.value = []float64{r.rates[2] / r.rates[0]}
		r.rate.ratio = r.rate.value
	} else {
		r.rate.note = fmt.Sprintf("not measured: needs 3 back-to-back repetitions, ran %d", len(r.rates))
	}
	if h := r.heap.value; len(h) >= 3 && h[0] > 0 && !math.IsNaN(h[2]) {
		r.heap.ratio = []float64{h[2] / h[0]}
	} else {
		r.heap.goalMax = 0
		r.heap.note = strings.TrimPrefix(r.heap.note+"; no ratio: needs 3 repetitions", "; ")
	}
}
