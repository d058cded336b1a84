package test

// The invariant check every scenario ends with: the audit of
// cmd/booking/loadgen/audit (the one `booking loadgen` prints), run against
// the scenario's log, simulator and API once the service has settled.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
)

// auditBound is how long a check waits for the invariants to hold: follow-ups
// such as a release or a refund may still land on a loaded machine.
const auditBound = 30 * time.Second

// audit runs the invariant check once with the scenario's sources.
func (s *server) audit(t testing.TB) audit.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	token := tokAdmin
	if s.auditToken != "" {
		token = s.auditToken
	}
	return audit.Check(ctx, audit.Sources{Log: s.log, SimURL: s.SimURL, APIURL: s.URL, Token: token, Client: s.client},
		audit.Options{Open: s.auditOpen})
}

// expectOpen lets order id stay pending, cancelling or in review at the
// scenario's final check, with the reason (the scenario leaves it so on
// purpose); everything else about it is still checked.
func (s *server) expectOpen(id, reason string) {
	if s.auditOpen == nil {
		s.auditOpen = map[string]string{}
	}
	s.auditOpen[id] = reason
}

// checkInvariants waits up to auditBound for the violations of the check
// that match (rule and a prefix of the violation; nil matches all) to be
// gone, and reports those left. It returns the last report.
func (s *server) checkInvariants(t testing.TB, match func(audit.Rule, string) bool) audit.Report {
	t.Helper()
	var rep audit.Report
	var bad []string
	eventually(auditBound, func() bool {
		rep, bad = s.audit(t), nil
		for _, row := range rep.Rows {
			for _, v := range row.Violations {
				if match == nil || match(row.Rule, v) {
					bad = append(bad, string(row.Rule)+": "+v)
				}
			}
		}
		return len(bad) == 0
	})
	if len(bad) > 0 {
		var b strings.Builder
		rep.WriteTable(&b, 10)
		t.Errorf("invariants after %s: %d violation(s):\n%s", auditBound, len(bad), b.String())
	}
	return rep
}

// checkEnd is the end of every scenario (a cleanup of mustStart that runs
// before the server stops): unless the test already failed, booking serve
// is running again if the scenario left it stopped, the service settles,
// and every invariant of the audit holds.
func (s *server) checkEnd(t *testing.T) {
	t.Helper()
	if t.Failed() || t.Skipped() {
		return
	}
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil || cur.hasExited() {
		s.opts.CrashAt, s.opts.HoldAt = nil, nil
		s.start(t)
	}
	s.settle(t)
	if !s.checkInvariants(t, nil).OK() {
		return
	}
	checkedEnds.Add(1)
}

// checkedEnds counts the scenarios whose final check passed.
var checkedEnds atomic.Int64

// checkCapacity checks capacity = available + held + ordered for every show
// (waiting up to auditBound for follow-ups such as a release to land).
func (s *server) checkCapacity(t testing.TB, showID string) {
	t.Helper()
	rep := s.checkInvariants(t, func(r audit.Rule, _ string) bool { return r == audit.Seats })
	if _, ok := rep.Seats[showID]; !ok && rep.Row(audit.Seats).Skipped == "" {
		t.Errorf("show %s: not in the audit's seat account", showID)
	}
}

// seatBook returns the show's seat account from the audit.
func (s *server) seatBook(t testing.TB, showID string) audit.SeatAccount {
	t.Helper()
	return s.checkInvariants(t, func(r audit.Rule, _ string) bool { return r == audit.Seats }).Seats[showID]
}

// checkNoUnfinishedIntents waits up to d for every intent to be finished
// (rejected, or its resource's first event stored).
func (s *server) checkNoUnfinishedIntents(t testing.TB, d time.Duration) {
	t.Helper()
	var u []string
	if !eventually(d, func() bool {
		u = nil
		for _, v := range s.audit(t).Row(audit.Settled).Violations {
			if strings.HasPrefix(v, "intent ") {
				u = append(u, v)
			}
		}
		return len(u) == 0
	}) {
		t.Errorf("event store: unfinished intents after %s: %v", d, u)
	}
}

// checkSeats is the seat account after a crash test: capacity = available +
// held + ordered, every claim finished (an order claim with its
// OrderPlaced, an expiry claim with its ReservationExpired), no intent
// unfinished.
func (s *server) checkSeats(t testing.TB, showID string) {
	t.Helper()
	s.checkCapacity(t, showID)
	s.checkInvariants(t, func(r audit.Rule, v string) bool {
		return r == audit.Settled && (strings.HasPrefix(v, "order claim ") || strings.HasPrefix(v, "expiry claim "))
	})
	s.checkNoUnfinishedIntents(t, time.Second)
}
