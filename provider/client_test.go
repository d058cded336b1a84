package provider

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fakeProvider answers every request with status and body.
func fakeProvider(tb testing.TB, status int, body string) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

func TestClientClassifiesAnswers(t *testing.T) {
	t.Parallel()
	req := NewChargeRequest(100, "EUR", "tok_secret_9", "o1", 1)
	tests := []struct {
		name   string
		status int
		body   string
		want   error
	}{
		{"a 402 card_error is a decline", 402, `{"error":{"type":"card_error","code":"card_declined","message":"declined","charge":"ch_1"},"charge":{"id":"ch_1","status":"failed","amount":100}}`, ErrDeclined},
		{"a 409 is key in use", 409, `{"error":{"type":"idempotency_key_in_use"}}`, ErrKeyInUse},
		{"a 400 idempotency_error is an idempotency alert", 400, `{"error":{"type":"idempotency_error"}}`, ErrIdempotency},
		{"a 400 invalid_request_error is invalid", 400, `{"error":{"type":"invalid_request_error","message":"No such token: 'tok_secret_9'"}}`, ErrInvalidRequest},
		{"a 500 to a POST is an unknown outcome", 500, `{"error":{"type":"api_error"}}`, ErrOutcomeUnknown},
		{"a 502 without JSON to a POST is an unknown outcome", 502, `<html>bad gateway</html>`, ErrOutcomeUnknown},
		{"a 429 is unavailable", 429, `{"error":{"type":"rate_limit_error"}}`, ErrUnavailable},
		{"a 401 is a refused API key", 401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided."}}`, ErrUnauthorized},
		{"a 401 is unavailable, never a refusal of the request", 401, `{"error":{"type":"invalid_request_error"}}`, ErrUnavailable},
		{"a 403 is a refused API key", 403, `{"error":{"type":"invalid_request_error"}}`, ErrUnauthorized},
		{"a 200 with a broken body is an unknown outcome", 200, `{"id":`, ErrOutcomeUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New(fakeProvider(t, tt.status, tt.body).URL, nil)
			_, err := c.CreateCharge(context.Background(), "k1", req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("CreateCharge() = %v, want %v", err, tt.want)
			}
			if strings.Contains(err.Error(), "tok_secret_9") {
				t.Fatalf("CreateCharge() error shows the token: %v", err)
			}
			var apiErr *APIError
			if tt.want == ErrDeclined && (!errors.As(err, &apiErr) || apiErr.Charge == nil || apiErr.Charge.ID != "ch_1" || apiErr.Charge.Status != StatusFailed) {
				t.Fatalf("CreateCharge() decline does not carry the failed charge: %#v", err)
			}
		})
	}
}

func TestClientReadErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := New(fakeProvider(t, 500, `{}`).URL, nil).GetCharge(ctx, "ch_1"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("GetCharge() on 500 = %v, want ErrUnavailable", err)
	}
	if _, err := New(fakeProvider(t, 404, `{"error":{"type":"invalid_request_error","code":"resource_missing"}}`).URL, nil).GetCharge(ctx, "ch_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCharge() on 404 = %v, want ErrNotFound", err)
	}
	_, ok, err := New(fakeProvider(t, 200, `{"object":"list","data":[]}`).URL, nil).ChargeByKey(ctx, "k")
	if ok || err != nil {
		t.Errorf("ChargeByKey() on an empty list = %v, %v; want false, nil", ok, err)
	}
}

func TestClientNothingSentIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connection refused from now on
	c := New("http://"+addr, nil)
	_, err = c.CreateCharge(context.Background(), "k1", NewChargeRequest(100, "EUR", "tok_visa", "o1", 1))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("CreateCharge() to a closed port = %v, want ErrUnavailable only", err)
	}
	if _, err := c.CreateCharge(context.Background(), "", NewChargeRequest(100, "EUR", "tok_visa", "o1", 1)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("CreateCharge() without key = %v, want ErrInvalidRequest", err)
	}
}

func TestClientTimeoutAfterSendIsUnknown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := New(srv.URL, nil).CreateCharge(ctx, "k1", NewChargeRequest(100, "EUR", "tok_visa", "o1", 1))
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CreateCharge() = %v, want ErrOutcomeUnknown wrapping context.DeadlineExceeded", err)
	}
}

func TestClientSendsRawBytesAndKey(t *testing.T) {
	t.Parallel()
	var gotBody, gotKey string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody, gotKey = string(b), r.Header.Get(HeaderIdempotencyKey)
		w.Header().Set(HeaderIdempotentReplayed, "true")
		_, _ = io.WriteString(w, `{"id":"ch_1","object":"charge","amount":100,"status":"succeeded"}`)
	}))
	t.Cleanup(srv.Close)
	raw := []byte(`{"amount":100,"currency":"EUR","token":"tok_visa","metadata":{"attempt":"1","order_id":"o1"}}`)
	ch, err := New(srv.URL, nil).CreateChargeRaw(context.Background(), "dep-order-o1-1", raw)
	if err != nil {
		t.Fatal(err)
	}
	if gotBody != string(raw) || gotKey != "dep-order-o1-1" || !ch.Replayed || ch.ID != "ch_1" {
		t.Fatalf("CreateChargeRaw() sent %s with key %q, got %+v", gotBody, gotKey, ch)
	}
}

// TestClientSendsAPIKey: WithAPIKey sends "Authorization: Bearer <key>" on
// every request; without it no Authorization header is sent. The key never
// appears in an error.
func TestClientSendsAPIKey(t *testing.T) {
	t.Parallel()
	const key = "sk_test_client_9f8e7d"
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"No valid API key provided."}}`)
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	_, err := New(srv.URL, nil, WithAPIKey(key)).CreateCharge(ctx, "k1", NewChargeRequest(100, "EUR", "tok_visa", "o1", 1))
	if !errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("CreateCharge() answered 401 = %v, want ErrUnauthorized and no unknown outcome", err)
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("the error shows the API key: %v", err)
	}
	if _, err := New(srv.URL, nil, WithAPIKey(key)).GetCharge(ctx, "ch_1"); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("GetCharge() answered 401 = %v, want ErrUnauthorized", err)
	}
	if _, err := New(srv.URL, nil).GetCharge(ctx, "ch_1"); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("GetCharge() without a key answered 401 = %v, want ErrUnauthorized", err)
	}
	want := []string{"Bearer " + key, "Bearer " + key, ""}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Authorization headers = %q, want %q", got, want)
	}
}
