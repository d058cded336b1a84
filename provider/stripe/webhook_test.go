package stripe

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/retrysafe/booking/provider"
)

// signedAt is the signing time of the test events: far from the host's
// clock, so only the now passed to ParseWebhook can accept them.
var signedAt = time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)

// eventBody returns an event of type typ about object, rendered in version.
func eventBody(typ, version, object string) []byte {
	return fmt.Appendf(nil, `{"id":"evt_1","object":"event","api_version":%q,"created":%d,"type":%q,"livemode":false,"pending_webhooks":1,"data":{"object":%s}}`,
		version, signedAt.Unix(), typ, object)
}

// sign returns a Stripe-Signature header for body at t, one v1 per secret.
func sign(body []byte, t time.Time, secrets ...string) string {
	h := fmt.Sprintf("t=%d", t.Unix())
	for _, s := range secrets {
		h += ",v1=" + hex.EncodeToString(webhook.ComputeSignature(t, body, s))
	}
	return h
}

func mustWebhookClient(tb testing.TB, cfg Config) *Client {
	tb.Helper()
	cfg.BaseURL = "http://127.0.0.1:1"
	c, err := New(cfg)
	if err != nil {
		tb.Fatalf("New() = %v", err)
	}
	return c
}

var succeededPI = `{"id":"pi_1","object":"payment_intent","status":"succeeded","client_secret":"pi_1_secret_x","metadata":{"order_id":"ord_1","attempt":"1"}}`

