//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package providersim

import (
	"os/exec"
	"sync/atomic"
	"testing"
)

// TestReopenWhileStartingProgramsIsNotRefused: a simulator closed and
// opened again on its data directory is not refused as "locked by another
// simulator" while the process starts other programs (a child shares the
// lock file until its exec closes it).
func TestReopenWhileStartingProgramsIsNotRefused(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Skipf("no true program to start: %v", err)
	}
	dir := t.TempDir()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			_ = exec.Command(bin).Run()
		}
	}()
	refused := 0
	for range 100 {
		s, err := Open(Config{DataDir: dir})
		if err != nil {
			refused++
			continue
		}
		s.Close()
	}
	stop.Store(true)
	<-done
	if refused != 0 {
		t.Errorf("%d of 100 reopens refused as locked, want 0", refused)
	}
}
