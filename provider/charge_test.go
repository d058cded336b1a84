package provider

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

func TestChargeRequestBodyGolden(t *testing.T) {
	t.Parallel()
	req := ChargeRequest{
		Amount:      4200,
		Currency:    "EUR",
		Token:       "tok_visa",
		Metadata:    map[string]string{"order_id": "0190f1c2-aaaa-7bbb-8ccc-000000000001", "attempt": "2", "a<b": "x&y"},
		Description: "2 seats",
	}
	got := req.Body()
	path := filepath.Join("testdata", "charge_request.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Body() = %s, want %s", got, want)
	}
}

func TestChargeRequestBodyIsDeterministic(t *testing.T) {
	t.Parallel()
	first := NewChargeRequest(100, "USD", "tok_visa", "o1", 1)
	first.Metadata["z"], first.Metadata["a"], first.Metadata["m"] = "1", "2", "3"
	for range 50 {
		again := ChargeRequest{Amount: 100, Currency: "USD", Token: "tok_visa", Metadata: map[string]string{"m": "3", "a": "2", "z": "1", "attempt": "1", "order_id": "o1"}}
		if !bytes.Equal(first.Body(), again.Body()) {
			t.Fatalf("Body() = %s, then %s", first.Body(), again.Body())
		}
	}
	if got, want := string(ChargeRequest{Amount: 1, Currency: "EUR", Token: "t"}.Body()), `{"amount":1,"currency":"EUR","token":"t","metadata":{}}`; got != want {
		t.Fatalf("Body() = %s, want %s", got, want)
	}
	parsed, err := ParseChargeRequest(first.Body())
	if err != nil || !bytes.Equal(parsed.Body(), first.Body()) {
		t.Fatalf("ParseChargeRequest(Body()) = %s, %v; want a round trip", parsed.Body(), err)
	}
}

func TestRefundRequestBody(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		req  RefundRequest
		want string
	}{
		{RefundRequest{Charge: "ch_1"}, `{"charge":"ch_1"}`},
		{RefundRequest{Charge: "ch_1", Amount: 5}, `{"charge":"ch_1","amount":5}`},
	} {
		if got := string(tt.req.Body()); got != tt.want {
			t.Errorf("Body() = %s, want %s", got, tt.want)
		}
	}
}

func TestChargeRequestNeverShowsToken(t *testing.T) {
	t.Parallel()
	req := NewChargeRequest(100, "EUR", "tok_secret_123", "o1", 1)
	for _, s := range []string{fmt.Sprint(req), fmt.Sprintf("%v %+v %#v %s", req, req, req, req), fmt.Sprint(&req)} {
		if strings.Contains(s, "tok_secret_123") {
			t.Fatalf("formatted request shows the token: %s", s)
		}
	}
	if err := (ChargeRequest{Currency: "EUR", Token: "tok_secret_123"}).Validate(); !errors.Is(err, ErrInvalidRequest) || strings.Contains(err.Error(), "tok_secret") {
		t.Fatalf("Validate() = %v, want ErrInvalidRequest without the token", err)
	}
}

func TestParseChargeRequestIsStrict(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"amount":1.5,"currency":"EUR","token":"tok_secret"}`,
		`{"amount":"1","currency":"EUR","token":"tok_secret"}`,
		`{"amount":1,"currency":"EUR","token":"tok_secret","extra":1}`,
		`{"amount":1,"currency":"EUR","token":"tok_secret"} {}`,
		`{"amount":1,"currency":"EUR","token":tok_secret}`,
	} {
		_, err := ParseChargeRequest([]byte(body))
		if !errors.Is(err, ErrInvalidRequest) || strings.Contains(err.Error(), "tok_secret") {
			t.Errorf("ParseChargeRequest(%s) = %v, want ErrInvalidRequest without the token", body, err)
		}
	}
}
