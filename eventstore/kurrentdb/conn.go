package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ErrClosed is returned by every method of a Store after Close.
var ErrClosed = errors.New("kurrentdb: store closed")

// schemes maps the connection string schemes New accepts to the ones
// EventStore-Client-Go v4 parses: it knows only esdb:// and
// esdb+discover://, KurrentDB's documentation uses kurrentdb://.
var schemes = map[string]string{
	"esdb":               "esdb",
	"esdb+discover":      "esdb+discover",
	"kurrentdb":          "esdb",
	"kurrentdb+discover": "esdb+discover",
}

// IsConnectionString reports whether s names a KurrentDB server: it starts
// with esdb://, esdb+discover://, kurrentdb:// or kurrentdb+discover://.
// It does not validate the rest; New does.
func IsConnectionString(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	_, known := schemes[strings.ToLower(scheme)]
	return ok && known
}

// parseConnectionString parses s into a client configuration, rewriting a
// kurrentdb scheme to esdb. Errors never contain the password.
func parseConnectionString(s string) (*esdb.Configuration, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	target, known := schemes[strings.ToLower(scheme)]
	if !ok || !known {
		return nil, fmt.Errorf("kurrentdb: connection string %q: want esdb://, esdb+discover://, kurrentdb:// or kurrentdb+discover://", redact(s))
	}
	cfg, err := esdb.ParseConnectionString(target + "://" + rest)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // url.Error repeats the whole string, password included
		}
		return nil, fmt.Errorf("kurrentdb: connection string %q: %v", redact(s), err)
	}
	return cfg, nil
}

var userinfo = regexp.MustCompile(`(://[^:/@]*):[^@/]*@`)

// redact hides the password of a connection string.
func redact(s string) string { return userinfo.ReplaceAllString(s, "${1}:xxxxx@") }

// conn supervises the client. EventStore-Client-Go v4 gives up for good
// when it cannot discover a node (10 attempts by default): the client's
// connection loop ends, and every later call fails with ConnectionClosed
// even after the server is back. So conn replaces a client that failed that
// way (or through Unavailable, or a panic inside it) with a fresh one.
//
// The old client is closed once no call runs on it any more: closing it
// closes the channel its calls send to (getConnectionHandle, and the
// reconnect request handleError sends on Unavailable), and a send racing
// the close would panic. A call blocked on that channel after the loop
// ended never returns (the client's own bug); its caller does not wait for
// it (see call), and its client is then never closed.
type conn struct {
	cfg    esdb.Configuration
	logger *slog.Logger

	mu      sync.Mutex
	client  *esdb.Client
	gen     uint64
	closed  bool
	active  map[*esdb.Client]int // calls running on each client
	retired map[*esdb.Client]bool
	// down is set when a client is replaced after a connection failure
	// and cleared by the next call the server answers: the first
	// replacement logs a warning, the next ones (about one a second while
	// the server is down) only at debug level, and the answer "connected"
	// at info. failures counts the replacements in a row after which no
	// node could be reached at all (connectFailure); from 2 on (a fresh
	// client could not connect either: the server is unreachable, not one
	// connection dropped) the retry loops stop at once and calls fail fast
	// with ErrUnreachable, except one probe every probeEvery.
	down      bool
	failures  int
	lastProbe time.Time
}

// probeEvery is how often, while the server is known to be unreachable,
// one call tries it; the others fail at once with ErrUnreachable.
const probeEvery = time.Second

// ErrUnreachable is returned, at once and with nothing sent, by a call made
// while the server is known to be unreachable: two clients in a row failed
// to connect and the last try (one a second goes through) is less than a
// second old. It counts as a transient error (for Append: nothing was sent
// by this call, but an earlier attempt's outcome may still be unknown).
var ErrUnreachable = errors.New("kurrentdb: the server is unreachable (the last connection attempts failed; nothing sent)")

// unreachable reports whether two clients in a row failed on the
// connection and no call has been answered since: the retry loops give up
// at once instead of trying again (Store.retryRead, Store.Append).
func (c *conn) unreachable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failures >= 2
}

// reconnecting reports whether a client was replaced after a failure and
// no call has been answered since, while the server is not known to be
// unreachable: what a cluster changing leader looks like to the calls in
// flight (the stopped leader refuses connections, a fresh client's call is
// cut off when another call replaces it, a node answers that it is not
// ready), so their retry loops keep trying within the failover window.
func (c *conn) reconnecting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down && c.failures < 2
}

// up records a call the server answered, logging "connected" if it was
// known to be down.
func (c *conn) up() {
	c.mu.Lock()
	was := c.down
	c.down, c.failures = false, 0
	c.mu.Unlock()
	if was {
		c.logger.Info("kurrentdb: connected")
	}
}

