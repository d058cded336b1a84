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
	// RecordedAt is when the intent stream was opened (database clock: the
	// first event's occurred_at, whatever the event store); the
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

// Resolution is what a request does with the intent its idempotency key
// names (draft-ietf-httpapi-idempotency-key-header §2). The whole decision
// table of the promise is Resolve (when the request arrives) and Await
// (before the intent's commit point):
//
//	Resolve: no intent, or one past its retention   → ResolveNew
//	Resolve: another fingerprint                     → ResolveMismatch (422)
//	Resolve: same fingerprint, rejected              → ResolveRejected (the recorded answer)
//	Resolve: same fingerprint, not rejected          → ResolveContinue (finish it or answer its outcome)
//	Await:   this request recorded or took it over   → ResolveExecute
//	Await:   executor's lease live, not yet waited    → ResolveWait (for the commit point)
//	Await:   executor's lease live after the wait     → ResolveInUse (409 with Retry-After)
//	Await:   executor's lease expired                 → ResolveTakeOver (IntentResumed, fenced)
type Resolution uint8

// Resolutions of a request, in the order of the table above.
const (
	ResolveNew      Resolution = iota // no live intent: record a new one
	ResolveMismatch                   // different fingerprint: 422
	ResolveRejected                   // definitively rejected: answer the rejection
	ResolveContinue                   // same fingerprint: continue or answer the outcome
	ResolveExecute                    // this request is the executor: go to the commit point
	ResolveWait                       // another executor holds the lease: wait for its commit point
	ResolveInUse                      // still held after the wait: 409 idempotency-key-in-use
	ResolveTakeOver                   // the executor's lease expired: take the intent over
)

// String returns the resolution's name, for test failures and logs.
func (r Resolution) String() string {
	names := [...]string{"new", "mismatch", "rejected", "continue", "execute", "wait", "in-use", "take-over"}
	if int(r) < len(names) {
		return names[r]
	}
	return "unknown"
}

// Resolve decides what a request with fingerprint fp does with this intent
// at now (database clock). fp must be computed under the intent's canonical
// version (Recorded.CanonicalVersion) when the intent exists. retention is
// the intent retention: an intent at or past RecordedAt + retention is
// treated as absent (its key starts a new intent). A continuing request that
// has not reached the commit point decides with Await.
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

// Await decides what a continuing request does before the intent's commit
// point is reached, at now (database clock). executor is true when this
// request recorded the intent or took it over; waited is true once it has
// waited for the executor (bounded) and found the commit point still
// missing. It returns ResolveExecute, ResolveWait, ResolveInUse or
// ResolveTakeOver.
func (i *Intent) Await(executor, waited bool, now time.Time) Resolution {
	switch {
	case executor:
		return ResolveExecute
	case i.LeaseLive(now) && !waited:
		return ResolveWait
	case i.LeaseLive(now):
		return ResolveInUse
	default:
		return ResolveTakeOver
	}
}

// LeaseLive reports whether the intent's executor still holds its lease at
// now; after it, another executor may take over with IntentResumed.
func (i *Intent) LeaseLive(now time.Time) bool { return now.Before(i.LeaseUntil) }

// Expired reports whether the intent is past its retention at now.
func (i *Intent) Expired(now time.Time, retention time.Duration) bool {
	return i.Exists() && !i.RecordedAt.IsZero() && !now.Before(i.RecordedAt.Add(retention))
}
