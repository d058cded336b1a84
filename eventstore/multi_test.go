package eventstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/retrysafe/booking/eventstore"
)

func TestAppendPartErrorNamesThePartAndUnwraps(t *testing.T) {
	conflict := &eventstore.RevisionConflictError{Stream: "order-1", Expected: eventstore.Exact(3), Actual: 4}
	err := error(&eventstore.AppendPartError{Part: 1, Parts: 3, Stream: "order-1", Err: conflict})
	if !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		t.Errorf("errors.Is(%v, ErrWrongExpectedRevision) = false, want true", err)
	}
	var got *eventstore.RevisionConflictError
	if !errors.As(err, &got) || got != conflict {
		t.Errorf("errors.As(%v) = %v, want the part's *RevisionConflictError", err, got)
	}
	for _, want := range []string{"3 streams", "part 1", "order-1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Error() = %q, want it to contain %q", err, want)
		}
	}
}

func TestCheckAppends(t *testing.T) {
	ev := func(id string) eventstore.EventData { return eventstore.EventData{ID: id, Type: "T"} }
	tests := []struct {
		name    string
		appends []eventstore.StreamAppend
		want    string // a part of the error message; "" for nil
	}{
		{"two valid parts", []eventstore.StreamAppend{
			{Stream: "a", Events: []eventstore.EventData{ev("1"), ev("2")}}, {Stream: "b", Events: []eventstore.EventData{ev("3")}}}, ""},
		{"no parts", nil, "at least one part"},
		{"an empty stream name", []eventstore.StreamAppend{
			{Stream: "a", Events: []eventstore.EventData{ev("1")}}, {Events: []eventstore.EventData{ev("2")}}}, "part 1: empty stream name"},
		{"a part without events", []eventstore.StreamAppend{{Stream: "a"}}, "part 0 (a): no events"},
		{"one stream twice", []eventstore.StreamAppend{
			{Stream: "a", Events: []eventstore.EventData{ev("1")}}, {Stream: "a", Events: []eventstore.EventData{ev("2")}}}, "parts 0 and 1 both append to a"},
		{"one id in two parts", []eventstore.StreamAppend{
			{Stream: "a", Events: []eventstore.EventData{ev("1")}}, {Stream: "b", Events: []eventstore.EventData{ev("1")}}}, "event id 1 is in parts 0 and 1"},
	}
	for _, tt := range tests {
		err := eventstore.CheckAppends(tt.appends)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckAppends(%s) = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckAppends(%s) = %v, want an error containing %q", tt.name, err, tt.want)
		case errors.Is(err, eventstore.ErrWrongExpectedRevision):
			t.Errorf("CheckAppends(%s) = %v, want a validation error, not a revision conflict", tt.name, err)
		}
	}
}
