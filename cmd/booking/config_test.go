package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
)

// TestCheckListenAddr: a listen address is accepted as net.Listen reads it
// (a numeric port 0–65535, empty for any, or a tcp service name) and
// refused, naming the variable, otherwise.
func TestCheckListenAddr(t *testing.T) {
	t.Parallel()
	accepted := []string{"127.0.0.1:8080", ":8080", "127.0.0.1:0", "localhost:", "[::1]:65535", "0.0.0.0:1"}
	if _, err := net.LookupPort("tcp", "http"); err == nil {
		accepted = append(accepted, "127.0.0.1:http") // where /etc/services names it
	}
	for _, addr := range accepted {
		if err := config.CheckListenAddr("BOOKING_HTTP_ADDR", addr, ""); err != nil {
			t.Errorf("CheckListenAddr(%q) = %v, want nil", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:http0", "localhost:99999", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1", "::1:8080",
		"127.0.0.1:80 80", "[::1]:no-such-service"} {
		err := config.CheckListenAddr("BOOKING_HTTP_ADDR", addr, "")
		if err == nil || !strings.HasPrefix(err.Error(), "invalid configuration: BOOKING_HTTP_ADDR: ") || exitCode(err) != exitUsage {
			t.Errorf("CheckListenAddr(%q) = %v (exit %d), want a configuration error naming BOOKING_HTTP_ADDR", addr, err, exitCode(err))
		}
	}
}

// TestServeHelpNamesSecrets: booking serve --help documents every secret
// variable.
func TestServeHelpNamesSecrets(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	for _, v := range []string{"BOOKING_MASTER_KEYS", "BOOKING_MASTER_KEYS_FILE", "BOOKING_PROVIDER_API_KEY", "BOOKING_PROVIDER_API_KEY_FILE"} {
		if !strings.Contains(stdout.String(), "$"+v) {
			t.Errorf("booking serve --help does not name %s:\n%s", v, stdout.String())
		}
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"provider-sim", "--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("provider-sim --help: %v", err)
	}
	if !strings.Contains(stdout.String(), "$BOOKING_PROVIDER_SIM_API_KEY") {
		t.Errorf("booking provider-sim --help does not name BOOKING_PROVIDER_SIM_API_KEY:\n%s", stdout.String())
	}
}
