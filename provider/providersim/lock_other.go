//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package providersim

// lockDir does nothing on systems without flock: do not point two
// simulators at one data directory there.
func lockDir(string) (func() error, error) { return func() error { return nil }, nil }
