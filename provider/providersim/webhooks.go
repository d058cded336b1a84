package providersim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// heldEvent is an event held back so that the next one overtakes it.
type heldEvent struct {
	release chan struct{} // closed when the next event is dispatched
	after   chan struct{} // closed after the overtaking event's first attempt
}

// Delivery is one webhook delivery attempt, as listed by Deliveries and
// GET /_sim/webhooks.
type Delivery struct {
	EventID    string    `json:"event_id"`
	Type       string    `json:"type"`
	Copy       int       `json:"copy"`                // 0 is the original, 1… duplicates, -1 a Resend
	Attempt    int       `json:"attempt"`             // 1-based, per copy
	StatusCode int       `json:"status_code"`         // 0 when no answer arrived
	Error      string    `json:"error,omitempty"`     // transport error, or why nothing was sent
	At         time.Time `json:"at"`                  // base clock
	Delivered  bool      `json:"delivered"`           // the receiver answered 2xx
	URL        string    `json:"url,omitempty"`       // where it was sent
	Signature  string    `json:"signature,omitempty"` // the Stripe-Signature header sent
}

// Event is a webhook event the simulator emitted: Stripe's event object
// (https://docs.stripe.com/api/events/object), kept with the exact bytes
// every delivery of it sends.
type Event struct {
	ID       string    // "evt_…"; the same for every delivery
	Type     string    // e.g. "payment_intent.succeeded"
	Created  time.Time // base clock, whole seconds
	ObjectID string    // the id of data.object: a pi_… or, for charge.refunded, a ch_…
	body     []byte
}

// Body returns the event's JSON, byte for byte what its deliveries send:
//
//	{"id":"evt_…","object":"event","api_version":"2026-02-25.clover","created":…,
//	 "data":{"object":{…}},"livemode":false,"pending_webhooks":1,
//	 "request":{"id":"req_…"|null,"idempotency_key":"K"|null},"type":"…"}
func (e Event) Body() []byte { return bytes.Clone(e.body) }

