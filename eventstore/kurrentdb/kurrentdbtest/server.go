package kurrentdbtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Defaults of Options.
const (
	// DefaultWriteTimeout is KurrentDB's default write timeout
	// (WriteTimeoutMs, 2 s): a write that is not committed by then is
	// answered Aborted "Operation timed out".
	DefaultWriteTimeout = 2 * time.Second
	// DefaultIdempotencyCacheEntries bounds the committed-events cache. The
	// server bounds it by size (CommittedEventsMemCacheLimit, 8 MiB); at
	// about 80 bytes per entry for short stream names that is about 100,000
	// entries.
	DefaultIdempotencyCacheEntries = 100_000
	// DefaultMaxAppendSize is the default MaxAppendSize of DefaultVersion
	// (256 MiB, TFConsts.ChunkSize; see LimitsOf): the most bytes of event
	// types, data and metadata one append may carry.
	DefaultMaxAppendSize = chunkSize
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// DataFile, when set, is where the log is kept (JSON lines, appended to
	// before an append is answered), so that it survives Restart and a
	// restart of the process. An existing file is loaded at start.
	DataFile string
	// WriteTimeout is how long a write waits to be committed before it is
	// answered Aborted (default DefaultWriteTimeout).
	WriteTimeout time.Duration
	// IdempotencyCacheEntries bounds the committed-events cache that
	// idempotent appends with Any or StreamExists rely on (default
	// DefaultIdempotencyCacheEntries).
	IdempotencyCacheEntries int
	// Version is the KurrentDB release the double imitates, e.g. "26.1.1"
	// or "24.10" (default DefaultVersion): it sets the size limits (see
	// LimitsOf) that MaxAppendSize and MaxAppendEventSize do not override.
	Version string
	// MaxAppendSize bounds one append, as the sum of its events' sizes
	// (default: the Version's, see LimitsOf).
	MaxAppendSize int
	// MaxAppendEventSize bounds one event of an append (default: the
	// Version's; none before 25.0).
	MaxAppendEventSize int
	// Now is the server clock: it stamps each event's "created" time and
	// judges $maxAge (default time.Now).
	Now func() time.Time
}

// Method names a gRPC method of the Streams service, for FailNext.
type Method string

// The methods the KurrentDB client's stream operations use.
const (
	MethodAppend Method = "/event_store.client.streams.Streams/Append"
	MethodRead   Method = "/event_store.client.streams.Streams/Read"
)

// Server is the KurrentDB server double: an in-process gRPC server with the
// Streams service of KurrentDB (Append, Read, Delete, Tombstone) over a log
// that reproduces the server's semantics (see the package comment), plus
// fault injection. Create it with Start or NewTest. It is safe for
// concurrent use.
type Server struct {
	opts   Options
	limits Limits
	addr   string

	mu       sync.Mutex
	db       *db
	changed  chan struct{} // closed and replaced whenever the readable log grows
	grpc     *grpc.Server
	lis      *trackingListener
	running  bool
	failures map[Method][]error
	odd      int // reads still to answer with an unexpected message first
	hold     *indexHold
	stopped  chan struct{} // closed by Stop, replaced by start
}

// indexHold is an active HoldIndex: records written while it lasts are not
// indexed (not readable, not acknowledged) until it is released.
type indexHold struct {
	releaseAfterDropped int
	dropped             int
}

var _ api.StreamsServer = (*streamsService)(nil)

