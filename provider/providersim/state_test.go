package providersim_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrysafe/booking/provider/providersim"
)

// stateBase is the fixed base clock of the state tests, so the simulator's
// clock is exactly base + offset across restarts.
var stateBase = time.Date(2030, 5, 20, 10, 0, 0, 0, time.UTC)

// durableSim is a simulator with a state file that a test can restart.
type durableSim struct {
	*sim
	ts *httptest.Server
}

// mustOpen opens a simulator on dir with the fixed base clock and a search
// lag of a minute; cleanup closes it.
func mustOpen(tb testing.TB, dir string) *durableSim {
	tb.Helper()
	s, err := providersim.Open(providersim.Config{DataDir: dir, WebhookSecret: testSecret, APIKey: testKey, Seed: 42,
		SearchLag: time.Minute, Now: func() time.Time { return stateBase }})
	if err != nil {
		tb.Fatalf("Open(%s) = %v", dir, err)
	}
	ts := httptest.NewServer(s.Handler())
	d := &durableSim{sim: &sim{Server: s, url: ts.URL, sc: stripeClient(ts.URL, ts.Client())}, ts: ts}
	tb.Cleanup(d.stop)
	return d
}

// stop closes the simulator (releasing its directory) and its listener.
func (d *durableSim) stop() {
	d.Server.Close()
	d.ts.Close()
}

func (d *durableSim) post(tb testing.TB, path, key string, form url.Values) answer {
	tb.Helper()
	return d.do(tb, http.MethodPost, path, form, map[string]string{"Idempotency-Key": key})
}

func wantAnswer(tb testing.TB, what string, got answer, status int, replayed bool) {
	tb.Helper()
	if got.status != status || (got.header.Get("Idempotent-Replayed") == "true") != replayed {
		tb.Fatalf("%s = %d (replayed %q) %s, want %d (replayed %v)", what, got.status, got.header.Get("Idempotent-Replayed"), got.body, status, replayed)
	}
}

func objectID(tb testing.TB, body []byte) string {
	tb.Helper()
	var v struct {
		ID    string `json:"id"`
		Error struct {
			PaymentIntent struct {
				ID string `json:"id"`
			} `json:"payment_intent"`
		} `json:"error"`
	}
	mustUnmarshal(tb, body, &v)
	if v.ID == "" {
		return v.Error.PaymentIntent.ID
	}
	return v.ID
}

