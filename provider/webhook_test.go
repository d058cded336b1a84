package provider

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerifySignature(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec_test")
	body := []byte(`{"id":"evt_1","object":"event","type":"charge.succeeded","created":1,"data":{"object":{"id":"ch_1"}}}`)
	now := time.Unix(1_767_225_600, 0)
	valid := Sign(body, now, secret)

	tests := []struct {
		name   string
		header string
		body   []byte
		secret []byte
		now    time.Time
		want   error
	}{
		{name: "a fresh signature of the exact body verifies", header: valid, body: body, secret: secret, now: now},
		{name: "a signature 4 minutes old verifies", header: valid, body: body, secret: secret, now: now.Add(4 * time.Minute)},
		{name: "a tampered body is refused", header: valid, body: []byte(strings.Replace(string(body), "ch_1", "ch_2", 1)), secret: secret, now: now, want: ErrBadSignature},
		{name: "a body with added whitespace is refused", header: valid, body: append([]byte(" "), body...), secret: secret, now: now, want: ErrBadSignature},
		{name: "another secret is refused", header: valid, body: body, secret: []byte("whsec_other"), now: now, want: ErrBadSignature},
		{name: "a tampered timestamp is refused", header: strings.Replace(valid, "t=1767225600", "t=1767225601", 1), body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "a flipped signature digit is refused", header: flipLast(valid), body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "a signature 6 minutes old is stale", header: valid, body: body, secret: secret, now: now.Add(6 * time.Minute), want: ErrStaleTimestamp},
		{name: "a signature 6 minutes in the future is stale", header: valid, body: body, secret: secret, now: now.Add(-6 * time.Minute), want: ErrStaleTimestamp},
		{name: "a missing header is refused", header: "", body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "a header without timestamp is refused", header: valid[strings.Index(valid, ",")+1:], body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "a header without v1 is refused", header: "t=1767225600,v0=abc", body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "a header with two timestamps is refused", header: "t=1767225600," + valid, body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "garbage is refused", header: "nonsense", body: body, secret: secret, now: now, want: ErrBadSignature},
		{name: "an empty secret is refused", header: Sign(body, now, nil), body: body, secret: nil, now: now, want: ErrBadSignature},
		{name: "during rotation the new secret verifies", header: Sign(body, now, []byte("old"), secret), body: body, secret: secret, now: now},
		{name: "during rotation the old secret verifies", header: Sign(body, now, secret, []byte("new")), body: body, secret: secret, now: now},
		{name: "unknown schemes and spaces are ignored", header: "t=1767225600, v0=ff, " + valid[strings.Index(valid, "v1="):], body: body, secret: secret, now: now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := VerifySignature(tt.header, tt.body, tt.secret, tt.now, 0)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("VerifySignature(%q) = %v, want %v", tt.header, err, tt.want)
			}
		})
	}
}

func flipLast(h string) string {
	last := h[len(h)-1]
	if last == '0' {
		return h[:len(h)-1] + "1"
	}
	return h[:len(h)-1] + "0"
}

func TestSignFormat(t *testing.T) {
	t.Parallel()
	// HMAC-SHA256("secret", "1700000000.{}"), computed independently with
	// `printf '1700000000.{}' | openssl dgst -sha256 -hmac secret`.
	got := Sign([]byte("{}"), time.Unix(1_700_000_000, 0), []byte("secret"))
	want := "t=1700000000,v1=" + "b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
	if got != want {
		t.Fatalf("Sign() = %s, want %s", got, want)
	}
}

func TestParseEvent(t *testing.T) {
	t.Parallel()
	e, err := ParseEvent([]byte(`{"id":"evt_1","object":"event","type":"charge.refunded","created":5,"data":{"object":{"id":"ch_1","amount":100,"refunded_amount":40,"metadata":{"order_id":"o1","attempt":"2"},"new_field":true}}}`))
	if err != nil {
		t.Fatalf("ParseEvent() error = %v", err)
	}
	if e.ID != "evt_1" || e.Type != EventChargeRefunded || e.Data.Object.RefundedAmount != 40 || e.Data.Object.Attempt() != 2 {
		t.Fatalf("ParseEvent() = %+v", e)
	}
	for _, body := range []string{`not json`, `{"type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}`, `{"id":"evt_1","type":"charge.succeeded"}`, `{"id":"evt_1","data":{}}`} {
		if _, err := ParseEvent([]byte(body)); !errors.Is(err, ErrMalformedEvent) {
			t.Errorf("ParseEvent(%s) = %v, want ErrMalformedEvent", body, err)
		}
	}
}
