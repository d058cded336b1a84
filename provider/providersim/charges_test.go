package providersim_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

func TestRepeatWithSameKeyReplaysOneCharge(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	req := charge("o1", 1, "tok_visa")

	first := s.mustCharge(t, ctx, "order-o1-1", req)
	again, err := s.client.CreateChargeRaw(ctx, "order-o1-1", req.Body())
	if err != nil {
		t.Fatalf("CreateChargeRaw() repeat = %v", err)
	}
	if first.Replayed || !again.Replayed {
		t.Fatalf("Replayed = %v then %v, want false then true", first.Replayed, again.Replayed)
	}
	again.Replayed = false
	if diff := cmp.Diff(first, again); diff != "" {
		t.Fatalf("replay differs (-first +replay):\n%s", diff)
	}
	if first.Status != provider.StatusSucceeded || first.Amount != 1500 || first.IdempotencyKey != "order-o1-1" || first.Metadata["order_id"] != "o1" {
		t.Fatalf("CreateCharge() = %+v", first)
	}
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("simulator has %d charges, want 1", n)
	}
	got, ok, err := s.client.ChargeByKey(ctx, "order-o1-1")
	if err != nil || !ok || got.ID != first.ID {
		t.Fatalf("ChargeByKey() = %+v, %v, %v; want %s", got, ok, err, first.ID)
	}
	if got, err := s.client.GetCharge(ctx, first.ID); err != nil || got.ID != first.ID {
		t.Fatalf("GetCharge() = %+v, %v", got, err)
	}
	if _, err := s.client.GetCharge(ctx, "ch_missing"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("GetCharge(unknown) = %v, want ErrNotFound", err)
	}
}

func TestReplayIgnoresWhitespaceAndMemberOrder(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	if _, err := s.client.CreateChargeRaw(ctx, "k", []byte(`{"amount":1500,"currency":"EUR","token":"tok_visa","metadata":{"order_id":"o1","attempt":"1"}}`)); err != nil {
		t.Fatal(err)
	}
	ch, err := s.client.CreateChargeRaw(ctx, "k", []byte(`{ "metadata": {"attempt":"1", "order_id":"o1"}, "token":"tok_visa", "currency":"EUR", "amount":1500 }`))
	if err != nil || !ch.Replayed {
		t.Fatalf("CreateChargeRaw() reordered = %+v, %v; want a replay", ch, err)
	}
}

