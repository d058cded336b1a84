package config

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/booking/cmd/booking/internal/connlimit"
)

// defaultLimits returns the documented defaults of HTTPLimits.
func defaultLimits() HTTPLimits { return validServe().HTTPLimits }

// startLimited serves h over loopback with limits l (the API's server and
// listener, as booking serve builds them) and returns its address and
// listener; a cleanup closes the server.
func startLimited(t *testing.T, l HTTPLimits, h http.Handler) (string, *connlimit.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := l.Listener(ln)
	srv := l.Server(h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lim)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String(), lim
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// waitFor polls cond every 10 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dial opens a raw connection to addr.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHTTPLimits_OversizedHeaderIs431: a request with a 1 MiB header is
// answered 431 under the default BOOKING_HTTP_MAX_HEADER_BYTES (64 KiB),
// and a request just under it is served.
func TestHTTPLimits_OversizedHeaderIs431(t *testing.T) {
	t.Parallel()
	addr, _ := startLimited(t, defaultLimits(), okHandler)
	c := dial(t, addr)
	// The server answers long before the client has sent its header, and
	// stops reading: the header goes out on a goroutine of its own.
	go func() {
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: booking\r\nX-Big: "+strings.Repeat("a", 1<<20)+"\r\n\r\n")
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 431 ") {
		t.Fatalf("a 1 MiB header: read %q, %v; want HTTP/1.1 431", line, err)
	}

	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 60<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("a 60 KiB header = %d, want 200", res.StatusCode)
	}
}

// TestHTTPLimits_SlowHeaderIsCut: a connection that trickles its headers is
// closed once BOOKING_HTTP_READ_HEADER_TIMEOUT has passed, long before the
// read timeout that bounds headers and body together.
func TestHTTPLimits_SlowHeaderIsCut(t *testing.T) {
	t.Parallel()
	l := defaultLimits()
	l.HTTPReadHeaderTimeout, l.HTTPReadTimeout = time.Second, 30*time.Second
	addr, _ := startLimited(t, l, okHandler)
	c := dial(t, addr)
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: booking\r\n"); err != nil {
			return
		}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := io.WriteString(c, "X"); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	// net/http may write a 4xx of its own (400: the header it was reading
	// is cut short) before it closes the connection, and a reset may
	// destroy that answer, as the client is still sending.
	got, err := io.ReadAll(c)
	took := time.Since(start)
	if isTimeout(err) || (len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.1 4")) {
		t.Fatalf("a slow header: read %q, %v; want the connection closed by the server", got, err)
	}
	if took < 900*time.Millisecond || took > 10*time.Second {
		t.Errorf("a slow header was cut after %s, want about the header timeout (1s), far below the read timeout (30s)", took)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHTTPLimits_ConnectionLimitRefusesAtOnce: with BOOKING_HTTP_MAX_CONNS
// connections open, one more is closed as it arrives (not queued until one
// leaves) and counted; once one leaves, a new connection is served.
func TestHTTPLimits_ConnectionLimitRefusesAtOnce(t *testing.T) {
	t.Parallel()
	l := defaultLimits()
	l.HTTPMaxConns, l.HTTPReadHeaderTimeout = 3, 30*time.Second
	addr, lim := startLimited(t, l, okHandler)
	held := make([]net.Conn, 3)
	for i := range held {
		held[i] = dial(t, addr)
	}
	waitFor(t, 30*time.Second, "3 connections open", func() bool { return lim.Open() == 3 })

	extra := dial(t, addr)
	start := time.Now()
	_, _ = io.WriteString(extra, "GET / HTTP/1.1\r\nHost: booking\r\n\r\n")
	_ = extra.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := extra.Read(make([]byte, 512))
	if n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("a 4th connection: read %d bytes, %v; want it closed without an answer", n, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a 4th connection was closed after %s, want at once (the header timeout is 30s)", took)
	}
	if lim.Refused() != 1 || lim.Open() != 3 {
		t.Errorf("after a 4th connection: refused %d, open %d; want 1, 3", lim.Refused(), lim.Open())
	}

	held[0].Close()
	waitFor(t, 30*time.Second, "a closed connection leaves", func() bool { return lim.Open() == 2 })
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	res, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("a new connection after one left: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("a new connection after one left = %d, want 200", res.StatusCode)
	}
}

// TestHTTPLimits_SlowHeaderFloodStarvesNoOne: 300 connections from one
// address that send their headers slowly, under the default limits, leave
// the API answering other clients within a second each; the header timeout
// then cuts every one of them.
func TestHTTPLimits_SlowHeaderFloodStarvesNoOne(t *testing.T) {
	t.Parallel()
	const flood = 300
	l := defaultLimits()
	addr, lim := startLimited(t, l, okHandler)
	conns := make([]net.Conn, flood)
	for i := range conns {
		conns[i] = dial(t, addr)
		if _, err := io.WriteString(conns[i], "GET / HTTP/1.1\r\nHost: booking\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "the flood accepted", func() bool { return lim.Open() >= flood })

	for i := range 10 {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		t0 := time.Now()
		res, err := client.Get("http://" + addr + "/")
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("request %d during the flood: %v", i, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || took > time.Second {
			t.Errorf("request %d during the flood = %d after %s, want 200 within 1s", i, res.StatusCode, took)
		}
	}

	var wg sync.WaitGroup
	cut := make(chan time.Duration, flood)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			if _, err := c.Read(make([]byte, 64)); err != nil && !isTimeout(err) {
				cut <- time.Since(start)
			}
		}()
	}
	wg.Wait()
	close(cut)
	n := 0
	for d := range cut {
		n++
		if d > l.HTTPReadHeaderTimeout+20*time.Second {
			t.Errorf("a flood connection was cut %s after the flood, want about the header timeout (%s)", d, l.HTTPReadHeaderTimeout)
			break
		}
	}
	if n != flood {
		t.Errorf("%d of %d flood connections were cut by the server, want all", n, flood)
	}
	waitFor(t, 30*time.Second, "the flood's connections freed", func() bool { return lim.Open() == 0 })
}

// TestHTTPLimits_WriteAndIdleTimeouts: an answer that takes longer than
// BOOKING_HTTP_WRITE_TIMEOUT is cut off, and a kept-alive connection is
// closed after BOOKING_HTTP_IDLE_TIMEOUT without a request.
func TestHTTPLimits_WriteAndIdleTimeouts(t *testing.T) {
	t.Parallel()
	l := defaultLimits()
	l.HTTPWriteTimeout, l.HTTPIdleTimeout = 500*time.Millisecond, 500*time.Millisecond
	addr, lim := startLimited(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(time.Second)
		}
		_, _ = io.WriteString(w, "ok")
	}))
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	if res, err := client.Get("http://" + addr + "/slow"); err == nil {
		res.Body.Close()
		t.Errorf("GET /slow (1s) under a 500ms write timeout = %d, want no answer", res.StatusCode)
	}

	c := dial(t, addr)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: booking\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	start := time.Now()
	if _, err := br.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("an idle kept-alive connection: %v, want it closed by the server", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 10*time.Second {
		t.Errorf("an idle connection was closed after %s, want about the idle timeout (500ms)", took)
	}
	waitFor(t, 30*time.Second, "connections freed", func() bool { return lim.Open() == 0 })
}
