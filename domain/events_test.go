package domain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// update rewrites the golden files from goldenEvents: go test ./domain -run Golden -update.
// Stored events never change, so a diff in testdata/events is a breaking
// change unless it only adds a file for a new event type.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/events")

// Fixed values of the golden events. They are literals, not shared with the
// other tests, so a change of a test fixture never touches a golden file.
const (
	goldenShowID    = "0190f5a0-7c3e-7d21-9a4b-3c5d6e7f8a90"
	goldenResID     = "0190f5a1-02b4-7e8c-8f1d-2a3b4c5d6e7f"
	goldenOrderID   = "0190f5a1-5d20-7a66-b3c4-9e8d7c6b5a41"
	goldenActor     = "user-2f8e1c"
	goldenIntent    = "intent-9c1d6e0a4f2b8375e6d1c0b9a8f7e6d5c4b3a29181706f5e4d3c2b1a09f8e7d6"
	goldenChargeID  = "ch_01J2X8Q4ZK3V7M9N5P6R"
	goldenChargeID2 = "ch_01J2X8R7TT0W1X2Y3Z4A"
	goldenRefundID  = "re_01J2X9A1B2C3D4E5F6G7"
	goldenTicket1   = "6b4f5e0c-1d2a-5b3c-9e8f-7a6b5c4d3e21"
	goldenTicket2   = "0d7e8f9a-2b3c-5d4e-8f6a-1b2c3d4e5f62"
	goldenExecutor  = "booking-7d9f4c-0"
	goldenToken     = "tok_test_visa_4242"
	goldenKey       = "checkout-2030-05-20-0001"
)

var (
	goldenStartsAt   = time.Date(2030, 6, 1, 19, 30, 0, 0, time.UTC)
	goldenHeldAt     = time.Date(2030, 5, 20, 10, 0, 0, 123456000, time.UTC)
	goldenExpiresAt  = goldenHeldAt.Add(15 * time.Minute)
	goldenOrderedAt  = time.Date(2030, 5, 20, 10, 3, 7, 654321000, time.UTC)
	goldenPrice      = domain.Money{Amount: 4250, Currency: "EUR"}
	goldenAmount     = domain.Money{Amount: 8500, Currency: "EUR"}
	goldenReqBody    = `{"amount":8500,"currency":"EUR","description":"2 ticket(s), order ` + goldenOrderID + `","reference":"order-` + goldenOrderID + `","source":"` + goldenToken + `"}`
	goldenTokenHash  = sha256Hex(goldenToken)
	goldenProviderID = "prod-order-" + goldenOrderID + "-1"
)

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// goldenEvents returns a representative, fully populated value of every
// event type, keyed by type name. IntentRecorded's maps must hold values as
// encoding/json decodes them from the store (numbers as float64) for the
// decode round trip to compare equal.
func goldenEvents() map[string]domain.Event {
	evs := []domain.Event{
		domain.ShowScheduled{ShowID: goldenShowID, Name: "Café Tacuba & Friends <Live>", StartsAt: goldenStartsAt, Capacity: 1200, Price: goldenPrice},
		domain.SeatsHeld{ShowID: goldenShowID, ReservationID: goldenResID, Actor: goldenActor, Intent: goldenIntent,
			Quantity: 2, Amount: goldenAmount, ExpiresAt: goldenExpiresAt},
		domain.SeatsReleased{ShowID: goldenShowID, ReservationID: goldenResID, Quantity: 2, Reason: domain.ReleasePaymentFailed},

		domain.ReservationHeld{ReservationID: goldenResID, ShowID: goldenShowID, Actor: goldenActor, Quantity: 2, Amount: goldenAmount, ExpiresAt: goldenExpiresAt},
		domain.ReservationOrdered{ReservationID: goldenResID, OrderID: goldenOrderID},
		domain.ReservationExpired{ReservationID: goldenResID},
		domain.ReservationReleased{ReservationID: goldenResID, OrderID: goldenOrderID, Reason: domain.ReleaseCancelled},

		domain.OrderClaimed{ReservationID: goldenResID, OrderID: goldenOrderID, ShowID: goldenShowID, Actor: goldenActor, Intent: goldenIntent,
			Quantity: 2, Amount: goldenAmount},
		domain.ExpiryClaimed{ReservationID: goldenResID, ShowID: goldenShowID, Quantity: 2},

		domain.OrderPlaced{OrderID: goldenOrderID, ReservationID: goldenResID, ShowID: goldenShowID, Actor: goldenActor, Intent: goldenIntent,
			Quantity: 2, Amount: goldenAmount, PaymentDeadline: goldenOrderedAt.Add(10 * time.Minute),
			Private: &domain.OrderPrivate{PaymentToken: goldenToken}},
		domain.PaymentAttemptStarted{OrderID: goldenOrderID, Attempt: 1, ProviderKey: goldenProviderID, Owner: goldenExecutor,
			LeaseUntil: goldenOrderedAt.Add(30 * time.Second), Amount: goldenAmount, StartedAt: goldenOrderedAt,
			RequestSHA256: sha256Hex(goldenReqBody), Private: &domain.AttemptPrivate{RequestBody: goldenReqBody}},
		domain.PaymentSucceeded{OrderID: goldenOrderID, Attempt: 1, ChargeID: goldenChargeID, Amount: goldenAmount},
		domain.PaymentFailed{OrderID: goldenOrderID, Attempt: 2, ChargeID: goldenChargeID2, Code: "card_declined", Reason: "the payment was declined"},
		domain.PaymentOutcomeUnknown{OrderID: goldenOrderID, Attempt: 1, Reason: "no definitive answer from the provider"},
		domain.OrderConfirmed{OrderID: goldenOrderID, Tickets: []domain.Ticket{{ID: goldenTicket1}, {ID: goldenTicket2}}},
		domain.OrderFailed{OrderID: goldenOrderID, Reason: domain.FailPaymentDeclined},
		domain.OrderCancelRequested{OrderID: goldenOrderID, Actor: goldenActor},
		domain.OrderCancelled{OrderID: goldenOrderID, VoidedTickets: []string{goldenTicket1, goldenTicket2}},
		domain.RefundRequested{OrderID: goldenOrderID, ChargeID: goldenChargeID, Amount: goldenAmount, Key: domain.RefundKey(goldenChargeID), Reason: "cancelled"},
		domain.RefundSucceeded{OrderID: goldenOrderID, ChargeID: goldenChargeID, RefundID: goldenRefundID, Amount: goldenAmount},
		domain.RefundRefused{OrderID: goldenOrderID, ChargeID: goldenChargeID, Code: "resource_missing", Reason: "No such charge."},
		domain.OrderNeedsReview{OrderID: goldenOrderID, Reason: "two successful charges: " + goldenChargeID + " and " + goldenChargeID2},

		domain.IntentRecorded{Actor: goldenActor, Operation: "POST /v1/orders", KeySHA256: sha256Hex(goldenKey),
			// commands.Fingerprint(1, "POST /v1/orders", Command).
			Fingerprint: "8713878d06a46fe654938adf997e41c1c0ee02f1f7309358655e65046ca6f289", CanonicalVersion: 1,
			Command:  map[string]any{"reservation_id": goldenResID, "payment": map[string]any{"token_sha256": goldenTokenHash}},
			TargetID: goldenOrderID, Executor: goldenExecutor, LeaseUntil: goldenOrderedAt.Add(30 * time.Second),
			Private: map[string]any{"payment_token": goldenToken}},
		domain.IntentResumed{Executor: "booking-7d9f4c-1", LeaseUntil: goldenOrderedAt.Add(2 * time.Minute)},
		domain.IntentRejected{Status: 409, Kind: "conflict", Code: "reservation-already-ordered",
			Detail: "the reservation already has order " + goldenOrderID, ResourceID: goldenOrderID},
	}
	m := make(map[string]domain.Event, len(evs))
	for _, e := range evs {
		m[e.EventType()] = e
	}
	return m
}

