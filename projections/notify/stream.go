package notify

import (
	"context"
	"errors"
	"fmt"
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
		Description: "Booking service notifications: booking.v1.{category}.{id}.{event}, see the README",
		Subjects:    []string{SubjectAll},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  s.Duplicates,
		Replicas:    max(s.Replicas, 1),
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
// owns the stream). It returns the stream, or a wrapped JetStream error. It
// blocks for one or two API requests.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	if spec.Duplicates <= 0 {
		return nil, errors.New("notify: stream duplicate window must be positive")
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
// behind their back). Other errors are wrapped JetStream errors.
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
	return s, nil
}
