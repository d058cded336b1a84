package providersim_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/provider"
	"github.com/retrysafe/booking/provider/providersim"
)

// stateBase is the fixed base clock of the state tests, so the simulator's
// clock is exactly base + offset across restarts.
var stateBase = time.Date(2030, 5, 20, 10, 0, 0, 0, time.UTC)

// durableSim is a simulator with a state file that a test can restart.
type durableSim struct {
	*providersim.Server
	url    string
	client *provider.Client
	ts     *httptest.Server
}

// mustOpen opens a simulator on dir with the fixed base clock; cleanup
// closes it.
func mustOpen(tb testing.TB, dir string) *durableSim {
	tb.Helper()
	s, err := providersim.Open(providersim.Config{DataDir: dir, WebhookSecret: testSecret, Seed: 42,
		Now: func() time.Time { return stateBase }})
	if err != nil {
		tb.Fatalf("Open(%s) = %v", dir, err)
	}
	ts := httptest.NewServer(s.Handler())
	d := &durableSim{Server: s, url: ts.URL, client: provider.New(ts.URL, ts.Client()), ts: ts}
	tb.Cleanup(d.stop)
	return d
}

// stop closes the simulator (releasing its directory) and its listener.
func (d *durableSim) stop() {
	d.Server.Close()
	d.ts.Close()
}

// raw is an answer read in full.
type raw struct {
	status   int
	body     []byte
	replayed bool
}

// post sends body to path with the idempotency key and reads the answer.
func (d *durableSim) post(tb testing.TB, path, key string, body []byte) raw {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, d.url+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set(provider.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return raw{status: resp.StatusCode, body: data, replayed: resp.Header.Get(provider.HeaderIdempotentReplayed) == "true"}
}

func refundBody(chargeID string, amount int64) []byte {
	return provider.RefundRequest{Charge: chargeID, Amount: amount}.Body()
}

func wantRaw(tb testing.TB, what string, got raw, status int, replayed bool) {
	tb.Helper()
	if got.status != status || got.replayed != replayed {
		tb.Fatalf("%s = %d (replayed %v) %s, want %d (replayed %v)", what, got.status, got.replayed, got.body, status, replayed)
	}
}

func chargeID(tb testing.TB, body []byte) string {
	tb.Helper()
	var ch struct {
		ID     string `json:"id"`
		Charge struct {
			ID string `json:"id"`
		} `json:"charge"`
	}
	if err := json.Unmarshal(body, &ch); err != nil {
		tb.Fatalf("decode %s: %v", body, err)
	}
	if ch.ID == "" {
		return ch.Charge.ID
	}
	return ch.ID
}

func TestState_RestartKeepsChargesRefundsKeysAndClock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	visa := charge("o1", 1, "tok_visa").Body()
	decline := charge("o2", 1, "tok_decline").Body()

	paid := s.post(t, "/v1/charges", "order-o1-1", visa)
	wantRaw(t, "POST /v1/charges visa", paid, http.StatusOK, false)
	declined := s.post(t, "/v1/charges", "order-o2-1", decline)
	wantRaw(t, "POST /v1/charges decline", declined, http.StatusPaymentRequired, false)
	ch := chargeID(t, paid.body)
	part := s.post(t, "/v1/refunds", "refund-part", refundBody(ch, 500))
	wantRaw(t, "POST /v1/refunds 500", part, http.StatusOK, false)
	s.AdvanceClock(time.Hour)
	charges, refunds := s.Charges(), s.Refunds()
	s.stop()

	s = mustOpen(t, dir)
	if diff := cmp.Diff(charges, s.Charges()); diff != "" {
		t.Errorf("charges after a restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(refunds, s.Refunds()); diff != "" {
		t.Errorf("refunds after a restart (-before +after):\n%s", diff)
	}
	if got, want := s.Now(), stateBase.Add(time.Hour); !got.Equal(want) {
		t.Errorf("Now() after a restart = %v, want %v (the clock offset kept)", got, want)
	}

	// Idempotency records survive with their fingerprints and answers.
	again := s.post(t, "/v1/charges", "order-o1-1", visa)
	wantRaw(t, "repeat of the visa charge", again, http.StatusOK, true)
	if !bytes.Equal(again.body, paid.body) {
		t.Errorf("replayed body = %s, want the first answer byte for byte: %s", again.body, paid.body)
	}
	if got := s.post(t, "/v1/charges", "order-o2-1", decline); got.status != http.StatusPaymentRequired || !got.replayed || !bytes.Equal(got.body, declined.body) {
		t.Errorf("repeat of the decline = %d (replayed %v) %s, want the first 402 replayed", got.status, got.replayed, got.body)
	}
	if got := s.post(t, "/v1/refunds", "refund-part", refundBody(ch, 500)); got.status != http.StatusOK || !got.replayed || !bytes.Equal(got.body, part.body) {
		t.Errorf("repeat of the refund = %d (replayed %v) %s, want the first 200 replayed", got.status, got.replayed, got.body)
	}
	other := s.post(t, "/v1/charges", "order-o1-1", provider.NewChargeRequest(1600, "EUR", "tok_visa", "o1", 1).Body())
	wantRaw(t, "same key, other amount", other, http.StatusBadRequest, false)
	if !strings.Contains(string(other.body), provider.TypeIdempotencyError) {
		t.Errorf("same key, other amount: %s, want an %s", other.body, provider.TypeIdempotencyError)
	}
	ctx := ctxT(t)
	if got, ok, err := s.client.ChargeByKey(ctx, "order-o1-1"); err != nil || !ok || got.ID != ch {
		t.Errorf("ChargeByKey(order-o1-1) = %s, %v, %v; want %s", got.ID, ok, err, ch)
	}
	if got, err := s.client.SearchCharges(ctx, "o1", 1); err != nil || len(got) != 1 || got[0].RefundedAmount != 500 {
		t.Errorf("SearchCharges(o1, 1) = %+v, %v; want the charge with 500 refunded", got, err)
	}
	if n, m := len(s.Charges()), len(s.Refunds()); n != 2 || m != 1 {
		t.Fatalf("after the repeats: %d charges, %d refunds; want 2, 1", n, m)
	}

	// The rest of the charge is refunded after the restart, and that too survives one.
	rest := s.post(t, "/v1/refunds", "refund-rest", refundBody(ch, 0))
	wantRaw(t, "POST /v1/refunds rest", rest, http.StatusOK, false)
	s.stop()
	s = mustOpen(t, dir)
	got, err := s.client.GetCharge(ctx, ch)
	if err != nil || got.RefundedAmount != 1500 || !got.Refunded {
		t.Errorf("GetCharge(%s) after the second restart = %+v, %v; want refunded_amount 1500, refunded", ch, got, err)
	}
	if n := len(s.Refunds()); n != 2 {
		t.Errorf("after the second restart: %d refunds, want 2", n)
	}
	if over := s.post(t, "/v1/refunds", "refund-more", refundBody(ch, 1)); over.status != http.StatusBadRequest {
		t.Errorf("refund of a fully refunded charge after a restart = %d %s, want 400", over.status, over.body)
	}
	var sim struct {
		Charges []providersim.SimCharge `json:"charges"`
	}
	if code := s.get(t, "/_sim/charges", &sim); code != http.StatusOK || len(sim.Charges) != 2 || sim.Charges[0].RefundedAmount != 1500 {
		t.Errorf("GET /_sim/charges = %d %+v, want the 2 charges, the first refunded in full", code, sim.Charges)
	}
}

// get sends GET path and decodes the JSON answer into out.
func (d *durableSim) get(tb testing.TB, path string, out any) int {
	tb.Helper()
	resp, err := http.Get(d.url + path)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		tb.Fatalf("GET %s: decode: %v", path, err)
	}
	return resp.StatusCode
}

