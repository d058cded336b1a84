package domain_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/retrysafe/booking/domain"
)

func givenIntent() domain.IntentRecorded {
	return domain.IntentRecorded{Actor: fixActor, Operation: "POST /v1/reservations", KeySHA256: fixOtherFP,
		Fingerprint: fixFP, CanonicalVersion: 1, Command: map[string]any{"show_id": fixShowID, "quantity": float64(2)},
		TargetID: fixResA, Executor: "booking-1", LeaseUntil: intentLease}
}

func givenRejection(code string) domain.IntentRejected {
	return domain.IntentRejected{Status: 409, Kind: "conflict", Code: code, Detail: "rejected: " + code}
}

// intentFrom applies events and sets RecordedAt as the command layer does
// from the stream's first record.
func intentFrom(recordedAt time.Time, events ...domain.Event) domain.Intent {
	in := replay[domain.Intent](events...)
	in.RecordedAt = recordedAt
	return in
}

func TestIntentResolve(t *testing.T) {
	t.Parallel()
	expiresAt := intentRecordedAt.Add(intentRetention)
	tests := []struct {
		name       string
		given      []domain.Event
		recordedAt time.Time
		fp         string
		now        time.Time
		want       domain.Resolution
	}{
		{name: "No intent is a new intent.", fp: fixFP, now: intentRecordedAt, want: domain.ResolveNew},
		{name: "The same fingerprint continues.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			fp: fixFP, now: intentRecordedAt.Add(time.Minute), want: domain.ResolveContinue},
		{name: "The same fingerprint continues after a takeover.",
			given:      []domain.Event{givenIntent(), domain.IntentResumed{Executor: "booking-2", LeaseUntil: intentLease.Add(time.Minute)}},
			recordedAt: intentRecordedAt, fp: fixFP, now: intentRecordedAt.Add(time.Minute), want: domain.ResolveContinue},
		{name: "A different fingerprint is a mismatch.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			fp: fixOtherFP, now: intentRecordedAt.Add(time.Minute), want: domain.ResolveMismatch},
		{name: "The same fingerprint of a rejected intent answers the rejection.",
			given: []domain.Event{givenIntent(), givenRejection("sold-out")}, recordedAt: intentRecordedAt,
			fp: fixFP, now: intentRecordedAt.Add(time.Minute), want: domain.ResolveRejected},
		{name: "A different fingerprint of a rejected intent is a mismatch, not the rejection.",
			given: []domain.Event{givenIntent(), givenRejection("sold-out")}, recordedAt: intentRecordedAt,
			fp: fixOtherFP, now: intentRecordedAt.Add(time.Minute), want: domain.ResolveMismatch},

		{name: "An intent one nanosecond before its retention ends continues.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			fp: fixFP, now: expiresAt.Add(-time.Nanosecond), want: domain.ResolveContinue},
		{name: "An intent exactly at its retention is treated as absent.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			fp: fixFP, now: expiresAt, want: domain.ResolveNew},
		{name: "An intent past its retention is new even with a different fingerprint.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			fp: fixOtherFP, now: expiresAt.Add(time.Hour), want: domain.ResolveNew},
		{name: "A rejected intent past its retention is new.",
			given: []domain.Event{givenIntent(), givenRejection("sold-out")}, recordedAt: intentRecordedAt,
			fp: fixFP, now: expiresAt, want: domain.ResolveNew},
		{name: "An intent with an unknown recording time never expires.", given: []domain.Event{givenIntent()},
			fp: fixFP, now: expiresAt.Add(365 * 24 * time.Hour), want: domain.ResolveContinue},
		{name: "Events that are not IntentRecorded do not make an intent exist.",
			given:      []domain.Event{domain.IntentResumed{Executor: "booking-2", LeaseUntil: intentLease}, givenRejection("sold-out")},
			recordedAt: intentRecordedAt, fp: fixFP, now: intentRecordedAt, want: domain.ResolveNew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := intentFrom(tt.recordedAt, tt.given...)
			if got := in.Resolve(tt.fp, tt.now, intentRetention); got != tt.want {
				t.Errorf("Resolve(%.8s…, %v, %v) = %v, want %v", tt.fp, tt.now, intentRetention, got, tt.want)
			}
		})
	}
}

func TestIntentAwait(t *testing.T) {
	t.Parallel()
	resumed := domain.IntentResumed{Executor: "booking-2", LeaseUntil: intentLease.Add(time.Minute)}
	tests := []struct {
		name     string
		given    []domain.Event
		executor bool
		waited   bool
		now      time.Time
		want     domain.Resolution
	}{
		{name: "The request that recorded the intent executes it.", given: []domain.Event{givenIntent()}, executor: true,
			now: intentRecordedAt, want: domain.ResolveExecute},
		{name: "The executor executes even after its lease ended.", given: []domain.Event{givenIntent()}, executor: true,
			now: intentLease.Add(time.Hour), want: domain.ResolveExecute},
		{name: "A repeat inside the executor's lease waits for the commit point.", given: []domain.Event{givenIntent()},
			now: intentLease.Add(-time.Nanosecond), want: domain.ResolveWait},
		{name: "A repeat that waited and still finds the lease live answers in use.", given: []domain.Event{givenIntent()}, waited: true,
			now: intentLease.Add(-time.Nanosecond), want: domain.ResolveInUse},
		{name: "A repeat exactly at the lease's end takes the intent over.", given: []domain.Event{givenIntent()},
			now: intentLease, want: domain.ResolveTakeOver},
		{name: "A repeat that waited past the lease's end takes the intent over.", given: []domain.Event{givenIntent()}, waited: true,
			now: intentLease.Add(time.Second), want: domain.ResolveTakeOver},
		{name: "A repeat inside a taken-over lease waits for the new executor.", given: []domain.Event{givenIntent(), resumed},
			now: intentLease.Add(time.Second), want: domain.ResolveWait},
		{name: "A repeat after a taken-over lease ended takes the intent over again.", given: []domain.Event{givenIntent(), resumed},
			now: resumed.LeaseUntil, want: domain.ResolveTakeOver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := intentFrom(intentRecordedAt, tt.given...)
			if got := in.Await(tt.executor, tt.waited, tt.now); got != tt.want {
				t.Errorf("Await(%t, %t, %v) = %v, want %v", tt.executor, tt.waited, tt.now, got, tt.want)
			}
		})
	}
}

func TestResolutionString(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for r := domain.ResolveNew; r <= domain.ResolveTakeOver; r++ {
		name := r.String()
		if name == "unknown" || seen[name] {
			t.Errorf("Resolution(%d).String() = %q, want a distinct name", r, name)
		}
		seen[name] = true
	}
	if got := domain.Resolution(200).String(); got != "unknown" {
		t.Errorf("Resolution(200).String() = %q, want \"unknown\"", got)
	}
}

func TestIntentExpired(t *testing.T) {
	t.Parallel()
	expiresAt := intentRecordedAt.Add(intentRetention)
	tests := []struct {
		name       string
		given      []domain.Event
		recordedAt time.Time
		now        time.Time
		want       bool
	}{
		{name: "An intent that does not exist is not expired.", recordedAt: intentRecordedAt, now: expiresAt.Add(time.Hour)},
		{name: "An intent within its retention is not expired.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			now: expiresAt.Add(-time.Nanosecond)},
		{name: "An intent exactly at its retention is expired.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			now: expiresAt, want: true},
		{name: "An intent past its retention is expired.", given: []domain.Event{givenIntent()}, recordedAt: intentRecordedAt,
			now: expiresAt.Add(time.Hour), want: true},
		{name: "An intent with an unknown recording time is never expired.", given: []domain.Event{givenIntent()},
			now: expiresAt.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := intentFrom(tt.recordedAt, tt.given...)
			if got := in.Expired(tt.now, intentRetention); got != tt.want {
				t.Errorf("Expired(%v, %v) = %t, want %t", tt.now, intentRetention, got, tt.want)
			}
			// Resolve treats exactly the expired intents as new.
			if got := in.Resolve(fixFP, tt.now, intentRetention) == domain.ResolveNew; in.Exists() && got != tt.want {
				t.Errorf("Resolve(...) == ResolveNew is %t, want %t (as Expired)", got, tt.want)
			}
		})
	}
}

func TestIntentLeaseLive(t *testing.T) {
	t.Parallel()
	resumed := domain.IntentResumed{Executor: "booking-2", LeaseUntil: intentLease.Add(time.Minute)}
	tests := []struct {
		name  string
		given []domain.Event
		now   time.Time
		want  bool
	}{
		{name: "A lease before its end is live.", given: []domain.Event{givenIntent()}, now: intentLease.Add(-time.Nanosecond), want: true},
		{name: "A lease exactly at its end is not live.", given: []domain.Event{givenIntent()}, now: intentLease},
		{name: "A lease past its end is not live.", given: []domain.Event{givenIntent()}, now: intentLease.Add(time.Second)},
		{name: "A takeover extends the lease.", given: []domain.Event{givenIntent(), resumed}, now: intentLease.Add(time.Second), want: true},
		{name: "A taken-over lease ends at its new end.", given: []domain.Event{givenIntent(), resumed}, now: resumed.LeaseUntil},
		{name: "A rejection leaves the lease as it was.", given: []domain.Event{givenIntent(), givenRejection("sold-out")}, now: intentLease.Add(-time.Second), want: true},
		{name: "An intent that does not exist has no live lease.", now: intentRecordedAt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := intentFrom(intentRecordedAt, tt.given...)
			if got := in.LeaseLive(tt.now); got != tt.want {
				t.Errorf("LeaseLive(%v) = %t, want %t (lease until %v)", tt.now, got, tt.want, in.LeaseUntil)
			}
		})
	}
}

func TestIntentApply(t *testing.T) {
	t.Parallel()
	rec := givenIntent()
	first, second := givenRejection("sold-out"), givenRejection("show-started")
	resumed := domain.IntentResumed{Executor: "booking-2", LeaseUntil: intentLease.Add(time.Minute)}
	tests := []struct {
		name  string
		given []domain.Event
		want  domain.Intent
	}{
		{name: "IntentRecorded records the intent, its executor and lease.", given: []domain.Event{rec},
			want: domain.Intent{Recorded: rec, Executor: "booking-1", LeaseUntil: intentLease}},
		{name: "IntentResumed hands the lease to the new executor and keeps the recorded executor.", given: []domain.Event{rec, resumed},
			want: domain.Intent{Recorded: rec, Executor: "booking-2", LeaseUntil: resumed.LeaseUntil}},
		{name: "IntentRejected records the rejection.", given: []domain.Event{rec, first},
			want: domain.Intent{Recorded: rec, Executor: "booking-1", LeaseUntil: intentLease, Rejection: &first}},
		{name: "The first rejection wins.", given: []domain.Event{rec, first, second},
			want: domain.Intent{Recorded: rec, Executor: "booking-1", LeaseUntil: intentLease, Rejection: &first}},
		{name: "Events of other streams are ignored.", given: []domain.Event{rec, givenHeld(fixResA, 2), givenOrderClaim(fixOrderA, fixIntent)},
			want: domain.Intent{Recorded: rec, Executor: "booking-1", LeaseUntil: intentLease}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := replay[domain.Intent](tt.given...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Apply(...) mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIntentApplyCopiesTheRejection(t *testing.T) {
	t.Parallel()
	rej := givenRejection("sold-out")
	var in domain.Intent
	in.Apply(givenIntent())
	in.Apply(rej)
	rej.Code = "changed"
	if in.Rejection.Code != "sold-out" {
		t.Errorf("Rejection.Code after changing the applied event = %q, want %q", in.Rejection.Code, "sold-out")
	}
}

func TestDiffFields(t *testing.T) {
	t.Parallel()
	type obj = map[string]any
	type arr = []any
	order := obj{"reservation_id": fixResA, "payment": obj{"token_sha256": fixFP}}
	tests := []struct {
		name string
		a, b obj
		want []string
	}{
		{name: "Two nil commands do not differ.", want: nil},
		{name: "Equal commands do not differ.", a: order, b: obj{"payment": obj{"token_sha256": fixFP}, "reservation_id": fixResA}},
		{name: "A differing scalar names its field.", a: obj{"show_id": "a", "quantity": float64(2)}, b: obj{"show_id": "a", "quantity": float64(3)},
			want: []string{"quantity"}},
		{name: "A field only in the first command differs.", a: obj{"show_id": "a", "quantity": float64(2)}, b: obj{"show_id": "a"},
			want: []string{"quantity"}},
		{name: "A field only in the second command differs.", a: obj{"show_id": "a"}, b: obj{"show_id": "a", "quantity": float64(2)},
			want: []string{"quantity"}},
		{name: "A field that is null in one and absent in the other differs.", a: obj{"x": nil}, b: obj{},
			want: []string{"x"}},
		{name: "A field that is null in both does not differ.", a: obj{"x": nil}, b: obj{"x": nil}},
		{name: "Differing fields are sorted.", a: obj{"z": "1", "a": "1", "m": "1", "same": true}, b: obj{"z": "2", "a": "2", "m": "2", "same": true},
			want: []string{"a", "m", "z"}},
		{name: "A value of another type differs.", a: obj{"quantity": float64(2)}, b: obj{"quantity": "2"},
			want: []string{"quantity"}},
		{name: "Booleans are compared by value.", a: obj{"flag": true, "other": false}, b: obj{"flag": false, "other": false},
			want: []string{"flag"}},

		{name: "A differing nested value names only the top-level field.",
			a: order, b: obj{"reservation_id": fixResA, "payment": obj{"token_sha256": fixOtherFP}},
			want: []string{"payment"}},
		{name: "A nested field only in one command names the top-level field.",
			a: order, b: obj{"reservation_id": fixResA, "payment": obj{"token_sha256": fixFP, "extra": "x"}},
			want: []string{"payment"}},
		{name: "A nested field only in the first command names the top-level field.",
			a: obj{"p": obj{"x": "1", "y": "2"}}, b: obj{"p": obj{"x": "1", "z": "2"}},
			want: []string{"p"}},
		{name: "Deeply nested equal maps do not differ.",
			a: obj{"p": obj{"q": obj{"r": arr{obj{"s": float64(1)}}}}}, b: obj{"p": obj{"q": obj{"r": arr{obj{"s": float64(1)}}}}}},
		{name: "Deeply nested differing maps name the top-level field.",
			a: obj{"p": obj{"q": obj{"r": arr{obj{"s": float64(1)}}}}, "k": "v"}, b: obj{"p": obj{"q": obj{"r": arr{obj{"s": float64(2)}}}}, "k": "v"},
			want: []string{"p"}},
		{name: "A map and a scalar differ.", a: obj{"p": obj{"x": "1"}}, b: obj{"p": "x"},
			want: []string{"p"}},
		{name: "A map and a slice differ.", a: obj{"p": obj{}}, b: obj{"p": arr{}},
			want: []string{"p"}},
		{name: "A scalar and a map differ.", a: obj{"p": "x"}, b: obj{"p": obj{"x": "1"}},
			want: []string{"p"}},

		{name: "Equal slices do not differ.", a: obj{"seats": arr{"A1", "A2"}}, b: obj{"seats": arr{"A1", "A2"}}},
		{name: "Empty slices do not differ.", a: obj{"seats": arr{}}, b: obj{"seats": arr{}}},
		{name: "Slices of different lengths differ.", a: obj{"seats": arr{"A1", "A2"}}, b: obj{"seats": arr{"A1"}},
			want: []string{"seats"}},
		{name: "Slices in another order differ.", a: obj{"seats": arr{"A1", "A2"}}, b: obj{"seats": arr{"A2", "A1"}},
			want: []string{"seats"}},
		{name: "Slices with a differing nested map differ.", a: obj{"items": arr{obj{"q": float64(1)}}}, b: obj{"items": arr{obj{"q": float64(2)}}},
			want: []string{"items"}},
		{name: "A slice and a scalar differ.", a: obj{"seats": arr{"A1"}}, b: obj{"seats": "A1"},
			want: []string{"seats"}},
		{name: "A nil first command differs in every field of the second.", b: obj{"b": "1", "a": "1"},
			want: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := domain.DiffFields(tt.a, tt.b)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("DiffFields(%v, %v) mismatch (-want +got):\n%s", tt.a, tt.b, diff)
			}
			// Symmetric: the same fields differ whichever command comes first.
			if diff := cmp.Diff(got, domain.DiffFields(tt.b, tt.a), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("DiffFields is not symmetric (-DiffFields(a, b) +DiffFields(b, a)):\n%s", diff)
			}
			// Never a value: every name is a top-level key of a command.
			for _, f := range got {
				_, inA := tt.a[f]
				_, inB := tt.b[f]
				if !inA && !inB {
					t.Errorf("DiffFields(...) returned %q, which is not a top-level field", f)
				}
			}
		})
	}
}

// TestDiffFieldsNeverReturnsValues uses secret-looking values that could
// leak through a careless implementation (a nested key path, a value, a
// formatted map) and checks only top-level names come back.
func TestDiffFieldsNeverReturnsValues(t *testing.T) {
	t.Parallel()
	a := map[string]any{
		"payment":        map[string]any{"token_sha256": "secret-token-hash-a", "card": map[string]any{"last4": "4242"}},
		"reservation_id": "secret-reservation-a",
		"note":           []any{"secret-note-a"},
	}
	b := map[string]any{
		"payment":        map[string]any{"token_sha256": "secret-token-hash-b", "card": map[string]any{"last4": "0000"}},
		"reservation_id": "secret-reservation-b",
		"note":           []any{"secret-note-b"},
		"secret-extra":   "secret-extra-value",
	}
	got := domain.DiffFields(a, b)
	want := []string{"note", "payment", "reservation_id", "secret-extra"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DiffFields(...) mismatch (-want +got):\n%s", diff)
	}
	leaks := []string{"secret-token-hash-a", "secret-token-hash-b", "4242", "0000", "secret-reservation-a",
		"secret-reservation-b", "secret-note-a", "secret-note-b", "secret-extra-value", "token_sha256", "card", "last4"}
	for _, f := range got {
		for _, v := range leaks {
			if strings.Contains(f, v) {
				t.Errorf("DiffFields(...) returned %q, which contains the value or nested name %q", f, v)
			}
		}
	}
}
