package pgstore

import "sync"

// broadcast wakes every goroutine waiting for the next append. The zero value
// is ready to use; it is safe for concurrent use.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{} // closed by notify; nil while nobody waits
}

// wait returns a channel that notify closes.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// notify wakes the current waiters. It costs one uncontended lock when
// nobody waits.
func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
