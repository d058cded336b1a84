package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestReadTimeout runs the API's server setup — http.Server.ReadTimeout
// and lingerAfterBodyTimeout — over loopback: a body that stops arriving is
// answered 408 before the handler acts on it and the connection closes; a
// body that arrives in time leaves the handler unbounded by the timeout —
// its request context stays live well past it.
func TestReadTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	a := &api{log: slog.New(slog.DiscardHandler)}
	acted := make(chan string, 4)
	srv := httptest.NewUnstartedServer(lingerAfterBodyTimeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			a.writeError(w, r, bodyReadError(err))
			return
		}
		// Work for three read timeouts after the body is in.
		select {
		case <-r.Context().Done():
			acted <- "context cancelled while working"
			w.WriteHeader(http.StatusInternalServerError)
			return
		case <-time.After(3 * timeout):
		}
		acted <- "done"
		w.WriteHeader(http.StatusNoContent)
	})))
	srv.Config.ReadTimeout = timeout
	srv.Start()
	defer srv.Close()

	t.Run("a whole body is answered after the handler's work, its context live", func(t *testing.T) {
		res, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent || <-acted != "done" {
			t.Fatalf("POST with a whole body = %d, want 204 after the handler's work", res.StatusCode)
		}
	})

	t.Run("a body that stops arriving is 408 and the connection closes", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{")
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"request-timeout"`) || !res.Close {
			t.Fatalf("stalled body = %d %s (Connection: close %v), want 408 request-timeout and close", res.StatusCode, body, res.Close)
		}
		if _, err := br.ReadByte(); err == nil {
			t.Fatalf("the connection stayed open after the 408")
		}
		select {
		case s := <-acted:
			t.Fatalf("the handler acted (%s) on a body that never arrived", s)
		default:
		}
	})
}
