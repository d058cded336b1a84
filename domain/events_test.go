package domain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
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
	goldenPaymentID = "pi_3PqZ8eKJ2vX9w1aB0c4D5e6F"
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

// Sealed bytes of the version-2 golden events: opaque to the domain, so
// fixed bytes in the shape of an AES-256-GCM ciphertext (format byte 1, a
// 12-byte nonce, the sealed bytes and a 16-byte tag) pin the encoding.
var (
	goldenSealedToken  = mustHex("01" + "a3c1f0e2d4b6988a7c5e3f21" + "5be0c7d19a3f6e24b8d0c1a9e7f3" + "8d2b4f6a1c3e5d7f9b0a2c4e6f8d1b3a")
	goldenSealedAction = mustHex("01" + "5a7c9e1b3d5f7a9c1e3b5d7f" + "e2c4a6b8d0f2e4c6a8b0d2e4f6a8c0e2b4d6" + "a1c3e5f7b9d1a3c5e7f9b1d3f5a7c9e1")
	goldenSealedBody   = mustHex("01" + "7e9c2a4b6d8f0e1c3a5b7d9f" + "c4e6a8b0d2f4e6a8c0b2d4f6a8c0e2b4d6f8a0c2e4b6d8f0a2c4e6b8d0f2" + "19f3b5d7e9a1c3e5f7b9d1a3c5e7f9b1")
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// golden is a representative, fully populated value of one event type at
// one schema version. absent names the fields (by path, as checkPopulated
// reports them) that belong to other versions of the type and stay zero.
type golden struct {
	version int
	e       domain.Event
	absent  []string
}

// goldenEvents returns the golden values of every event type, keyed by type
// name, one per schema version ever written (oldest first): stored events
// of every version must still decode. IntentRecorded's maps must hold values
// as encoding/json decodes them from the store (numbers as float64) for the
// decode round trip to compare equal.
func goldenEvents() map[string][]golden {
	v1 := func(e domain.Event, absent ...string) golden { return golden{version: 1, e: e, absent: absent} }
	v2 := func(e domain.Event, absent ...string) golden { return golden{version: 2, e: e, absent: absent} }
	placed := domain.OrderPlaced{OrderID: goldenOrderID, ReservationID: goldenResID, ShowID: goldenShowID, Actor: goldenActor, Intent: goldenIntent,
		Quantity: 2, Amount: goldenAmount, PaymentDeadline: goldenOrderedAt.Add(10 * time.Minute)}
	placedV1, placedV2 := placed, placed
	placedV1.Private = &domain.OrderPrivate{PaymentToken: goldenToken}
	placedV2.Private = &domain.OrderPrivate{SealedPaymentToken: goldenSealedToken}
	started := domain.PaymentAttemptStarted{OrderID: goldenOrderID, Attempt: 1, ProviderKey: goldenProviderID, Owner: goldenExecutor,
		LeaseUntil: goldenOrderedAt.Add(30 * time.Second), Amount: goldenAmount, StartedAt: goldenOrderedAt,
		RequestSHA256: sha256Hex(goldenReqBody)}
	startedV1, startedV2, startedV3 := started, started, started
	startedV1.Private = &domain.AttemptPrivate{RequestBody: goldenReqBody}
	startedV2.Private = &domain.AttemptPrivate{SealedRequestBody: goldenSealedBody}
	// Version 3: the digest of the attempt's inputs (pinned by commands.TestAttemptDigestIsPinned).
	startedV3.RequestSHA256 = "86dadbb3d885ab5cc01d0e26dd269b8a7fde4528526b936dcb811d1f135aa9ec"
	startedV3.Description, startedV3.Deployment = "2 ticket(s), order "+goldenOrderID, "prod"
	intent := domain.IntentRecorded{Actor: goldenActor, Operation: "POST /v1/orders", KeySHA256: sha256Hex(goldenKey),
		// commands.Fingerprint(1, "POST /v1/orders", Command).
		Fingerprint: "8713878d06a46fe654938adf997e41c1c0ee02f1f7309358655e65046ca6f289", CanonicalVersion: 1,
		Command:  map[string]any{"reservation_id": goldenResID, "payment": map[string]any{"token_sha256": goldenTokenHash}},
		TargetID: goldenOrderID, Executor: goldenExecutor, LeaseUntil: goldenOrderedAt.Add(30 * time.Second)}
	intentV1 := intent
	intentV1.Private = map[string]any{"payment_token": goldenToken}

	evs := []golden{
		v1(domain.ShowScheduled{ShowID: goldenShowID, Name: "Café Tacuba & Friends <Live>", StartsAt: goldenStartsAt, Capacity: 1200, Price: goldenPrice}),
		v1(domain.SeatsHeld{ShowID: goldenShowID, ReservationID: goldenResID, Actor: goldenActor, Intent: goldenIntent,
			Quantity: 2, Amount: goldenAmount, ExpiresAt: goldenExpiresAt}),
		v1(domain.SeatsReleased{ShowID: goldenShowID, ReservationID: goldenResID, Quantity: 2, Reason: domain.ReleasePaymentFailed}),

		v1(domain.ReservationHeld{ReservationID: goldenResID, ShowID: goldenShowID, Actor: goldenActor, Quantity: 2, Amount: goldenAmount, ExpiresAt: goldenExpiresAt}),
		v1(domain.ReservationOrdered{ReservationID: goldenResID, OrderID: goldenOrderID}),
		v1(domain.ReservationExpired{ReservationID: goldenResID}),
		v1(domain.ReservationReleased{ReservationID: goldenResID, OrderID: goldenOrderID, Reason: domain.ReleaseCancelled}),

		v1(domain.OrderClaimed{ReservationID: goldenResID, OrderID: goldenOrderID, ShowID: goldenShowID, Actor: goldenActor, Intent: goldenIntent,
			Quantity: 2, Amount: goldenAmount}),
		v1(domain.ExpiryClaimed{ReservationID: goldenResID, ShowID: goldenShowID, Quantity: 2}),

		// Version 1 held the token and the request bytes in clear; version 2
		// holds them sealed under the order's data key.
		v1(placedV1, "OrderPlaced.Private.SealedPaymentToken"),
		v2(placedV2, "OrderPlaced.Private.PaymentToken"),
		// Version 3 holds the attempt's inputs instead of request bytes.
		v1(startedV1, "PaymentAttemptStarted.Private.SealedRequestBody", "PaymentAttemptStarted.Description", "PaymentAttemptStarted.Deployment"),
		v2(startedV2, "PaymentAttemptStarted.Private.RequestBody", "PaymentAttemptStarted.Description", "PaymentAttemptStarted.Deployment"),
		{version: 3, e: startedV3, absent: []string{"PaymentAttemptStarted.Private"}},
		v1(domain.PaymentSucceeded{OrderID: goldenOrderID, Attempt: 1, ChargeID: goldenChargeID, Amount: goldenAmount}),
		v1(domain.PaymentFailed{OrderID: goldenOrderID, Attempt: 2, ChargeID: goldenChargeID2, Code: "card_declined", Reason: "the payment was declined"}),
		v1(domain.PaymentOutcomeUnknown{OrderID: goldenOrderID, Attempt: 1, Reason: "no definitive answer from the provider"}),
		v1(domain.PaymentActionRequired{OrderID: goldenOrderID, Attempt: 1, PaymentID: goldenPaymentID,
			Private: &domain.ActionPrivate{SealedAction: goldenSealedAction}}),
		v1(domain.OrderConfirmed{OrderID: goldenOrderID, Tickets: []domain.Ticket{{ID: goldenTicket1}, {ID: goldenTicket2}}}),
		v1(domain.OrderFailed{OrderID: goldenOrderID, Reason: domain.FailPaymentDeclined}),
		v1(domain.OrderCancelRequested{OrderID: goldenOrderID, Actor: goldenActor}),
		v1(domain.OrderCancelled{OrderID: goldenOrderID, VoidedTickets: []string{goldenTicket1, goldenTicket2}}),
		v1(domain.RefundRequested{OrderID: goldenOrderID, ChargeID: goldenChargeID, Amount: goldenAmount, Key: domain.RefundKey(goldenChargeID), Reason: "cancelled"}),
		v1(domain.RefundSucceeded{OrderID: goldenOrderID, ChargeID: goldenChargeID, RefundID: goldenRefundID, Amount: goldenAmount}),
		v1(domain.RefundRefused{OrderID: goldenOrderID, ChargeID: goldenChargeID, Code: "resource_missing", Reason: "No such charge."}),
		v1(domain.OrderNeedsReview{OrderID: goldenOrderID, Reason: "two successful charges: " + goldenChargeID + " and " + goldenChargeID2}),
		v1(domain.PaymentSecretsShredded{OrderID: goldenOrderID, ShreddedAt: time.Date(2030, 5, 20, 10, 20, 0, 123456000, time.UTC)}),

		// Version 1 held the payment token in clear in Private; version 2 has
		// no private part (the token waits sealed in the key table).
		v1(intentV1),
		v2(intent, "IntentRecorded.Private"),
		v1(domain.IntentResumed{Executor: "booking-7d9f4c-1", LeaseUntil: goldenOrderedAt.Add(2 * time.Minute)}),
		// Version 1 also stored the HTTP status it answered; version 2
		// stores the domain outcome (kind and code) only.
		v1(domain.IntentRejected{Status: 409, Kind: "conflict", Code: "reservation-already-ordered",
			Detail: "the reservation already has order " + goldenOrderID, ResourceID: goldenOrderID}),
		v2(domain.IntentRejected{Kind: "conflict", Code: "reservation-already-ordered",
			Detail: "the reservation already has order " + goldenOrderID, ResourceID: goldenOrderID}, "IntentRejected.Status"),
	}
	m := make(map[string][]golden, len(evs))
	for _, g := range evs {
		m[g.e.EventType()] = append(m[g.e.EventType()], g)
	}
	return m
}

// goldenPath names the golden file of typ at schema version: Type.json for
// version 1 (the files written before versions existed), Type.vN.json after.
func goldenPath(typ string, version int) string {
	if version == 1 {
		return filepath.Join("testdata", "events", typ+".json")
	}
	return filepath.Join("testdata", "events", fmt.Sprintf("%s.v%d.json", typ, version))
}

// TestGoldenEvents pins the JSON encoding of every event type at every
// schema version: marshalling the representative value gives the golden
// file byte for byte, and decoding the golden file through the eventstore
// registry gives the value back. Every version from 1 to the one written
// today (SchemaVersionOf) has a golden value, so old events keep decoding.
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
		current := domain.SchemaVersionOf(zero)
		versions := samples[name]
		if len(versions) != current {
			t.Errorf("goldenEvents() has %d version(s) of %s, want one per schema version 1..%d: add a fully populated value and run go test ./domain -run Golden -update",
				len(versions), name, current)
			continue
		}
		for i, g := range versions {
			t.Run(fmt.Sprintf("%s/v%d", name, g.version), func(t *testing.T) {
				t.Parallel()
				if g.version != i+1 {
					t.Fatalf("goldenEvents()[%q][%d] is version %d, want %d (oldest first)", name, i, g.version, i+1)
				}
				checkGolden(t, reg, zero, g)
			})
		}
	}
}