func TestState_KeysExpireOnTheRestoredClockAndLeaveTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	body := charge("o1", 1, "tok_visa").Body()
	wantRaw(t, "POST /v1/charges", s.post(t, "/v1/charges", "order-o1-1", body), http.StatusOK, false)
	s.AdvanceClock(providersim.DefaultRetention + time.Minute)
	s.stop()

	s = mustOpen(t, dir)
	data, err := os.ReadFile(filepath.Join(dir, providersim.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(`"key":{"key":"order-o1-1"`)) {
		t.Errorf("state file after a restart past the retention still holds the key:\n%s", data)
	}
	if lines := bytes.Count(data, []byte("\n")); lines != 3 {
		t.Errorf("state file has %d lines, want 3 (header, the charge, the clock offset):\n%s", lines, data)
	}
	if _, ok, err := s.client.ChargeByKey(ctxT(t), "order-o1-1"); err != nil || ok {
		t.Errorf("ChargeByKey(order-o1-1) past the retention = %v, %v; want not found", ok, err)
	}
	wantRaw(t, "the key again past the retention", s.post(t, "/v1/charges", "order-o1-1", body), http.StatusOK, false)
	if n := len(s.Charges()); n != 2 {
		t.Errorf("%d charges, want 2 (the old one kept, the key forgotten)", n)
	}
}

func TestState_ResetEmptiesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	wantRaw(t, "POST /v1/charges", s.post(t, "/v1/charges", "k", charge("o1", 1, "tok_visa").Body()), http.StatusOK, false)
	s.AdvanceClock(time.Hour)
	if code := s.post(t, "/_sim/reset", "", nil).status; code != http.StatusNoContent {
		t.Fatalf("POST /_sim/reset = %d, want 204", code)
	}
	s.stop()
	s = mustOpen(t, dir)
	if n := len(s.Charges()); n != 0 {
		t.Errorf("after a reset and a restart: %d charges, want 0", n)
	}
	if got := s.Now(); !got.Equal(stateBase) {
		t.Errorf("Now() after a reset and a restart = %v, want the base clock %v", got, stateBase)
	}
}

