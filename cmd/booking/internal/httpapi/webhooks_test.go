package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
)

// fakeReceiver records what the webhook route hands to the commands layer.
type fakeReceiver struct {
	err       error
	signature string
	body      []byte
	calls     int
}

func (f *fakeReceiver) ReceiveWebhook(_ context.Context, signature string, body []byte) error {
	f.calls++
	f.signature, f.body = signature, body
	return f.err
}

func TestWebhookRoute(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1", "type":"payment_intent.succeeded" ,"data":{"object":{"id":"pi_1"}}}` + "\n")
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{name: "A recorded notice is answered 204.", wantStatus: http.StatusNoContent},
		{name: "A bad signature is answered 400.", err: commands.ErrWebhookSignature, wantStatus: http.StatusBadRequest, wantCode: "invalid-signature"},
		{name: "A stale timestamp is answered 400.", err: commands.ErrWebhookStale, wantStatus: http.StatusBadRequest, wantCode: "stale-signature"},
		{name: "A malformed event is answered 400.", err: commands.ErrWebhookMalformed, wantStatus: http.StatusBadRequest, wantCode: "malformed-event"},
		{name: "A payment of an order not known yet is answered 404, so the provider redelivers.", err: domain.ErrOrderNotFound, wantStatus: http.StatusNotFound, wantCode: "order-not-found"},
		{name: "A provider that cannot be reached is answered 503.", err: domain.ErrUnavailable, wantStatus: http.StatusServiceUnavailable, wantCode: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &api{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			recv := &fakeReceiver{err: tt.err}
			a.webhooks = newWebhookHandler(a, recv)
			srv := httptest.NewServer(a.routes())
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/provider/webhooks", bytes.NewReader(body))
			req.Header.Set("Stripe-Signature", "t=1,v1=ab")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("POST /v1/provider/webhooks = %d %s, want %d", resp.StatusCode, got, tt.wantStatus)
			}
			if tt.wantCode != "" && !strings.Contains(string(got), `"code":"`+tt.wantCode+`"`) {
				t.Errorf("problem %s, want code %s", got, tt.wantCode)
			}
			if recv.calls != 1 || !bytes.Equal(recv.body, body) || recv.signature != "t=1,v1=ab" {
				t.Errorf("receiver got %d calls, body %q, signature %q; want the raw bytes and header once", recv.calls, recv.body, recv.signature)
			}
		})
	}
}