func checkGolden(t *testing.T, reg *eventstore.Registry, zero domain.Event, g golden) {
	name := zero.EventType()
	sample := g.e
	if got, want := reflect.TypeOf(sample), reflect.TypeOf(zero); got != want {
		t.Fatalf("goldenEvents()[%q] is a %v, want %v", name, got, want)
	}
	checkPopulated(t, name, reflect.ValueOf(sample), g.absent)

	got, err := json.Marshal(sample)
	if err != nil {
		t.Fatalf("json.Marshal(%s) error = %v", name, err)
	}
	path := goldenPath(name, g.version)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file of %s: %v (add it with go test ./domain -run Golden -update)", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("json.Marshal(%s) = %s, want %s (golden %s)", name, got, want, path)
	}

	// The store writes exactly these bytes.
	ed, err := eventstore.Encode(goldenResID, sample, eventstore.Metadata{SchemaVersion: g.version})
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
}

// TestGoldenFilesHaveEventTypes fails for a golden file whose type is no
// longer registered, or whose version is newer than the type's (stored
// events of that type could not be read), or that no golden value pins.
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
	for name, versions := range goldenEvents() {
		for _, g := range versions {
			known[goldenPath(name, g.version)] = true
		}
	}
	if len(files) == 0 {
		t.Fatalf("no golden files in testdata/events")
	}
	for _, f := range files {
		if !known[f] {
			t.Errorf("golden file %s names no type and version of goldenEvents()", f)
		}
	}
}

