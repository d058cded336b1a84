package domain_test

import (
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
)

// checkDomainError reports whether err is want: both nil, or err is a
// *domain.Error (possibly wrapped) equal to want in Kind, Code, Msg and
// Fields. call names the call in failure messages, e.g. "Hold(...)".
func checkDomainError(t *testing.T, call string, err error, want *domain.Error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%s error = %v, want nil", call, err)
		}
		return
	}
	var got *domain.Error
	if !errors.As(err, &got) {
		t.Errorf("%s error = %v (%T), want %v (*domain.Error)", call, err, err, want)
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("errors.Is(%s error %q, %q) = false, want true", call, got.Code, want.Code)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s error mismatch (-want +got):\n%s", call, diff)
	}
}

// invalid returns the Invalid error the deciders return for one bad field.
func invalid(field, msg string) *domain.Error {
	return &domain.Error{Kind: domain.Invalid, Code: "invalid-request", Msg: msg, Fields: []string{field}}
}

// tableCase is one row of a table test of a function of one argument: the
// subtest's name, the argument and the wanted result.
type tableCase[In any, Out comparable] struct {
	name string
	in   In
	want Out
}

// checkTable runs f on each case's argument in a parallel subtest and reports
// call (the function's name in failure messages, e.g. "ParseKind") with the
// argument and the result when the result is not want.
func checkTable[In any, Out comparable](t *testing.T, call string, f func(In) Out, tests []tableCase[In, Out]) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := f(tt.in); got != tt.want {
				t.Errorf("%s(%#v) = %v, want %v", call, tt.in, got, tt.want)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	tests := []tableCase[domain.Kind, string]{
		{"The zero kind is internal.", domain.Kind(0), "internal"},
		{"Internal is internal.", domain.Internal, "internal"},
		{"Invalid is invalid.", domain.Invalid, "invalid"},
		{"NotFound is not_found.", domain.NotFound, "not_found"},
		{"Conflict is conflict.", domain.Conflict, "conflict"},
		{"Rejected is rejected.", domain.Rejected, "rejected"},
		{"Unavailable is unavailable.", domain.Unavailable, "unavailable"},
		{"Forbidden is forbidden.", domain.Forbidden, "forbidden"},
		{"Gone is gone.", domain.Gone, "gone"},
		{"Unauthorized is unauthorized.", domain.Unauthorized, "unauthorized"},
		{"RateLimited is rate_limited.", domain.RateLimited, "rate_limited"},
		{"PaymentRequired is payment_required.", domain.PaymentRequired, "payment_required"},
		{"UnsupportedMedia is unsupported_media.", domain.UnsupportedMedia, "unsupported_media"},
		{"TooLarge is too_large.", domain.TooLarge, "too_large"},
		{"Timeout is timeout.", domain.Timeout, "timeout"},
		{"An unknown kind is internal.", domain.Kind(200), "internal"},
	}
	checkTable(t, "Kind.String", domain.Kind.String, tests)
}

func TestParseKind(t *testing.T) {
	t.Parallel()
	tests := []tableCase[string, domain.Kind]{
		{"An empty name is internal.", "", domain.Internal},
		{"An unknown name is internal.", "teapot", domain.Internal},
		{"Names are case-sensitive.", "Invalid", domain.Internal},
		{"A name with surrounding space is not a kind.", " gone", domain.Internal},
	}
	// Every kind round-trips through String and ParseKind.
	for k := domain.Internal; k <= domain.Timeout; k++ {
		tests = append(tests, tableCase[string, domain.Kind]{fmt.Sprintf("The name %q parses back to its kind.", k.String()), k.String(), k})
	}
	checkTable(t, "ParseKind", domain.ParseKind, tests)
}

func TestErrorError(t *testing.T) {
	t.Parallel()
	tests := []tableCase[*domain.Error, string]{
		{"An error with a message returns the message.", &domain.Error{Code: "sold-out", Msg: "no seats"}, "no seats"},
		{"An error without a message returns its code.", &domain.Error{Code: "sold-out"}, "sold-out"},
		{"A copy made With a detail returns the detail.", domain.ErrSoldOut.With("3 seats requested, 2 available"), "3 seats requested, 2 available"},
	}
	checkTable(t, "(*Error).Error", (*domain.Error).Error, tests)
}

