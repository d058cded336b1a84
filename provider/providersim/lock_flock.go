//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package providersim

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive advisory lock (flock) on the lock file at
// path, creating it, so that two simulators never append to one state file.
// It returns the function that releases the lock, or an error naming the
// file if another process holds it. The kernel releases the lock when the
// process dies, so a crash leaves nothing to clean up.
func lockDir(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("providersim: lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("providersim: %s is locked: another simulator uses this data directory", path)
		}
		return nil, fmt.Errorf("providersim: lock %s: %w", path, err)
	}
	return f.Close, nil
}
