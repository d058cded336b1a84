package natsrun

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/projections/notify"
)

// TestWriteNotification: one line per notification, the summary form or
// the payload as compact JSON; the Booking-Request-Id header, which carries
// the event's correlation_id, is labelled correlation_id (never
// request_id, the name of another of the event's ids).
func TestWriteNotification(t *testing.T) {
	t.Parallel()
	n := &notify.Notification{
		Payload: notify.Payload{ID: "e1", Stream: "order-o1", Revision: 3, Position: "7/12",
			OccurredAt: time.Date(2027, 6, 1, 20, 0, 0, 500, time.FixedZone("CEST", 7200))},
		MsgID: "e1", Subject: "booking.v1.order.OrderConfirmed", Body: []byte("{\n  \"id\": \"e1\",\n  \"revision\": 3\n}"),
	}
	for _, tt := range []struct {
		gap, asJSON bool
		correlation string
		want        string
	}{
		{false, false, "", "2027-06-01T18:00:00.0000005Z booking.v1.order.OrderConfirmed order-o1@3 id=e1 position=7/12\n"},
		{true, false, "", "2027-06-01T18:00:00.0000005Z booking.v1.order.OrderConfirmed order-o1@3 id=e1 position=7/12 gap=true\n"},
		{false, true, "", `{"id":"e1","revision":3}` + "\n"},
		// The Booking-Request-Id header (the correlation id), in both forms.
		{false, false, "trace-me-123", "2027-06-01T18:00:00.0000005Z booking.v1.order.OrderConfirmed order-o1@3 id=e1 position=7/12 correlation_id=trace-me-123\n"},
		{true, false, `a "b"`, "2027-06-01T18:00:00.0000005Z booking.v1.order.OrderConfirmed order-o1@3 id=e1 position=7/12 correlation_id=\"a \\\"b\\\"\" gap=true\n"},
		{false, true, "trace-me-123", `{"id":"e1","revision":3,"correlation_id":"trace-me-123"}` + "\n"},
		{false, true, `a "b"`, `{"id":"e1","revision":3,"correlation_id":"a \"b\""}` + "\n"},
	} {
		n.Gap, n.CorrelationID = tt.gap, tt.correlation
		var b bytes.Buffer
		writeNotification(&b, n, tt.asJSON)
		if b.String() != tt.want {
			t.Errorf("writeNotification(gap %v, json %v, correlation id %q) = %q, want %q", tt.gap, tt.asJSON, tt.correlation, b.String(), tt.want)
		}
	}
}

// TestTailNeedsTheStream: tail on a server without stream BOOKING refuses to
// start with a configuration error naming BOOKING_NATS_URL, and on no server
// says that NATS cannot be reached there.
func TestTailNeedsTheStream(t *testing.T) {
	t.Parallel()
	ns, err := startEmbedded(Config{Addr: "127.0.0.1:0", DataDir: t.TempDir()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	for url, want := range map[string]string{
		ns.ClientURL():       "invalid configuration: BOOKING_NATS_URL:",
		"nats://127.0.0.1:1": "cannot reach NATS at nats://127.0.0.1:1 (BOOKING_NATS_URL): ",
	} {
		err := Tail(t.Context(), TailConfig{URL: url, Durable: "t", Subject: notify.SubjectAll}, nil, &bytes.Buffer{}, quiet)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Tail on %s = %v, want an error containing %q", url, err, want)
		}
	}
}