func TestState_RestartKeepsPaymentsRefundsKeysAndClock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	visa, decline := createForm("o1", "1", "tok_visa"), createForm("o2", "1", "tok_decline")
	paid := s.post(t, "/v1/payment_intents", "order-o1-1", visa)
	wantAnswer(t, "create visa", paid, http.StatusOK, false)
	declined := s.post(t, "/v1/payment_intents", "order-o2-1", decline)
	wantAnswer(t, "create decline", declined, http.StatusPaymentRequired, false)
	pi := objectID(t, paid.body)
	part := s.post(t, "/v1/refunds", "refund-part", url.Values{"payment_intent": {pi}, "amount": {"500"}})
	wantAnswer(t, "refund 500", part, http.StatusOK, false)
	failed := s.post(t, "/v1/payment_intents", "order-o3-1", createForm("o3", "1", "tok_error_after_commit"))
	wantAnswer(t, "create tok_error_after_commit", failed, http.StatusInternalServerError, false)
	s.AdvanceClock(time.Hour)
	intents, charges, refunds := s.PaymentIntents(), s.Charges(), s.Refunds()
	s.stop()

	s = mustOpen(t, dir)
	if diff := cmp.Diff(intents, s.PaymentIntents()); diff != "" {
		t.Errorf("PaymentIntents after a restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(charges, s.Charges()); diff != "" {
		t.Errorf("/_sim/charges after a restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(refunds, s.Refunds()); diff != "" {
		t.Errorf("refunds after a restart (-before +after):\n%s", diff)
	}
	if got, want := s.Now(), stateBase.Add(time.Hour); !got.Equal(want) {
		t.Errorf("Now() after a restart = %v, want %v (the clock offset kept)", got, want)
	}

	// Idempotency records survive with their parameters and answers, the
	// saved 500 included.
	for _, c := range []struct {
		name, path, key string
		form            url.Values
		first           answer
	}{
		{"visa", "/v1/payment_intents", "order-o1-1", visa, paid},
		{"decline", "/v1/payment_intents", "order-o2-1", decline, declined},
		{"refund", "/v1/refunds", "refund-part", url.Values{"payment_intent": {pi}, "amount": {"500"}}, part},
		{"500 after commit", "/v1/payment_intents", "order-o3-1", createForm("o3", "1", "tok_error_after_commit"), failed},
	} {
		got := s.post(t, c.path, c.key, c.form)
		wantAnswer(t, "repeat of "+c.name, got, c.first.status, true)
		if !bytes.Equal(got.body, c.first.body) {
			t.Errorf("repeat of %s = %s, want the first answer byte for byte: %s", c.name, got.body, c.first.body)
		}
	}
	other := createForm("o1", "1", "tok_visa")
	other.Set("amount", "1600")
	if got := s.post(t, "/v1/payment_intents", "order-o1-1", other); got.status != 400 || got.errorObject(t).Type != "idempotency_error" {
		t.Errorf("same key, other amount after a restart = %d %s, want 400 idempotency_error", got.status, got.body)
	}
	// The search lag counts from the creation kept in the file.
	search := s.do(t, http.MethodGet, "/v1/payment_intents/search", url.Values{"query": {"metadata['order_id']:'o1'"}}, nil)
	if !strings.Contains(string(search.body), pi) {
		t.Errorf("search after a restart = %s, want %s (created an hour ago)", search.body, pi)
	}

	// The rest is refunded after the restart, and that too survives one.
	rest := s.post(t, "/v1/refunds", "refund-rest", url.Values{"payment_intent": {pi}})
	wantAnswer(t, "refund of the rest", rest, http.StatusOK, false)
	s.stop()
	s = mustOpen(t, dir)
	if c := s.Charges(); len(c) != 3 || c[0].RefundedAmount != 1500 || len(s.Refunds()) != 2 {
		t.Errorf("after the second restart: %+v, %d refunds; want the first refunded in full, 2 refunds", c, len(s.Refunds()))
	}
	if over := s.post(t, "/v1/refunds", "refund-more", url.Values{"payment_intent": {pi}, "amount": {"1"}}); over.status != http.StatusBadRequest {
		t.Errorf("refund of a fully refunded one after a restart = %d %s, want 400", over.status, over.body)
	}
}

func TestState_KeysExpireOnTheRestoredClockAndLeaveTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	form := createForm("o1", "1", "tok_visa")
	wantAnswer(t, "create", s.post(t, "/v1/payment_intents", "order-o1-1", form), http.StatusOK, false)
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
		t.Errorf("state file has %d lines, want 3 (header, the PaymentIntent with its charge, the clock offset):\n%s", lines, data)
	}
	wantAnswer(t, "the key again past the retention", s.post(t, "/v1/payment_intents", "order-o1-1", form), http.StatusOK, false)
	if n := len(s.Charges()); n != 2 {
		t.Errorf("%d PaymentIntents, want 2 (the old one kept, the key forgotten)", n)
	}
}

func TestState_ResetEmptiesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	wantAnswer(t, "create", s.post(t, "/v1/payment_intents", "k", createForm("o1", "1", "tok_visa")), http.StatusOK, false)
	s.AdvanceClock(time.Hour)
	s.wantControl(t, http.MethodPost, "/_sim/reset", "", http.StatusNoContent)
	s.stop()
	s = mustOpen(t, dir)
	if n := len(s.Charges()); n != 0 {
		t.Errorf("after a reset and a restart: %d PaymentIntents, want 0", n)
	}
	if got := s.Now(); !got.Equal(stateBase) {
		t.Errorf("Now() after a reset and a restart = %v, want the base clock %v", got, stateBase)
	}
}

