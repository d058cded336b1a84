//go:build faultinject

package faults

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.DiscardHandler)

// TestUnknownStepIsRefused: a step name outside commands.Steps in either
// variable is a configuration error naming that variable.
func TestUnknownStepIsRefused(t *testing.T) {
	for _, variable := range []string{"BOOKING_TEST_CRASH_AT", "BOOKING_TEST_HOLD_AT"} {
		t.Run(variable, func(t *testing.T) {
			t.Setenv("BOOKING_TEST_CRASH_AT", "")
			t.Setenv("BOOKING_TEST_HOLD_AT", "")
			t.Setenv(variable, "order.claimed, order.nowhere")
			_, h, err := FromEnv(t.Context(), quiet)
			if err == nil || h != nil || !strings.Contains(err.Error(), "invalid configuration: "+variable+": unknown step \"order.nowhere\"") {
				t.Fatalf("FromEnv() = handler %v, %v; want an error naming %s and the unknown step", h, err, variable)
			}
		})
	}
}

// call sends one request to the control API and decodes the state it
// answers with.
func call(t *testing.T, h http.Handler, method, path string) (int, holdState) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	var st holdState
	if rec.Code == http.StatusOK {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, rec.Body)
		}
	}
	return rec.Code, st
}

// TestHoldPoint: a step armed by BOOKING_TEST_HOLD_AT parks each goroutine
// that reaches it; the control API reports the arrivals (waiting for them
// with ?arrived, never sleeping) and DELETE lets them all go on.
func TestHoldPoint(t *testing.T) {
	t.Setenv("BOOKING_TEST_CRASH_AT", "")
	t.Setenv("BOOKING_TEST_HOLD_AT", "order.claiming")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hooks, h, err := FromEnv(ctx, quiet)
	if err != nil || hooks.Step == nil || h == nil {
		t.Fatalf("FromEnv() = step hook set %v, control API %v, %v; want both", hooks.Step != nil, h, err)
	}
	hooks.Step("order.placed") // not armed: returns at once
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			hooks.Step("order.claiming")
			done <- struct{}{}
		}()
	}
	code, st := call(t, h, http.MethodGet, Prefix+"/holds/order.claiming?arrived=2&wait=60s")
	if code != http.StatusOK || st != (holdState{Step: "order.claiming", Armed: true, Parked: 2, Arrived: 2}) {
		t.Fatalf("GET ?arrived=2 = %d %+v, want 200 with 2 parked of 2 arrived, armed", code, st)
	}
	select {
	case <-done:
		t.Fatal("a goroutine went on past an armed step before the release")
	default:
	}
	code, st = call(t, h, http.MethodDelete, Prefix+"/holds/order.claiming")
	if code != http.StatusOK || st.Armed || st.Arrived != 2 {
		t.Fatalf("DELETE = %d %+v, want 200, disarmed, 2 arrived", code, st)
	}
	<-done
	<-done
	code, st = call(t, h, http.MethodGet, Prefix+"/holds/order.claiming")
	if code != http.StatusOK || st != (holdState{Step: "order.claiming", Arrived: 2}) {
		t.Fatalf("GET after the release = %d %+v, want 200, none parked, 2 arrived, disarmed", code, st)
	}

	// Armed again through PUT; the end of ctx (shutdown) releases it.
	if code, st = call(t, h, http.MethodPut, Prefix+"/holds/payment.sent"); code != http.StatusOK || !st.Armed {
		t.Fatalf("PUT = %d %+v, want 200 and armed", code, st)
	}
	go func() {
		hooks.Step("payment.sent")
		done <- struct{}{}
	}()
	if code, st = call(t, h, http.MethodGet, Prefix+"/holds/payment.sent?arrived=1"); code != http.StatusOK || st.Parked != 1 {
		t.Fatalf("GET ?arrived=1 = %d %+v, want 200 and 1 parked", code, st)
	}
	cancel()
	<-done
}

// TestControlAPIRefusals: unknown steps are 404, bad parameters 400, other
// methods 405, and paths outside /_test/holds 404.
func TestControlAPIRefusals(t *testing.T) {
	t.Setenv("BOOKING_TEST_CRASH_AT", "")
	t.Setenv("BOOKING_TEST_HOLD_AT", "")
	_, h, err := FromEnv(t.Context(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPut, Prefix + "/holds/order.nowhere", http.StatusNotFound},
		{http.MethodGet, Prefix + "/holds/order.claimed?arrived=-1", http.StatusBadRequest},
		{http.MethodGet, Prefix + "/holds/order.claimed?arrived=x", http.StatusBadRequest},
		{http.MethodGet, Prefix + "/holds/order.claimed?arrived=1&wait=soon", http.StatusBadRequest},
		{http.MethodPost, Prefix + "/holds/order.claimed", http.StatusMethodNotAllowed},
		{http.MethodGet, Prefix + "/other", http.StatusNotFound},
		{http.MethodGet, Prefix + "/holds/order.claimed?arrived=1&wait=0s", http.StatusOK},
	} {
		if code, _ := call(t, h, tt.method, tt.path); code != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, code, tt.want)
		}
	}
}
