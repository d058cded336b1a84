package test

// `booking projections rebuild` against a running service: after a mixed live run the rebuild produces tables equal
// row for row to the live ones, twice in a row; during the rebuild the
// provider simulator and NATS see nothing.

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rbTables are the read-model tables (migrations/00003_readmodels.sql) with
// their primary keys, in the order they are snapshotted.
var rbTables = []struct{ name, pk string }{
	{"rm_orders", "id"},
	{"rm_reservations", "id"},
	{"rm_shows", "id"},
	{"rm_show_reservations", "reservation_id"},
	{"rm_show_sales", "show_id"},
	{"rm_intents", "stream"},
	{"rm_intent_targets", "id"},
}

// rbCheckpointCols are the columns of projection_checkpoints a rebuild must
// reproduce. Left out: updated_at (now() of the last batch or swap: the
// wall clock, not the log) and rebuilt_at (set by the rebuild itself, NULL
// before the first one).
const rbCheckpointCols = `name, commit_tx, prepare, log_time`

// rbSnapshot is the content of the read models: per table, every row as
// PostgreSQL's text form of the whole row, in primary-key order.
type rbSnapshot map[string][]string

// rbSnapshot reads every read-model table and the checkpoints.
func (s *server) rbSnapshot(t testing.TB) rbSnapshot {
	t.Helper()
	snap := rbSnapshot{}
	for _, tb := range rbTables {
		snap[tb.name] = s.queryText(t, fmt.Sprintf(`SELECT r::text FROM %s r ORDER BY %s`, tb.name, tb.pk))
	}
	snap["projection_checkpoints"] = s.queryText(t,
		`SELECT row(`+rbCheckpointCols+`)::text FROM projection_checkpoints ORDER BY name`)
	return snap
}

// rbSchema describes the read-model tables' shape: columns (with generated
// expressions), persistence, storage parameters and indexes. A rebuild swaps
// in fresh tables, so their shape must come out the same as well.
func (s *server) rbSchema(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, tb := range rbTables {
		out = append(out, s.queryText(t, `
SELECT c.relname || ' ' || c.relpersistence::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '-') || ' | ' ||
       (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' ' ||
                          a.attgenerated::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), '; ' ORDER BY a.attnum)
          FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
  FROM pg_class c WHERE c.oid = $1::regclass`, tb.name)...)
		out = append(out, s.queryText(t, `SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1
ORDER BY indexname`, tb.name)...)
		out = append(out, s.queryText(t, `SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = $1::regclass ORDER BY conname`, tb.name)...)
	}
	return out
}

// rbCompare reports every difference between two snapshots.
func rbCompare(t testing.TB, what string, want, got rbSnapshot) {
	t.Helper()
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		w, g := want[n], got[n]
		if slices.Equal(w, g) {
			continue
		}
		var missing, extra []string
		for _, r := range w {
			if !slices.Contains(g, r) {
				missing = append(missing, r)
			}
		}
		for _, r := range g {
			if !slices.Contains(w, r) {
				extra = append(extra, r)
			}
		}
		t.Errorf("%s: table %s differs from the live one: %d rows live, %d after; live rows missing after (%d):\n  %s\nrows only after (%d):\n  %s",
			what, n, len(w), len(g), len(missing), strings.Join(rbFirst(missing, 10), "\n  "), len(extra), strings.Join(rbFirst(extra, 10), "\n  "))
	}
}

func rbFirst(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], fmt.Sprintf("… %d more", len(xs)-n))
	}
	return xs
}

// rbHead returns the log position of the last event ("commit/prepare").
func (s *server) rbHead(t testing.TB) string {
	t.Helper()
	if s.eventStore != "" { // KurrentDB: the log's head, read through the store
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		h, err := s.log.Head(ctx)
		if err != nil {
			t.Fatalf("log head: %v", err)
		}
		return h.String()
	}
	return s.queryText(t, `SELECT tx::text || '/' || seq FROM events ORDER BY tx DESC, seq DESC LIMIT 1`)[0]
}

// rbCheckpoints returns each projector's checkpoint ("name commit/prepare").
func (s *server) rbCheckpoints(t testing.TB) []string {
	t.Helper()
	return s.queryText(t, `SELECT name || ' ' || commit_tx || '/' || prepare FROM projection_checkpoints ORDER BY name`)
}

