package kurrentdbtest

import (
	"net"
	"strconv"
	"testing"
	"time"
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

// TestHoldKeepsThePortAndRefusesUntilStart: after Hold no other listener
// can take the node's port, every connection to it is closed at once, and
// Start serves on the same address again; Stop of a held node frees it.
func TestHoldKeepsThePortAndRefusesUntilStart(t *testing.T) {
	srv := NewTest(t, Options{})
	addr := srv.Addr()
	if err := srv.Hold(); err != nil {
		t.Fatalf("Hold() = %v", err)
	}
	if err := srv.Hold(); err == nil {
		t.Fatalf("Hold() of a held node = nil error, want one")
	}
	if lis, err := net.Listen("tcp", addr); err == nil {
		lis.Close()
		t.Fatalf("net.Listen(%s) while held = nil error, want the port in use", addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("Dial(%s) while held = %v, want a connection that is closed at once", addr, err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("Read on a held port = %d bytes, want EOF or a reset", n)
	}
	c.Close()
	if err := srv.Start(); err != nil {
		t.Fatalf("Start() after Hold = %v", err)
	}
	if got := srv.Addr(); got != addr {
		t.Fatalf("Start() after Hold listens on %s, want %s", got, addr)
	}
	if err := srv.Hold(); err != nil {
		t.Fatalf("second Hold() = %v", err)
	}
	srv.Stop()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("net.Listen(%s) after Stop of a held node = %v, want the port free", addr, err)
	}
	lis.Close()
}
