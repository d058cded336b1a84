package providersim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Faults are the injected faults, set with SetFaults or POST /_sim/faults and
// cleared with ResetFaults or DELETE /_sim/faults. The zero value injects
// nothing. The same struct is the JSON body of /_sim/faults.
//
// Counts are consumed: each matching request decrements its count, and
// GET /_sim/faults shows what remains. Rates are probabilities in [0,1] drawn
// from the seeded random source (Config.Seed). Request faults apply to every
// POST of the API (create, cancel, refund), and only to requests that
// execute (not to replays or refusals of validation), except InUse409,
// which answers before the key is looked at.
// Webhook fields add to Config.Webhooks: a non-zero delay or hold replaces the
// configured one, duplicates add up, Reorder turns reordering on.
type Faults struct {
	// LatencyMS delays every /v1 request by this many milliseconds. For a POST
	// that executes, the delay is processing time: the key is in use during
	// it, and the charge commits even if the client gave up meanwhile.
	LatencyMS int `json:"latency_ms"`
	// ErrorBeforeCommit answers the next n POSTs with a 500 api_error
	// before they execute: nothing happens and nothing is saved under the
	// key, so a repeat executes.
	ErrorBeforeCommit int `json:"error_before_commit"`
	// ErrorBeforeCommitRate does the same to each POST with this probability.
	ErrorBeforeCommitRate float64 `json:"error_before_commit_rate"`
	// ErrorAfterCommit executes the next n POSTs, then answers 500
	// api_error, and saves that 500 under the key: a repeat replays it, as
	// Stripe replays a 500 of an endpoint that began executing.
	ErrorAfterCommit int `json:"error_after_commit"`
	// ErrorAfterCommitRate does the same to each executing POST with this probability.
	ErrorAfterCommitRate float64 `json:"error_after_commit_rate"`
	// DropAfterCommit commits the next n executing POSTs, then closes their
	// connections without an answer. A repeat with the key replays the outcome.
	DropAfterCommit int `json:"drop_after_commit"`
	// DropAfterCommitRate does the same to each executing POST with this probability.
	DropAfterCommitRate float64 `json:"drop_after_commit_rate"`
	// InUse409 answers the next n POSTs with 409 idempotency_key_in_use,
	// without effect, as if another request with the key were executing.
	InUse409 int `json:"in_use_409"`
	// DeclineTokens are payment methods declined (402 card_declined)
	// whatever their fixed meaning, even ones the table does not know.
	DeclineTokens []string `json:"decline_tokens"`
	// SearchLagMS, when not nil, replaces Config.SearchLag: a
	// PaymentIntent is searchable only once the simulator's clock has
	// passed its creation plus this many milliseconds (0: at once).
	SearchLagMS *int `json:"search_lag_ms"`
	// WebhookDelayMS delays the first attempt of every new event's delivery.
	WebhookDelayMS int `json:"webhook_delay_ms"`
	// WebhookDuplicates sends this many extra copies of every new event (same
	// event id, new signature), each after the previous copy was acknowledged.
	WebhookDuplicates int `json:"webhook_duplicates"`
	// WebhookDuplicateRate sends one more copy with this probability.
	WebhookDuplicateRate float64 `json:"webhook_duplicate_rate"`
	// WebhookReorder holds every other new event back until the next event
	// has had its first delivery attempt (so the later one overtakes it), or
	// WebhookReorderHoldMS passes.
	WebhookReorder bool `json:"webhook_reorder"`
	// WebhookReorderHoldMS bounds a hold; 0 means Config.Webhooks.ReorderHold.
	WebhookReorderHoldMS int `json:"webhook_reorder_hold_ms"`
	// WebhooksPaused stops all delivery attempts until it is set false again;
	// events queue up meanwhile (attempts are not used up).
	WebhooksPaused bool `json:"webhooks_paused"`
}

