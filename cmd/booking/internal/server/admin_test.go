package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/metrics"
)

// TestAdminListener: set, BOOKING_ADMIN_ADDR serves /metrics and the
// profiler (/debug/pprof/: the index and a heap profile) on a listener of
// its own and nothing of the API; empty, it serves nothing. A busy address
// is a listen error naming it.
func TestAdminListener(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := startAdmin("", metrics.New("v-test"), time.Second, log)
	if err != nil || a.Addr != "" || a.Listener != nil {
		t.Errorf(`startAdmin("") = %+v, %v; want no listener`, a, err)
	}
	a.stop()

	a, err = startAdmin("127.0.0.1:0", metrics.New("v-test"), time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	for path, want := range map[string]string{"/metrics": `booking_http_connections_max{listener="admin"} 32`,
		"/debug/pprof/": "heap", "/debug/pprof/heap?debug=1": "heap profile:"} {
		res, err := http.Get("http://" + a.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d %.200q, want 200 containing %q", path, res.StatusCode, body, want)
		}
	}
	for _, path := range []string{"/v1/shows", "/healthz", "/openapi.yaml"} {
		if res, err := http.Get("http://" + a.Addr + path); err != nil || res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the admin listener = %v, %v; want 404 (the API is not served there)", path, res, err)
		} else {
			res.Body.Close()
		}
	}

	_, err = startAdmin(a.Addr, metrics.New("v-test"), time.Second, log)
	var busy *net.OpError
	if err == nil || !strings.Contains(err.Error(), "(BOOKING_ADMIN_ADDR)") || !errors.As(err, &busy) {
		t.Errorf("startAdmin on a busy address = %v, want a listen error naming BOOKING_ADMIN_ADDR", err)
	}
}
