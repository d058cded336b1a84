package kurrentdbtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gossip "github.com/EventStore/EventStore-Client-Go/v4/protos/gossip"
	features "github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
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
	// DefaultElectionDelay is how long a cluster has no leader after losing
	// it (KurrentDB's LeaderElectionTimeoutMs, 1 s; the gossip timeout
	// that detects the loss first is not modelled).
	DefaultElectionDelay = time.Second
	// DefaultForwardTimeout is how long a follower waits for a forwarded
	// write (ClusterVNodeController: PrepareTimeoutMs + CommitTimeoutMs +
	// 300 ms = 4.3 s).
	DefaultForwardTimeout = 4300 * time.Millisecond
)

// Options configure a Server or a Cluster. The zero value is usable.
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
	// ReplicationLag is how long after the leader indexes a record a
	// follower can read it (default 0: at once). Appends are acknowledged by
	// the leader as before; follower reads and subscriptions lag.
	ReplicationLag time.Duration
	// ElectionDelay is how long a cluster of several nodes has no leader
	// after its leader is stopped or cut off (default DefaultElectionDelay),
	// and how long a node cut off from the others keeps believing in the
	// leader it had.
	ElectionDelay time.Duration
	// ForwardTimeout is how long a follower waits for the leader to answer
	// a write it forwards before answering Aborted "Operation timed out:
	// Forwarding timeout" (default DefaultForwardTimeout).
	ForwardTimeout time.Duration
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
// Streams service of KurrentDB (Append, Read, Delete, Tombstone), Gossip
// (Read) and ServerFeatures (GetSupportedMethods) over a log that reproduces
// the server's semantics (see the package comment), plus fault injection.
// A Server made by Start or NewTest is a single node, always the leader; one
// made by StartCluster is one node of a Cluster. Its methods are safe for
// concurrent use.
type Server struct {
	c        *Cluster
	id       int // the node's index in the cluster
	instance uuid.UUID

	// Guarded by c.mu.
	addr     string
	grpc     *grpc.Server
	lis      *trackingListener
	running  bool
	failures map[Method][]error
	odd      int           // reads still to answer with an unexpected message first
	stopped  chan struct{} // closed by Stop, replaced by start
	cut      *cutOff       // set while the node is cut off from the others
	held     *heldPort     // set by Hold until the next Start
}

// Cluster is a KurrentDB cluster double: nodes (Servers) over one log, one
// of them the leader. It is safe for concurrent use.
type Cluster struct {
	opts   Options
	limits Limits

	mu       sync.Mutex
	db       *db
	changed  chan struct{} // closed and replaced whenever the readable log grows
	hold     *indexHold
	nodes    []*Server
	leader   *Server     // nil while there is none
	election *time.Timer // pending election, if any
	// lastLeader is the last node elected; term counts elections (the
	// epoch number of the leader's epoch record).
	lastLeader *Server
	term       int
}

// indexHold is an active HoldIndex: records written while it lasts are not
// indexed (not readable, not acknowledged) until it is released.
type indexHold struct {
	releaseAfterDropped int
	dropped             int
}

var _ api.StreamsServer = (*streamsService)(nil)

// newCluster applies the defaults of opts and returns an empty Cluster.
func newCluster(opts Options) (*Cluster, error) {
	opts.WriteTimeout = orDefault(opts.WriteTimeout, DefaultWriteTimeout)
	opts.IdempotencyCacheEntries = orDefault(opts.IdempotencyCacheEntries, DefaultIdempotencyCacheEntries)
	opts.ElectionDelay = orDefault(opts.ElectionDelay, DefaultElectionDelay)
	opts.ForwardTimeout = orDefault(opts.ForwardTimeout, DefaultForwardTimeout)
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
	return &Cluster{opts: opts, limits: limits, changed: make(chan struct{})}, nil
}

// addNode adds a stopped node that will listen on addr.
func (c *Cluster) addNode(addr string) *Server {
	s := &Server{c: c, id: len(c.nodes), instance: uuid.New(), addr: addr, failures: map[Method][]error{}}
	c.nodes = append(c.nodes, s)
	return s
}