// Validate reports negative counts or durations and rates outside [0,1].
func (f Faults) Validate() error {
	lag := 0
	if f.SearchLagMS != nil {
		lag = *f.SearchLagMS
	}
	for _, n := range []int{f.LatencyMS, f.ErrorBeforeCommit, f.ErrorAfterCommit, f.DropAfterCommit, f.InUse409, f.WebhookDelayMS,
		f.WebhookDuplicates, f.WebhookReorderHoldMS, lag} {
		if n < 0 {
			return errors.New("counts and milliseconds must not be negative")
		}
	}
	for _, r := range []float64{f.ErrorBeforeCommitRate, f.ErrorAfterCommitRate, f.DropAfterCommitRate, f.WebhookDuplicateRate} {
		if r < 0 || r > 1 {
			return errors.New("rates must be in [0,1]")
		}
	}
	return nil
}

// SetFaults replaces the injected faults. It returns an error, changing
// nothing, if f is invalid (see Faults.Validate).
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("providersim: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaultsLocked(f)
	return nil
}

// ResetFaults removes every injected fault (and resumes paused webhooks).
func (s *Server) ResetFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaultsLocked(Faults{})
}

// Faults returns the injected faults, with the counts that remain.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults.clone()
}

// clone returns f with its own copies of reference members.
func (f Faults) clone() Faults {
	f.DeclineTokens = slices.Clone(f.DeclineTokens)
	if f.SearchLagMS != nil {
		lag := *f.SearchLagMS
		f.SearchLagMS = &lag
	}
	return f
}

func (s *Server) setFaultsLocked(f Faults) {
	f = f.clone()
	wasPaused := s.faults.WebhooksPaused
	s.faults = f
	switch {
	case f.WebhooksPaused && !wasPaused:
		s.resume = make(chan struct{})
	case !f.WebhooksPaused && wasPaused:
		close(s.resume)
	}
}

// plan is what an executing POST will do, decided (and fault counts
// consumed) before it runs.
type plan struct {
	errorBeforeCommit bool // 500, nothing executed or saved
	errorAfterCommit  bool // executed; 500 saved and answered
	dropAfterCommit   bool // executed; connection dropped
	latency           time.Duration
}

func (s *Server) planLocked() plan {
	f := &s.faults
	var p plan
	p.latency = s.latencyLocked()
	if p.errorBeforeCommit = take(&f.ErrorBeforeCommit, f.ErrorBeforeCommitRate, s.rng); p.errorBeforeCommit {
		return p
	}
	p.errorAfterCommit = take(&f.ErrorAfterCommit, f.ErrorAfterCommitRate, s.rng)
	p.dropAfterCommit = take(&f.DropAfterCommit, f.DropAfterCommitRate, s.rng)
	return p
}

// take consumes one of *count, or draws rate: it reports whether the
// fault applies.
func take(count *int, rate float64, rng *rand.Rand) bool {
	if *count > 0 {
		*count--
		return true
	}
	return rate > 0 && rng.Float64() < rate
}

func (s *Server) latencyLocked() time.Duration {
	return time.Duration(s.faults.LatencyMS) * time.Millisecond
}

// takeInUse409 consumes one InUse409 fault and reports whether there was one.
func (s *Server) takeInUse409() (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	latency := s.latencyLocked()
	if s.faults.InUse409 > 0 {
		s.faults.InUse409--
		return true, latency
	}
	return false, latency
}

// webhookSettings are the effective delivery settings for a new event.
type webhookSettings struct {
	delay   time.Duration
	copies  int
	reorder bool
	hold    time.Duration
}

func (s *Server) webhookSettingsLocked() webhookSettings {
	w, f := s.cfg.Webhooks, s.faults
	ws := webhookSettings{
		delay:   w.Delay,
		copies:  1 + w.Duplicates + f.WebhookDuplicates,
		reorder: w.Reorder || f.WebhookReorder,
		hold:    w.ReorderHold,
	}
	if f.WebhookDelayMS > 0 {
		ws.delay = time.Duration(f.WebhookDelayMS) * time.Millisecond
	}
	if f.WebhookReorderHoldMS > 0 {
		ws.hold = time.Duration(f.WebhookReorderHoldMS) * time.Millisecond
	}
	for _, rate := range []float64{w.DuplicateRate, f.WebhookDuplicateRate} {
		if rate > 0 && s.rng.Float64() < rate {
			ws.copies++
		}
	}
	return ws
}