func TestSameKeyWithOtherParametersIsIdempotencyError(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	s.mustCharge(t, ctx, "k", charge("o1", 1, "tok_visa"))
	changed := charge("o1", 1, "tok_visa")
	changed.Amount = 1600
	_, err := s.client.CreateCharge(ctx, "k", changed)
	var apiErr *provider.APIError
	if !errors.Is(err, provider.ErrIdempotency) || errors.Is(err, provider.ErrDeclined) || !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Type != "idempotency_error" {
		t.Fatalf("CreateCharge() with other amount = %v, want 400 idempotency_error", err)
	}
	// The key is shared across endpoints, as at Stripe.
	if _, err := s.client.Refund(ctx, "k", s.Charges()[0].ID, 0); !errors.Is(err, provider.ErrIdempotency) {
		t.Fatalf("Refund() with a charge's key = %v, want ErrIdempotency", err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("simulator has %d charges, want 1", n)
	}
}

func TestConcurrentSameKeyMakesExactlyOneCharge(t *testing.T) {
	t.Parallel()
	s := mustSim(t, providersim.Config{})
	// Every request takes 5 s, and the others start once the first holds
	// the key, so overlaps (hence 409s) are certain on any machine.
	const latency = 5 * time.Second
	if err := s.SetFaults(providersim.Faults{LatencyMS: int(latency / time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	req := charge("o1", 1, "tok_visa")
	const n = 50
	var wg sync.WaitGroup
	results := make([]provider.Charge, n)
	errs := make([]error, n)
	wg.Go(func() { results[0], errs[0] = s.client.CreateCharge(ctx, "same-key", req) })
	for begin := time.Now(); !slices.Contains(s.InFlight(), "same-key"); time.Sleep(5 * time.Millisecond) {
		if time.Since(begin) > latency {
			t.Fatalf("the first request did not hold the key within %s", latency)
		}
	}
	start := make(chan struct{})
	for i := 1; i < n; i++ {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.client.CreateCharge(ctx, "same-key", req)
		})
	}
	close(start)
	wg.Wait()

	charges := s.Charges()
	if len(charges) != 1 {
		t.Fatalf("simulator has %d charges, want 1", len(charges))
	}
	var ok, inUse int
	for i := range n {
		switch {
		case errs[i] == nil:
			ok++
			if results[i].ID != charges[0].ID {
				t.Errorf("request %d got charge %s, want %s", i, results[i].ID, charges[0].ID)
			}
		case errors.Is(errs[i], provider.ErrKeyInUse):
			inUse++
		default:
			t.Errorf("request %d: %v, want success or ErrKeyInUse", i, errs[i])
		}
	}
	if ok == 0 || inUse == 0 {
		t.Errorf("%d successes and %d key-in-use answers; want some of each", ok, inUse)
	}
}

func TestFixedTokens(t *testing.T) {
	t.Parallel()

	t.Run("tok_visa succeeds", func(t *testing.T) {
		t.Parallel()
		s := mustSim(t, providersim.Config{})
		ch, err := s.client.CreateCharge(ctxT(t), "k", charge("o1", 1, "tok_visa"))
		if err != nil || ch.Status != provider.StatusSucceeded {
			t.Fatalf("CreateCharge() = %+v, %v", ch, err)
		}
	})

	t.Run("tok_decline is a definitive decline with a recorded failed charge", func(t *testing.T) {
		t.Parallel()
		s, ctx := mustSimCtx(t, providersim.Config{})
		_, err := s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_decline"))
		var apiErr *provider.APIError
		if !errors.Is(err, provider.ErrDeclined) || !errors.As(err, &apiErr) {
			t.Fatalf("CreateCharge() = %v, want ErrDeclined", err)
		}
		if apiErr.StatusCode != 402 || apiErr.Type != "card_error" || apiErr.Code != "card_declined" || apiErr.Charge == nil ||
			apiErr.Charge.Status != provider.StatusFailed || apiErr.Charge.FailureCode != "card_declined" || apiErr.Charge.Amount != 1500 {
			t.Fatalf("decline = %+v, charge %+v", apiErr, apiErr.Charge)
		}
		charges := s.Charges()
		if len(charges) != 1 || charges[0].Status != provider.StatusFailed || charges[0].ID != apiErr.Charge.ID {
			t.Fatalf("Charges() = %+v, want the one failed charge", charges)
		}
		_, err = s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_decline"))
		if !errors.As(err, &apiErr) || !errors.Is(err, provider.ErrDeclined) || !apiErr.Replayed || apiErr.Charge.ID != charges[0].ID {
			t.Fatalf("repeat = %v, want the replayed decline", err)
		}
		if got, ok, err := s.client.ChargeByKey(ctx, "k"); !ok || err != nil || got.Status != provider.StatusFailed {
			t.Fatalf("ChargeByKey() = %+v, %v, %v; want the failed charge", got, ok, err)
		}
	})

	t.Run("tok_error_before_commit always answers 500 without charging", func(t *testing.T) {
		t.Parallel()
		s, ctx := mustSimCtx(t, providersim.Config{})
		for range 2 {
			_, err := s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_error_before_commit"))
			if !errors.Is(err, provider.ErrOutcomeUnknown) {
				t.Fatalf("CreateCharge() = %v, want ErrOutcomeUnknown", err)
			}
		}
		if n := len(s.Charges()); n != 0 {
			t.Fatalf("simulator has %d charges, want 0", n)
		}
		if _, ok, err := s.client.ChargeByKey(ctx, "k"); ok || err != nil {
			t.Fatalf("ChargeByKey() = %v, %v; want nothing", ok, err)
		}
		// The key was not used up: other parameters are not a conflict.
		if _, err := s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_visa")); err != nil {
			t.Fatalf("CreateCharge() after 500s = %v", err)
		}
	})

	t.Run("tok_timeout_after_commit charges, then drops the connection", func(t *testing.T) {
		t.Parallel()
		s, ctx := mustSimCtx(t, providersim.Config{})
		req := charge("o1", 1, "tok_timeout_after_commit")
		_, err := s.freshClient().CreateCharge(ctx, "k", req)
		if !errors.Is(err, provider.ErrOutcomeUnknown) {
			t.Fatalf("CreateCharge() = %v, want ErrOutcomeUnknown", err)
		}
		charges := s.Charges()
		if len(charges) != 1 || charges[0].Status != provider.StatusSucceeded {
			t.Fatalf("Charges() = %+v, want one succeeded charge", charges)
		}
		got, ok, err := s.client.ChargeByKey(ctx, "k")
		if err != nil || !ok || got.ID != charges[0].ID {
			t.Fatalf("ChargeByKey() = %+v, %v, %v; want %s", got, ok, err, charges[0].ID)
		}
		again, err := s.freshClient().CreateChargeRaw(ctx, "k", req.Body())
		if err != nil || !again.Replayed || again.ID != charges[0].ID {
			t.Fatalf("repeat = %+v, %v; want a replay of %s", again, err, charges[0].ID)
		}
	})

	t.Run("tok_slow succeeds after the delay and holds the key meanwhile", func(t *testing.T) {
		t.Parallel()
		// The delay is long enough that the concurrent request surely
		// arrives while the first is in flight, whatever the machine's load.
		const delay = 3 * time.Second
		s, ctx := mustSimCtx(t, providersim.Config{SlowDelay: delay})
		req := charge("o1", 1, "tok_slow")
		begin := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := s.client.CreateCharge(ctx, "k", req)
			done <- err
		}()
		for !slices.Contains(s.InFlight(), "k") { // the first request holds the key
			if time.Since(begin) > delay {
				t.Fatalf("the first tok_slow request was not in flight within %s", delay)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := s.client.CreateCharge(ctx, "k", req); !errors.Is(err, provider.ErrKeyInUse) {
			t.Errorf("concurrent CreateCharge() = %v, want ErrKeyInUse", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("CreateCharge() = %v", err)
		}
		if d := time.Since(begin); d < delay {
			t.Errorf("tok_slow answered after %s, want ≥ %s", d, delay)
		}
		if n := len(s.Charges()); n != 1 {
			t.Fatalf("simulator has %d charges, want 1", n)
		}
	})

	t.Run("tok_slow commits even when the client gives up", func(t *testing.T) {
		t.Parallel()
		s := mustSim(t, providersim.Config{SlowDelay: 300 * time.Millisecond})
		ctx, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
		defer cancel()
		if _, err := s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_slow")); !errors.Is(err, provider.ErrOutcomeUnknown) {
			t.Fatalf("CreateCharge() = %v, want ErrOutcomeUnknown", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(s.Charges()) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := len(s.Charges()); n != 1 {
			t.Fatalf("simulator has %d charges, want 1 (late commit)", n)
		}
	})

	t.Run("suffixed tokens behave like their prefix", func(t *testing.T) {
		t.Parallel()
		s := mustSim(t, providersim.Config{})
		if _, err := s.client.CreateCharge(ctxT(t), "k", charge("o1", 1, "tok_visa_42")); err != nil {
			t.Fatalf("CreateCharge(tok_visa_42) = %v", err)
		}
	})

	t.Run("an unknown token is an invalid request that does not use up the key", func(t *testing.T) {
		t.Parallel()
		s, ctx := mustSimCtx(t, providersim.Config{})
		_, err := s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_mystery"))
		var apiErr *provider.APIError
		if !errors.Is(err, provider.ErrInvalidRequest) || errors.Is(err, provider.ErrDeclined) || !errors.As(err, &apiErr) || apiErr.Param != "token" {
			t.Fatalf("CreateCharge() = %v, want ErrInvalidRequest on param token", err)
		}
		if _, err := s.client.CreateCharge(ctx, "k", charge("o1", 1, "tok_visa")); err != nil {
			t.Fatalf("CreateCharge() after the invalid request = %v", err)
		}
	})
}

func TestRetentionWindow(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	req := charge("o1", 3, "tok_visa")
	first := s.mustCharge(t, ctx, "order-o1-3", req)

	s.AdvanceClock(23 * time.Hour)
	if _, ok, _ := s.client.ChargeByKey(ctx, "order-o1-3"); !ok {
		t.Fatalf("ChargeByKey() after 23h found nothing, want the charge")
	}

	var clock struct{ Now, Offset string }
	if status := s.mustDo(t, http.MethodPost, "/_sim/clock", map[string]string{"advance": "2h"}, &clock); status != http.StatusOK || clock.Offset != "25h0m0s" {
		t.Fatalf("POST /_sim/clock = %d %+v, want 200 with offset 25h", status, clock)
	}
	if _, ok, err := s.client.ChargeByKey(ctx, "order-o1-3"); ok || err != nil {
		t.Fatalf("ChargeByKey() after 25h = %v, %v; want nothing", ok, err)
	}
	found, err := s.client.SearchCharges(ctx, "o1", 3)
	if err != nil || len(found) != 1 || found[0].ID != first.ID {
		t.Fatalf("SearchCharges() after 25h = %+v, %v; want %s", found, err, first.ID)
	}
	if got, err := s.client.GetCharge(ctx, first.ID); err != nil || got.ID != first.ID {
		t.Fatalf("GetCharge() after 25h = %v", err)
	}
	// Past the window the key is new again: this is why callers must not
	// retry an old attempt's key after the window.
	second, err := s.client.CreateCharge(ctx, "order-o1-3", req)
	if err != nil || second.Replayed || second.ID == first.ID {
		t.Fatalf("CreateCharge() after 25h = %+v, %v; want a new charge", second, err)
	}
	if found, _ := s.client.SearchCharges(ctx, "o1", 0); len(found) != 2 {
		t.Fatalf("SearchCharges(any attempt) = %d charges, want 2", len(found))
	}
	if found, _ := s.client.SearchCharges(ctx, "o2", 0); len(found) != 0 {
		t.Fatalf("SearchCharges(o2) = %d charges, want 0", len(found))
	}
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	s, ctx := mustSimCtx(t, providersim.Config{})
	ch := s.mustCharge(t, ctx, "k", charge("o1", 1, "tok_visa"))

	part, err := s.client.Refund(ctx, "refund-1", ch.ID, 500)
	if err != nil || part.Amount != 500 || part.Charge != ch.ID || part.Replayed {
		t.Fatalf("Refund(500) = %+v, %v", part, err)
	}
	again, err := s.client.Refund(ctx, "refund-1", ch.ID, 500)
	if err != nil || !again.Replayed || again.ID != part.ID {
		t.Fatalf("Refund(500) repeat = %+v, %v; want a replay of %s", again, err, part.ID)
	}
	if _, err := s.client.Refund(ctx, "refund-1", ch.ID, 600); !errors.Is(err, provider.ErrIdempotency) {
		t.Fatalf("Refund(600) with the same key = %v, want ErrIdempotency", err)
	}
	var apiErr *provider.APIError
	if _, err := s.client.Refund(ctx, "refund-2", ch.ID, 5000); !errors.As(err, &apiErr) || apiErr.Code != provider.CodeAmountTooLarge {
		t.Fatalf("Refund(5000) = %v, want amount_too_large", err)
	}
	rest, err := s.client.Refund(ctx, "refund-2", ch.ID, 0)
	if err != nil || rest.Amount != 1000 {
		t.Fatalf("Refund(rest) = %+v, %v; want 1000", rest, err)
	}
	if _, err := s.client.Refund(ctx, "refund-3", ch.ID, 0); !errors.As(err, &apiErr) || apiErr.Code != provider.CodeChargeAlreadyRefunded {
		t.Fatalf("Refund() of a refunded charge = %v, want charge_already_refunded", err)
	}
	if _, err := s.client.Refund(ctx, "refund-4", "ch_missing", 0); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Refund() of an unknown charge = %v, want ErrNotFound", err)
	}

	got, err := s.client.GetCharge(ctx, ch.ID)
	if err != nil || got.RefundedAmount != 1500 || !got.Refunded {
		t.Fatalf("GetCharge() = %+v, %v; want fully refunded", got, err)
	}
	if re, ok, err := s.client.RefundByKey(ctx, "refund-2"); err != nil || !ok || re.ID != rest.ID {
		t.Fatalf("RefundByKey() = %+v, %v, %v", re, ok, err)
	}
	if list, err := s.client.ListRefunds(ctx, ch.ID); err != nil || len(list) != 2 {
		t.Fatalf("ListRefunds() = %+v, %v; want 2", list, err)
	}
	if n := len(s.Refunds()); n != 2 {
		t.Fatalf("simulator has %d refunds, want 2", n)
	}

	if _, err := s.client.CreateCharge(ctx, "k-declined", charge("o2", 1, "tok_decline")); !errors.Is(err, provider.ErrDeclined) {
		t.Fatalf("CreateCharge(tok_decline) = %v", err)
	}
	failed := s.Charges()[1]
	if _, err := s.client.Refund(ctx, "refund-5", failed.ID, 0); !errors.As(err, &apiErr) || apiErr.Code != provider.CodeChargeNotRefundable {
		t.Fatalf("Refund() of a failed charge = %v, want charge_not_refundable", err)
	}
}
