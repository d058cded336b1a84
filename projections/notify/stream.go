package notify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the JetStream stream of the notifications.
const StreamName = "BOOKING"

// DefaultDuplicateWindow is the default JetStream duplicate window of stream
// BOOKING (BOOKING_NATS_DUPLICATE_WINDOW).
const DefaultDuplicateWindow = 10 * time.Minute

// StreamSpec is what the service requires of stream BOOKING.
type StreamSpec struct {
	// Name defaults to StreamName.
	Name string
	// Duplicates is the JetStream duplicate window; it must exceed the
	// relay's fail-over time (RelayConfig.CheckDuplicateWindow).
	Duplicates time.Duration
	// Replicas defaults to 1; used only when the stream is created.
	Replicas int
	// Backend is the event store whose log positions the relay publishes
	// (Booking-Position headers, from which a relay resumes): "postgres"
	// (the default) or "kurrentdb". It is kept in the stream's metadata
	// (MetadataBackend); a stream holding messages from another backend is
	// refused with a *StreamBackendError.
	Backend string
}

// MetadataBackend is the stream metadata key (JetStream stream metadata,
// nats-server 2.10 or later) that names the event store backend whose
// positions the stream's messages carry. A stream without it was filled
// from PostgreSQL.
const MetadataBackend = "booking_event_store"

func (s StreamSpec) backend() string {
	if s.Backend == "" {
		return "postgres"
	}
	return s.Backend
}

// StreamBackendError reports a stream whose messages were relayed from
// another event store backend than the service's: their Booking-Position
// values, from which a relay resumes, are not comparable with the new
// backend's positions.
type StreamBackendError struct {
	Stream    string
	Want, Got string
	Messages  uint64
}

// Error names the stream, both backends and the way out.
func (e *StreamBackendError) Error() string {
	return fmt.Sprintf("notify: stream %s holds %d notifications relayed from the %s event store, but the service runs on %s: "+
		"their positions are not comparable; delete the stream (nats stream rm %s; with the embedded NATS server, remove $BOOKING_DATA_DIR/nats while the service is stopped) "+
		"and reset the relay's checkpoint (DELETE FROM notify_relays), which makes the relay republish the whole log, "+
		"or run on %s again", e.Stream, e.Messages, e.Got, e.Want, e.Stream, e.Got)
}

// checkBackend returns a *StreamBackendError if info's stream has messages
// from a backend other than spec's; an empty stream may change backend.
func checkBackend(info *jetstream.StreamInfo, spec StreamSpec) error {
	got := info.Config.Metadata[MetadataBackend]
	if got == "" {
		got = "postgres"
	}
	if info.State.Msgs > 0 && got != spec.backend() {
		return &StreamBackendError{Stream: spec.name(), Want: spec.backend(), Got: got, Messages: info.State.Msgs}
	}
	return nil
}

func (s StreamSpec) name() string {
	if s.Name == "" {
		return StreamName
	}
	return s.Name
}

// config returns the JetStream configuration the service creates: file
// storage, limits retention, subjects booking.v1.>, the duplicate window.
func (s StreamSpec) config() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        s.name(),
		Description: "Booking service notifications: booking.v1.{category}.{id}.{event}, see docs/notifications.md",
		Subjects:    []string{SubjectAll},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  s.Duplicates,
		Replicas:    max(s.Replicas, 1),
		Metadata:    map[string]string{MetadataBackend: s.backend()},
	}
}

// StreamConfigError reports a stream whose configuration differs from what
// the service requires. Field is "subjects" or "duplicates".
type StreamConfigError struct {
	Stream    string
	Field     string
	Want, Got string
}

// Error names the stream, the mismatching setting, and both values.
func (e *StreamConfigError) Error() string {
	return fmt.Sprintf("notify: stream %s: %s is %s, want %s", e.Stream, e.Field, e.Got, e.Want)
}

// EnsureStream creates stream spec.Name with the service's configuration, or
// brings an existing one to it (the embedded server's case: the service
// owns the stream). It returns the stream, a *StreamBackendError if the
// existing stream holds messages relayed from another event store backend
// (spec.Backend), or a wrapped JetStream error. It blocks for a few API
// requests.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	if spec.Duplicates <= 0 {
		return nil, errors.New("notify: stream duplicate window must be positive")
	}
	if cur, err := js.Stream(ctx, spec.name()); err == nil {
		info, err := cur.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("notify: stream %s: %w", spec.name(), err)
		}
		if err := checkBackend(info, spec); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("notify: stream %s: %w", spec.name(), err)
	}
	s, err := js.CreateOrUpdateStream(ctx, spec.config())
	if err != nil {
		return nil, fmt.Errorf("notify: create or update stream %s: %w", spec.name(), err)
	}
	return s, nil
}

// CheckStream verifies the stream of an external NATS server: it creates the
// stream if it does not exist, and otherwise checks that its subjects are
// exactly booking.v1.> and its duplicate window is spec.Duplicates, returning
// a *StreamConfigError on a mismatch (an operator's stream is never changed
// behind their back, except for the backend marker of an empty stream), and
// a *StreamBackendError if its messages came from another event store
// backend. Other errors are wrapped JetStream errors.
func CheckStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	if spec.Duplicates <= 0 {
		return nil, errors.New("notify: stream duplicate window must be positive")
	}
	s, err := js.Stream(ctx, spec.name())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, spec.config())
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created concurrently by a replica
			s, err = js.Stream(ctx, spec.name())
		}
		if err != nil {
			return nil, fmt.Errorf("notify: create stream %s: %w", spec.name(), err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("notify: stream %s: %w", spec.name(), err)
	}
	cfg := s.CachedInfo().Config
	if !slices.Equal(cfg.Subjects, []string{SubjectAll}) {
		return nil, &StreamConfigError{Stream: spec.name(), Field: "subjects", Want: fmt.Sprintf("%q", []string{SubjectAll}), Got: fmt.Sprintf("%q", cfg.Subjects)}
	}
	if cfg.Duplicates != spec.Duplicates {
		return nil, &StreamConfigError{Stream: spec.name(), Field: "duplicates", Want: spec.Duplicates.String(), Got: cfg.Duplicates.String()}
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("notify: stream %s: %w", spec.name(), err)
	}
	if err := checkBackend(info, spec); err != nil {
		return nil, err
	}
	if info.Config.Metadata[MetadataBackend] != spec.backend() {
		// Only the backend marker changes, and only on a stream with no
		// messages: its positions would otherwise be misread.
		cfg := info.Config
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		cfg.Metadata[MetadataBackend] = spec.backend()
		if s, err = js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("notify: mark stream %s with backend %s: %w", spec.name(), spec.backend(), err)
		}
	}
	return s, nil
}
