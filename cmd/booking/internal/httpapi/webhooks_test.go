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

// fakeReceiver records what the webhook route hands to the commands layer,
// and reports appended events (or an ignored event) as the commands layer
// does.
type fakeReceiver struct {
	err       error
	appends   int
	ignored   bool
	signature string
	body      []byte
	calls     int
}

func (f *fakeReceiver) ReceiveWebhook(ctx context.Context, signature string, body []byte) error {
	f.calls++
	f.signature, f.body = signature, body
	if r := commands.WebhookReportFrom(ctx); r != nil {
		r.AddAppended(f.appends)
		if f.ignored {
			r.MarkIgnored()
		}
	}
	return f.err
}

func TestWebhookRoute(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1", "type":"payment_intent.succeeded" ,"data":{"object":{"id":"pi_1"}}}` + "\n")
	tests := []struct {
		name       string
		err        error
		appends    int
		ignored    bool
		wantStatus int
		wantCode   string
		wantResult string
	}{
		{name: "A recorded notice is answered 204, accepted.", appends: 2, wantStatus: http.StatusNoContent, wantResult: WebhookAccepted},
		{name: "A notice with nothing new is answered 204, a duplicate.", wantStatus: http.StatusNoContent, wantResult: WebhookDuplicate},
		{name: "An event not about a payment of this deployment is answered 204, ignored.", ignored: true, wantStatus: http.StatusNoContent, wantResult: WebhookIgnored},
		{name: "A bad signature is answered 400.", err: commands.ErrWebhookSignature, wantStatus: http.StatusBadRequest, wantCode: "invalid-signature", wantResult: WebhookBadSignature},
		{name: "A stale timestamp is answered 400.", err: commands.ErrWebhookStale, wantStatus: http.StatusBadRequest, wantCode: "stale-signature", wantResult: WebhookBadSignature},
		{name: "A malformed event is answered 400.", err: commands.ErrWebhookMalformed, wantStatus: http.StatusBadRequest, wantCode: "malformed-event", wantResult: WebhookInvalid},
		{name: "A payment of an order not known yet is answered 404, so the provider redelivers.", err: domain.ErrOrderNotFound, wantStatus: http.StatusNotFound, wantCode: "order-not-found", wantResult: WebhookUnknownOrder},
		{name: "A provider that cannot be reached is answered 503.", err: domain.ErrUnavailable, wantStatus: http.StatusServiceUnavailable, wantCode: "unavailable", wantResult: WebhookFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var results []string
			a := &api{log: slog.New(slog.NewTextHandler(io.Discard, nil)), observeWebhook: func(r string) { results = append(results, r) }}
			recv := &fakeReceiver{err: tt.err, appends: tt.appends, ignored: tt.ignored}
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
			if len(results) != 1 || results[0] != tt.wantResult {
				t.Errorf("observed results %q, want [%s]", results, tt.wantResult)
			}
			if recv.calls != 1 || !bytes.Equal(recv.body, body) || recv.signature != "t=1,v1=ab" {
				t.Errorf("receiver got %d calls, body %q, signature %q; want the raw bytes and header once", recv.calls, recv.body, recv.signature)
			}
		})
	}
}
