package notify

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestStreamBackend: stream BOOKING keeps the event store backend whose
// positions its messages carry. An empty stream takes the backend of
// whoever checks it (EnsureStream or CheckStream); a stream with messages
// from another backend is refused with a *StreamBackendError naming both
// and the way out; a stream without the marker counts as PostgreSQL's.
func TestStreamBackend(t *testing.T) {
	t.Parallel()
	js, err := jetstream.New(mustConnect(t, mustEmbedded(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pg, kdb := StreamSpec{Duplicates: time.Minute}, StreamSpec{Duplicates: time.Minute, Backend: "kurrentdb"}
	// A stream from before the marker: no metadata, one message.
	cfg := pg.config()
	cfg.Metadata = nil
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, SubjectPrefix+"order.1.OrderPlaced", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	var be *StreamBackendError
	for name, check := range map[string]func(context.Context, jetstream.JetStream, StreamSpec) (jetstream.Stream, error){
		"EnsureStream": EnsureStream, "CheckStream": CheckStream} {
		if _, err := check(ctx, js, kdb); !errors.As(err, &be) || be.Got != "postgres" || be.Want != "kurrentdb" || be.Messages != 1 ||
			!strings.Contains(err.Error(), "nats stream rm BOOKING") || !strings.Contains(err.Error(), "remove $BOOKING_DATA_DIR/nats") {
			t.Errorf("%s(kurrentdb) on a stream with a PostgreSQL message = %v; want a StreamBackendError postgres → kurrentdb naming the way out", name, err)
		}
		if _, err := check(ctx, js, pg); err != nil {
			t.Errorf("%s(postgres) on it = %v", name, err)
		}
	}
	// Emptied, it may change backend; then PostgreSQL is refused.
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckStream(ctx, js, kdb); err != nil {
		t.Fatalf("CheckStream(kurrentdb) on the empty stream = %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Config.Metadata[MetadataBackend] != "kurrentdb" {
		t.Fatalf("stream metadata after CheckStream(kurrentdb) = %v, %v; want %s=kurrentdb", info.Config.Metadata, err, MetadataBackend)
	}
	if _, err := js.Publish(ctx, SubjectPrefix+"order.1.OrderPlaced", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(ctx, js, pg); !errors.As(err, &be) || be.Got != "kurrentdb" || be.Want != "postgres" {
		t.Errorf("EnsureStream(postgres) on a stream with a KurrentDB message = %v; want a StreamBackendError", err)
	}
	if _, err := EnsureStream(ctx, js, kdb); err != nil {
		t.Errorf("EnsureStream(kurrentdb) on it = %v", err)
	}
}
