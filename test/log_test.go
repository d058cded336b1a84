package test

// Probes of the event store. The log is read through eventstore.Store (the
// same interface the service and the audit use); SQL remains only for what
// the log interface does not hold (checkpoints, read models, key tables).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// readLog returns every event of the log, in log order, including every
// event committed before the call (waitHorizon).
func (s *server) readLog(t testing.TB) []eventstore.RecordedEvent {
	t.Helper()
	s.waitHorizon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	evs, err := audit.ReadLog(ctx, s.log)
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	return evs
}

// waitHorizon waits (up to 60 s) until every transaction that committed
// before the call is below the log's readable horizon. ReadAll never
// returns an event while an older transaction may still commit, and that
// horizon is the server's: on a PostgreSQL shared by parallel tests it
// trails the newest commit, so a probe right after an answer waits here.
func (s *server) waitHorizon(t testing.TB) {
	t.Helper()
	xmax := s.queryText(t, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`)[0]
	if !eventually(60*time.Second, func() bool {
		return s.queryInt(t, `SELECT (pg_snapshot_xmin(pg_current_snapshot()) >= $1::xid8)::int`, xmax) == 1
	}) {
		t.Fatalf("the log's readable horizon did not pass transaction %s within 60 s", xmax)
	}
}

// logEvents returns the events of type typ (any type if "") on streams whose
// name starts with prefix ("order-", "reservation-", ...), in log order.
func (s *server) logEvents(t testing.TB, prefix, typ string) []eventstore.RecordedEvent {
	t.Helper()
	var out []eventstore.RecordedEvent
	for _, e := range s.readLog(t) {
		if len(e.Stream) >= len(prefix) && e.Stream[:len(prefix)] == prefix && (typ == "" || e.Type == typ) {
			out = append(out, e)
		}
	}
	return out
}

// totalEvents returns the number of events in the log.
func (s *server) totalEvents(t testing.TB) int {
	t.Helper()
	return len(s.readLog(t))
}

// countType returns the number of events of type typ on streams whose name
// starts with prefix.
func (s *server) countType(t testing.TB, prefix, typ string) int {
	t.Helper()
	return len(s.logEvents(t, prefix, typ))
}

// typeCounts returns the number of events of each type in the log.
func (s *server) typeCounts(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range s.readLog(t) {
		out[e.Type]++
	}
	return out
}

// orders returns the number of orders in the log (OrderPlaced).
func (s *server) orders(t testing.TB) int {
	t.Helper()
	return s.countType(t, "order-", "OrderPlaced")
}

// streamTypes returns the event types of stream's live events in revision
// order (none for a stream that does not exist or was truncated).
func (s *server) streamTypes(t testing.TB, stream string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	evs, err := s.log.ReadStream(ctx, stream, 0, 0)
	if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("read stream %s: %v", stream, err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// streamEventCount returns the number of live events of stream.
func (s *server) streamEventCount(t testing.TB, stream string) int {
	t.Helper()
	return len(s.streamTypes(t, stream))
}

// eventData returns the decoded data of every event of type typ on streams
// whose name starts with prefix, in log order.
func (s *server) eventData(t testing.TB, prefix, typ string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range s.logEvents(t, prefix, typ) {
		var m map[string]any
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatalf("%s event data %q: %v", typ, e.Data, err)
		}
		out = append(out, m)
	}
	return out
}

// claimedOrderIDs returns the order ids of every OrderClaimed, oldest first.
func (s *server) claimedOrderIDs(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, m := range s.eventData(t, "reservation-order-", "OrderClaimed") {
		id, _ := m["order_id"].(string)
		out = append(out, id)
	}
	return out
}

// queryInt runs sql, which returns one integer.
func (s *server) queryInt(t testing.TB, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var n int
	if err := s.db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// queryRows runs sql, whose columns are all text, and returns the rows
// (a NULL as "<NULL>").
func (s *server) queryRows(t testing.TB, sql string, args ...any) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals := make([]*string, len(rows.FieldDescriptions()))
		dst := make([]any, len(vals))
		for i := range vals {
			dst[i] = &vals[i]
		}
		if err := rows.Scan(dst...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = "<NULL>"
			if v != nil {
				row[i] = *v
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// queryText returns the first column of every row of sql, as text.
func (s *server) queryText(t testing.TB, sql string, args ...any) []string {
	t.Helper()
	var out []string
	for _, r := range s.queryRows(t, sql, args...) {
		out = append(out, r[0])
	}
	return out
}

// logTail describes the last events of the log and the process manager's
// checkpoint, for a test that failed waiting for them (PostgreSQL only).
func (s *server) logTail(t testing.TB) string {
	t.Helper()
	if s.eventStore != "" {
		return ""
	}
	rows := s.queryText(t, `SELECT concat_ws(' ', tx::text || '/' || seq, recorded_at::time, stream || '@' || revision, type)
		FROM (SELECT * FROM events ORDER BY tx DESC, seq DESC LIMIT 12) e ORDER BY tx, seq`)
	cp := s.queryText(t, `SELECT coalesce((SELECT commit_tx || '/' || prepare FROM checkpoints WHERE name = $1), 'none')`, commands.FollowUpsName)
	return fmt.Sprintf("the log's last events (position, time, stream@revision, type):\n  %s\nprocess manager's checkpoint: %s",
		strings.Join(rows, "\n  "), strings.Join(cp, ""))
}

// settle waits until the background work is done and returns the event
// count: the process manager has handled every event that needs a
// follow-up (followUpsAtHead: every follow-up of every event so far is
// finished) and the count has stayed the same for 500 ms since (late payment steps, refunds and webhooks land). It
// fails the test after 60 s, so a busy machine only makes it slower.
func (s *server) settle(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	n, caughtUp := s.totalEvents(t), false
	var stableSince time.Time
	for {
		if !caughtUp {
			if caughtUp = s.followUpsAtHead(t); caughtUp {
				stableSince = time.Now()
			}
		} else if time.Since(stableSince) >= 500*time.Millisecond && s.erasuresSettled(t) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the event store did not settle within 60 s (%d events; process manager at the head: %v)\n%s", n, caughtUp, s.logTail(t))
		}
		time.Sleep(50 * time.Millisecond)
		if m := s.totalEvents(t); m != n {
			n, caughtUp = m, false
		}
	}
}

// erasuresSettled reports whether every order that can send no more has
// its key deleted and its erasure recorded (PaymentSecretsShredded): no
// such order keeps a key, and no erasure is left to record. The keys of
// ended orders go with the commit that ends them (events on PostgreSQL) or
// within the shredder's delay (5 s, on KurrentDB), and the reconciler
// records their erasures at once, so a settled log no longer grows by them.
func (s *server) erasuresSettled(t testing.TB) bool {
	t.Helper()
	if s.queryInt(t, `SELECT count(*) FROM order_key_erasures`) > 0 {
		return false
	}
	if s.eventStore != "" { // KurrentDB: the ended orders read through the store
		ended := s.sendingEndedOrders(t)
		return len(ended) == 0 || s.queryInt(t, `SELECT count(*) FROM order_keys WHERE order_id = ANY($1::uuid[])`, ended) == 0
	}
	return s.queryInt(t, `SELECT count(*) FROM order_keys k WHERE EXISTS (SELECT 1 FROM events e
		WHERE e.stream = 'order-' || k.order_id::text AND e.type = ANY($1))`, sendingEnds) == 0
}

// sendingEnds are the order events after which an order sends nothing
// more: its key is deleted.
var sendingEnds = []string{"OrderConfirmed", "OrderFailed", "OrderCancelRequested", "OrderCancelled", "OrderNeedsReview"}

// followUpsAtHead reports whether the process manager has handled every
// event that needs a follow-up (commands.FollowedUp): on PostgreSQL, none
// of those lies after its checkpoint. Events that need none may lie after
// it: the process manager handles events in rounds a second or two apart,
// and an order whose payment keeps failing renews its lease
// (PaymentAttemptStarted) more often than that, so its checkpoint may
// never be at the very head. On KurrentDB the checkpoint must be at the
// head of the log (true for an empty log).
func (s *server) followUpsAtHead(t testing.TB) bool {
	t.Helper()
	if s.eventStore != "" { // KurrentDB: the head read through the store
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		head, err := s.log.Head(ctx)
		if err != nil {
			t.Fatalf("log head: %v", err)
		}
		return s.queryInt(t, `SELECT count(*) FROM checkpoints WHERE name = $1 AND (commit_tx, prepare) >= ($2::bigint, $3::bigint)`,
			commands.FollowUpsName, int64(head.Commit), int64(head.Prepare)) == 1 || head.IsZero()
	}
	var followed []string
	for _, e := range domain.EventTypes() {
		if commands.FollowedUp(e.EventType()) {
			followed = append(followed, e.EventType())
		}
	}
	return s.queryInt(t, `SELECT count(*) FROM events e
		WHERE e.type = ANY($2)
		AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.name = $1
			AND (c.commit_tx, c.prepare) >= (e.tx::text::bigint, e.seq))`, commands.FollowUpsName, followed) == 0
}

// eventually polls cond every 50 ms for up to d; it returns whether cond held.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantCount checks that the streams whose name starts with prefix hold
// exactly want events of type typ; why, if given, explains want in the
// message.
func (s *server) wantCount(t testing.TB, prefix, typ string, want int, why ...string) {
	t.Helper()
	if n := s.countType(t, prefix, typ); n != want {
		t.Errorf("event store: %d %s, want %d%s", n, typ, want, note(why))
	}
}

// onlyClaimedOrder returns the order id of the one OrderClaimed in the log
// and stops the test unless there is exactly one; when names the moment
// ("after the crash").
func (s *server) onlyClaimedOrder(t testing.TB, when string) string {
	t.Helper()
	ids := s.claimedOrderIDs(t)
	if len(ids) != 1 {
		t.Fatalf("event store %s: OrderClaimed %v, want exactly 1", when, ids)
	}
	return ids[0]
}

// checkNothingAppended waits until the service settled and checks that the
// log still holds before events; after names what happened since.
func (s *server) checkNothingAppended(t testing.TB, before int, after string) {
	t.Helper()
	if n := s.settle(t); n != before {
		t.Errorf("event store: %d events after %s, want %d (nothing appended)", n, after, before)
	}
}

// checkNoNewEvents checks, without waiting, that the log still holds
// *before events after a refused request (after names it); on a mismatch it
// moves *before on, so each request's own appends are reported once.
func (s *server) checkNoNewEvents(t testing.TB, before *int, after string) {
	t.Helper()
	if n := s.totalEvents(t); n != *before {
		t.Errorf("event store: %d events after %s, want %d (nothing appended)", n, after, *before)
		*before = n
	}
}
