// Package faults is the test-only fault injection of `booking serve`: crash
// points and hold points at the named steps of commands.Steps, used by the
// end-to-end crash and hold tests.
//
// It exists only in a binary built with -tags faultinject. Without the tag,
// FromEnv returns no hooks and no handler whatever the environment says: the
// production build can neither kill itself at a step nor park a goroutine,
// and serves no /_test routes.
//
// With the tag, FromEnv reads
//
//   - BOOKING_TEST_CRASH_AT=step[,step...]: the process kills itself with
//     SIGKILL when it reaches a named step (no deferred function runs, as in
//     a power cut);
//   - BOOKING_TEST_HOLD_AT=step[,step...]: every goroutine that reaches a
//     named step parks there until a test releases the step through the
//     control API below;
//   - BOOKING_TEST_COUNT_SQL=1 (read by SQLCounter): a counter of every
//     SQL statement, which booking serve installs on its pool, for the
//     whole-service statement budget test;
//
// and returns the control API, an http.Handler for the paths under Prefix:
//
//	GET    /_test/holds/{step}[?arrived=N[&wait=D]]  the step's state; with
//	       arrived, first waits (up to D, a Go duration, default 30s) until
//	       N goroutines in all have parked at the step
//	PUT    /_test/holds/{step}   arm: park every goroutine that reaches step
//	DELETE /_test/holds/{step}   release: disarm step and let every parked
//	       goroutine go on
//
// Each answers 200 with the JSON object {"step", "armed", "parked",
// "arrived"}; an unknown step is 404, a bad parameter 400. Tests never sleep
// to wait for a goroutine: they wait for its arrival with ?arrived=N. With
// BOOKING_TEST_COUNT_SQL set the control API also serves
//
//	GET    /_test/sql[?per=N]  {"total", "report"}: the statements counted
//	       since start or the last reset, and sqlcount.Counter.Report(N)
//	DELETE /_test/sql          reset the counts
package faults

// Prefix is the path prefix of the control API. The handler FromEnv returns
// matches the whole request path, prefix included: mount it at Prefix
// without stripping the prefix (chi's Mount keeps the path as it is).
const Prefix = "/_test"