// eventBody is the JSON shape of an event.
type eventBody struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`
}

type eventData struct {
	Object any `json:"object"`
}

// eventRequest names the API request that caused the event; both are
// null for an event no API request caused (an authentication finished
// through the control API).
type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// newEventsLocked records the events of a commit by request reqID under
// key ("" for none).
func (s *Server) newEventsLocked(pending []pendingEvent, reqID, key string) []*Event {
	out := make([]*Event, 0, len(pending))
	now := s.cfg.Now()
	for _, p := range pending {
		ev := &Event{ID: newID("evt_"), Type: p.typ, Created: now.Truncate(time.Second)}
		switch o := p.object.(type) {
		case *PaymentIntent:
			ev.ObjectID = o.ID
		case *Charge:
			ev.ObjectID = o.ID
		}
		ev.body = encodeJSON(eventBody{ID: ev.ID, Object: "event", APIVersion: APIVersion, Created: now.Unix(),
			Data: eventData{Object: p.object}, PendingWebhooks: 1,
			Request: eventRequest{ID: optStr(reqID), IdempotencyKey: optStr(key)}, Type: p.typ})
		s.events = trim(append(s.events, ev))
		out = append(out, ev)
	}
	return out
}

// Events returns every event emitted, in commit order (at least the last
// 10 000, at most 12 500).
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneAll(s.events, func(ev *Event) Event { return *ev })
}

// Deliveries returns every delivery attempt so far, in the order they ended
// (at least the last 10 000, at most 12 500).
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// WaitWebhooks blocks until no webhook delivery is pending (held, delayed,
// paused, in flight or backing off), or ctx is done, whose error it then
// returns.
func (s *Server) WaitWebhooks(ctx context.Context) error {
	for {
		s.mu.Lock()
		idle := s.idle
		pending := s.pending
		s.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Resend delivers the event with the given id once more (with retries), as a
// receiver's duplicate. It returns an error if no such event is known or the
// server is closed.
func (s *Server) Resend(eventID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range s.events {
		if ev.ID == eventID {
			if !s.goLocked(func() { s.deliverCopy(ev, -1, nil) }) {
				return errors.New("providersim: closed")
			}
			return nil
		}
	}
	return fmt.Errorf("providersim: unknown event %q", eventID)
}

// goLocked runs f as a tracked delivery goroutine, unless the server is
// closed.
func (s *Server) goLocked(f func()) bool {
	if s.closed {
		return false
	}
	if s.pending == 0 {
		s.idle = make(chan struct{})
	}
	s.pending++
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			s.pending--
			if s.pending == 0 {
				close(s.idle)
			}
			s.mu.Unlock()
		}()
		f()
	}()
	return true
}

// dispatch starts delivering committed events in the background, in
// order, with the configured delay, duplicates and reordering.
func (s *Server) dispatch(evs ...*Event) {
	for _, ev := range evs {
		s.dispatchOne(ev)
	}
}

func (s *Server) dispatchOne(ev *Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.webhookURL == "" {
		s.deliveries = trim(append(s.deliveries, Delivery{EventID: ev.ID, Type: ev.Type, Error: "no webhook URL configured; not delivered", At: s.cfg.Now()}))
		return
	}
	ws := s.webhookSettingsLocked()
	if ws.reorder && s.held == nil {
		h := &heldEvent{release: make(chan struct{})}
		s.held = h
		s.goLocked(func() {
			t := time.NewTimer(ws.hold)
			defer t.Stop()
			select {
			case <-h.release:
			case <-t.C:
			case <-s.done:
				return
			}
			s.mu.Lock()
			if s.held == h {
				s.held = nil
			}
			after := h.after
			s.mu.Unlock()
			if after != nil {
				select {
				case <-after:
				case <-s.done:
					return
				}
			}
			s.deliverCopies(ev, ws, nil)
		})
		return
	}
	var firstDone chan struct{}
	if h := s.held; h != nil {
		s.held = nil
		firstDone = make(chan struct{})
		h.after = firstDone
		close(h.release)
	}
	s.goLocked(func() { s.deliverCopies(ev, ws, firstDone) })
}

// deliverCopies waits the delay, then delivers the original and each
// duplicate in turn. firstDone, if not nil, is closed after the original's
// first attempt (or when giving up).
func (s *Server) deliverCopies(ev *Event, ws webhookSettings, firstDone chan struct{}) {
	if fd := firstDone; fd != nil {
		defer func() {
			select {
			case <-fd:
			default:
				close(fd)
			}
		}()
	}
	if !s.sleep(ws.delay) {
		return
	}
	for c := range ws.copies {
		if !s.deliverCopy(ev, c, firstDone) {
			return
		}
		firstDone = nil
	}
}

// deliverCopy delivers one copy of the event until the receiver answers 2xx,
// for at most MaxAttempts attempts. It reports false when the server closed.
func (s *Server) deliverCopy(ev *Event, copyNo int, firstDone chan struct{}) bool {
	backoff := s.cfg.Webhooks.InitialBackoff
	for attempt := 1; attempt <= s.cfg.Webhooks.MaxAttempts; attempt++ {
		if !s.waitUnpaused() {
			return false
		}
		d := s.attempt(ev, copyNo, attempt)
		if firstDone != nil {
			close(firstDone)
			firstDone = nil
		}
		if d.Delivered {
			return true
		}
		if attempt == s.cfg.Webhooks.MaxAttempts {
			s.log.Warn("webhook delivery abandoned", "event", ev.ID, "type", ev.Type, "attempts", attempt)
			return true
		}
		if !s.sleep(backoff) {
			return false
		}
		backoff = min(2*backoff, s.cfg.Webhooks.MaxBackoff)
	}
	return true
}

func (s *Server) waitUnpaused() bool {
	s.mu.Lock()
	resume := s.resume
	s.mu.Unlock()
	select {
	case <-resume:
		return true
	case <-s.done:
		return false
	}
}

// attempt makes one delivery attempt and records it.
func (s *Server) attempt(ev *Event, copyNo, n int) Delivery {
	s.mu.Lock()
	url := s.webhookURL
	s.mu.Unlock()
	d := Delivery{EventID: ev.ID, Type: ev.Type, Copy: copyNo, Attempt: n, URL: url}
	if url == "" {
		d.Error = "no webhook URL configured"
	} else {
		d.StatusCode, d.Signature, d.Error = s.post(url, ev.body)
		d.Delivered = d.StatusCode/100 == 2
	}
	d.At = s.cfg.Now()
	s.mu.Lock()
	s.deliveries = trim(append(s.deliveries, d))
	s.mu.Unlock()
	s.log.Debug("webhook attempt", "event", ev.ID, "type", ev.Type, "copy", copyNo, "attempt", n, "status", d.StatusCode, "error", d.Error)
	return d
}

// post sends one signed delivery. It returns the status (0 without answer),
// the signature header, and an error text.
func (s *Server) post(url string, body []byte) (int, string, string) {
	ctx, cancel := context.WithTimeout(lifetime{s.done}, s.cfg.Webhooks.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err.Error()
	}
	var sig string
	if len(s.secret) > 0 {
		sig = sign(body, s.cfg.Now(), s.secret)
		req.Header.Set(headerSignature, sig)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks; retrysafe-providersim)")
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, sig, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, sig, ""
}

// headerSignature is the header of a webhook's signature.
const headerSignature = "Stripe-Signature"

// sign returns the Stripe-Signature header of body sent at t, as Stripe
// signs webhooks (https://docs.stripe.com/webhooks#verify-manually):
// t=<Unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">, keyed with the
// whole endpoint secret (a "whsec_…" string is used as it is).
func sign(body []byte, t time.Time, secret []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// lifetime is a context.Context that is done when the server closes; it is
// the parent of webhook requests, which belong to no incoming request.
type lifetime struct{ done <-chan struct{} }

func (lifetime) Deadline() (time.Time, bool) { return time.Time{}, false }
func (l lifetime) Done() <-chan struct{}     { return l.done }
func (l lifetime) Value(any) any             { return nil }
func (l lifetime) Err() error {
	select {
	case <-l.done:
		return context.Canceled
	default:
		return nil
	}
}
