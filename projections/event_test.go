package projections

import (
	"testing"

	"github.com/google/uuid"
)

// TestCanonicalUUID checks canonicalUUID against uuid.Parse and
// uuid.UUID.String on every form uuid.Parse accepts and on non-UUIDs.
func TestCanonicalUUID(t *testing.T) {
	for _, s := range []string{
		"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "0193A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B",
		"{0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b}", "urn:uuid:0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		"0193a1b2c3d47e5f8a9b0c1d2e3f4a5b", "", "x", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5bz",
	} {
		got, ok := canonicalUUID(s)
		id, err := uuid.Parse(s)
		if ok != (err == nil) || (ok && got != id.String()) {
			t.Errorf("canonicalUUID(%q) = %q, %v; uuid.Parse: %v, %v", s, got, ok, id, err)
		}
	}
	s := "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	if n := testing.AllocsPerRun(100, func() { canonicalUUID(s) }); n != 0 {
		t.Errorf("canonicalUUID of a canonical UUID: %v allocations, want 0", n)
	}
}