// TestGoldenEventsHaveEventTypes fails for a golden value of a type that
// EventTypes does not return (it would never be decoded), or of a version
// newer than the one the type is written at.
func TestGoldenEventsHaveEventTypes(t *testing.T) {
	t.Parallel()
	known := map[string]int{}
	for _, e := range domain.EventTypes() {
		known[e.EventType()] = domain.SchemaVersionOf(e)
	}
	for name, versions := range goldenEvents() {
		current, ok := known[name]
		if !ok {
			t.Errorf("goldenEvents() has %s, which domain.EventTypes() does not return", name)
		}
		for _, g := range versions {
			if g.version > current {
				t.Errorf("goldenEvents() has %s version %d, newer than SchemaVersionOf (%d)", name, g.version, current)
			}
		}
	}
}

// checkPopulated fails for a zero field anywhere in v, so the golden files
// pin every field (including omitempty ones), except the fields named in
// absent, which must be zero (they belong to another schema version).
func checkPopulated(t *testing.T, path string, v reflect.Value, absent []string) {
	t.Helper()
	if slices.Contains(absent, path) {
		if !v.IsZero() {
			t.Errorf("golden value %s belongs to another schema version: leave it zero", path)
		}
		return
	}
	if v.IsZero() {
		t.Errorf("golden value %s is zero: populate it so its encoding is pinned", path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		checkPopulated(t, path, v.Elem(), absent)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				checkPopulated(t, path+"."+f.Name, v.Field(i), absent)
			}
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			t.Errorf("golden value %s is empty: populate it so its encoding is pinned", path)
		}
		if v.Kind() == reflect.Slice {
			for i := range v.Len() {
				checkPopulated(t, path+"[]", v.Index(i), absent)
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
		t.Errorf("SchemaVersion = %d, want 1: it names the version of the types that never changed", domain.SchemaVersion)
	}
	want := map[string]int{"OrderPlaced": 2, "PaymentAttemptStarted": 3, "IntentRecorded": 2, "IntentRejected": 2}
	for _, e := range domain.EventTypes() {
		v, ok := want[e.EventType()]
		if !ok {
			v = domain.SchemaVersion
		}
		if got := domain.SchemaVersionOf(e); got != v {
			t.Errorf("SchemaVersionOf(%s) = %d, want %d: a new version needs golden files of its own", e.EventType(), got, v)
		}
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