func TestErrorIs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"A sentinel is itself.", domain.ErrSoldOut, domain.ErrSoldOut, true},
		{"A copy with a detail is its sentinel.", domain.ErrSoldOut.With("detail"), domain.ErrSoldOut, true},
		{"A wrapped copy is its sentinel.", fmt.Errorf("hold: %w", domain.ErrSoldOut.With("detail")), domain.ErrSoldOut, true},
		{"An error with the same code and another kind and message matches.", &domain.Error{Kind: domain.Internal, Code: "sold-out"}, domain.ErrSoldOut, true},
		{"Another code does not match.", domain.ErrShowStarted, domain.ErrSoldOut, false},
		{"A plain error with the same text does not match.", domain.ErrSoldOut, errors.New("not enough seats available"), false},
		{"A domain error is not a plain error.", errors.New("sold-out"), domain.ErrSoldOut, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %t, want %t", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

func TestErrorWithLeavesTheSentinelUnchanged(t *testing.T) {
	t.Parallel()
	sentinel := &domain.Error{Kind: domain.Conflict, Code: "sold-out", Msg: "not enough seats available", Fields: []string{"quantity"}}
	before := *sentinel
	got := sentinel.With("3 seats requested, 2 available")
	want := &domain.Error{Kind: domain.Conflict, Code: "sold-out", Msg: "3 seats requested, 2 available", Fields: []string{"quantity"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("With(...) mismatch (-want +got):\n%s", diff)
	}
	if got == sentinel {
		t.Errorf("With(...) = the sentinel itself, want a copy")
	}
	if diff := cmp.Diff(before, *sentinel); diff != "" {
		t.Errorf("With(...) changed the sentinel (-before +after):\n%s", diff)
	}
}

func TestKindOf(t *testing.T) {
	t.Parallel()
	tests := []tableCase[error, domain.Kind]{
		{"No error is internal.", nil, domain.Internal},
		{"A plain error is internal.", errors.New("boom"), domain.Internal},
		{"A domain error has its kind.", domain.ErrReservationExpired, domain.Gone},
		{"A wrapped domain error has its kind.", fmt.Errorf("claim: %w", domain.ErrReservationNotFound), domain.NotFound},
		{"A copy with a detail keeps its kind.", domain.ErrSoldOut.With("detail"), domain.Conflict},
		{"Joined errors take the first domain error.", errors.Join(errors.New("io"), domain.ErrForbidden, domain.ErrInvalid), domain.Forbidden},
	}
	checkTable(t, "KindOf", domain.KindOf, tests)
}

// TestSentinels pins each sentinel's kind (cmd/booking maps kinds to HTTP
// statuses) and checks the codes clients depend on are unique kebab-case.
func TestSentinels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  *domain.Error
		kind domain.Kind
		code string
	}{
		{domain.ErrInvalid, domain.Invalid, "invalid-request"},
		{domain.ErrNotFound, domain.NotFound, "not-found"},
		{domain.ErrShowNotFound, domain.NotFound, "show-not-found"},
		{domain.ErrReservationNotFound, domain.NotFound, "reservation-not-found"},
		{domain.ErrOrderNotFound, domain.NotFound, "order-not-found"},
		{domain.ErrShowExists, domain.Conflict, "show-exists"},
		{domain.ErrSoldOut, domain.Conflict, "sold-out"},
		{domain.ErrShowStarted, domain.Conflict, "show-started"},
		{domain.ErrReservationAlreadyOrdered, domain.Conflict, "reservation-already-ordered"},
		{domain.ErrReservationExpired, domain.Gone, "reservation-expired"},
		{domain.ErrReservationReleased, domain.Gone, "reservation-released"},
		{domain.ErrPaymentDeclined, domain.PaymentRequired, "payment-declined"},
		{domain.ErrPaymentFailed, domain.PaymentRequired, "payment-failed"},
		{domain.ErrNotCancellable, domain.Conflict, "order-not-cancellable"},
		{domain.ErrVersionConflict, domain.Conflict, "version-conflict"},
		{domain.ErrContention, domain.Unavailable, "contention"},
		{domain.ErrUnavailable, domain.Unavailable, "unavailable"},
		{domain.ErrForbidden, domain.Forbidden, "forbidden"},
		{domain.ErrUnauthorized, domain.Unauthorized, "unauthorized"},
		{domain.ErrRateLimited, domain.RateLimited, "rate-limited"},
		{domain.ErrKeyReused, domain.Rejected, "idempotency-key-reused"},
		{domain.ErrKeyInUse, domain.Conflict, "idempotency-key-in-use"},
		{domain.ErrAttemptNotAllowed, domain.Conflict, "attempt-not-allowed"},
	}
	kebab := regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)
	seen := map[string]bool{}
	for _, tt := range tests {
		if seen[tt.code] {
			t.Errorf("sentinel code %q is used twice", tt.code)
		}
		seen[tt.code] = true
		t.Run(fmt.Sprintf("The sentinel %s is %v with a message.", tt.code, tt.kind), func(t *testing.T) {
			t.Parallel()
			if tt.err.Code != tt.code {
				t.Errorf("Code = %q, want %q", tt.err.Code, tt.code)
			}
			if tt.err.Kind != tt.kind {
				t.Errorf("%s: Kind = %v, want %v", tt.code, tt.err.Kind, tt.kind)
			}
			if !kebab.MatchString(tt.err.Code) {
				t.Errorf("Code = %q, want kebab-case", tt.err.Code)
			}
			if tt.err.Msg == "" {
				t.Errorf("%s: Msg is empty, want a human-readable detail", tt.code)
			}
		})
	}
}
