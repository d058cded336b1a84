package notify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// publishedFields is, for each golden event of the published streams (by
// file name: type, then schema version from 2 on), the exact set of data
// members a notification carries: the event's members
// without "private" and without the coordination internals (the intent
// stream of SeatsHeld and OrderPlaced; the lease holder, lease end and
// request digest of PaymentAttemptStarted).
var publishedFields = map[string][]string{
	domain.TypeShowScheduled:          {"capacity", "name", "price", "show_id", "starts_at"},
	domain.TypeSeatsHeld:              {"actor", "amount", "expires_at", "quantity", "reservation_id", "show_id"},
	domain.TypeSeatsReleased:          {"quantity", "reason", "reservation_id", "show_id"},
	domain.TypeReservationHeld:        {"actor", "amount", "expires_at", "quantity", "reservation_id", "show_id"},
	domain.TypeReservationOrdered:     {"order_id", "reservation_id"},
	domain.TypeReservationExpired:     {"reservation_id"},
	domain.TypeReservationReleased:    {"order_id", "reason", "reservation_id"},
	domain.TypeOrderPlaced:            {"actor", "amount", "order_id", "payment_deadline", "quantity", "reservation_id", "show_id"},
	domain.TypePaymentAttemptStarted:  {"amount", "attempt", "order_id", "provider_key", "started_at"},
	"PaymentAttemptStarted.v2":        {"amount", "attempt", "order_id", "provider_key", "started_at"},
	"PaymentAttemptStarted.v3":        {"amount", "attempt", "deployment", "description", "order_id", "provider_key", "started_at"},
	"OrderPlaced.v2":                  {"actor", "amount", "order_id", "payment_deadline", "quantity", "reservation_id", "show_id"},
	domain.TypePaymentSucceeded:       {"amount", "attempt", "charge_id", "order_id"},
	domain.TypePaymentFailed:          {"attempt", "charge_id", "code", "order_id", "reason"},
	domain.TypePaymentOutcomeUnknown:  {"attempt", "order_id", "reason"},
	domain.TypePaymentActionRequired:  {"attempt", "order_id", "payment_id"},
	domain.TypeOrderConfirmed:         {"order_id", "tickets"},
	domain.TypeOrderFailed:            {"order_id", "reason"},
	domain.TypeOrderCancelRequested:   {"actor", "order_id"},
	domain.TypeOrderCancelled:         {"order_id", "voided_tickets"},
	domain.TypeRefundRequested:        {"amount", "charge_id", "key", "order_id", "reason"},
	domain.TypeRefundSucceeded:        {"amount", "charge_id", "order_id", "refund_id"},
	domain.TypeRefundRefused:          {"charge_id", "code", "order_id", "reason"},
	domain.TypeOrderNeedsReview:       {"order_id", "reason"},
	domain.TypePaymentSecretsShredded: {"order_id", "shredded_at"},
}

// TestNotificationFieldSets: the notification of every stored event
// (domain's golden files, every schema version, every member set) has
// exactly the payload members {id, type, stream, revision, position,
// occurred_at, data}, and data exactly the members publishedFields lists
// for its file, with their stored values; events of the claim and intent
// streams are not published.
func TestNotificationFieldSets(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "domain", "testdata", "events", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden events: %v, %v", files, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		typ, _, _ := strings.Cut(name, ".")
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stream, published := streamOf(typ)
		e := eventstore.RecordedEvent{ID: uuid.NewString(), Stream: stream, Type: typ, Revision: 3,
			Data: data, Metadata: []byte(`{"occurred_at":"2030-05-20T10:03:07Z"}`)}
		msg, ok, err := NewMessage(e)
		if err != nil || ok != published {
			t.Errorf("%s: NewMessage = ok %v, %v; want ok %v and no error", filepath.Base(f), ok, err, published)
			continue
		}
		if !ok {
			continue
		}
		seen[name] = true
		var payload map[string]json.RawMessage
		if err := json.Unmarshal(msg.Data, &payload); err != nil {
			t.Fatalf("%s: payload %s: %v", filepath.Base(f), msg.Data, err)
		}
		if diff := cmp.Diff([]string{"data", "id", "occurred_at", "position", "revision", "stream", "type"}, keys(payload)); diff != "" {
			t.Errorf("%s: payload members (-want +got):\n%s", filepath.Base(f), diff)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(payload["data"], &got); err != nil {
			t.Fatalf("%s: data %s: %v", filepath.Base(f), payload["data"], err)
		}
		if diff := cmp.Diff(publishedFields[name], keys(got)); diff != "" {
			t.Errorf("%s: data members (-want +got):\n%s", filepath.Base(f), diff)
		}
		var stored map[string]json.RawMessage
		if err := json.Unmarshal(data, &stored); err != nil {
			t.Fatal(err)
		}
		for k, v := range got {
			if string(v) != string(stored[k]) {
				t.Errorf("%s: data.%s = %s, want the stored %s", filepath.Base(f), k, v, stored[k])
			}
		}
	}
	for name := range publishedFields {
		if !seen[name] {
			t.Errorf("no golden event %s was published", name)
		}
	}
}

// streamOf returns a stream that events of type typ are stored on, and
// whether that stream is published.
func streamOf(typ string) (string, bool) {
	id := uuid.NewString()
	switch {
	case strings.HasPrefix(typ, "Intent"):
		return domain.CategoryIntent + strings.Repeat("a", 64), false
	case typ == domain.TypeOrderClaimed || typ == domain.TypeExpiryClaimed:
		return domain.ClaimStream(id), false
	case typ == domain.TypeShowScheduled || typ == domain.TypeSeatsHeld || typ == domain.TypeSeatsReleased:
		return domain.ShowStream(id), true
	case strings.HasPrefix(typ, "Reservation"):
		return domain.ReservationStream(id), true
	}
	return domain.OrderStream(id), true
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