// rbPublished is the number of events the NATS relay publishes: those of
// the show, reservation and order streams (not reservation-order-{id}, not
// intents).
func (s *server) rbPublished(t testing.TB) int {
	t.Helper()
	if s.eventStore != "" { // KurrentDB: count in the log read through the store
		n := 0
		for _, e := range s.readLog(t) {
			if !strings.HasPrefix(e.Stream, "reservation-order-") && (strings.HasPrefix(e.Stream, "show-") ||
				strings.HasPrefix(e.Stream, "reservation-") || strings.HasPrefix(e.Stream, "order-")) {
				n++
			}
		}
		return n
	}
	return s.queryInt(t, `SELECT count(*) FROM events WHERE stream NOT LIKE 'reservation-order-%'
AND (stream LIKE 'show-%' OR stream LIKE 'reservation-%' OR stream LIKE 'order-%')`)
}

// rbNATSMsgs returns the number of messages in JetStream stream BOOKING.
func rbNATSMsgs(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, state := bookingStream(ctx, t, js)
	return state.Msgs
}

// bookingStream returns JetStream stream BOOKING and its state now.
func bookingStream(ctx context.Context, t testing.TB, js jetstream.JetStream) (jetstream.Stream, jetstream.StreamState) {
	t.Helper()
	st, err := js.Stream(ctx, "BOOKING")
	if err != nil {
		t.Fatalf("NATS: stream BOOKING: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("NATS: stream BOOKING info: %v", err)
	}
	return st, info.State
}

// rbOutside is what the world outside the database has seen: the provider
// simulator's charges, refunds and webhook deliveries, and the NATS stream.
type rbOutside struct {
	Charges, Refunds, Deliveries, SimEvents int
	NATSMsgs                                uint64
}

func (s *server) rbOutside(t testing.TB, js jetstream.JetStream) rbOutside {
	t.Helper()
	return rbOutside{
		Charges:    len(s.charges(t).All),
		Refunds:    len(s.simRefunds(t)),
		Deliveries: len(s.simDeliveries(t)),
		SimEvents:  len(s.simEvents(t)),
		NATSMsgs:   rbNATSMsgs(t, js),
	}
}

// rbListOrders returns the token's actor's orders from GET /v1/orders (the
// read model), following next_cursor, by id, and the Booking-Position of the
// first page.
func (s *server) rbListOrders(t testing.TB, token string) (map[string]map[string]any, string) {
	t.Helper()
	out := map[string]map[string]any{}
	path, pos := "/v1/orders?limit=2", ""
	for page := 0; ; page++ {
		r := s.do(t, "GET", path, token, "", nil)
		wantStatus(t, r, http.StatusOK)
		if page == 0 {
			pos = r.Header.Get("Booking-Position")
		}
		items, _ := r.get("items").([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			if id, _ := m["id"].(string); id != "" {
				if _, dup := out[id]; dup {
					t.Errorf("GET /v1/orders: order %s on two pages", id)
				}
				out[id] = m
			}
		}
		next, _ := r.get("next_cursor").(string)
		if next == "" {
			return out, pos
		}
		if page > 100 {
			t.Fatalf("GET /v1/orders: more than 100 pages")
		}
		path = "/v1/orders?limit=2&cursor=" + next
	}
}

// rbRebuild runs `booking projections rebuild` as its own process with only
// DATABASE_URL (and BOOKING_EVENT_STORE on KurrentDB; the service's intent
// retention, the default) and
// returns its exit code and output.
func (s *server) rbRebuild(t testing.TB) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bookingBin, "projections", "rebuild")
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BOOKING_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "DATABASE_URL="+s.dbURL)
	if s.eventStore != "" {
		cmd.Env = append(cmd.Env, "BOOKING_EVENT_STORE="+s.eventStore)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	fmt.Fprintf(s.logs, "=== e2e: booking projections rebuild (%s, exit %d):\n%s", time.Since(start).Round(time.Millisecond), code, out)
	t.Logf("booking projections rebuild: exit %d in %s: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
	return code, string(out)
}

// rbCancel cancels an order, repeating under the same key while the answer
// is retryable (503, 409 idempotency-key-in-use).
func (s *server) rbCancel(t testing.TB, token, id string) *resp {
	t.Helper()
	c, err := s.sendRepeating(context.Background(), call{Method: "POST", Path: "/v1/orders/" + id + "/cancel", Token: token, Key: keyOf(newKey())})
	if err != nil {
		t.Fatalf("POST /v1/orders/%s/cancel: %v", id, err)
	}
	return c
}

// TestRebuild_EqualsLiveTwiceAndTouchesNoProviderOrNATS: after a mixed live
// run (confirmed orders, declines, a cancel of a confirmed order and of a
// pending one, an expired hold, a held reservation, webhooks), `booking
// projections rebuild` run while the service keeps running exits 0 and
// leaves every read-model table and the checkpoints equal row for row to the
// live ones, twice in a row; the simulator's charges, refunds, events and
// webhook deliveries and the NATS stream BOOKING do not change; the live
// projector goes on after the swaps.
func TestRebuild_EqualsLiveTwiceAndTouchesNoProviderOrNATS(t *testing.T) {
	t.Parallel()
	s := mustStart(t, Options{Env: fastEnv("BOOKING_RESERVATION_HOLD", "8s")})

	nc, err := nats.Connect("nats://"+s.natsAddr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS: connect to %s: %v", s.natsAddr, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("NATS: jetstream: %v", err)
	}

	// ---- the live workload
	showA := s.mustCreateShow(t, 10)
	showB := s.mustCreateShow(t, 6)
	showC := s.mustCreateShow(t, 20)
	owner := map[string]string{} // order id → token

	order := func(token, show string, qty int, card string, want int) string {
		t.Helper()
		res := s.mustReserve(t, token, show, qty)
		r := s.do(t, "POST", "/v1/orders", token, newKey(), orderBody(res, card))
		wantStatus(t, r, want)
		id := orderIDOf(t, r)
		owner[id] = token
		return id
	}
	// Confirmed orders, one repeated under its key (a replay).
	order(tokAlice, showA, 2, "tok_visa", http.StatusCreated)
	order(tokBob, showC, 3, "tok_visa", http.StatusCreated)
	{
		res := s.mustReserve(t, tokAlice, showB, 1)
		key := newKey()
		first := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
		wantStatus(t, first, http.StatusCreated)
		again := s.do(t, "POST", "/v1/orders", tokAlice, key, orderBody(res, "tok_visa"))
		wantStatus(t, again, http.StatusCreated)
		owner[first.str("id")] = tokAlice
	}
	// Declines.
	order(tokAlice, showB, 2, "tok_decline", http.StatusPaymentRequired)
	order(tokBob, showA, 1, "tok_decline", http.StatusPaymentRequired)
	// A confirmed order cancelled: 200 cancelled, refund through a webhook.
	cancelConfirmed := order(tokAlice, showC, 2, "tok_visa", http.StatusCreated)
	if c := s.rbCancel(t, tokAlice, cancelConfirmed); c.Status != http.StatusOK || c.str("status") != "cancelled" {
		t.Errorf("%s, want 200 cancelled", c)
	}
	// A pending order (tok_slow, Prefer: wait=0) cancelled while its payment
	// attempt is in flight: 202 cancelling. The send is held at
	// payment.fenced (the attempt started, the provider not yet called)
	// until the cancel has answered, so the cancel cannot come before the
	// attempt (200 cancelled) or after the charge.
	{
		res := s.mustReserve(t, tokBob, showA, 1)
		s.armHold(t, "payment.fenced")
		r := s.doCall(t, call{Method: "POST", Path: "/v1/orders", Token: tokBob, Key: keyOf(newKey()),
			Body: orderBody(res, "tok_slow"), Header: map[string]string{"Prefer": "wait=0"}})
		wantStatus(t, r, http.StatusAccepted)
		owner[r.str("id")] = tokBob
		s.waitHeld(t, "payment.fenced", 1)
		c := s.rbCancel(t, tokBob, r.str("id"))
		s.releaseHold(t, "payment.fenced")
		if c.Status != http.StatusAccepted || c.str("status") != "cancelling" {
			t.Errorf("%s, want 202 cancelling", c)
		}
	}
	// A pending order left to finish on its own (confirmed later).
	{
		res := s.mustReserve(t, tokBob, showC, 1)
		r := s.doCall(t, call{Method: "POST", Path: "/v1/orders", Token: tokBob, Key: keyOf(newKey()),
			Body: orderBody(res, "tok_slow"), Header: map[string]string{"Prefer": "wait=0"}})
		wantStatus(t, r, http.StatusAccepted)
		owner[r.str("id")] = tokBob
	}
	// A hold that expires (BOOKING_RESERVATION_HOLD 8s) and one more order
	// placed after it was taken.
	expiring := s.mustReserve(t, tokAlice, showB, 2)
	order(tokBob, showB, 1, "tok_visa", http.StatusCreated)

	// ---- settle: every order final, refunds done, the hold expired,
	// webhooks delivered, projectors and relay at the head of the log.
	final := map[string]bool{"confirmed": true, "cancelled": true, "failed": true}
	var lastList map[string]map[string]any
	if !eventually(60*time.Second, func() bool {
		lastList = map[string]map[string]any{}
		for _, tok := range []string{tokAlice, tokBob} {
			l, _ := s.rbListOrders(t, tok)
			for id, o := range l {
				lastList[id] = o
			}
		}
		for id := range owner {
			o, ok := lastList[id]
			if !ok || !final[fmt.Sprint(o["status"])] {
				return false
			}
			if p, _ := o["payment"].(map[string]any); o["status"] == "cancelled" && p["status"] == "refund_pending" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("GET /v1/orders: not every order final (and refunded if cancelled) within 60 s: %v", lastList)
	}
	if len(lastList) != len(owner) {
		t.Errorf("GET /v1/orders lists %d orders, want %d", len(lastList), len(owner))
	}
	if !eventually(30*time.Second, func() bool {
		r := s.do(t, "GET", "/v1/reservations/"+expiring, tokAlice, "", nil)
		return r.str("status") == "expired"
	}) {
		t.Errorf("reservation %s not expired 30 s after an 8 s hold", expiring)
	}
	if !eventually(30*time.Second, func() bool {
		delivered := map[string]bool{}
		for _, d := range s.simDeliveries(t) {
			if d.Delivered {
				delivered[d.EventID] = true
			}
		}
		for _, e := range s.simEvents(t) {
			if !delivered[e.ID] {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("GET /_sim/webhooks: not every simulator event delivered within 30 s: %+v", s.simDeliveries(t))
	}
	var head string
	var cps []string
	settled := eventually(30*time.Second, func() bool {
		s.settle(t)
		head = s.rbHead(t)
		cps = s.rbCheckpoints(t)
		if len(cps) != 4 {
			return false
		}
		for _, cp := range cps {
			if !strings.HasSuffix(cp, " "+head) {
				return false
			}
		}
		if s.queryInt(t, `SELECT count(*) FROM notify_relays WHERE commit_tx::text || '/' || prepare = $1`, head) != 1 {
			return false
		}
		if uint64(s.rbPublished(t)) != rbNATSMsgs(t, js) {
			return false
		}
		// Nothing moved meanwhile.
		return s.rbHead(t) == head && slices.Equal(s.rbCheckpoints(t), cps)
	})
	if !settled {
		t.Fatalf("read models not caught up within 30 s: head %s, checkpoints %v, relay at head %d, NATS %d of %d published",
			head, cps, s.queryInt(t, `SELECT count(*) FROM notify_relays WHERE commit_tx::text || '/' || prepare = $1`, head),
			rbNATSMsgs(t, js), s.rbPublished(t))
	}

	events := s.totalEvents(t)
	live := s.rbSnapshot(t)
	liveSchema := s.rbSchema(t)
	before := s.rbOutside(t, js)
	t.Logf("live run: %d events, head %s; rows %s; outside %+v", events, head, rbCounts(live), before)
	// The workload must have produced what this test is about.
	for _, st := range []string{"confirmed", "cancelled", "failed"} {
		if n := s.queryInt(t, `SELECT count(*) FROM rm_orders WHERE status = $1`, st); n == 0 {
			t.Errorf("rm_orders: no %s order after the workload", st)
		}
	}
	if before.Refunds < 2 || before.Deliveries == 0 || before.NATSMsgs == 0 {
		t.Errorf("workload: %+v, want at least 2 refunds, webhook deliveries and NATS messages", before)
	}
	if n := s.queryInt(t, `SELECT count(*) FROM rm_reservations WHERE status = 'expired'`); n != 1 {
		t.Errorf("rm_reservations: %d expired, want 1", n)
	}
	if n := s.queryInt(t, `SELECT count(*) FROM projection_checkpoints WHERE rebuilt_at IS NOT NULL`); n != 0 {
		t.Errorf("projection_checkpoints: %d rows with rebuilt_at before any rebuild", n)
	}
	if lq := s.queryText(t, `SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
AND c.relname LIKE 'rm\_%' ORDER BY 1`); len(lq) != len(rbTables) {
		t.Errorf("read-model tables in the database: %v, the test snapshots %d (update rbTables)", lq, len(rbTables))
	}

	// ---- rebuild twice while the service runs
	var lastRebuiltAt []string
	for i := 1; i <= 2; i++ {
		what := fmt.Sprintf("rebuild %d", i)
		code, out := s.rbRebuild(t)
		if code != 0 {
			t.Fatalf("%s: booking projections rebuild exited %d, want 0:\n%s", what, code, out)
		}
		// Nothing is appended meanwhile, so the live projectors, resuming from
		// the swapped checkpoints, have nothing to apply: compare at once
		// and once more a little later.
		if h := s.rbHead(t); h != head {
			t.Errorf("%s: the log head moved from %s to %s during the rebuild", what, head, h)
		}
		rbCompare(t, what, live, s.rbSnapshot(t))
		if got := s.rbSchema(t); !slices.Equal(got, liveSchema) {
			t.Errorf("%s: the shape of the read-model tables changed:\nbefore:\n  %s\nafter:\n  %s", what,
				strings.Join(liveSchema, "\n  "), strings.Join(got, "\n  "))
		}
		if left := s.queryText(t, `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace
AND relname ~ '_rebuild_[0-9]+' ORDER BY 1`); len(left) != 0 {
			t.Errorf("%s: fresh tables or indexes left behind: %v", what, left)
		}
		rebuiltAt := s.queryText(t, `SELECT name || ' ' || coalesce(rebuilt_at::text, 'NULL') FROM projection_checkpoints ORDER BY name`)
		for j, r := range rebuiltAt {
			if strings.HasSuffix(r, " NULL") {
				t.Errorf("%s: projection_checkpoints %s: rebuilt_at not set (was it swapped?)", what, r)
			}
			if lastRebuiltAt != nil && j < len(lastRebuiltAt) && lastRebuiltAt[j] == r {
				t.Errorf("%s: projection_checkpoints %s: rebuilt_at unchanged since the first rebuild (not swapped?)", what, r)
			}
		}
		lastRebuiltAt = rebuiltAt
		// The live projectors are back on their locks (the rebuild held
		// them): compare again once each has had the chance to apply
		// something.
		if !eventually(60*time.Second, func() bool { return s.rbProjectorsLocked(t) }) {
			t.Fatalf("%s: the live projectors did not take their locks back within 60 s", what)
		}
		rbCompare(t, what+" (live projectors back)", live, s.rbSnapshot(t))
		if after := s.rbOutside(t, js); after != before {
			t.Errorf("%s: simulator/NATS changed: before %+v, after %+v", what, before, after)
		}
		if n := s.totalEvents(t); n != events {
			t.Errorf("%s: the event store holds %d events, %d before the rebuild (the rebuild must only read)", what, n, events)
		}
	}
	for _, tok := range []string{tokAlice, tokBob} {
		l, pos := s.rbListOrders(t, tok)
		for id, o := range l {
			if w := lastList[id]; fmt.Sprint(w) != fmt.Sprint(o) {
				t.Errorf("GET /v1/orders after the rebuilds: order %s = %v, before %v", id, o, w)
			}
		}
		if pos != head {
			t.Errorf("GET /v1/orders after the rebuilds: Booking-Position %q, want the head %s", pos, head)
		}
	}

	// ---- the live projectors go on after the swaps
	newID := order(tokAlice, showA, 1, "tok_visa", http.StatusCreated)
	if !eventually(60*time.Second, func() bool {
		l, _ := s.rbListOrders(t, tokAlice)
		o, ok := l[newID]
		return ok && o["status"] == "confirmed"
	}) {
		l, pos := s.rbListOrders(t, tokAlice)
		t.Errorf("GET /v1/orders: order %s placed after the rebuilds not listed confirmed within 60 s (position %s, checkpoints %v, head %s): %v",
			newID, pos, s.rbCheckpoints(t), s.rbHead(t), l)
	}
	if !eventually(60*time.Second, func() bool {
		h := s.rbHead(t)
		for _, cp := range s.rbCheckpoints(t) {
			if !strings.HasSuffix(cp, " "+h) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("checkpoints %v not at the head %s 60 s after the new order", s.rbCheckpoints(t), s.rbHead(t))
	}
	if !eventually(60*time.Second, func() bool { return uint64(s.rbPublished(t)) == rbNATSMsgs(t, js) }) {
		t.Errorf("NATS: %d messages, want %d after the new order (the relay goes on)", rbNATSMsgs(t, js), s.rbPublished(t))
	}
}

// rbProjectorsLocked reports whether every projector's session advisory
// lock (pgcoord.Key: FNV-64a of "booking-worker:projection:NAME")
// is held.
func (s *server) rbProjectorsLocked(t testing.TB) bool {
	t.Helper()
	for _, name := range s.queryText(t, `SELECT name FROM projection_checkpoints ORDER BY name`) {
		h := fnv.New64a()
		h.Write([]byte("booking-worker:projection:" + name))
		k := h.Sum64()
		if s.queryInt(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid = $1::bigint::oid AND objid = $2::bigint::oid`, int64(k>>32), int64(k&0xffffffff)) != 1 {
			return false
		}
	}
	return true
}

// rbCounts summarizes a snapshot's row counts.
func rbCounts(s rbSnapshot) string {
	var parts []string
	for _, tb := range rbTables {
		parts = append(parts, fmt.Sprintf("%s=%d", tb.name, len(s[tb.name])))
	}
	return strings.Join(parts, " ")
}