// Start starts a single-node Server listening on addr (host:port; port 0
// picks a free one) and returns it once it accepts connections. Returns an
// error if an option is invalid, the data file cannot be loaded or the
// address cannot be listened on.
func Start(addr string, opts Options) (*Server, error) {
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	s := c.addNode(addr)
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
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.addr
}

// URL returns an insecure connection string for this node alone,
// esdb://host:port?tls=false.
func (s *Server) URL() string { return "esdb://" + s.Addr() + "?tls=false" }

// Cluster returns the cluster the node belongs to (a cluster of one for a
// Server made by Start).
func (s *Server) Cluster() *Cluster { return s.c }

// Start starts a stopped node on its address again. When no other node of
// its cluster runs, it reloads the log from the data file if there is one
// (otherwise the in-memory log is kept), indexes every record, and starts
// with an empty committed-events cache, as KurrentDB does after a restart.
// A single node is the leader at once; a node of a cluster joins as a
// follower, or takes part in the next election if there is no leader.
// Returns an error if it is running or the address cannot be listened on.
func (s *Server) Start() error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.running {
		return errors.New("kurrentdbtest: server already running")
	}
	if c.runningLocked() == 0 {
		if err := c.reloadLocked(); err != nil {
			return err
		}
	}
	lis, err := s.takeHeldOrListen()
	if err != nil {
		if c.runningLocked() == 0 && c.db.file != nil {
			c.db.file.Close()
		}
		return fmt.Errorf("kurrentdbtest: listen on %s: %w", s.addr, err)
	}
	s.addr = lis.Addr().String()
	s.lis = &trackingListener{Listener: lis, conns: map[net.Conn]struct{}{}}
	s.grpc = grpc.NewServer(
		// The client pings every 10 s; KurrentDB accepts that.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.StreamInterceptor(s.intercept),
		grpc.UnaryInterceptor(s.interceptUnary),
		// KurrentDB's Streams service receives at most
		// TFConsts.EffectiveMaxLogRecordSize per message (grpc-go's own
		// default, 4 MiB, would refuse events the server takes).
		grpc.MaxRecvMsgSize(c.limits.MaxReceiveMessageSize),
	)
	api.RegisterStreamsServer(s.grpc, &streamsService{s: s})
	gossip.RegisterGossipServer(s.grpc, &gossipService{s: s})
	features.RegisterServerFeaturesServer(s.grpc, &featuresService{s: s})
	s.stopped = make(chan struct{})
	s.running = true
	s.cut = nil
	c.joinedLocked(s)
	go s.grpc.Serve(s.lis) //nolint:errcheck // Serve returns when Stop closes it
	return nil
}

// reloadLocked loads the log again as a start of the first node does: from
// the data file, or from memory.
func (c *Cluster) reloadLocked() error {
	fresh := c.db == nil
	d := newDB(c.opts.IdempotencyCacheEntries)
	if c.opts.DataFile != "" {
		f, err := os.OpenFile(c.opts.DataFile, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("kurrentdbtest: open data file: %w", err)
		}
		if err := d.load(f); err != nil {
			f.Close()
			return err
		}
		d.file = f
		fresh = len(d.records) == 0
	} else if c.db != nil {
		for _, r := range c.db.records {
			d.place(r)
		}
		d.indexTo(len(d.records), time.Time{})
	}
	if fresh {
		// A new database starts with its epoch record, which the default
		// $all filter hides, so the first user event is never at 0.
		if _, err := d.add(&record{
			Stream: epochInformation, Number: d.lastNumber(epochInformation, writerView) + 1, ID: uuid.New(), Type: typeEpochInformation,
			JSON: true, Data: []byte(`{"epochNumber":0}`), Created: ticks(c.opts.Now()),
		}, true); err != nil {
			return err
		}
	}
	c.db = d
	c.hold = nil
	return nil
}

// runningLocked returns the number of running nodes.
func (c *Cluster) runningLocked() int {
	n := 0
	for _, s := range c.nodes {
		if s.running {
			n++
		}
	}
	return n
}