// Start starts a Server listening on addr (host:port; port 0 picks a free
// one) and returns it once it accepts connections. Returns an error if the
// data file cannot be loaded or the address cannot be listened on.
func Start(addr string, opts Options) (*Server, error) {
	opts.WriteTimeout = orDefault(opts.WriteTimeout, DefaultWriteTimeout)
	opts.IdempotencyCacheEntries = orDefault(opts.IdempotencyCacheEntries, DefaultIdempotencyCacheEntries)
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	limits, err := LimitsOf(opts.Version)
	if err != nil {
		return nil, err
	}
	opts.MaxAppendSize = orDefault(opts.MaxAppendSize, limits.MaxAppendSize)
	if opts.MaxAppendEventSize <= 0 {
		opts.MaxAppendEventSize = limits.MaxAppendEventSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, limits: limits, addr: addr, changed: make(chan struct{}), failures: map[Method][]error{}}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewTest starts a Server on 127.0.0.1 with a free port for the test tb and
// stops it when tb ends. It fails tb if the server cannot start.
func NewTest(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := Start("127.0.0.1:0", opts)
	if err != nil {
		tb.Fatalf("kurrentdbtest.Start() = %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Addr returns the host:port the server listens on (the same across
// restarts).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL returns an insecure connection string for the server,
// esdb://host:port?tls=false.
func (s *Server) URL() string { return "esdb://" + s.Addr() + "?tls=false" }

// Start starts a stopped server on its address again. It reloads the log
// from the data file if there is one (otherwise the in-memory log is kept),
// indexes every record, and starts with an empty committed-events cache, as
// KurrentDB does after a restart. Returns an error if it is running or the
// address cannot be listened on.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return errors.New("kurrentdbtest: server already running")
	}
	fresh := s.db == nil
	d := newDB(s.opts.IdempotencyCacheEntries)
	if s.opts.DataFile != "" {
		f, err := os.OpenFile(s.opts.DataFile, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("kurrentdbtest: open data file: %w", err)
		}
		if err := d.load(f); err != nil {
			f.Close()
			return err
		}
		d.file = f
		fresh = len(d.records) == 0
	} else if s.db != nil {
		for _, r := range s.db.records {
			d.place(r)
		}
		d.indexed = len(d.records)
	}
	if fresh {
		// A new database starts with its epoch record, which the default
		// $all filter hides, so the first user event is never at 0.
		if _, err := d.add(&record{
			Stream: epochInformation, Number: d.lastNumber(epochInformation, writerView) + 1, ID: uuid.New(), Type: typeEpochInformation,
			JSON: true, Data: []byte(`{"epochNumber":0}`), Created: ticks(s.opts.Now()),
		}, true); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		if d.file != nil {
			d.file.Close()
		}
		return fmt.Errorf("kurrentdbtest: listen on %s: %w", s.addr, err)
	}
	s.addr = lis.Addr().String()
	s.db = d
	s.hold = nil
	s.lis = &trackingListener{Listener: lis, conns: map[net.Conn]struct{}{}}
	s.grpc = grpc.NewServer(
		// The client pings every 10 s; KurrentDB accepts that.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.StreamInterceptor(s.intercept),
		// KurrentDB's Streams service receives at most
		// TFConsts.EffectiveMaxLogRecordSize per message (grpc-go's own
		// default, 4 MiB, would refuse events the server takes).
		grpc.MaxRecvMsgSize(s.limits.MaxReceiveMessageSize),
	)
	api.RegisterStreamsServer(s.grpc, &streamsService{s: s})
	s.stopped = make(chan struct{})
	s.running = true
	go s.grpc.Serve(s.lis) //nolint:errcheck // Serve returns when Stop closes it
	return nil
}

// Stop stops the server at once, as a crash would: the listener and every
// connection close, in-flight calls fail, subscriptions drop. The log is
// kept (in the data file if there is one) for Start. Stop is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	s.running = false
	g, f, lis := s.grpc, s.db.file, s.lis
	close(s.stopped)
	s.mu.Unlock()
	g.Stop()
	// Stop closes what Serve has taken over; close the rest in case Serve
	// has not started yet.
	lis.Close()
	lis.dropAll()
	if f != nil {
		f.Close()
	}
}

// Restart stops the server and starts it again on the same address (see
// Stop and Start).
func (s *Server) Restart() error {
	s.Stop()
	return s.Start()
}

// DropConnections closes every client connection but keeps listening, as a
// network failure would: in-flight calls fail with Unavailable and
// subscriptions drop; clients reconnect.
func (s *Server) DropConnections() {
	s.mu.Lock()
	lis := s.lis
	s.mu.Unlock()
	if lis != nil {
		lis.dropAll()
	}
}

// FailNext makes the next n calls of method fail with code and msg before
// they reach the service, e.g. Unavailable "Server Is Not Ready" as
// KurrentDB answers while starting (RpcExceptions.ServerNotReady).
func (s *Server) FailNext(method Method, n int, code codes.Code, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures[method] = append(s.failures[method], status.Error(code, msg))
	}
}

// SendUnexpectedReply makes the next n reads (not subscriptions) begin with
// a message a read does not expect (a checkpoint), as a server newer than
// the client could send. Client v4 panics on it ("unreachable code").
func (s *Server) SendUnexpectedReply(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.odd += n
}

