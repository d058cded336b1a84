package main

import (
	"net"
	"net/http"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/connlimit"
	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
)

// HTTPLimits are the limits of the API's HTTP server (net/http.Server and
// the listener beneath it), each with its variable and default. They keep
// a client that sends slowly, sends too much or opens too many connections
// from holding what other clients need: see docs/configuration.md, "HTTP
// server limits".
type HTTPLimits struct {
	// HTTPReadTimeout bounds the time to receive a whole request, headers
	// and body: a body that has not arrived whole by then is answered 408
	// and nothing is recorded.
	HTTPReadTimeout time.Duration `name:"http-read-timeout" env:"BOOKING_HTTP_READ_TIMEOUT" default:"15s" help:"Time to receive a whole request, headers and body (408 after)."`
	// HTTPReadHeaderTimeout bounds the time to receive a request's
	// headers; a connection that has not sent them by then is closed
	// without an answer. BOOKING_HTTP_READ_TIMEOUT bounds the headers too,
	// so the shorter of the two applies (net/http's rule).
	HTTPReadHeaderTimeout time.Duration `name:"http-read-header-timeout" env:"BOOKING_HTTP_READ_HEADER_TIMEOUT" default:"5s" help:"Time to receive a request's headers (the connection is closed after); the shorter of it and BOOKING_HTTP_READ_TIMEOUT applies."`
	// HTTPWriteTimeout bounds the time from the end of a request's headers
	// to the end of its answer: the body, the handling (with a Prefer:
	// wait of up to 10 s) and the writing. Past it the answer is cut off.
	HTTPWriteTimeout time.Duration `name:"http-write-timeout" env:"BOOKING_HTTP_WRITE_TIMEOUT" default:"30s" help:"Time from the end of a request's headers to the end of its answer (above the longest Prefer: wait)."`
	// HTTPIdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	HTTPIdleTimeout time.Duration `name:"http-idle-timeout" env:"BOOKING_HTTP_IDLE_TIMEOUT" default:"2m" help:"How long a kept-alive connection may wait for its next request."`
	// HTTPMaxHeaderBytes bounds the request line and headers of a request,
	// in bytes; net/http answers 431 past it (it reads up to 4 KiB more
	// before it decides).
	HTTPMaxHeaderBytes int `name:"http-max-header-bytes" env:"BOOKING_HTTP_MAX_HEADER_BYTES" default:"65536" help:"Largest request line and headers in bytes (431 past it)."`
	// HTTPMaxConns bounds the API listener's open connections; one more is
	// closed as it arrives (connlimit), not queued.
	HTTPMaxConns int `name:"http-max-conns" env:"BOOKING_HTTP_MAX_CONNS" default:"1024" help:"Most connections the API listener keeps open; one more is closed at once."`
	// WebhookTimeout bounds a provider notification (POST
	// /v1/provider/webhooks) from the end of its headers to its answer:
	// past it the answer is 503 and the provider redelivers.
	WebhookTimeout time.Duration `name:"webhook-timeout" env:"BOOKING_WEBHOOK_TIMEOUT" default:"15s" help:"Time from the end of a provider notification's headers to its answer (503 after, the provider redelivers)."`
	// WebhookConcurrency bounds the provider notifications worked on at
	// once, from before the body is read to the end of their work; one
	// more is answered 503 at once.
	WebhookConcurrency int `name:"webhook-concurrency" env:"BOOKING_WEBHOOK_CONCURRENCY" default:"16" help:"Most provider notifications worked on at once; one more is answered 503 at once (the provider redelivers)."`
}

// writeMargin is what the write timeout must leave, beyond the longest
// wait a request may spend in the service, to read the body and write the
// answer.
const writeMargin = 5 * time.Second

// minHeaderBytes is the smallest BOOKING_HTTP_MAX_HEADER_BYTES accepted: a
// request with a bearer token and the API's headers fits in it.
const minHeaderBytes = 4096

// validate checks the limits; inUseWait is BOOKING_IN_USE_WAIT, which a
// request may wait before its own wait (Prefer: wait). The error names the
// variable at fault.
func (l HTTPLimits) validate(inUseWait time.Duration) error {
	for _, p := range []struct {
		name string
		d    time.Duration
	}{
		{"BOOKING_HTTP_READ_TIMEOUT", l.HTTPReadTimeout}, {"BOOKING_HTTP_READ_HEADER_TIMEOUT", l.HTTPReadHeaderTimeout},
		{"BOOKING_HTTP_WRITE_TIMEOUT", l.HTTPWriteTimeout}, {"BOOKING_HTTP_IDLE_TIMEOUT", l.HTTPIdleTimeout},
	} {
		if p.d <= 0 {
			return configError(p.name, "must be a positive duration such as 30s")
		}
	}
	if least := httpapi.MaxWait + inUseWait + writeMargin; l.HTTPWriteTimeout < least {
		return configError("BOOKING_HTTP_WRITE_TIMEOUT", "%s must be at least %s: the longest Prefer: wait (%s) + BOOKING_IN_USE_WAIT (%s) + %s to read the body and write the answer",
			l.HTTPWriteTimeout, least, httpapi.MaxWait, inUseWait, writeMargin)
	}
	if l.HTTPMaxHeaderBytes < minHeaderBytes {
		return configError("BOOKING_HTTP_MAX_HEADER_BYTES", "must be at least %d (bytes)", minHeaderBytes)
	}
	if l.HTTPMaxConns < 1 {
		return configError("BOOKING_HTTP_MAX_CONNS", "must be at least 1")
	}
	return l.validateWebhooks()
}

// validateWebhooks checks the webhook route's budget: its timeout must
// leave the write timeout time to write the answer.
func (l HTTPLimits) validateWebhooks() error {
	if l.WebhookTimeout <= 0 {
		return configError("BOOKING_WEBHOOK_TIMEOUT", "must be a positive duration such as 15s")
	}
	if most := l.HTTPWriteTimeout - writeMargin; l.WebhookTimeout > most {
		return configError("BOOKING_WEBHOOK_TIMEOUT", "%s must be at most %s: BOOKING_HTTP_WRITE_TIMEOUT (%s) less %s to write the answer",
			l.WebhookTimeout, most, l.HTTPWriteTimeout, writeMargin)
	}
	if l.WebhookConcurrency < 1 {
		return configError("BOOKING_WEBHOOK_CONCURRENCY", "must be at least 1")
	}
	return nil
}

// server returns the API's HTTP server with these limits, serving h.
func (l HTTPLimits) server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadTimeout: l.HTTPReadTimeout, ReadHeaderTimeout: l.HTTPReadHeaderTimeout,
		WriteTimeout: l.HTTPWriteTimeout, IdleTimeout: l.HTTPIdleTimeout, MaxHeaderBytes: l.HTTPMaxHeaderBytes}
}

// listener returns ln bounded to HTTPMaxConns open connections.
func (l HTTPLimits) listener(ln net.Listener) *connlimit.Listener {
	return connlimit.New(ln, l.HTTPMaxConns)
}

// listen listens on addr (BOOKING_HTTP_ADDR) with the connection bound; a
// listen error names the variable (listenError).
func (l HTTPLimits) listen(addr string) (*connlimit.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError(addr, "BOOKING_HTTP_ADDR", err)
	}
	return l.listener(ln), nil
}