// Stop stops the node at once, as a crash would: the listener and every
// connection close, in-flight calls fail, subscriptions drop. The log is
// kept (in the data file if there is one) for Start. If the node was the
// leader of a cluster, the others elect a new one after the election delay.
// Stop is idempotent; on a node that Hold stopped it closes the held socket.
func (s *Server) Stop() {
	c := s.c
	c.mu.Lock()
	if !s.running {
		h := s.held
		s.held = nil
		c.mu.Unlock()
		if h != nil {
			h.lis.Close()
			<-h.done
		}
		return
	}
	s.running = false
	g, lis := s.grpc, s.lis
	close(s.stopped)
	var f *os.File
	if c.runningLocked() == 0 {
		f = c.db.file
		if c.election != nil {
			c.election.Stop()
			c.election = nil
		}
	}
	c.leftLocked(s)
	c.mu.Unlock()
	g.Stop()
	// Stop closes what Serve has taken over; close the rest in case Serve
	// has not started yet.
	lis.Close()
	lis.dropAll()
	if f != nil {
		f.Close()
	}
}

// listen listens on TCP addr (host:port). Port 0 takes a free port below
// Linux's ephemeral range (32768–60999), as test/scripts/pg.sh does: a
// node starts again on the port it first took (Restart, a killed process
// started again), and a port of the ephemeral range may meanwhile become
// the local end of any outgoing connection on the machine, where one below
// it can only be taken by another listener. If 100 random ports are taken,
// it takes whatever free port the system gives.
func listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		return net.Listen("tcp", addr)
	}
	for range 100 {
		p := strconv.Itoa(20000 + rand.IntN(12000))
		if lis, err := net.Listen("tcp", net.JoinHostPort(host, p)); err == nil {
			return lis, nil
		}
	}
	return net.Listen("tcp", addr)
}

// Hold stops the node as Stop does but keeps its listening socket until the
// next Start, which serves on it again: meanwhile every connection to its
// address is accepted and closed at once, as by a host with nothing
// serving, and no other listener can take the port (after Stop, a parallel
// test's server could). It returns an error if the node is not running.
func (s *Server) Hold() error {
	s.c.mu.Lock()
	if !s.running {
		s.c.mu.Unlock()
		return errors.New("kurrentdbtest: Hold of a server that is not running")
	}
	lis := s.lis
	lis.keep.Store(true)
	s.c.mu.Unlock()
	s.Stop()
	tcp := lis.Listener.(*net.TCPListener)
	if err := tcp.SetDeadline(time.Time{}); err != nil {
		tcp.Close()
		return fmt.Errorf("kurrentdbtest: hold %s: %w", s.Addr(), err)
	}
	h := &heldPort{lis: tcp, done: make(chan struct{})}
	go h.refuse()
	s.c.mu.Lock()
	s.held = h
	s.c.mu.Unlock()
	return nil
}

// heldPort is a node's listening socket while Hold keeps it.
type heldPort struct {
	lis  *net.TCPListener
	done chan struct{} // closed when refuse returns
}

// refuse accepts and closes connections until Accept fails (release makes
// it fail).
func (h *heldPort) refuse() {
	defer close(h.done)
	for {
		c, err := h.lis.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// release stops refusing and returns the socket, ready to serve again.
func (h *heldPort) release() (net.Listener, error) {
	if err := h.lis.SetDeadline(time.Unix(1, 0)); err != nil {
		return nil, err
	}
	<-h.done
	if err := h.lis.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return h.lis, nil
}

// takeHeldOrListen returns the socket Hold kept, or listens on s.addr.
// Callers hold s.c.mu.
func (s *Server) takeHeldOrListen() (net.Listener, error) {
	if h := s.held; h != nil {
		s.held = nil
		return h.release()
	}
	return listen(s.addr)
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
	s.c.mu.Lock()
	lis := s.lis
	s.c.mu.Unlock()
	if lis != nil {
		lis.dropAll()
	}
}

// FailNext makes the next n calls of method fail with code and msg before
// they reach the service, e.g. Unavailable "Server Is Not Ready" as
// KurrentDB answers while starting (RpcExceptions.ServerNotReady).
func (s *Server) FailNext(method Method, n int, code codes.Code, msg string) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for range n {
		s.failures[method] = append(s.failures[method], status.Error(code, msg))
	}
}

// SendUnexpectedReply makes the next n reads (not subscriptions) begin with
// a message a read does not expect (a checkpoint), as a server newer than
// the client could send. Client v4 panics on it ("unreachable code").
func (s *Server) SendUnexpectedReply(n int) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.odd += n
}

