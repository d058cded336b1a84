package domain_test

import (
	"errors"
	"testing"

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
