//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package providersim

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockWait bounds how long lockDir waits for a lock that looks held. A
// process this one starts (os/exec) shares every open file of this one from
// its fork until its exec closes them (close-on-exec), the lock file's
// included: for that moment a lock just released by Close still looks held.
// A simulator that really holds the lock holds it much longer.
const lockWait = 250 * time.Millisecond

// lockDir takes an exclusive advisory lock (flock) on the lock file at
// path, creating it, so that two simulators never append to one state file.
// It returns the function that releases the lock, or an error naming the
// file if another simulator holds it (still after lockWait). The kernel
// releases the lock when the process dies, so a crash leaves nothing to
// clean up.
func lockDir(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("providersim: lock file: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return f.Close, nil
		case !errors.Is(err, syscall.EWOULDBLOCK):
			f.Close()
			return nil, fmt.Errorf("providersim: lock %s: %w", path, err)
		case !time.Now().Before(deadline):
			f.Close()
			return nil, fmt.Errorf("providersim: %s is locked: another simulator uses this data directory", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