func TestState_TornLastLineIsDropped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	wantRaw(t, "POST /v1/charges", s.post(t, "/v1/charges", "k1", charge("o1", 1, "tok_visa").Body()), http.StatusOK, false)
	s.stop()
	path := filepath.Join(dir, providersim.StateFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of a write: no "\n" at the end.
	if _, err := f.WriteString(`0badc0de {"charge":{"id":"ch_TORN","amou`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = mustOpen(t, dir)
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("after a torn last line: %d charges, want 1", n)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("TORN")) || !bytes.HasSuffix(data, []byte("\n")) {
		t.Errorf("state file after the restart still holds the torn line:\n%s", data)
	}
	wantRaw(t, "POST /v1/charges", s.post(t, "/v1/charges", "k2", charge("o2", 1, "tok_visa").Body()), http.StatusOK, false)
	s.stop()
	s = mustOpen(t, dir)
	if n := len(s.Charges()); n != 2 {
		t.Errorf("after another restart: %d charges, want 2", n)
	}
}

// line returns a journal line with a correct checksum.
func line(js string) string {
	return fmt.Sprintf("%08x %s\n", crc32.Checksum([]byte(js), crc32.MakeTable(crc32.Castagnoli)), js)
}

func TestState_CorruptFileIsRefusedNamingFileAndLine(t *testing.T) {
	t.Parallel()
	header := line(`{"format":"booking-provider-sim","version":1}`)
	goodCharge := `{"charge":{"id":"ch_A","object":"charge","amount":1500,"currency":"EUR","status":"succeeded","idempotency_key":"k","metadata":{},"refunded_amount":0,"refunded":false,"created":1}}`
	cases := []struct {
		name     string
		content  string
		wantLine int
		wantWhy  string
	}{
		{"an empty file", "", 0, "no header"},
		{"a changed digit", header + strings.Replace(line(goodCharge), "1500", "1600", 1), 2, "checksum"},
		{"a line that is not a record", header + "garbage\n", 2, "want a line"},
		{"a header of a newer version", line(`{"format":"booking-provider-sim","version":2}`), 1, "version 2"},
		{"another file's header", line(`{"format":"something-else","version":1}`), 1, "format"},
		{"an unknown member", header + line(`{"charges":[]}`), 2, "not a record"},
		{"a refund of an unknown charge", header + line(`{"refund":{"id":"re_A","object":"refund","amount":1,"currency":"EUR","charge":"ch_B","status":"succeeded","idempotency_key":"r","created":1}}`), 2, "unknown charge"},
		{"a bad line in the middle", header + line(goodCharge) + "0000 {}\n" + line(goodCharge), 3, "want a line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, providersim.StateFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := providersim.Open(providersim.Config{DataDir: dir})
			if err == nil {
				s.Close()
				t.Fatalf("Open() = nil error, want the file refused")
			}
			var ce *providersim.CorruptError
			if !errors.As(err, &ce) || ce.Path != path || ce.Line != tc.wantLine || !strings.Contains(ce.Reason, tc.wantWhy) {
				t.Fatalf("Open() = %v, want a CorruptError for %s line %d (%q)", err, path, tc.wantLine, tc.wantWhy)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("Open() = %q, want the message to name %s", err, path)
			}
			if data, _ := os.ReadFile(path); string(data) != tc.content {
				t.Errorf("the refused file was changed to %q", data)
			}
			// The lock is released: the directory opens once the file is moved away.
			if err := os.Rename(path, path+".bad"); err != nil {
				t.Fatal(err)
			}
			s, err = providersim.Open(providersim.Config{DataDir: dir})
			if err != nil {
				t.Fatalf("Open() with the file moved away = %v", err)
			}
			s.Close()
		})
	}
}

func TestState_SecondSimulatorOnTheDirectoryIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := mustOpen(t, dir)
	if s, err := providersim.Open(providersim.Config{DataDir: dir}); err == nil {
		s.Close()
		t.Fatal("second Open() of a directory in use = nil error, want refused")
	} else if !strings.Contains(err.Error(), filepath.Join(dir, providersim.LockFile)) {
		t.Fatalf("second Open() = %q, want the message to name the lock file", err)
	}
	first.stop()
	s, err := providersim.Open(providersim.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("Open() after the first closed = %v", err)
	}
	s.Close()
}

func TestState_NewRefusesADataDir(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("New(Config{DataDir}) did not panic, want a panic pointing at Open")
		}
	}()
	providersim.New(providersim.Config{DataDir: t.TempDir()})
}
