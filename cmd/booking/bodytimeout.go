package main

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

// bodyDeadline bounds the time to receive a request's body: it must arrive
// whole within a.readTimeout (BOOKING_HTTP_READ_TIMEOUT) of the end of the
// headers, however steadily it trickles. Reading it after that fails with
// os.ErrDeadlineExceeded, which the handlers answer 408 request-timeout
// (bodyReadError) before anything is recorded; the connection then closes.
//
// The deadline is lifted once the body has been read to its end, so a
// handler's own work is not bounded by it. (http.Server.ReadTimeout is not
// used for this: it stays armed while the handler runs and cancels the
// request's context when it passes.)
func (a *api) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.readTimeout <= 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(a.readTimeout)); err != nil {
			next.ServeHTTP(w, r) // a ResponseWriter without deadlines (httptest)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		r.Body = b
		next.ServeHTTP(w, r)
		if b.timedOut {
			// The answer (408) is complete; send it, then drain what the
			// client still sends for a moment so the close is not a reset.
			_ = rc.Flush()
			_ = rc.SetReadDeadline(time.Now().Add(lingerAfterTimeout))
			_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, maxWebhookBytes))
		}
	})
}

// deadlineBody is a request body read under bodyDeadline's deadline. It is
// read by the handler's goroutine only.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timedOut bool
}

// Read reads the body; at its end it lifts the read deadline, and it records
// whether the deadline passed.
func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut = true
	}
	return n, err
}