// acquire returns the current client and its generation, creating one if
// needed, and counts a call on it; release must follow. Creating a client
// does not connect; its first call does.
func (c *conn) acquire() (*esdb.Client, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, ErrClosed
	}
	if c.failures >= 2 {
		if now := time.Now(); now.Sub(c.lastProbe) < probeEvery {
			return nil, 0, ErrUnreachable
		} else {
			c.lastProbe = now
		}
	}
	if c.client == nil {
		cfg := c.cfg
		client, err := esdb.NewClient(&cfg)
		if err != nil {
			return nil, 0, fmt.Errorf("kurrentdb: new client: %w", err)
		}
		c.client = client
	}
	if c.active == nil {
		c.active, c.retired = map[*esdb.Client]int{}, map[*esdb.Client]bool{}
	}
	c.active[c.client]++
	return c.client, c.gen, nil
}

// release ends a call on client, closing it if it was the last call on a
// retired client.
func (c *conn) release(client *esdb.Client) {
	c.mu.Lock()
	c.active[client]--
	idle := c.active[client] == 0
	if idle {
		delete(c.active, client)
	}
	retire := idle && c.retired[client]
	if retire {
		delete(c.retired, client)
	}
	c.mu.Unlock()
	if retire {
		closeClient(client)
	}
}

// replace discards the client of generation gen, if it is still current,
// so the next call gets a fresh one.
func (c *conn) replace(gen uint64, reason error) {
	c.mu.Lock()
	if c.closed || c.client == nil || gen != c.gen {
		c.mu.Unlock()
		return
	}
	old := c.client
	c.client = nil
	c.gen++
	first := !c.down
	c.down = true
	if connectFailure(reason) {
		c.failures++
	} else {
		c.failures = 0 // the server answered (e.g. Unavailable while not ready): worth retrying
	}
	c.mu.Unlock()
	if first {
		c.logger.Warn("kurrentdb: replacing the client after a connection failure; until it connects again, the next replacements are logged at debug level",
			"error", reason)
	} else {
		c.logger.Debug("kurrentdb: replacing the client after a connection failure", "error", reason)
	}
	c.retire(old)
}

// retire closes client now if no call runs on it, or when the last ends.
func (c *conn) retire(client *esdb.Client) {
	c.mu.Lock()
	busy := c.active[client] > 0
	if busy {
		c.retired[client] = true
	}
	c.mu.Unlock()
	if !busy {
		closeClient(client)
	}
}

// close retires the current client; later calls fail with ErrClosed.
func (c *conn) close() {
	c.mu.Lock()
	old := c.client
	c.client, c.closed = nil, true
	c.mu.Unlock()
	if old != nil {
		c.retire(old)
	}
}

func closeClient(client *esdb.Client) {
	defer func() { _ = recover() }() // a client whose loop has ended may not close cleanly
	client.Close()
}

// call runs op with the current client in a goroutine of its own and waits
// for it or for ctx. The client can block without regard to ctx (see conn),
// so a caller never waits on it past ctx; a panic inside the client (it
// panics on replies it does not expect) is recovered and returned as a
// *clientPanicError. An error that shows the client is broken makes conn
// replace it.
func (c *conn) call(ctx context.Context, op func(ctx context.Context, client *esdb.Client) error) error {
	client, gen, err := c.acquire()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		defer c.release(client)
		defer func() {
			if r := recover(); r != nil {
				done <- &clientPanicError{value: r}
			}
		}()
		done <- op(ctx, client)
	}()
	select {
	case err := <-done:
		if brokenClient(err) {
			c.replace(gen, err)
		} else if answered(err) {
			c.up()
		}
		return err
	case <-ctx.Done():
		// op goes on until the client answers or its connection ends. A
		// deadline passed with no answer at all is how a client whose
		// connection loop has ended looks (its calls block for good, see
		// conn): the next call gets a fresh one.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(context.Cause(ctx), errNoAnswer) {
			c.replace(gen, context.Cause(ctx))
		}
		return ctx.Err()
	}
}

// connectFailure reports whether err shows the client could not reach any
// node: it gave up for good (ConnectionClosed), or its discovery ran out
// of attempts (client v4 reports that as Unavailable "maximum discovery
// attempt count reached"), unlike an Unavailable the server itself
// answered (not ready yet), which a retry may get past.
func connectFailure(err error) bool {
	code, ok := esdbCode(err)
	return ok && (code == esdb.ErrorCodeConnectionClosed || strings.Contains(err.Error(), "discovery attempt count reached"))
}

