package eventstore_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/retrysafe/booking/eventstore"
)

// TestPositionStringRoundTrips checks that Position.String writes
// "commit/prepare" in decimal (as fmt's %d/%d does), up to the largest
// positions, and that ParsePosition reads it back.
func TestPositionStringRoundTrips(t *testing.T) {
	for _, p := range []eventstore.Position{
		{}, {Commit: 1}, {Prepare: 1}, {Commit: 48_213_977, Prepare: 1_204_518},
		{Commit: math.MaxUint64, Prepare: math.MaxUint64}, {Commit: math.MaxInt64 + 1, Prepare: 10},
	} {
		s := p.String()
		if want := fmt.Sprintf("%d/%d", p.Commit, p.Prepare); s != want {
			t.Errorf("%#v.String() = %q, want %q", p, s, want)
		}
		back, err := eventstore.ParsePosition(s)
		if err != nil || back != p {
			t.Errorf("ParsePosition(%q) = %#v, %v; want %#v", s, back, err, p)
		}
	}
}
