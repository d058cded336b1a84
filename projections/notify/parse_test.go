package notify

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fakeMsg is the part of a jetstream.Msg parseNotification reads.
type fakeMsg struct {
	jetstream.Msg
	h    nats.Header
	data []byte
}

func (m fakeMsg) Headers() nats.Header { return m.h }
func (m fakeMsg) Subject() string      { return "booking.v1.order.o1.order_placed" }
func (m fakeMsg) Data() []byte         { return m.data }
func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return nil, errors.New("not a JetStream message")
}

// TestParseNotificationCorrelationID: the Booking-Request-Id header is the
// notification's CorrelationID, empty when the message has none.
func TestParseNotificationCorrelationID(t *testing.T) {
	t.Parallel()
	for _, want := range []string{"trace-me-123", ""} {
		h := nats.Header{HeaderMsgID: {"e1"}, HeaderStream: {"order-o1"}, HeaderRevision: {"0"}}
		if want != "" {
			h.Set(HeaderRequestID, want)
		}
		n, err := parseNotification(fakeMsg{h: h, data: []byte(`{"id":"e1","type":"OrderPlaced"}`)})
		if err != nil {
			t.Fatalf("parseNotification: %v", err)
		}
		if n.CorrelationID != want || n.MsgID != "e1" || n.Stream != "order-o1" {
			t.Errorf("parseNotification with Booking-Request-Id %q = CorrelationID %q, MsgID %q, Stream %q", want, n.CorrelationID, n.MsgID, n.Stream)
		}
	}
}