// takeUnexpected reports whether this read must begin with an unexpected
// message.
func (s *Server) takeUnexpected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.odd == 0 {
		return false
	}
	s.odd--
	return true
}

// Unindexed returns the number of records written while indexing is held
// and not yet indexed.
func (s *Server) Unindexed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.db.records) - s.db.indexed
}

// HoldIndex stops indexing: records written from now on are in the log but
// not readable and not acknowledged, as when a leader waits for replication
// that does not come. An append waiting longer than the write timeout is
// answered Aborted; a repeat of it that arrives meanwhile is dropped and
// answered Aborted too (IndexWriter's IdempotentNotReady). Indexing resumes
// with ReleaseIndex, or by itself once releaseAfterDropped repeats have been
// dropped (never when it is 0).
func (s *Server) HoldIndex(releaseAfterDropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = &indexHold{releaseAfterDropped: releaseAfterDropped}
}

// ReleaseIndex indexes every record written while indexing was held, wakes
// their waiting appends and subscriptions, and ends the hold.
func (s *Server) ReleaseIndex() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *Server) releaseLocked() {
	s.hold = nil
	if s.db.indexed < len(s.db.records) {
		s.db.indexed = len(s.db.records)
		s.notifyLocked()
	}
}

// AppendSystemEvent appends an event of type typ with JSON data to a system
// stream, the way KurrentDB's own subsystems write $stats, $users or
// $settings events, so tests can check that readers skip them. stream must
// start with "$". Returns the event's log position.
func (s *Server) AppendSystemEvent(stream, typ string, data []byte) (int64, error) {
	if !strings.HasPrefix(stream, "$") {
		return 0, fmt.Errorf("kurrentdbtest: %q is not a system stream", stream)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &record{
		Stream: stream, Number: s.db.lastNumber(stream, writerView) + 1, ID: uuid.New(), Type: typ,
		JSON: true, Data: data, Created: ticks(s.opts.Now()),
	}
	if _, err := s.db.add(r, s.hold == nil); err != nil {
		return 0, err
	}
	s.notifyLocked()
	return r.Pos, nil
}

// notifyLocked wakes everything waiting for the readable log to change.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// intercept fails a call when FailNext queued a failure for its method.
func (s *Server) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s.mu.Lock()
	var err error
	if q := s.failures[Method(info.FullMethod)]; len(q) > 0 {
		err, s.failures[Method(info.FullMethod)] = q[0], q[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return handler(srv, ss)
}

// waitIndexed waits until the record at log index i is indexed, the write
// timeout passes (Aborted "Operation timed out", as RequestManagerBase
// answers), the call ends or the server stops.
func (s *Server) waitIndexed(ctx context.Context, i int) error {
	timeout := time.NewTimer(s.opts.WriteTimeout)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		done, changed, stopped := s.db.indexed > i, s.changed, s.stopped
		s.mu.Unlock()
		if done {
			return nil
		}
		if err := await(ctx, changed, timeout.C, stopped); err != nil {
			return err
		}
	}
}

// await waits until changed is closed (nil when nothing is awaited; it
// returns nil then), the timeout fires (errTimedOut), ctx ends (its status)
// or the server stops (Unavailable).
func await(ctx context.Context, changed <-chan struct{}, timeout <-chan time.Time, stopped <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-timeout:
		return errTimedOut
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-stopped:
		return status.Error(codes.Unavailable, "server stopped")
	}
}

// errTimedOut is KurrentDB's answer to a write not committed within the
// write timeout (RpcExceptions.Timeout with "Commit phase timeout.").
var errTimedOut = status.Error(codes.Aborted, "Operation timed out: Commit phase timeout.")

// dropWrite answers a write that KurrentDB drops without reply (a repeat of
// an append not yet indexed): Aborted once the write timeout passes.
func (s *Server) dropWrite(ctx context.Context) error {
	timeout := time.NewTimer(s.opts.WriteTimeout)
	defer timeout.Stop()
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	return await(ctx, nil, timeout.C, stopped)
}

// trackingListener remembers accepted connections so DropConnections can
// close them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return &trackedConn{Conn: c, l: l}, nil
}

func (l *trackingListener) dropAll() {
	l.mu.Lock()
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.Conn)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// orDefault returns v if it is positive, def otherwise: the zero value (or
// a negative one) of a setting selects its default.
func orDefault[T ~int | ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
