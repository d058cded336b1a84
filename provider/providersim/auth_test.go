package providersim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/retrysafe/booking/internal/syncbuf"
	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

// TestAPIKeyRequired: a simulator with an API key answers /v1 only to
// requests that carry it as a bearer token; others get 401 with a
// Stripe-like error body, and nothing is charged. /_sim and /healthz stay
// open. The key appears in no answer and no log line.
func TestAPIKeyRequired(t *testing.T) {
	t.Parallel()
	const key = "sk_test_sim_7c1e5a"
	logs := &syncbuf.Buffer{}
	s := mustSim(t, providersim.Config{APIKey: key, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := context.Background()
	req := provider.NewChargeRequest(1500, "EUR", providersim.TokenVisa, "o1", 1)

	for _, c := range []struct {
		name   string
		header string
		want   string
	}{
		{"no Authorization header", "", "You did not provide an API key"},
		{"another scheme", "Basic " + key, "You did not provide an API key"},
		{"a wrong key", "Bearer sk_test_wrong", "Invalid API Key provided."},
		{"a prefix of the key", "Bearer " + key[:len(key)-1], "Invalid API Key provided."},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, s.url+"/v1/charges", bytes.NewReader(req.Body()))
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set(provider.HeaderIdempotencyKey, "auth-"+c.name)
			r.Header.Set("Content-Type", "application/json")
			if c.header != "" {
				r.Header.Set("Authorization", c.header)
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("POST /v1/charges with %s = %d (WWW-Authenticate %q) %s, want 401 with a Bearer challenge", c.name,
					resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
			var env struct {
				Error struct {
					Type, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &env); err != nil || env.Error.Type != provider.TypeInvalidRequestError || !strings.Contains(env.Error.Message, c.want) {
				t.Errorf("401 body = %s, want an invalid_request_error saying %q", body, c.want)
			}
			if strings.Contains(string(body), key) {
				t.Errorf("401 body echoes the key: %s", body)
			}
		})
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d charges after refused requests, want 0", n)
	}

	// The client without the key: refused, classified as unauthorized.
	if _, err := s.client.CreateCharge(ctx, "auth-client-1", req); !errors.Is(err, provider.ErrUnauthorized) {
		t.Errorf("CreateCharge without the key = %v, want ErrUnauthorized", err)
	}
	// With the key: charged, once.
	authed := provider.New(s.url, nil, provider.WithAPIKey(key))
	ch, err := authed.CreateCharge(ctx, "auth-client-1", req)
	if err != nil || ch.Status != provider.StatusSucceeded {
		t.Fatalf("CreateCharge with the key = %+v, %v; want succeeded", ch, err)
	}
	if _, found, err := authed.ChargeByKey(ctx, "auth-client-1"); !found || err != nil {
		t.Errorf("ChargeByKey with the key = found %v, %v", found, err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
	// The control API needs no key.
	var out map[string]any
	if st := s.mustDo(t, http.MethodGet, "/_sim/charges", nil, &out); st != http.StatusOK {
		t.Errorf("GET /_sim/charges without a key = %d, want 200", st)
	}
	if strings.Contains(logs.String(), key) {
		t.Errorf("the simulator logged its API key:\n%s", logs.String())
	}
}