// takeUnexpected reports whether this read must begin with an unexpected
// message.
func (s *Server) takeUnexpected() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.odd == 0 {
		return false
	}
	s.odd--
	return true
}

// Unindexed returns the number of records written while indexing is held
// and not yet indexed.
func (s *Server) Unindexed() int {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return len(s.c.db.records) - s.c.db.indexed
}

// HoldIndex stops indexing: records written from now on are in the log but
// not readable and not acknowledged, as when a leader waits for replication
// that does not come. An append waiting longer than the write timeout is
// answered Aborted; a repeat of it that arrives meanwhile is dropped and
// answered Aborted too (IndexWriter's IdempotentNotReady). Indexing resumes
// with ReleaseIndex, or by itself once releaseAfterDropped repeats have been
// dropped (never when it is 0). It holds the whole cluster.
func (s *Server) HoldIndex(releaseAfterDropped int) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.hold = &indexHold{releaseAfterDropped: releaseAfterDropped}
}

// ReleaseIndex indexes every record written while indexing was held, wakes
// their waiting appends and subscriptions, and ends the hold.
func (s *Server) ReleaseIndex() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.releaseLocked()
}

func (c *Cluster) releaseLocked() {
	c.hold = nil
	if c.db.indexed < len(c.db.records) {
		c.db.indexTo(len(c.db.records), time.Now())
		c.notifyLocked()
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
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &record{
		Stream: stream, Number: c.db.lastNumber(stream, writerView) + 1, ID: uuid.New(), Type: typ,
		JSON: true, Data: data, Created: ticks(c.opts.Now()),
	}
	if _, err := c.db.add(r, c.hold == nil); err != nil {
		return 0, err
	}
	c.notifyLocked()
	return r.Pos, nil
}

// notifyLocked wakes everything waiting for the readable log to change.
func (c *Cluster) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// takeFailure returns the failure FailNext queued for method, if any.
func (s *Server) takeFailure(method string) error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	q := s.failures[Method(method)]
	if len(q) == 0 {
		return nil
	}
	s.failures[Method(method)] = q[1:]
	return q[0]
}

// intercept fails a call when FailNext queued a failure for its method.
func (s *Server) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.takeFailure(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// interceptUnary fails a unary call (gossip, server features) when FailNext
// queued a failure for its method.
func (s *Server) interceptUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.takeFailure(info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// waitIndexed waits until the record at log index i is indexed, the write
// timeout passes (Aborted "Operation timed out", as RequestManagerBase
// answers), the call ends or the server stops.
func (s *Server) waitIndexed(ctx context.Context, i int) error {
	c := s.c
	timeout := time.NewTimer(c.opts.WriteTimeout)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		done, changed, stopped := c.db.indexed > i, c.changed, s.stopped
		c.mu.Unlock()
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
	return s.waitOut(ctx, s.c.opts.WriteTimeout, errTimedOut)
}

// waitOut waits d, then returns err; or ctx's status if it ends first, or
// Unavailable if the node stops.
func (s *Server) waitOut(ctx context.Context, d time.Duration, err error) error {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	s.c.mu.Lock()
	stopped := s.stopped
	s.c.mu.Unlock()
	select {
	case <-timeout.C:
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-stopped:
		return status.Error(codes.Unavailable, "server stopped")
	}
}

// trackingListener remembers accepted connections so DropConnections can
// close them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// keep (set by Hold before it stops the node) makes Close leave the
	// socket open: it only makes a blocked Accept return, so the gRPC
	// server stops serving while the socket stays bound.
	keep      atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Close closes the socket, or with keep set makes a blocked Accept return a
// timeout instead (the gRPC server stops serving on it; Hold takes it
// over). Only the first call acts: a gRPC Serve that starts after Stop
// closes its listener again, which must not touch a socket Hold or a later
// Start is using.
func (l *trackingListener) Close() error {
	l.closeOnce.Do(func() {
		if l.keep.Load() {
			l.closeErr = l.Listener.(*net.TCPListener).SetDeadline(time.Unix(1, 0))
		} else {
			l.closeErr = l.Listener.Close()
		}
	})
	return l.closeErr
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
