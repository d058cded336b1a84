package httpapi

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// lingerAfterTimeout is how long a connection whose request body timed out
// is still read, and the bytes discarded, after the 408 answer went out and
// before the connection closes. Closing a TCP connection with unread bytes
// resets it, and a reset may destroy the answer before the client reads it
// (RFC 9112 §9.6; net/http lingers the same way on its own early closes).
const lingerAfterTimeout = 500 * time.Millisecond

// lingerDiscardBytes bounds what is read and discarded while lingering.
const lingerDiscardBytes = 1 << 20

// lingerAfterBodyTimeout completes the server's read timeout. The server's
// ReadTimeout (BOOKING_HTTP_READ_TIMEOUT) bounds the time to receive a whole
// request, headers and body, however steadily it trickles: reading the body
// after that fails with os.ErrDeadlineExceeded, which the handlers answer
// 408 request-timeout (bodyReadError) before anything is recorded, and
// net/http then closes the connection. This middleware makes sure that
// answer reaches the client: it sends it, then reads and discards what the
// client still sends for lingerAfterTimeout before the close.
//
// (ReadTimeout does not bound a handler's own work: net/http lifts the read
// deadline once the body has been read to its end.)
func lingerAfterBodyTimeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &watchedBody{ReadCloser: r.Body}
		r.Body = b
		next.ServeHTTP(w, r)
		if b.timedOut {
			rc := http.NewResponseController(w)
			_ = rc.Flush()
			_ = rc.SetReadDeadline(time.Now().Add(lingerAfterTimeout))
			_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, lingerDiscardBytes))
		}
	})
}

// watchedBody is a request body that records whether reading it passed the
// read deadline. It is read by the handler's goroutine only.
type watchedBody struct {
	io.ReadCloser
	timedOut bool
}

// Read reads the body and records a read deadline that passed.
func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.timedOut = true
	}
	return n, err
}
