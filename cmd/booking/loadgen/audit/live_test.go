package audit_test

// The rows that need real servers: read models against a real PostgreSQL
// (the live tables built by the same rebuild the audit replays into its
// scratch database) and NATS against a real JetStream server holding the
// notifications the relay would publish.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/cmd/booking/loadgen/audit"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
	"github.com/retrysafe/booking/projections"
	"github.com/retrysafe/booking/projections/notify"
)

// newLiveWorld is newWorld stored in a real PostgreSQL event store with its
// read models projected, and its notifications in a real JetStream stream;
// it returns the world, the sources with every one set, the JetStream
// context and an SQL runner on the service database.
func newLiveWorld(t *testing.T) (*world, audit.Sources, jetstream.JetStream, func(sql string)) {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t)
	dbURL := pgtest.NewDatabase(t)
	pool := pgtest.NewPool(t, dbURL)
	store := pgstore.New(pool)
	for _, e := range w.log.events {
		stream, data := liveIDs.Replace(e.Stream), []byte(liveIDs.Replace(string(e.Data)))
		if _, err := store.Append(ctx, stream, eventstore.Any(), eventstore.EventData{ID: uuid.NewString(), Type: e.Type, Data: data, Metadata: e.Metadata}); err != nil {
			t.Fatalf("append %s: %v", e.Stream, err)
		}
	}
	for i := range w.charges {
		w.charges[i].Metadata = map[string]string{"order_id": strings.Trim(liveIDs.Replace(`"`+w.charges[i].Metadata["order_id"]+`"`), `"`)}
	}
	w.available = map[string]int{liveS1: w.available[show]}
	var recorded []eventstore.RecordedEvent
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		recorded, err = audit.ReadLog(ctx, store)
		if err != nil {
			t.Fatal(err)
		}
		if len(recorded) == len(w.log.events) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the log's readable head, not synchronizing
	}
	if len(recorded) != len(w.log.events) {
		t.Fatalf("read back %d events, want %d", len(recorded), len(w.log.events))
	}
	if _, err := projections.Rebuild(ctx, pool, store, projections.All(audit.DefaultIntentRetention), projections.RebuildOptions{}); err != nil {
		t.Fatalf("project the read models: %v", err)
	}

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notify.EnsureStream(ctx, js, notify.StreamSpec{Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, e := range recorded {
		msg, ok, err := notify.NewMessage(e)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	src := w.serve(t)
	src.Log, src.DatabaseURL, src.NATSURL = store, dbURL, ns.ClientURL()
	src.HTTP = &audit.HTTPStats{}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return w, src, js, exec
}

// The ids of newWorld as UUIDs (the read models want UUID stream ids).
const (
	liveS1 = "00000000-0000-4000-8000-0000000000a1"
	liveR1 = "00000000-0000-4000-8000-0000000000b1"
	liveR2 = "00000000-0000-4000-8000-0000000000b2"
	liveR3 = "00000000-0000-4000-8000-0000000000b3"
	liveO1 = "00000000-0000-4000-8000-0000000000c1"
	liveO2 = "00000000-0000-4000-8000-0000000000c2"
)

var liveIDs = strings.NewReplacer(
	"show-s1", "show-"+liveS1, `"s1"`, `"`+liveS1+`"`,
	"reservation-order-r1", "reservation-order-"+liveR1, "reservation-order-r3", "reservation-order-"+liveR3,
	"reservation-r1", "reservation-"+liveR1, "reservation-r2", "reservation-"+liveR2, "reservation-r3", "reservation-"+liveR3,
	`"r1"`, `"`+liveR1+`"`, `"r2"`, `"`+liveR2+`"`, `"r3"`, `"`+liveR3+`"`,
	"order-o1", "order-"+liveO1, "order-o2", "order-"+liveO2, "intent-o1", "intent-"+liveO1,
	`"o1"`, `"`+liveO1+`"`, `"o2"`, `"`+liveO2+`"`,
)

// TestCheckLiveRowsPassAndNameEachPlantedViolation: the clean world passes
// every row (nothing skipped); each planted fault fails its row naming it.
func TestCheckLiveRowsPassAndNameEachPlantedViolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name  string
		plant func(t *testing.T, w *world, src audit.Sources, js jetstream.JetStream, exec func(string))
		rule  audit.Rule
		want  string
	}{
		{"nothing planted", nil, "", ""},
		{"a read-model row changed", func(t *testing.T, _ *world, _ audit.Sources, _ jetstream.JetStream, exec func(string)) {
			exec(`UPDATE rm_orders SET status = 'cancelled' WHERE id = '` + liveO1 + `'`)
		}, audit.ReadModels, "rm_orders: row " + liveO1 + " differs: live (" + liveO1 + ","},
		{"a read-model row missing", func(t *testing.T, _ *world, _ audit.Sources, _ jetstream.JetStream, exec func(string)) {
			exec(`DELETE FROM rm_reservations WHERE id = '` + liveR2 + `'`)
		}, audit.ReadModels, "rm_reservations: rebuilt row missing live: (" + liveR2 + ","},
		{"a missing NATS message", func(t *testing.T, _ *world, _ audit.Sources, js jetstream.JetStream, _ func(string)) {
			s, err := js.Stream(ctx, notify.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteMsg(ctx, 3); err != nil { // the third message: ReservationHeld of r1
				t.Fatal(err)
			}
		}, audit.NATS, "(reservation-" + liveR1 + "@0, ReservationHeld) missing from the stream"},
		{"a duplicated NATS message", func(t *testing.T, _ *world, _ audit.Sources, js jetstream.JetStream, _ func(string)) {
			s, err := js.Stream(ctx, notify.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetMsg(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			h := nats.Header{}
			for k, v := range m.Header {
				if k != notify.HeaderMsgID { // past the duplicate window, as a relay bug would publish it
					h[k] = v
				}
			}
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: h, Data: m.Data}); err != nil {
				t.Fatal(err)
			}
		}, audit.NATS, "(show-" + liveS1 + "@0, ShowScheduled) in the stream 2 times"},
		{"a 500 seen by a client", func(t *testing.T, _ *world, src audit.Sources, _ jetstream.JetStream, _ func(string)) {
			src.HTTP.Record("POST", "/v1/orders", 500, false, "internal error")
			src.HTTP.Record("POST", "/v1/orders", 503, true, "")
			src.HTTP.Record("POST", "/v1/orders", 201, false, "")
		}, audit.HTTP500, "POST /v1/orders answered 500: internal error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, src, js, exec := newLiveWorld(t)
			if c.plant != nil {
				c.plant(t, w, src, js, exec)
			}
			rep := audit.Check(ctx, src, audit.Options{})
			var b strings.Builder
			rep.WriteTable(&b, 0)
			for _, row := range rep.Rows {
				if row.Skipped != "" {
					t.Errorf("row %q skipped (%s) with every source given", row.Rule, row.Skipped)
				}
				if row.Rule != c.rule && len(row.Violations) > 0 {
					t.Errorf("row %q: %q, want no violation:\n%s", row.Rule, row.Violations, b.String())
				}
			}
			if c.rule == "" {
				if !rep.OK() || rep.Published != 17 || rep.Messages != 17 || rep.Row(audit.ReadModels).Checked == 0 {
					t.Errorf("clean world: published %d, messages %d, read-model rows %d:\n%s",
						rep.Published, rep.Messages, rep.Row(audit.ReadModels).Checked, b.String())
				}
				return
			}
			row := rep.Row(c.rule)
			if len(row.Violations) != 1 && c.rule != audit.NATS {
				t.Errorf("row %q: %d violations, want 1: %q", c.rule, len(row.Violations), row.Violations)
			}
			if !strings.Contains(strings.Join(row.Violations, "\n"), c.want) {
				t.Errorf("row %q = %q, want one containing %q", c.rule, row.Violations, c.want)
			}
			if c.name == "a missing NATS message" && !strings.Contains(strings.Join(row.Violations, "\n"), "reservation-"+liveR1+": revision 0 missing from the stream") {
				t.Errorf("row %q = %q, want the gap named too", c.rule, row.Violations)
			}
			if !strings.Contains(b.String(), "VIOLATION: "+string(c.rule)+": ") {
				t.Errorf("table does not name the violation:\n%s", b.String())
			}
		})
	}
}
