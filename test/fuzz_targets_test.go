package test

import (
	"os/exec"
	"testing"
)

// TestFuzzTargetsAreListedWithCorpora: every Go fuzz target of the module
// is listed in docs/tests.md and has its checked-in seed corpus
// (test/scripts/fuzz.sh check; `make fuzz` runs them all).
func TestFuzzTargetsAreListedWithCorpora(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("bash", "scripts/fuzz.sh", "check").CombinedOutput()
	if err != nil {
		t.Fatalf("test/scripts/fuzz.sh check: %v\n%s", err, out)
	}
	list, err := exec.Command("bash", "scripts/fuzz.sh", "list").Output()
	if err != nil || len(list) == 0 {
		t.Fatalf("test/scripts/fuzz.sh list = %q, %v; want the fuzz targets", list, err)
	}
}