// answered reports whether err (nil included) shows the server answered:
// not a connection failure nor a timeout.
func answered(err error) bool {
	return err == nil || (!transient(err) && !errors.Is(err, context.Canceled))
}

// errNoAnswer is the cause a caller cancels a call's context with when the
// client did not answer in time (opening a subscription, whose context
// cannot carry a deadline): call then replaces the client, as on a passed
// deadline.
var errNoAnswer = errors.New("kurrentdb: the client did not answer in time")

// clientPanicError is a panic inside EventStore-Client-Go, recovered.
type clientPanicError struct{ value any }

func (e *clientPanicError) Error() string {
	return fmt.Sprintf("kurrentdb: the client panicked: %v", e.value)
}

// esdbCode returns the client's error code of err, or false.
func esdbCode(err error) (esdb.ErrorCode, bool) {
	var esErr *esdb.Error
	if !errors.As(err, &esErr) {
		return 0, false
	}
	return esErr.Code(), true
}

// grpcCode returns the gRPC status code inside err (through the client's
// error wrapping), or codes.Unknown.
func grpcCode(err error) codes.Code {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := status.FromError(e); ok && s.Code() != codes.Unknown {
			return s.Code()
		}
	}
	return codes.Unknown
}

// brokenClient reports whether err shows that the client itself must be
// replaced: it has given up (ConnectionClosed), the server is unreachable
// (Unavailable, which covers a failed discovery, with or without the
// client's wrapping), or it panicked.
func brokenClient(err error) bool {
	var p *clientPanicError
	if errors.As(err, &p) {
		return true
	}
	if code, ok := esdbCode(err); ok {
		return code == esdb.ErrorCodeConnectionClosed || code == esdb.ErrorUnavailable
	}
	// A read that failed to open returns gRPC's error as is, without the
	// client's reconnect (Client-Go#190): a client whose node went away
	// would keep dialing it.
	return grpcCode(err) == codes.Unavailable
}

// transient reports whether err may go away on its own: the connection
// failed or was replaced, the server was unavailable or timed out (Aborted
// "Operation timed out"), a deadline passed, a request could not be sent
// whole, or the client panicked. For an
// append the outcome of such an error is unknown.
func transient(err error) bool {
	if brokenClient(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnreachable) {
		return true
	}
	if errors.Is(err, io.EOF) {
		// A send on a call the server or the network already ended
		// (KurrentDB refuses an append before reading it while not ready).
		return true
	}
	if code, ok := esdbCode(err); ok {
		switch code {
		case esdb.ErrorAborted, esdb.ErrorCodeDeadlineExceeded, esdb.ErrorUnavailable, esdb.ErrorCodeConnectionClosed,
			esdb.ErrorCodeNotLeader: // the client reconnects to the leader the error names
			return true
		}
	}
	switch grpcCode(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		// Canceled while the caller's context is alive: the client was
		// closed under the call (replaced).
		return true
	}
	return false
}

// failover reports whether err shows a cluster changing leader: the node
// is not the leader (NotLeader: the client reconnects to the one it names),
// or it has none ("Server Is Not Ready", answered while a node starts or
// while the cluster elects a leader).
func failover(err error) bool {
	if code, ok := esdbCode(err); ok && code == esdb.ErrorCodeNotLeader {
		return true
	}
	return grpcCode(err) == codes.Unavailable && strings.Contains(err.Error(), "Server Is Not Ready")
}

// leaderOnly marks a call as one only the leader may answer
// (requires-leader: true, which KurrentDB honours on every node: a follower
// answers NotLeader naming the leader, a node without one "Server Is Not
// Ready"). Client v4 puts the header it means to send into the incoming
// metadata of its context, so it never reaches the server; leaderOnly puts
// it into the outgoing metadata, which gRPC sends. Appends and the reads
// the service decides on use it, so after an election no call is answered
// by a node that was demoted or has not caught up; subscriptions do not
// (a follower may serve them).
func leaderOnly(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "requires-leader", "true")
}

// describe adds a hint for errors a user can fix.
func describe(err error) error {
	code, _ := esdbCode(err)
	switch {
	case code == esdb.ErrorCodeAccessDenied || grpcCode(err) == codes.PermissionDenied:
		return fmt.Errorf("%w (access denied: in secure mode reading $all needs an admin user in the connection string)", err)
	case code == esdb.ErrorCodeUnauthenticated || grpcCode(err) == codes.Unauthenticated:
		return fmt.Errorf("%w (authentication failed: check the user and password in the connection string)", err)
	}
	return err
}
