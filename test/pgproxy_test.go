package test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgProxy is a TCP proxy between booking serve and PostgreSQL that can cut
// the answer of a chosen append: it forwards the statement, lets the server
// run and commit it, swallows the server's answer up to its ReadyForQuery
// (sent only after the commit), and then closes both connections. The
// service sees its connection drop with the statement's outcome unknown,
// exactly as when a network failure loses an answer.
//
// It understands just enough of the PostgreSQL protocol (version 3; message
// frames, Parse and Bind decoded with pgproto3) to recognise the append:
// a Bind of a statement that calls eventstore_append or
// eventstore_append_multi with a part whose stream has the chosen prefix and
// whose events hold the chosen type (appendTargets). SSL and GSS encryption requests are
// refused, so the session stays readable (the test URL has sslmode=disable
// anyway). Safe for concurrent use.
type pgProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	rules []*cutRule
	cuts  []cutAnswer
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// cutRule selects appends whose answers to cut: the next n appends to a
// stream starting with prefix whose batch holds an event of type typ.
type cutRule struct {
	prefix, typ string
	n           int
}

// cutAnswer is an answer the proxy withheld.
type cutAnswer struct {
	Stream string
	Types  []string
	// Committed is true when the server ended the statement without an
	// error and reported an idle session (ReadyForQuery 'I'): the append's
	// transaction has committed.
	Committed bool
	// ServerError is the server's error message, if it sent one.
	ServerError string
}

// startPGProxy starts a proxy to the server of databaseURL (a postgres://
// URL) on a free loopback port and returns it; proxyURL gives the URL to
// hand the service. A cleanup closes it.
func startPGProxy(t testing.TB, databaseURL string) *pgProxy {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil || u.Host == "" {
		t.Fatalf("pg proxy: %s is not a postgres:// URL (%v)", databaseURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pg proxy: listen: %v", err)
	}
	p := &pgProxy{t: t, ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// proxyURL returns databaseURL with its host replaced by the proxy's.
func (p *pgProxy) proxyURL(databaseURL string) string {
	u, _ := url.Parse(databaseURL)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// cutNext arms the proxy to cut the answers of the next n appends to a
// stream starting with prefix whose batch holds an event of type typ.
func (p *pgProxy) cutNext(prefix, typ string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &cutRule{prefix: prefix, typ: typ, n: n})
}

// cutAnswers returns the answers cut so far.
func (p *pgProxy) cutAnswers() []cutAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.cuts)
}

// armed returns how many cuts the rules still ask for.
func (p *pgProxy) armed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.rules {
		n += r.n
	}
	return n
}

// take reports whether an append to stream with types matches an armed
// rule, and uses one cut of it.
func (p *pgProxy) take(stream string, types []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.n > 0 && strings.HasPrefix(stream, r.prefix) && slices.Contains(types, r.typ) {
			r.n--
			return true
		}
	}
	return false
}

func (p *pgProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *pgProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *pgProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// proxyConn is one proxied session. cut is set, before the statement is
// forwarded, to the append whose answer is to be withheld.
type proxyConn struct {
	p              *pgProxy
	client, server net.Conn
	cut            atomic.Pointer[cutAnswer]
}

func (p *pgProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		client.Close()
		server.Close()
		return
	}
	pc := &proxyConn{p: p, client: client, server: server}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc.serverToClient()
	}()
	pc.clientToServer()
	<-done
}

func (pc *proxyConn) closeBoth() {
	pc.client.Close()
	pc.server.Close()
}

