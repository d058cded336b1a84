package kurrentdbtest

import (
	"net"
	"strconv"
	"testing"
)

// TestListenTakesAPortBelowTheEphemeralRange: port 0 gives a port in
// [20000, 32000), which no outgoing connection can take while a node is
// down between Stop and Start; a given port is kept.
func TestListenTakesAPortBelowTheEphemeralRange(t *testing.T) {
	lis, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen(127.0.0.1:0) = %v", err)
	}
	addr := lis.Addr().String()
	_, p, _ := net.SplitHostPort(addr)
	if port, _ := strconv.Atoi(p); port < 20000 || port >= 32000 {
		t.Errorf("listen(127.0.0.1:0) took port %d, want one in [20000, 32000)", port)
	}
	lis.Close()
	again, err := listen(addr)
	if err != nil {
		t.Fatalf("listen(%s) after closing it = %v", addr, err)
	}
	if got := again.Addr().String(); got != addr {
		t.Errorf("listen(%s) listens on %s", addr, got)
	}
	again.Close()
}
