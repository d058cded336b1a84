// Package syncbuf holds Buffer, a bytes.Buffer that goroutines may write and
// read at once: tests hand it to loggers and child processes as their output
// and read it while those still write.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent Write and String calls. The
// zero value is an empty buffer ready to use; a Buffer must not be copied
// after first use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer, as bytes.Buffer.Write does; the error is
// always nil.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns a copy of everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