// clientToServer forwards the frontend's messages, recording prepared
// statements and arming the cut at a matching Bind.
func (pc *proxyConn) clientToServer() {
	defer pc.closeBoth()
	// Startup phase: untyped messages (length, then a 4-byte code).
	for {
		msg, err := readUntyped(pc.client)
		if err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == 80877103 || code == 80877104 { // SSLRequest, GSSENCRequest: refuse
			if _, err := pc.client.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		if _, err := pc.server.Write(msg); err != nil {
			return
		}
		if code == 80877102 { // CancelRequest: the server closes the session
			return
		}
		break
	}
	stmts := map[string]string{} // prepared statement name → query
	for {
		typ, msg, err := readTyped(pc.client)
		if err != nil {
			return
		}
		switch typ {
		case 'P':
			var m pgproto3.Parse
			if m.Decode(msg[5:]) == nil {
				stmts[m.Name] = m.Query
			}
		case 'B':
			var m pgproto3.Bind
			if m.Decode(msg[5:]) == nil && strings.Contains(stmts[m.PreparedStatement], "eventstore_append") {
				for _, part := range appendTargets(&m) {
					if pc.p.take(part.Stream, part.Types) {
						pc.cut.Store(&cutAnswer{Stream: part.Stream, Types: part.Types})
						break
					}
				}
			}
		}
		if _, err := pc.server.Write(msg); err != nil {
			return
		}
		if typ == 'X' { // Terminate
			return
		}
	}
}

// serverToClient forwards the backend's messages; once a cut is armed it
// swallows them up to ReadyForQuery and then closes both connections.
func (pc *proxyConn) serverToClient() {
	defer pc.closeBoth()
	var serverErr string
	for {
		typ, msg, err := readTyped(pc.server)
		if err != nil {
			return
		}
		cut := pc.cut.Load()
		if cut == nil {
			if _, err := pc.client.Write(msg); err != nil {
				return
			}
			continue
		}
		switch typ {
		case 'E':
			var m pgproto3.ErrorResponse
			if m.Decode(msg[5:]) == nil {
				serverErr = m.Code + ": " + m.Message
			}
		case 'Z':
			c := *cut
			c.ServerError = serverErr
			c.Committed = serverErr == "" && len(msg) == 6 && msg[5] == 'I'
			pc.p.mu.Lock()
			pc.p.cuts = append(pc.p.cuts, c)
			pc.p.mu.Unlock()
			return // closes both: the answer never reaches the service
		}
	}
}

// appendPart is one stream of an append and the types of its events.
type appendPart struct {
	Stream string
	Types  []string
}

// appendTargets returns the parts of an append's Bind: for eventstore_append
// (8 parameters) its stream (parameter 1) and event types (parameter 5,
// text[]); for eventstore_append_multi (9 parameters) each part's stream
// (parameter 1, text[]) with its share, by the counts of parameter 4
// (int4[]), of the event types of parameter 6 (text[]).
func appendTargets(m *pgproto3.Bind) []appendPart {
	format := func(i int) int16 {
		switch len(m.ParameterFormatCodes) {
		case 0:
			return pgtype.TextFormatCode
		case 1:
			return m.ParameterFormatCodes[0]
		}
		return m.ParameterFormatCodes[i]
	}
	tm := pgtype.NewMap()
	var types []string
	switch len(m.Parameters) {
	case 8:
		if err := tm.Scan(pgtype.TextArrayOID, format(4), m.Parameters[4], &types); err != nil {
			return nil
		}
		return []appendPart{{Stream: string(m.Parameters[0]), Types: types}}
	case 9:
		var streams []string
		var counts []int32
		if tm.Scan(pgtype.TextArrayOID, format(0), m.Parameters[0], &streams) != nil ||
			tm.Scan(pgtype.Int4ArrayOID, format(3), m.Parameters[3], &counts) != nil ||
			tm.Scan(pgtype.TextArrayOID, format(5), m.Parameters[5], &types) != nil || len(counts) != len(streams) {
			return nil
		}
		parts := make([]appendPart, len(streams))
		for i, st := range streams {
			n := min(int(counts[i]), len(types))
			parts[i], types = appendPart{Stream: st, Types: types[:n]}, types[n:]
		}
		return parts
	}
	return nil
}

// readUntyped reads a startup-phase message: a 4-byte length (itself
// included), then the body.
func readUntyped(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 8 || n > 10000 {
		return nil, fmt.Errorf("pg proxy: startup message of %d bytes", n)
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readTyped reads a message: a type byte, a 4-byte length (itself
// included), then the body. It returns the type and the whole frame.
func readTyped(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, fmt.Errorf("pg proxy: message %q of %d bytes", hdr[0], n)
	}
	msg := make([]byte, 1+n)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, errors.Join(err, io.ErrUnexpectedEOF)
	}
	return hdr[0], msg, nil
}
