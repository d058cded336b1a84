package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// expectedMAC is HMAC-SHA256(secret, "<t>.<body>") computed here, apart
// from the code under test.
func expectedMAC(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts + "."))
	h.Write(body)
	return h.Sum(nil)
}

// FuzzVerifySignature: whatever the header, VerifySignature returns nil,
// ErrBadSignature or ErrStaleTimestamp, and nil only when the header's one
// timestamp is within 5 minutes of now and one of its v1 entries is the
// HMAC of "<t>.<body>" under the secret. What Sign writes verifies at its
// time and 5 minutes either side, is stale a second beyond, and is refused
// for another body or another secret.
func FuzzVerifySignature(f *testing.F) {
	body := []byte(`{"id":"evt_1","object":"event","type":"charge.succeeded","created":1,"data":{"object":{"id":"ch_1"}}}`)
	f.Add(Sign(body, time.Unix(1_767_225_600, 0), []byte("whsec_test")), body, []byte("whsec_test"), int64(1_767_225_600), int64(0))
	f.Add("t=1767225600, v0=ff, v1=00", body, []byte("s"), int64(1_767_225_600), int64(299))
	f.Add("t=1,t=2,v1=zz", []byte{}, []byte{}, int64(-1), int64(-301))
	f.Add("t=+1767225600,v1="+strings.Repeat("ab", 32), []byte("x"), []byte("k"), int64(9_223_372_036), int64(1<<40))
	f.Add(strings.Repeat("v1=00,", 9)+"t=0", body, []byte("k"), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, header string, body, secret []byte, unix, skew int64) {
		unix %= 1 << 40 // about ±35,000 years: time arithmetic stays exact
		now := time.Unix(unix, 0).Add(time.Duration(skew%(1<<20)) * time.Second)
		err := VerifySignature(header, body, secret, now, 0)
		switch {
		case err == nil:
			var ts string
			var sigs []string
			for part := range strings.SplitSeq(header, ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
				switch k {
				case "t":
					ts = v
				case "v1":
					sigs = append(sigs, v)
				}
			}
			matched := false
			for _, v := range sigs {
				if sig, err := hex.DecodeString(v); err == nil && hmac.Equal(sig, expectedMAC(secret, ts, body)) {
					matched = true
				}
			}
			sec, perr := strconv.ParseInt(ts, 10, 64)
			if len(secret) == 0 || !matched || perr != nil {
				t.Fatalf("VerifySignature(%q, %q, %q) = nil without a valid signature", header, body, secret)
			}
			if d := now.Sub(time.Unix(sec, 0)); d > DefaultTolerance || d < -DefaultTolerance {
				t.Fatalf("VerifySignature(%q) = nil for a timestamp %v from now", header, d)
			}
		case !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrStaleTimestamp):
			t.Fatalf("VerifySignature(%q) = %v, want ErrBadSignature or ErrStaleTimestamp", header, err)
		}

		if len(secret) == 0 {
			return
		}
		signedAt := time.Unix(unix, 0)
		sig := Sign(body, signedAt, secret)
		for _, d := range []time.Duration{0, DefaultTolerance, -DefaultTolerance} {
			if err := VerifySignature(sig, body, secret, signedAt.Add(d), 0); err != nil {
				t.Fatalf("VerifySignature(Sign(...)) %v later = %v, want nil", d, err)
			}
		}
		for _, d := range []time.Duration{DefaultTolerance + time.Second, -DefaultTolerance - time.Second} {
			if err := VerifySignature(sig, body, secret, signedAt.Add(d), 0); !errors.Is(err, ErrStaleTimestamp) {
				t.Fatalf("VerifySignature(Sign(...)) %v later = %v, want ErrStaleTimestamp", d, err)
			}
		}
		if err := VerifySignature(sig, append(append([]byte{}, body...), ' '), secret, signedAt, 0); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("VerifySignature(Sign(body), body+\" \") = %v, want ErrBadSignature", err)
		}
		if err := VerifySignature(sig, body, append(append([]byte{}, secret...), 'x'), signedAt, 0); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("VerifySignature(Sign(body, secret), secret+\"x\") = %v, want ErrBadSignature", err)
		}
		rotated := Sign(body, signedAt, []byte("old-"+string(secret)), secret)
		if err := VerifySignature(rotated, body, secret, signedAt, 0); err != nil {
			t.Fatalf("VerifySignature(signed with an old and the current secret) = %v, want nil", err)
		}
	})
}

// FuzzParseEvent: a webhook body is accepted only with an id, a type and,
// for charge events, a charge id; every refusal wraps ErrMalformedEvent; an
// accepted event re-encodes (Event.Body) to a body that parses to the same
// event.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"id":"evt_1","object":"event","type":"charge.refunded","created":5,"data":{"object":{"id":"ch_1","amount":100,"refunded_amount":40,"metadata":{"order_id":"o1","attempt":"2"},"new_field":true}}}`,
		`{"id":"evt_1","type":"charge.succeeded"}`, `{"id":"evt_2","type":"payout.paid","data":{}}`, `not json`, `{"id":1}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := ParseEvent(body)
		if err != nil {
			if !errors.Is(err, ErrMalformedEvent) {
				t.Fatalf("ParseEvent(%q) error = %v, want ErrMalformedEvent", body, err)
			}
			return
		}
		if e.ID == "" || e.Type == "" || (strings.HasPrefix(e.Type, "charge.") && e.Data.Object.ID == "") {
			t.Fatalf("ParseEvent(%q) = %+v, accepted without an id, a type or a charge id", body, e)
		}
		again, err := ParseEvent(e.Body())
		if err != nil {
			t.Fatalf("ParseEvent(%s), the re-encoding of ParseEvent(%q), error = %v", e.Body(), body, err)
		}
		if !reflect.DeepEqual(normalizeEvent(again), normalizeEvent(e)) {
			t.Fatalf("ParseEvent(%q) = %+v, its re-encoding parses to %+v", body, e, again)
		}
	})
}

// normalizeEvent makes an empty metadata map nil, as encoding drops it.
func normalizeEvent(e Event) Event {
	if len(e.Data.Object.Metadata) == 0 {
		e.Data.Object.Metadata = nil
	}
	return e
}
