package notify

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// Notified is the event the last message of a stream names: its stream,
// revision and id (Booking-Stream, Booking-Revision, Nats-Msg-Id).
type Notified struct {
	Stream   string
	Revision uint64
	ID       string
}

// CutOver prepares stream name for a service whose log was copied to
// another event store backend (booking eventstore copy): it returns the
// event the stream's last message names (ok false if the stream is empty,
// missing, or its last message is not a notification), from which the copy
// sets the relay's resume point, and marks the stream with backend
// (MetadataBackend), so the service on it accepts the stream: its messages
// keep their old Booking-Position values, which no relay resumes from
// since they do not verify against the new log. Returns a wrapped JetStream
// error otherwise.
func CutOver(ctx context.Context, js jetstream.JetStream, name, backend string) (last Notified, ok bool, err error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Notified{}, false, nil
	}
	if err != nil {
		return Notified{}, false, fmt.Errorf("notify: stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return Notified{}, false, fmt.Errorf("notify: stream %s: %w", name, err)
	}
	if info.State.Msgs > 0 {
		m, err := s.GetMsg(ctx, info.State.LastSeq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return Notified{}, false, fmt.Errorf("notify: stream %s last message: %w", name, err)
		default:
			rev, rerr := strconv.ParseUint(m.Header.Get(HeaderRevision), 10, 64)
			last = Notified{Stream: m.Header.Get(HeaderStream), Revision: rev, ID: m.Header.Get(HeaderMsgID)}
			ok = rerr == nil && last.Stream != "" && last.ID != ""
		}
	}
	cfg := info.Config
	if cfg.Metadata[MetadataBackend] != backend {
		md := map[string]string{}
		for k, v := range cfg.Metadata {
			md[k] = v
		}
		md[MetadataBackend] = backend
		cfg.Metadata = md
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return Notified{}, false, fmt.Errorf("notify: mark stream %s as %s: %w", name, backend, err)
		}
	}
	return last, ok, nil
}
