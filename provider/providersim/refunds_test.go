package providersim_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stripe/stripe-go/v84"

	"github.com/retrysafe/booking/provider/providersim"
)

func refundParams(key, pi string, amount int64) *stripe.RefundCreateParams {
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(pi)}
	if amount > 0 {
		p.Amount = stripe.Int64(amount)
	}
	p.AddMetadata("reason", "cancelled")
	p.SetIdempotencyKey(key)
	return p
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 0)
	s := mustSim(t, providersim.Config{WebhookURL: rcv.srv.URL})
	pi := s.mustCreate(t, "k", "o1", "1", providersim.TokenVisa)
	ctx := ctxT(t)
	part, err := s.sc.V1Refunds.Create(ctx, refundParams("r1", pi.ID, 500))
	if err != nil {
		t.Fatal(err)
	}
	if part.Status != stripe.RefundStatusSucceeded || part.Amount != 500 || part.Currency != "eur" || part.PaymentIntent.ID != pi.ID ||
		part.Charge.ID != pi.LatestCharge.ID || part.Metadata["reason"] != "cancelled" {
		t.Fatalf("refund %+v, want 500 eur succeeded of %s", part, pi.ID)
	}
	if again, err := s.sc.V1Refunds.Create(ctx, refundParams("r1", pi.ID, 500)); err != nil || again.ID != part.ID {
		t.Fatalf("repeat = %v, %v; want the replay of %s", again, err, part.ID)
	}
	_, err = s.sc.V1Refunds.Create(ctx, refundParams("r2", pi.ID, 1001))
	if se := stripeErr(t, err); se.HTTPStatusCode != 400 || se.Code != stripe.ErrorCodeAmountTooLarge {
		t.Fatalf("too large = %d %s, want 400 amount_too_large", se.HTTPStatusCode, se.Code)
	}
	rest, err := s.sc.V1Refunds.Create(ctx, refundParams("r3", pi.ID, 0))
	if err != nil || rest.Amount != 1000 {
		t.Fatalf("refund of the rest = %v, %v; want 1000", rest, err)
	}
	for i := range 2 {
		a := s.do(t, http.MethodPost, "/v1/refunds", url.Values{"payment_intent": {pi.ID}}, map[string]string{"Idempotency-Key": "r4"})
		if a.status != 400 || a.errorObject(t).Code != "charge_already_refunded" || (a.header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("refund #%d of a refunded one = %d %s replayed %q, want 400 charge_already_refunded, saved", i+1, a.status, a.body,
				a.header.Get("Idempotent-Replayed"))
		}
	}
	p := &stripe.PaymentIntentRetrieveParams{}
	p.AddExpand("latest_charge")
	got, err := s.sc.V1PaymentIntents.Retrieve(ctx, pi.ID, p)
	if err != nil || got.LatestCharge.AmountRefunded != 1500 || !got.LatestCharge.Refunded {
		t.Fatalf("charge after refunds = %+v, %v; want 1500 refunded", got.LatestCharge, err)
	}
	if c := s.Charges(); c[0].RefundedAmount != 1500 {
		t.Fatalf("Charges() = %+v, want refunded_amount 1500", c)
	}

	// Refunds of the PaymentIntent, paged by stripe-go, newest first.
	lp := &stripe.RefundListParams{PaymentIntent: stripe.String(pi.ID)}
	lp.Limit = stripe.Int64(1)
	list, err := collect(s.sc.V1Refunds.List(ctx, lp))
	if err != nil || len(list) != 2 || list[0].ID != rest.ID || list[1].ID != part.ID {
		t.Fatalf("List(refunds of %s) = %v, %v; want %s, %s", pi.ID, list, err, rest.ID, part.ID)
	}
	if got, err := s.sc.V1Refunds.Retrieve(ctx, part.ID, nil); err != nil || got.Amount != 500 {
		t.Fatalf("Retrieve(%s) = %v, %v", part.ID, got, err)
	}
	mustWaitWebhooks(t, s)
	refunded := 0
	for _, ev := range rcv.events() {
		if ev.Type == "charge.refunded" {
			refunded++
			if ev.Data.Object["payment_intent"] != pi.ID || ev.Data.Object["object"] != "charge" {
				t.Errorf("charge.refunded object %v, want the charge of %s", ev.Data.Object, pi.ID)
			}
		}
	}
	if refunded != 2 {
		t.Fatalf("%d charge.refunded events, want 2", refunded)
	}
}

func TestRefundRefusals(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	_, err := s.sc.V1PaymentIntents.Create(ctxT(t), createParams("k", "o1", "1", providersim.TokenDecline))
	declined := stripeErr(t, err).PaymentIntent
	a := s.do(t, http.MethodPost, "/v1/refunds", url.Values{"payment_intent": {declined.ID}}, nil)
	if a.status != 400 || a.errorObject(t).Code != "payment_intent_unexpected_state" {
		t.Fatalf("refund of a declined one = %d %s, want 400 payment_intent_unexpected_state", a.status, a.body)
	}
	// An unknown PaymentIntent is 404, not saved: the key stays free.
	_, err = s.sc.V1Refunds.Create(ctxT(t), refundParams("r", "pi_missing", 0))
	if se := stripeErr(t, err); se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing || se.Param != "payment_intent" {
		t.Fatalf("refund of an unknown one = %d %s %s, want 404 resource_missing payment_intent", se.HTTPStatusCode, se.Code, se.Param)
	}
	pi := s.mustCreate(t, "k2", "o2", "1", providersim.TokenVisa)
	if re, err := s.sc.V1Refunds.Create(ctxT(t), refundParams("r", pi.ID, 0)); err != nil || re.Amount != 1500 {
		t.Fatalf("the key after a 404 = %v, %v; want a refund", re, err)
	}
	if n := len(s.Refunds()); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}
