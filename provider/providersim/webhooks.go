package providersim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/retrysafe/booking/provider"
)

// event is an emitted webhook event with its encoded body, which every
// delivery of it sends unchanged.
type event struct {
	provider.Event
	body []byte
}

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
	Signature  string    `json:"signature,omitempty"` // the Provider-Signature header sent
}

// newEventLocked records a new event about the charge's current state.
func (s *Server) newEventLocked(typ string, ch *provider.Charge) *event {
	e := provider.Event{
		ID:      newID("evt_"),
		Object:  "event",
		Type:    typ,
		Created: s.nowLocked().Unix(),
		Data:    provider.EventData{Object: cloneCharge(ch)},
	}
	ev := &event{Event: e, body: e.Body()}
	s.events = trim(append(s.events, ev))
	return ev
}

// Events returns every event emitted, in commit order (at least the last 10 000, at most 12 500).
func (s *Server) Events() []provider.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneAll(s.events, func(ev *event) provider.Event {
		e := ev.Event
		e.Data.Object = cloneCharge(&ev.Data.Object)
		return e
	})
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

// dispatch starts delivering a committed event in the background, with the
// configured delay, duplicates and reordering. A nil event is ignored.
func (s *Server) dispatch(ev *event) {
	if ev == nil {
		return
	}
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
func (s *Server) deliverCopies(ev *event, ws webhookSettings, firstDone chan struct{}) {
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
func (s *Server) deliverCopy(ev *event, copyNo int, firstDone chan struct{}) bool {
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
func (s *Server) attempt(ev *event, copyNo, n int) Delivery {
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
		sig = provider.Sign(body, s.cfg.Now(), s.secret)
		req.Header.Set(provider.HeaderSignature, sig)
	}
	req.Header.Set(headerContentType, contentTypeJSON)
	req.Header.Set("User-Agent", "retrysafe-providersim")
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, sig, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, sig, ""
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