func TestState_AuthenticationOutcomeSurvives(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	pi := objectID(t, s.post(t, "/v1/payment_intents", "k", createForm("o1", "1", "pm_card_authenticationRequired")).body)
	if _, err := s.Authenticate(pi, true); err != nil {
		t.Fatal(err)
	}
	s.stop()
	s = mustOpen(t, dir)
	if c := s.Charges(); len(c) != 1 || c[0].Status != "succeeded" {
		t.Fatalf("after a restart: %+v, want the authenticated PaymentIntent succeeded", c)
	}
	if re := s.post(t, "/v1/refunds", "r", url.Values{"payment_intent": {pi}}); re.status != 200 {
		t.Fatalf("refund after a restart = %d %s, want 200 (its charge kept)", re.status, re.body)
	}
}

func TestState_TornLastLineIsDropped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	wantAnswer(t, "create", s.post(t, "/v1/payment_intents", "k1", createForm("o1", "1", "tok_visa")), http.StatusOK, false)
	s.stop()
	path := filepath.Join(dir, providersim.StateFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of a write: no "\n" at the end.
	if _, err := f.WriteString(`0badc0de {"payment_intent":{"id":"pi_TORN","amou`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = mustOpen(t, dir)
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("after a torn last line: %d PaymentIntents, want 1", n)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("TORN")) || !bytes.HasSuffix(data, []byte("\n")) {
		t.Errorf("state file after the restart still holds the torn line:\n%s", data)
	}
	wantAnswer(t, "create", s.post(t, "/v1/payment_intents", "k2", createForm("o2", "1", "tok_visa")), http.StatusOK, false)
	s.stop()
	s = mustOpen(t, dir)
	if n := len(s.Charges()); n != 2 {
		t.Errorf("after another restart: %d PaymentIntents, want 2", n)
	}
}

// line returns a journal line with a correct checksum.
func line(js string) string {
	return fmt.Sprintf("%08x %s\n", crc32.Checksum([]byte(js), crc32.MakeTable(crc32.Castagnoli)), js)
}

func TestState_CorruptFileIsRefusedNamingFileAndLine(t *testing.T) {
	t.Parallel()
	header := line(`{"format":"booking-provider-sim","version":2}`)
	goodIntent := `{"payment_intent":{"id":"pi_A","object":"payment_intent","amount":1500,"currency":"eur","status":"requires_action","metadata":{},"latest_charge":null,"created":1,"sim_created_ns":1}}`
	cases := []struct {
		name     string
		content  string
		wantLine int
		wantWhy  string
	}{
		{"an empty file", "", 0, "no header"},
		{"a changed digit", header + strings.Replace(line(goodIntent), "1500", "1600", 1), 2, "checksum"},
		{"a line that is not a record", header + "garbage\n", 2, "want a line"},
		{"a header of a newer version", line(`{"format":"booking-provider-sim","version":3}`), 1, "version 3"},
		{"another file's header", line(`{"format":"something-else","version":2}`), 1, "format"},
		{"an unknown member", header + line(`{"charges":[]}`), 2, "not a record"},
		{"a latest charge that is not there", header + line(strings.Replace(goodIntent, `"latest_charge":null`, `"latest_charge":"ch_X"`, 1)), 2, "latest_charge"},
		{"a refund of an unknown charge", header + line(goodIntent) + line(`{"refund":{"id":"re_A","object":"refund","amount":1,"currency":"eur","charge":"ch_B","payment_intent":"pi_A","status":"succeeded","metadata":{},"created":1}}`), 3, "unknown charge"},
		{"a bad line in the middle", header + line(goodIntent) + "0000 {}\n" + line(goodIntent), 3, "want a line"},
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

// TestState_EarlierVersionIsMovedAside: the charges API's state (version
// 1) cannot become PaymentIntents; it is kept beside, and the simulator
// starts empty.
func TestState_EarlierVersionIsMovedAside(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, providersim.StateFile)
	old := line(`{"format":"booking-provider-sim","version":1}`) +
		line(`{"charge":{"id":"ch_A","object":"charge","amount":1500,"currency":"EUR","status":"succeeded","created":1}}`)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, dir)
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d PaymentIntents from a version 1 file, want 0", n)
	}
	if data, err := os.ReadFile(path + ".v1"); err != nil || string(data) != old {
		t.Fatalf("the version 1 file moved aside: %q, %v; want it unchanged", data, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var header map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(string(data), " ", 2)[1]), &header); err != nil || header["version"] != 2.0 {
		t.Fatalf("new state file %q, want a version 2 header", data)
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
