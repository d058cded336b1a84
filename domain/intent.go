package domain

import (
	"sort"
	"time"
)

// Intent is the state of an intent stream: the first request made with an
// idempotency key, who executes it, and any definitive rejection. The zero
// Intent does not exist. Not safe for concurrent use.
type Intent struct {
	Recorded   IntentRecorded
	Executor   string
	LeaseUntil time.Time
	Rejection  *IntentRejected
	// RecordedAt is when the intent stream was opened (database clock); the
	// intent expires at RecordedAt + retention.
	RecordedAt time.Time
}

// Exists reports whether the intent has been recorded.
func (i *Intent) Exists() bool { return i.Recorded.Fingerprint != "" }

// Apply evolves the intent by one event of its stream.
func (i *Intent) Apply(e Event) {
	switch e := e.(type) {
	case IntentRecorded:
		i.Recorded, i.Executor, i.LeaseUntil = e, e.Executor, e.LeaseUntil
	case IntentResumed:
		i.Executor, i.LeaseUntil = e.Executor, e.LeaseUntil
	case IntentRejected:
		if i.Rejection == nil {
			r := e
			i.Rejection = &r
		}
	}
}

// ErrKeyReused is the refusal of a repeat whose fingerprint differs from the
// intent's (draft-ietf-httpapi-idempotency-key-header §2.7: 422).
var ErrKeyReused = &Error{Kind: Rejected, Code: "idempotency-key-reused",
	Msg: "this idempotency key was used with a different request"}

// ErrKeyInUse is the answer to a repeat while the first request is still
// executing under its lease (draft-ietf-httpapi-idempotency-key-header §2.7: 409).
var ErrKeyInUse = &Error{Kind: Conflict, Code: "idempotency-key-in-use",
	Msg: "a request with this idempotency key is still being processed"}

// DiffFields returns the sorted names of the top-level fields whose values
// differ between two normalized commands (present in one and not the other,
// or unequal). It never returns values, so a 422 cannot reveal the first
// request's content.
func DiffFields(a, b map[string]any) []string {
	var out []string
	seen := map[string]bool{}
	for k, va := range a {
		seen[k] = true
		vb, ok := b[k]
		if !ok || !equalJSON(va, vb) {
			out = append(out, k)
		}
	}
	for k := range b {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			if !equalJSON(v, bm[k]) {
				return false
			}
		}
		return true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], bs[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// Resolution is what a repeat of an intent should do.
type Resolution uint8

// Resolutions of a repeat.
const (
	ResolveNew      Resolution = iota // no live intent: record a new one
	ResolveMismatch                   // different fingerprint: 422
	ResolveRejected                   // definitively rejected: answer the rejection
	ResolveContinue                   // same fingerprint: continue or answer the outcome
)

// Resolve decides what a request with fingerprint fp does with this intent
// at now (database clock). retention is the intent retention: an intent
// older than it is treated as absent (its key starts a new intent). Whether a
// continuing request waits for the executor or takes over is decided with
// LeaseLive once the caller knows whether the commit point was reached.
func (i *Intent) Resolve(fp string, now time.Time, retention time.Duration) Resolution {
	if !i.Exists() || (!i.RecordedAt.IsZero() && !now.Before(i.RecordedAt.Add(retention))) {
		return ResolveNew
	}
	if i.Recorded.Fingerprint != fp {
		return ResolveMismatch
	}
	if i.Rejection != nil {
		return ResolveRejected
	}
	return ResolveContinue
}

// LeaseLive reports whether the intent's executor still holds its lease at
// now; after it, another executor may take over with IntentResumed.
func (i *Intent) LeaseLive(now time.Time) bool { return now.Before(i.LeaseUntil) }

// Expired reports whether the intent is past its retention at now.
func (i *Intent) Expired(now time.Time, retention time.Duration) bool {
	return i.Exists() && !i.RecordedAt.IsZero() && !now.Before(i.RecordedAt.Add(retention))
}
