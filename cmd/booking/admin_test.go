package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestAdminListener: BOOKING_ADMIN_ADDR defaults to a loopback address
// (the listener itself: server.TestAdminListener; the refusal of an
// address that is not host:port: config.TestAdminAddr).
func TestAdminListener(t *testing.T) {
	t.Setenv("BOOKING_ADMIN_ADDR", "")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	help := stdout.String()
	if !strings.Contains(help, "--admin-addr=") || !strings.Contains(help, "$BOOKING_ADMIN_ADDR") || !strings.Contains(help, `"127.0.0.1:9091"`) {
		t.Errorf("serve --help does not list --admin-addr ($BOOKING_ADMIN_ADDR) with its default 127.0.0.1:9091:\n%s", help)
	}
	if strings.Contains(help, "PPROF") {
		t.Errorf("serve --help still lists BOOKING_PPROF_ADDR, folded into BOOKING_ADMIN_ADDR:\n%s", help)
	}
}
