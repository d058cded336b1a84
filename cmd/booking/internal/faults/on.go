//go:build faultinject

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/internal/sqlcount"
)

// sqlCounter is the statement counter of BOOKING_TEST_COUNT_SQL, made on
// the first call (the pool is opened before the control API exists).
var sqlCounter = sync.OnceValue(func() *sqlcount.Counter {
	if v := os.Getenv("BOOKING_TEST_COUNT_SQL"); v == "" || v == "0" {
		return nil
	}
	return &sqlcount.Counter{}
})

// SQLCounter returns the counter of every SQL statement the service's pool
// sends when BOOKING_TEST_COUNT_SQL is set (not "" or "0"), for the
// whole-service statement budget test; nil otherwise. booking serve
// installs it on its pool (sqlcount.Counter.Install) and the control API
// serves its counts at Prefix+"/sql".
func SQLCounter() *sqlcount.Counter { return sqlCounter() }

// FromEnv returns the fault points of a binary built with -tags
// faultinject, configured from BOOKING_TEST_CRASH_AT and
// BOOKING_TEST_HOLD_AT (see the package documentation), and the control API
// of its hold points. An unknown step name is a *configerr.Error naming the
// variable. Parked goroutines are released when ctx is done, so a graceful
// shutdown never waits for a test.
func FromEnv(ctx context.Context, log *slog.Logger) (commands.Hooks, http.Handler, error) {
	crash, err := parseSteps("BOOKING_TEST_CRASH_AT", os.Getenv("BOOKING_TEST_CRASH_AT"))
	if err != nil {
		return commands.Hooks{}, nil, err
	}
	holdAt, err := parseSteps("BOOKING_TEST_HOLD_AT", os.Getenv("BOOKING_TEST_HOLD_AT"))
	if err != nil {
		return commands.Hooks{}, nil, err
	}
	holds := newHoldSet(log)
	for _, s := range holdAt {
		holds.arm(s)
	}
	go func() {
		<-ctx.Done()
		holds.releaseAll()
	}()
	return commands.Hooks{Step: func(step string) {
		if slices.Contains(crash, step) {
			log.Warn("fault injection: killing the process", "step", step)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		holds.hold(step)
	}}, holds.handler(), nil
}

// parseSteps splits a comma-separated list of step names and checks each
// against commands.Steps; an unknown name is an error naming variable.
func parseSteps(variable, spec string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(spec, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(commands.Steps, s) {
			return nil, configerr.New(variable, "unknown step %q (known: %s)", s, strings.Join(commands.Steps, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// holdSet parks goroutines at armed steps. It is safe for concurrent use.
//
// Its counts make a test race-free without sleeping: arrived only grows, so
// "wait until arrived >= n" cannot miss an arrival, and release disarms the
// step in the same critical section that wakes the parked goroutines, so no
// goroutine can park after a release it did not see.
type holdSet struct {
	log     *slog.Logger
	mu      sync.Mutex
	steps   map[string]*holdStep
	changed chan struct{} // closed and replaced on every change
}

type holdStep struct {
	armed   bool
	parked  int           // goroutines parked now
	arrived int           // goroutines that ever parked here
	release chan struct{} // closed when the step is released
}

// holdState is a step's state as the control API shows it.
type holdState struct {
	Step    string `json:"step"`
	Armed   bool   `json:"armed"`
	Parked  int    `json:"parked"`
	Arrived int    `json:"arrived"`
}

func newHoldSet(log *slog.Logger) *holdSet {
	return &holdSet{log: log, steps: map[string]*holdStep{}, changed: make(chan struct{})}
}

// get returns step's entry; the caller holds mu.
func (hs *holdSet) get(step string) *holdStep {
	st := hs.steps[step]
	if st == nil {
		st = &holdStep{release: make(chan struct{})}
		hs.steps[step] = st
	}
	return st
}

// notify wakes every waiter; the caller holds mu.
func (hs *holdSet) notify() {
	close(hs.changed)
	hs.changed = make(chan struct{})
}

// state returns step's state; the caller holds mu.
func (hs *holdSet) state(step string) holdState {
	st := hs.get(step)
	return holdState{Step: step, Armed: st.armed, Parked: st.parked, Arrived: st.arrived}
}

// arm makes step park every goroutine that reaches it from now on.
func (hs *holdSet) arm(step string) holdState {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	st := hs.get(step)
	if !st.armed {
		st.armed = true
		st.release = make(chan struct{})
		hs.notify()
	}
	return hs.state(step)
}

// release disarms step and lets every goroutine parked there go on.
func (hs *holdSet) release(step string) holdState {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	st := hs.get(step)
	if st.armed {
		st.armed = false
		close(st.release)
		hs.notify()
	}
	return hs.state(step)
}

// releaseAll releases every step.
func (hs *holdSet) releaseAll() {
	hs.mu.Lock()
	var steps []string
	for s := range hs.steps {
		steps = append(steps, s)
	}
	hs.mu.Unlock()
	for _, s := range steps {
		hs.release(s)
	}
}

// hold parks the caller while step is armed, until it is released.
func (hs *holdSet) hold(step string) {
	hs.mu.Lock()
	st := hs.steps[step]
	if st == nil || !st.armed {
		hs.mu.Unlock()
		return
	}
	st.parked++
	st.arrived++
	n, ch := st.arrived, st.release
	hs.notify()
	hs.mu.Unlock()
	hs.log.Warn("fault injection: holding at a step until the test releases it", "step", step, "arrival", n)
	<-ch
	hs.mu.Lock()
	st.parked--
	hs.notify()
	hs.mu.Unlock()
	hs.log.Warn("fault injection: released", "step", step, "arrival", n)
}

// waitArrived blocks until at least n goroutines have arrived at step in
// all, ctx is done or d passes, and returns the state then.
func (hs *holdSet) waitArrived(ctx context.Context, step string, n int, d time.Duration) holdState {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		hs.mu.Lock()
		s := hs.state(step)
		ch := hs.changed
		hs.mu.Unlock()
		if s.Arrived >= n {
			return s
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s
		case <-timer.C:
			return s
		}
	}
}

// handler serves the control API under Prefix (see the package
// documentation) with the standard library's method and wildcard patterns.
func (hs *holdSet) handler() http.Handler {
	step := func(w http.ResponseWriter, r *http.Request) (string, bool) {
		s := r.PathValue("step")
		if !slices.Contains(commands.Steps, s) {
			http.Error(w, fmt.Sprintf("unknown step %q (known: %s)", s, strings.Join(commands.Steps, ", ")), http.StatusNotFound)
			return "", false
		}
		return s, true
	}
	answer := func(w http.ResponseWriter, st holdState) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"/holds/{step}", func(w http.ResponseWriter, r *http.Request) {
		s, ok := step(w, r)
		if !ok {
			return
		}
		n, d := 0, 30*time.Second
		if v := r.URL.Query().Get("arrived"); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil || n < 0 {
				http.Error(w, "arrived: want a count ≥ 0", http.StatusBadRequest)
				return
			}
		}
		if v := r.URL.Query().Get("wait"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil || d < 0 {
				http.Error(w, "wait: want a Go duration ≥ 0 such as 30s", http.StatusBadRequest)
				return
			}
		}
		answer(w, hs.waitArrived(r.Context(), s, n, d))
	})
	mux.HandleFunc("PUT "+Prefix+"/holds/{step}", func(w http.ResponseWriter, r *http.Request) {
		if s, ok := step(w, r); ok {
			answer(w, hs.arm(s))
		}
	})
	mux.HandleFunc("DELETE "+Prefix+"/holds/{step}", func(w http.ResponseWriter, r *http.Request) {
		if s, ok := step(w, r); ok {
			answer(w, hs.release(s))
		}
	})
	if c := SQLCounter(); c != nil {
		mux.HandleFunc("GET "+Prefix+"/sql", func(w http.ResponseWriter, r *http.Request) {
			per := 1
			if v := r.URL.Query().Get("per"); v != "" {
				var err error
				if per, err = strconv.Atoi(v); err != nil || per < 1 {
					http.Error(w, "per: want a count ≥ 1", http.StatusBadRequest)
					return
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(sqlState{Total: c.Total(), Report: c.Report(per)})
		})
		mux.HandleFunc("DELETE "+Prefix+"/sql", func(w http.ResponseWriter, r *http.Request) {
			c.Reset()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(sqlState{Total: c.Total()})
		})
	}
	return mux
}

// sqlState is the answer of the statement counter's control API: the
// statements counted since the last reset and sqlcount.Counter.Report of
// them divided by the query parameter per.
type sqlState struct {
	Total  int    `json:"total"`
	Report string `json:"report"`
}
