//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package providersim

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLockDirRefusesAHeldLock: while one holder has a data directory's
// lock, a second lockDir is refused after waiting lockWait; once the lock
// is released, the next lockDir takes it.
func TestLockDirRefusesAHeldLock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lock")
	release, err := lockDir(path)
	if err != nil {
		t.Fatalf("first lockDir = %v", err)
	}
	if _, err := lockDir(path); err == nil || !strings.Contains(err.Error(), "is locked") {
		t.Fatalf("second lockDir while held = %v, want an \"is locked\" refusal", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	again, err := lockDir(path)
	if err != nil {
		t.Fatalf("lockDir after release = %v", err)
	}
	again()
}

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