func goldenPath(typ string) string { return filepath.Join("testdata", "events", typ+".json") }

// TestGoldenEvents pins the JSON encoding of every event type: marshalling
// the representative value gives the golden file byte for byte, and decoding
// the golden file through the eventstore registry gives the value back.
func TestGoldenEvents(t *testing.T) {
	t.Parallel()
	samples := goldenEvents()
	types := domain.EventTypes()
	typed := make([]eventstore.Typed, len(types))
	for i, e := range types {
		typed[i] = e
	}
	reg := eventstore.NewRegistry(typed...)
	for _, zero := range types {
		name := zero.EventType()
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sample, ok := samples[name]
			if !ok {
				t.Fatalf("goldenEvents() has no value of %s: add a fully populated one and run go test ./domain -run Golden -update", name)
			}
			if got, want := reflect.TypeOf(sample), reflect.TypeOf(zero); got != want {
				t.Fatalf("goldenEvents()[%q] is a %v, want %v", name, got, want)
			}
			checkPopulated(t, name, reflect.ValueOf(sample))

			got, err := json.Marshal(sample)
			if err != nil {
				t.Fatalf("json.Marshal(%s) error = %v", name, err)
			}
			if *update {
				if err := os.MkdirAll(filepath.Dir(goldenPath(name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(goldenPath(name), got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenPath(name))
			if err != nil {
				t.Fatalf("reading the golden file of %s: %v (add it with go test ./domain -run Golden -update)", name, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("json.Marshal(%s) = %s, want %s (golden %s)", name, got, want, goldenPath(name))
			}

			// The store writes exactly these bytes.
			ed, err := eventstore.Encode(goldenResID, sample, eventstore.Metadata{SchemaVersion: domain.SchemaVersion})
			if err != nil {
				t.Fatalf("eventstore.Encode(%s) error = %v", name, err)
			}
			if ed.Type != name || !bytes.Equal(ed.Data, want) {
				t.Errorf("eventstore.Encode(%s) = type %q data %s, want type %q data %s", name, ed.Type, ed.Data, name, want)
			}

			decoded, err := reg.Decode(name, want)
			if err != nil {
				t.Fatalf("Registry.Decode(%q, golden) error = %v", name, err)
			}
			if diff := cmp.Diff(sample, decoded); diff != "" {
				t.Errorf("Registry.Decode(%q, golden) mismatch (-want +got):\n%s", name, diff)
			}
			again, err := json.Marshal(decoded)
			if err != nil {
				t.Fatalf("json.Marshal(decoded %s) error = %v", name, err)
			}
			if !bytes.Equal(again, want) {
				t.Errorf("json.Marshal(Decode(golden %s)) = %s, want the golden bytes %s", name, again, want)
			}
		})
	}
}

// TestGoldenFilesHaveEventTypes fails for a golden file whose type is no
// longer registered: stored events of that type could not be read.
func TestGoldenFilesHaveEventTypes(t *testing.T) {
	if *update {
		t.Skip("the golden files are being rewritten by TestGoldenEvents")
	}
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "events", "*"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, e := range domain.EventTypes() {
		known[e.EventType()+".json"] = true
	}
	if len(files) == 0 {
		t.Fatalf("no golden files in testdata/events")
	}
	for _, f := range files {
		if !known[filepath.Base(f)] {
			t.Errorf("golden file %s names no type of domain.EventTypes()", f)
		}
	}
}

// TestGoldenEventsHaveEventTypes fails for a golden value of a type that
// EventTypes does not return (it would never be decoded).
func TestGoldenEventsHaveEventTypes(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, e := range domain.EventTypes() {
		known[e.EventType()] = true
	}
	for name := range goldenEvents() {
		if !known[name] {
			t.Errorf("goldenEvents() has %s, which domain.EventTypes() does not return", name)
		}
	}
}

// checkPopulated fails for a zero field anywhere in v, so the golden files
// pin every field (including omitempty ones).
func checkPopulated(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	if v.IsZero() {
		t.Errorf("golden value %s is zero: populate it so its encoding is pinned", path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		checkPopulated(t, path, v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				checkPopulated(t, path+"."+f.Name, v.Field(i))
			}
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			t.Errorf("golden value %s is empty: populate it so its encoding is pinned", path)
		}
		if v.Kind() == reflect.Slice {
			for i := range v.Len() {
				checkPopulated(t, path+"[]", v.Index(i))
			}
		}
	}
}

func TestEventTypes(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, e := range domain.EventTypes() {
		name := e.EventType()
		typ := reflect.TypeOf(e)
		if seen[name] {
			t.Errorf("EventTypes() has %s twice", name)
		}
		seen[name] = true
		if typ.Kind() != reflect.Struct {
			t.Errorf("EventTypes() has %s as a %v, want a struct value (decoded values are not pointers)", name, typ.Kind())
		}
		if typ.Name() != name {
			t.Errorf("EventTypes() has Go type %s named %q; want the Go type's name as its stable name", typ.Name(), name)
		}
		if !reflect.ValueOf(e).IsZero() {
			t.Errorf("EventTypes() has a non-zero %s, want zero values", name)
		}
	}
	if domain.SchemaVersion != 1 {
		t.Errorf("SchemaVersion = %d, want 1: a new version needs golden files of its own and upcasting", domain.SchemaVersion)
	}
}

func TestMoneyTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    domain.Money
		n    int
		want domain.Money
	}{
		{"A price times a seat count is the total in the same currency.", domain.Money{Amount: 2500, Currency: "EUR"}, 3, domain.Money{Amount: 7500, Currency: "EUR"}},
		{"A price times one is the price.", domain.Money{Amount: 1999, Currency: "USD"}, 1, domain.Money{Amount: 1999, Currency: "USD"}},
		{"A free price times any count is free.", domain.Money{Amount: 0, Currency: "EUR"}, 20, domain.Money{Amount: 0, Currency: "EUR"}},
		{"The largest amount times the largest hold stays exact in int64.", domain.Money{Amount: domain.MaxAmountMinor, Currency: "EUR"}, domain.MaxSeatsPerHold,
			domain.Money{Amount: domain.MaxAmountMinor * domain.MaxSeatsPerHold, Currency: "EUR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.m.Times(tt.n); got != tt.want {
				t.Errorf("%+v.Times(%d) = %+v, want %+v", tt.m, tt.n, got, tt.want)
			}
		})
	}
}

func TestStreamNames(t *testing.T) {
	t.Parallel()
	id := "0190f5a0-7c3e-7d21-9a4b-3c5d6e7f8a90"
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"A show's stream is show-{id}.", domain.ShowStream(id), "show-" + id},
		{"A reservation's stream is reservation-{id}.", domain.ReservationStream(id), "reservation-" + id},
		{"A reservation's uniqueness stream is reservation-order-{id}.", domain.ClaimStream(id), "reservation-order-" + id},
		{"An order's stream is order-{id}.", domain.OrderStream(id), "order-" + id},
	}
	names := []string{}
	for _, tt := range tests {
		names = append(names, tt.got)
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Errorf("stream name = %q, want %q", tt.got, tt.want)
			}
		})
	}
	slices.Sort(names)
	if len(slices.Compact(names)) != len(tests) {
		t.Errorf("stream names of one id collide: %v", names)
	}
}
