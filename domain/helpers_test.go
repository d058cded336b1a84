package domain_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
)

// replay returns the aggregate A evolved from events in order, the way a
// command handler loads it from its stream.
func replay[A any, P interface {
	*A
	Apply(domain.Event)
}](events ...domain.Event) A {
	var a A
	for _, e := range events {
		P(&a).Apply(e)
	}
	return a
}

// checkDecision checks what a decide function returned: err is wantErr (see
// checkDomainError) and got equals want under opts. call names the call in
// failure messages, e.g. "Hold(...)".
func checkDecision(t *testing.T, call string, got []domain.Event, err error, want []domain.Event, wantErr *domain.Error, opts ...cmp.Option) {
	t.Helper()
	checkDomainError(t, call, err, wantErr)
	checkEvents(t, call, got, want, opts...)
}

// checkEvents reports a difference between the decided events got and want
// under opts.
func checkEvents(t *testing.T, call string, got, want []domain.Event, opts ...cmp.Option) {
	t.Helper()
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("%s events mismatch (-want +got):\n%s", call, diff)
	}
}

// checkErrorIs stops the test unless errors.Is(err, want): nil matches only
// nil, and a decision refused with a more specific message still matches its
// sentinel.
func checkErrorIs(t *testing.T, call string, err error, want *domain.Error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s error = %v, want %v", call, err, want)
	}
}

// decideCase is one row of a table test in the shape "given events, when
// command at now, then events or error". now and wantErr stay zero where the
// decision takes no time or cannot fail.
type decideCase[C any] struct {
	name    string
	given   []domain.Event
	when    C
	now     time.Time
	want    []domain.Event
	wantErr *domain.Error
}

// runDecisions runs every row of a decide table as a parallel subtest:
// decide returns the call's name for failure messages and what the aggregate
// built from the row's given events decides; checkErr (checkDomainError or
// checkErrorIs) checks the error against wantErr, and the events must equal
// want under opts.
func runDecisions[C any](t *testing.T, tests []decideCase[C], checkErr func(*testing.T, string, error, *domain.Error),
	decide func(tt decideCase[C]) (call string, got []domain.Event, err error), opts ...cmp.Option) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			call, got, err := decide(tt)
			checkErr(t, call, err, tt.wantErr)
			checkEvents(t, call, got, tt.want, opts...)
		})
	}
}