func TestParseWebhook_DecodesVerifiedEvents(t *testing.T) {
	t.Parallel()
	c := mustWebhookClient(t, Config{WebhookSecrets: []string{"whsec_old", "whsec_new"}})
	for _, tc := range []struct {
		name   string
		body   []byte
		header func(body []byte) string
		want   provider.WebhookEvent
	}{
		{
			name:   "a payment_intent event signed with the new secret",
			body:   eventBody(provider.EventPaymentIntentSucceeded, APIVersion, succeededPI),
			header: func(b []byte) string { return sign(b, signedAt, "whsec_new") },
			want: provider.WebhookEvent{ID: "evt_1", Type: provider.EventPaymentIntentSucceeded, Created: signedAt, APIVersion: APIVersion,
				PaymentID: "pi_1", Metadata: map[string]string{"order_id": "ord_1", "attempt": "1"}},
		},
		{
			name:   "a charge event names its payment_intent; signed with an unknown and the old secret (rotation)",
			body:   eventBody(provider.EventChargeRefunded, APIVersion, `{"id":"ch_1","object":"charge","payment_intent":"pi_2","metadata":{}}`),
			header: func(b []byte) string { return sign(b, signedAt, "whsec_other", "whsec_old") },
			want: provider.WebhookEvent{ID: "evt_1", Type: provider.EventChargeRefunded, Created: signedAt, APIVersion: APIVersion,
				PaymentID: "pi_2", Metadata: map[string]string{}},
		},
		{
			name:   "an event of another kind of object has no payment id",
			body:   eventBody("customer.created", APIVersion, `{"id":"cus_1","object":"customer"}`),
			header: func(b []byte) string { return sign(b, signedAt, "whsec_old") },
			want:   provider.WebhookEvent{ID: "evt_1", Type: "customer.created", Created: signedAt, APIVersion: APIVersion},
		},
		{
			name:   "an event of the same release train at another date",
			body:   eventBody(provider.EventPaymentIntentCanceled, "2099-01-01."+strings.SplitN(APIVersion, ".", 2)[1], succeededPI),
			header: func(b []byte) string { return sign(b, signedAt, "whsec_old") },
			want: provider.WebhookEvent{ID: "evt_1", Type: provider.EventPaymentIntentCanceled, Created: signedAt,
				APIVersion: "2099-01-01." + strings.SplitN(APIVersion, ".", 2)[1],
				PaymentID:  "pi_1", Metadata: map[string]string{"order_id": "ord_1", "attempt": "1"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.ParseWebhook(tc.body, tc.header(tc.body), signedAt.Add(4*time.Minute))
			if err != nil {
				t.Fatalf("ParseWebhook() = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseWebhook() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseWebhook_RefusesWhatStripeDidNotSignNow(t *testing.T) {
	t.Parallel()
	c := mustWebhookClient(t, Config{WebhookSecrets: []string{"whsec_1"}, WebhookTolerance: time.Minute})
	body := eventBody(provider.EventPaymentIntentSucceeded, APIVersion, succeededPI)
	good := sign(body, signedAt, "whsec_1")
	for _, tc := range []struct {
		name   string
		body   []byte
		header string
		now    time.Time
		want   error
	}{
		{"no header", body, "", signedAt, provider.ErrBadSignature},
		{"another secret", body, sign(body, signedAt, "whsec_2"), signedAt, provider.ErrBadSignature},
		{"a changed body", append([]byte(" "), body...), good, signedAt, provider.ErrBadSignature},
		{"no timestamp", body, good[strings.Index(good, ",")+1:], signedAt, provider.ErrBadSignature},
		{"a malformed timestamp", body, "t=soon," + good[strings.Index(good, ",")+1:], signedAt, provider.ErrBadSignature},
		{"two timestamps", body, good + ",t=1", signedAt, provider.ErrBadSignature},
		{"no v1", body, fmt.Sprintf("t=%d,v0=abc", signedAt.Unix()), signedAt, provider.ErrBadSignature},
		{"a part without =", body, good + ",junk", signedAt, provider.ErrBadSignature},
		{"a header too long", body, good + strings.Repeat(",v1=00", 1000), signedAt, provider.ErrBadSignature},
		{"a valid signature older than the tolerance", body, good, signedAt.Add(time.Minute + time.Second), provider.ErrStaleTimestamp},
		{"a valid signature newer than the tolerance", body, good, signedAt.Add(-time.Minute - time.Second), provider.ErrStaleTimestamp},
		{"a bad signature, stale too, is a bad signature", body, sign(body, signedAt, "whsec_2"), signedAt.Add(time.Hour), provider.ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.ParseWebhook(tc.body, tc.header, tc.now)
			if !errors.Is(err, tc.want) {
				t.Errorf("ParseWebhook() = %v, want %v", err, tc.want)
			}
		})
	}
	for _, d := range []time.Duration{time.Minute, -time.Minute} {
		if _, err := c.ParseWebhook(body, good, signedAt.Add(d)); err != nil {
			t.Errorf("ParseWebhook(now = signed %+v) = %v, want nil (at the tolerance)", d, err)
		}
	}
	none := mustWebhookClient(t, Config{})
	if _, err := none.ParseWebhook(body, good, signedAt); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("ParseWebhook(no secret configured) = %v, want ErrBadSignature", err)
	}
}

// TestCheckWebhookHeader_RefusesBeforeTheBody: the header alone is refused
// when ParseWebhook would refuse it whatever the body (missing, malformed,
// no v1 signature, too long, no secret configured: ErrBadSignature) or when
// its timestamp is outside the tolerance (ErrStaleTimestamp); a header of
// the right form signed within the tolerance passes, whether or not its
// signature matches a body.
func TestCheckWebhookHeader_RefusesBeforeTheBody(t *testing.T) {
	t.Parallel()
	c := mustWebhookClient(t, Config{WebhookSecrets: []string{"whsec_1"}, WebhookTolerance: time.Minute})
	body := eventBody(provider.EventPaymentIntentSucceeded, APIVersion, succeededPI)
	good := sign(body, signedAt, "whsec_1")
	sigs := good[strings.Index(good, ",")+1:]
	for _, tc := range []struct {
		name   string
		header string
		now    time.Time
		want   error
	}{
		{"no header", "", signedAt, provider.ErrBadSignature},
		{"no timestamp", sigs, signedAt, provider.ErrBadSignature},
		{"a malformed timestamp", "t=soon," + sigs, signedAt, provider.ErrBadSignature},
		{"two timestamps", good + ",t=1", signedAt, provider.ErrBadSignature},
		{"no v1", fmt.Sprintf("t=%d,v0=abc", signedAt.Unix()), signedAt, provider.ErrBadSignature},
		{"an empty v1", fmt.Sprintf("t=%d,v1=", signedAt.Unix()), signedAt, provider.ErrBadSignature},
		{"a part without =", good + ",junk", signedAt, provider.ErrBadSignature},
		{"a header too long", good + strings.Repeat(",v1=00", 1000), signedAt, provider.ErrBadSignature},
		{"older than the tolerance", good, signedAt.Add(time.Minute + time.Second), provider.ErrStaleTimestamp},
		{"newer than the tolerance", good, signedAt.Add(-time.Minute - time.Second), provider.ErrStaleTimestamp},
		{"a wrong signature, stale", sign(body, signedAt, "whsec_2"), signedAt.Add(time.Hour), provider.ErrStaleTimestamp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := c.CheckWebhookHeader(tc.header, tc.now); !errors.Is(err, tc.want) {
				t.Errorf("CheckWebhookHeader(%.40q) = %v, want %v", tc.header, err, tc.want)
			}
		})
	}
	for _, h := range []string{good, sign(body, signedAt, "whsec_2"), fmt.Sprintf("t=%d,v1=00", signedAt.Unix())} {
		for _, d := range []time.Duration{0, time.Minute, -time.Minute} {
			if err := c.CheckWebhookHeader(h, signedAt.Add(d)); err != nil {
				t.Errorf("CheckWebhookHeader(%.40q, signed %+v from now) = %v, want nil", h, d, err)
			}
		}
	}
	none := mustWebhookClient(t, Config{})
	if err := none.CheckWebhookHeader(good, signedAt); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("CheckWebhookHeader(no secret configured) = %v, want ErrBadSignature", err)
	}
}

func TestParseWebhook_RefusesMalformedEventsAndOtherAPIVersions(t *testing.T) {
	t.Parallel()
	strict := mustWebhookClient(t, Config{WebhookSecrets: []string{"whsec_1"}})
	lenient := mustWebhookClient(t, Config{WebhookSecrets: []string{"whsec_1"}, IgnoreAPIVersionMismatch: true})
	oldVersion := eventBody(provider.EventPaymentIntentSucceeded, "2024-06-20", succeededPI)
	otherTrain := eventBody(provider.EventPaymentIntentSucceeded, "2025-03-31.basil", succeededPI)
	for _, tc := range []struct {
		name string
		body []byte
		c    *Client
		want error // nil: accepted
	}{
		{"an event of a version before release trains", oldVersion, strict, provider.ErrMalformedEvent},
		{"an event of another release train", otherTrain, strict, provider.ErrMalformedEvent},
		{"another release train, mismatch ignored", otherTrain, lenient, nil},
		{"not JSON", []byte(`{"id":`), strict, provider.ErrMalformedEvent},
		{"not an event", []byte(`{"id":"pi_1","object":"payment_intent"}`), strict, provider.ErrMalformedEvent},
		{"no id", []byte(`{"object":"event","api_version":"` + APIVersion + `","type":"payment_intent.succeeded","data":{"object":` + succeededPI + `}}`), strict, provider.ErrMalformedEvent},
		{"no type", []byte(`{"id":"evt_1","object":"event","api_version":"` + APIVersion + `","data":{"object":` + succeededPI + `}}`), strict, provider.ErrMalformedEvent},
		{"no data", []byte(`{"id":"evt_1","object":"event","api_version":"` + APIVersion + `","type":"payment_intent.succeeded"}`), strict, provider.ErrMalformedEvent},
		{"a payment_intent without id", eventBody(provider.EventPaymentIntentSucceeded, APIVersion, `{"object":"payment_intent"}`), strict, provider.ErrMalformedEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.c.ParseWebhook(tc.body, sign(tc.body, signedAt, "whsec_1"), signedAt)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("ParseWebhook() = %v, want %v", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "_secret_") {
				t.Errorf("ParseWebhook() error shows a secret: %v", err)
			}
		})
	}
}

func TestParseWebhook_AcceptsWhatStripeGoSigns(t *testing.T) {
	t.Parallel()
	c := mustWebhookClient(t, Config{WebhookSecrets: []string{"whsec_lib"}})
	body := eventBody(provider.EventPaymentIntentPaymentFailed, APIVersion, succeededPI)
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_lib", Timestamp: signedAt})
	if _, err := c.ParseWebhook(body, p.Header, signedAt); err != nil {
		t.Fatalf("ParseWebhook(stripe-go's test header) = %v", err)
	}
}

// libraryEvent decodes a signed body as stripe-go's ConstructEvent does
// and maps the stripe.Event it returns: the oracle decodeEvent is held to.
func libraryEvent(body []byte, header, secret string, ignoreVersion bool) (provider.WebhookEvent, bool) {
	ev, err := webhook.ConstructEventWithOptions(body, header, secret, webhook.ConstructEventOptions{
		IgnoreTolerance: true, IgnoreAPIVersionMismatch: ignoreVersion})
	if err != nil || ev.ID == "" || ev.Type == "" || ev.Data == nil {
		return provider.WebhookEvent{}, false
	}
	var obj eventObject
	if json.Unmarshal(ev.Data.Raw, &obj) != nil {
		return provider.WebhookEvent{}, false
	}
	out := provider.WebhookEvent{ID: ev.ID, Type: string(ev.Type), Created: time.Unix(ev.Created, 0).UTC(),
		APIVersion: ev.APIVersion, Metadata: obj.Metadata}
	switch obj.Object {
	case "payment_intent":
		if obj.ID == "" {
			return provider.WebhookEvent{}, false
		}
		out.PaymentID = obj.ID
	case "charge", "refund":
		out.PaymentID = objectID(obj.PaymentIntent)
	}
	return out, true
}

func TestParseWebhook_DecodesAsStripeGoDoes(t *testing.T) {
	t.Parallel()
	train := strings.SplitN(APIVersion, ".", 2)[1]
	bodies := map[string][]byte{
		"payment_intent.succeeded":              eventBody(provider.EventPaymentIntentSucceeded, APIVersion, benchPI),
		"charge.refunded, id":                   eventBody(provider.EventChargeRefunded, APIVersion, `{"id":"ch_1","object":"charge","payment_intent":"pi_2","metadata":{"a":"b"}}`),
		"charge.refunded, expanded":             eventBody(provider.EventChargeRefunded, APIVersion, `{"id":"ch_1","object":"charge","payment_intent":{"id":"pi_3","object":"payment_intent"}}`),
		"refund, null payment_intent":           eventBody("refund.created", APIVersion, `{"id":"re_1","object":"refund","payment_intent":null}`),
		"another object":                        eventBody("customer.created", APIVersion, `{"id":"cus_1","object":"customer","metadata":{}}`),
		"same train, other date":                eventBody(provider.EventPaymentIntentCanceled, "2099-01-01."+train, succeededPI),
		"other train":                           eventBody(provider.EventPaymentIntentSucceeded, "2025-03-31.basil", succeededPI),
		"no train":                              eventBody(provider.EventPaymentIntentSucceeded, "2024-06-20", succeededPI),
		"empty version":                         eventBody(provider.EventPaymentIntentSucceeded, "", succeededPI),
		"payment_intent without id":             eventBody(provider.EventPaymentIntentSucceeded, APIVersion, `{"object":"payment_intent"}`),
		"data.object not an object":             eventBody(provider.EventPaymentIntentSucceeded, APIVersion, `"pi_1"`),
		"metadata not strings":                  eventBody(provider.EventPaymentIntentSucceeded, APIVersion, `{"id":"pi_1","object":"payment_intent","metadata":{"a":1}}`),
		"not an event":                          []byte(`{"id":"pi_1","object":"payment_intent"}`),
		"not JSON":                              []byte(`{"id":`),
		"no data":                               []byte(`{"id":"evt_1","object":"event","api_version":"` + APIVersion + `","type":"x.y"}`),
		"data without object":                   []byte(`{"id":"evt_1","object":"event","api_version":"` + APIVersion + `","type":"x.y","data":{}}`),
		"unknown members, nested":               []byte(`{"id":"evt_1","object":"event","api_version":"` + APIVersion + `","type":"x.y","request":{"id":null,"idempotency_key":"k"},"data":{"object":{"id":"o","object":"thing","deep":[1,{"a":[]}]},"previous_attributes":{"status":"x"}}}`),
		"created as a string (refused by both)": []byte(`{"id":"evt_1","object":"event","api_version":"` + APIVersion + `","created":"1","type":"x.y","data":{"object":{}}}`),
	}
	for name, body := range bodies {
		for _, ignore := range []bool{false, true} {
			header := sign(body, signedAt, "whsec_1")
			want, wantOK := libraryEvent(body, header, "whsec_1", ignore)
			got, err := decodeEvent(body, ignore)
			if (err == nil) != wantOK {
				t.Errorf("%s (ignore version %t): decodeEvent error %v, stripe-go accepts: %t", name, ignore, err, wantOK)
				continue
			}
			if err != nil && !errors.Is(err, provider.ErrMalformedEvent) {
				t.Errorf("%s (ignore version %t): decodeEvent error %v, want ErrMalformedEvent", name, ignore, err)
			}
			if diff := cmp.Diff(want, got); wantOK && diff != "" {
				t.Errorf("%s (ignore version %t): decodeEvent mismatch (-stripe-go +got):\n%s", name, ignore, diff)
			}
		}
	}
}

func TestParseWebhook_RefusesANullDataObject(t *testing.T) {
	t.Parallel()
	// stripe-go decodes a null data.object as an empty one; no event Stripe
	// sends has one, and the adapter refuses it as it refuses a missing one.
	body := eventBody(provider.EventPaymentIntentSucceeded, APIVersion, `null`)
	if _, err := decodeEvent(body, false); !errors.Is(err, provider.ErrMalformedEvent) {
		t.Errorf("decodeEvent(null data.object) = %v, want ErrMalformedEvent", err)
	}
}
