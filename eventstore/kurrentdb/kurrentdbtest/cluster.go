package kurrentdbtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	gossip "github.com/EventStore/EventStore-Client-Go/v4/protos/gossip"
	features "github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// cutOff is a node cut off from the other nodes (Isolate): clients still
// reach it. Until the election delay has passed it believes in the leader it
// had; it reads what it had at the cut.
type cutOff struct {
	at       time.Time
	believed *Server
	view     view
}

// StartCluster starts a cluster of len(addrs) nodes, node i listening on
// addrs[i] (host:port; port 0 picks a free one), over one log (kept in
// opts.DataFile if set), and returns it once every node accepts connections
// and node 0 leads. Returns an error if fewer than one address is given or a
// node cannot start (the others are stopped then).
func StartCluster(addrs []string, opts Options) (*Cluster, error) {
	if len(addrs) == 0 {
		return nil, errors.New("kurrentdbtest: a cluster needs at least one node")
	}
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		c.addNode(a)
	}
	for _, s := range c.nodes {
		if err := s.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	c.mu.Lock()
	c.electLocked(0)
	c.mu.Unlock()
	return c, nil
}

// NewTestCluster starts a cluster of n nodes on free ports of 127.0.0.1 for
// the test tb and stops it when tb ends. It fails tb if it cannot start.
func NewTestCluster(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	c, err := StartCluster(addrs, opts)
	if err != nil {
		tb.Fatalf("kurrentdbtest.StartCluster() = %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// Nodes returns the cluster's nodes, in the order of their addresses.
func (c *Cluster) Nodes() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Server(nil), c.nodes...)
}

// Leader returns the current leader, or nil while there is none.
func (c *Cluster) Leader() *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// AwaitLeader waits until the cluster has a leader and returns it, or
// returns ctx's error.
func (c *Cluster) AwaitLeader(ctx context.Context) (*Server, error) {
	for {
		c.mu.Lock()
		leader, changed := c.leader, c.changed
		c.mu.Unlock()
		if leader != nil {
			return leader, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.addr
	}
	return out
}

// URL returns an insecure connection string naming every node as a gossip
// seed, esdb://host1:port1,host2:port2,…?tls=false: the client reads the
// cluster's gossip and connects to the leader.
func (c *Cluster) URL() string { return "esdb://" + strings.Join(c.Addrs(), ",") + "?tls=false" }

// DiscoverURL returns an insecure connection string that discovers the
// cluster through the gossip of its first node, esdb+discover://host:port?tls=false.
func (c *Cluster) DiscoverURL() string { return "esdb+discover://" + c.Addrs()[0] + "?tls=false" }

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes() {
		s.Stop()
	}
}

// Isolate cuts the node off from the other nodes, as a network partition
// would; clients still reach it. The others lose it at once: if it led, they
// elect a new leader after the election delay (if they are a majority). The
// node itself believes in the leader it had for the election delay (a
// leader cannot commit then: its writes time out, Aborted; a follower
// forwards writes to a leader it cannot reach: they time out after the
// forward timeout), then has no leader (writes and reads that require the
// leader: Unavailable "Server Is Not Ready"). It reads what it had. Heal
// ends it.
func (s *Server) Isolate() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.running || s.cut != nil {
		return
	}
	now := time.Now()
	s.cut = &cutOff{at: now, believed: s.leaderLocked(now), view: s.viewLocked(now)}
	if c.leader == s {
		c.leader = nil
		c.scheduleElectionLocked()
	}
}

// Heal ends Isolate: the node rejoins the others as a follower (or takes
// part in the next election if there is no leader).
func (s *Server) Heal() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.cut == nil {
		return
	}
	s.cut = nil
	c.joinedLocked(s)
	c.notifyLocked()
}

// IsLeader reports whether the node is the cluster's leader.
func (s *Server) IsLeader() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.c.leader == s
}

// joinedLocked takes a node that started or healed into the cluster: a
// single node leads at once; otherwise an election follows if there is no
// leader.
func (c *Cluster) joinedLocked(s *Server) {
	if len(c.nodes) == 1 {
		c.leader = s
		return
	}
	if c.leader == nil {
		c.scheduleElectionLocked()
	}
}

// leftLocked takes a stopped node out: if it led, an election follows.
func (c *Cluster) leftLocked(s *Server) {
	if c.leader != s {
		return
	}
	c.leader = nil
	if len(c.nodes) > 1 && c.runningLocked() > 0 {
		c.scheduleElectionLocked()
	}
}

// scheduleElectionLocked elects a leader after the election delay, unless
// one is pending.
func (c *Cluster) scheduleElectionLocked() {
	if c.election != nil {
		return
	}
	c.election = time.AfterFunc(c.opts.ElectionDelay, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.election = nil
		if c.leader == nil {
			c.electLocked(-1)
		}
	})
}

// electLocked elects a leader among the running nodes that are not cut
// off, if they are a majority: preferred if it is one of them, otherwise the
// next one after the last leader. The new leader starts with an empty
// committed-events cache and writes an epoch record, as KurrentDB's does.
func (c *Cluster) electLocked(preferred int) {
	var voters []*Server
	for _, s := range c.nodes {
		if s.running && s.cut == nil {
			voters = append(voters, s)
		}
	}
	if len(voters)*2 <= len(c.nodes) {
		return // no majority: no leader until a node starts or heals
	}
	next := voters[0]
	last := -1
	if c.lastLeader != nil {
		last = c.lastLeader.id
	}
	for _, s := range voters {
		if s.id == preferred {
			next = s
			break
		}
		if preferred < 0 && s.id > last {
			next = s
			break
		}
	}
	c.leader, c.lastLeader = next, next
	c.term++
	d := c.db
	d.cache = newIDCache(c.opts.IdempotencyCacheEntries)
	if _, err := d.add(&record{
		Stream: epochInformation, Number: d.lastNumber(epochInformation, writerView) + 1, ID: uuid.New(), Type: typeEpochInformation,
		JSON: true, Data: fmt.Appendf(nil, `{"epochNumber":%d,"leaderInstanceId":%q}`, c.term, next.instance), Created: ticks(c.opts.Now()),
	}, c.hold == nil); err == nil {
		c.notifyLocked()
	}
}

// leaderLocked returns the leader the node believes in at now, or nil.
func (s *Server) leaderLocked(now time.Time) *Server {
	if !s.running {
		return nil
	}
	if s.cut != nil {
		if now.Sub(s.cut.at) < s.c.opts.ElectionDelay {
			return s.cut.believed
		}
		return nil
	}
	return s.c.leader
}

// viewLocked returns what the node reads at now: the leader every indexed
// record; a follower those indexed at least the replication lag ago; a node
// cut off at most what it had then.
func (s *Server) viewLocked(now time.Time) view {
	c := s.c
	v := c.db.committed()
	if c.leader != s {
		v = c.db.replicatedBy(now, c.opts.ReplicationLag)
	}
	if s.cut != nil && s.cut.view < v {
		v = s.cut.view
	}
	return v
}

// nextVisibleLocked returns how long until the node's view grows without a
// new record (a follower's replication lag running out), or 0 if it will not.
func (s *Server) nextVisibleLocked(now time.Time) time.Duration {
	c := s.c
	if c.leader == s || s.cut != nil || c.opts.ReplicationLag <= 0 {
		return 0
	}
	v := int(c.db.replicatedBy(now, c.opts.ReplicationLag))
	if v >= c.db.indexed {
		return 0
	}
	return max(time.Millisecond, c.db.indexedAt[v].Add(c.opts.ReplicationLag).Sub(now))
}

// requiresLeader reports whether a call carries requires-leader: true
// (ServiceBase.GetRequiresLeader).
func requiresLeader(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("requires-leader") {
		if b, err := strconv.ParseBool(v); err == nil && b {
			return true
		}
	}
	return false
}

// errNotReady is KurrentDB's answer while a node has no leader to send a
// request to (RpcExceptions.ServerNotReady).
var errNotReady = status.Error(codes.Unavailable, "Server Is Not Ready")

// errForwardTimeout is a follower's answer to a write the leader did not
// answer in time (OperationResult.ForwardTimeout, RpcExceptions.Timeout).
var errForwardTimeout = status.Error(codes.Aborted, "Operation timed out: Forwarding timeout")

// notLeader is KurrentDB's answer to a request that requires the leader on
// another node (RpcExceptions.LeaderInfo): NotFound with the leader's
// address in the trailers, which the client reconnects to.
func notLeader(setTrailer func(metadata.MD), leader string) error {
	host, port, _ := net.SplitHostPort(leader)
	setTrailer(metadata.Pairs("exception", "not-leader", "leader-endpoint-host", host, "leader-endpoint-port", port))
	return status.Error(codes.NotFound, "Leader info available")
}

// admitWrite decides where a write that reached the node goes, as
// ClusterVNodeController does (HandleAsNonLeader, DenyRequestBecauseNotLeader,
// ForwardRequest): the leader it believes in takes it (the node itself, or
// the leader it is forwarded to); it returns the error to answer otherwise.
// Without a leader: NotReady. With requires-leader on a follower: NotLeader
// naming the leader. Forwarded to a leader the node cannot reach: Aborted
// after the forward timeout. On a leader cut off from the others: Aborted
// after the write timeout (it cannot replicate; nothing is written).
func (s *Server) admitWrite(ctx context.Context, setTrailer func(metadata.MD)) error {
	c := s.c
	c.mu.Lock()
	now := time.Now()
	believed := s.leaderLocked(now)
	leader := c.leader
	cut := s.cut != nil
	c.mu.Unlock()
	switch {
	case believed == s && !cut:
		return nil
	case believed == s:
		return s.waitOut(ctx, c.opts.WriteTimeout, errTimedOut)
	case believed == nil:
		return errNotReady
	case requiresLeader(ctx):
		return notLeader(setTrailer, believed.Addr())
	case cut || believed != leader:
		return s.waitOut(ctx, c.opts.ForwardTimeout, errForwardTimeout)
	}
	return nil
}

// admitRead decides whether the node serves a read or subscription: always
// without requires-leader (a follower reads what has reached it); with it,
// only the leader (NotLeader naming it on a follower, NotReady without one).
func (s *Server) admitRead(ctx context.Context, setTrailer func(metadata.MD)) error {
	if !requiresLeader(ctx) {
		return nil
	}
	c := s.c
	c.mu.Lock()
	believed := s.leaderLocked(time.Now())
	c.mu.Unlock()
	switch believed {
	case s:
		return nil
	case nil:
		return errNotReady
	}
	return notLeader(setTrailer, believed.Addr())
}

// gossipService implements the Gossip service's Read: the cluster as the
// node sees it.
type gossipService struct {
	gossip.UnimplementedGossipServer
	s *Server
}

// Read answers the members as the node sees them (GossipService): each
// node's address, whether it is alive (running and reachable from this
// node), and its state: the leader this node believes in is Leader, the
// others Follower, and this node Unknown when it is cut off and has given
// up on its leader.
func (g *gossipService) Read(context.Context, *shared.Empty) (*gossip.ClusterInfo, error) {
	s := g.s
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	believed := s.leaderLocked(now)
	info := &gossip.ClusterInfo{}
	for _, n := range c.nodes {
		state := gossip.MemberInfo_Follower
		switch {
		case n == believed:
			state = gossip.MemberInfo_Leader
		case n == s && s.cut != nil && believed == nil:
			state = gossip.MemberInfo_Unknown
		}
		host, port, _ := net.SplitHostPort(n.addr)
		p, _ := strconv.Atoi(port)
		info.Members = append(info.Members, &gossip.MemberInfo{
			InstanceId:   uuidToProto(n.instance, false),
			TimeStamp:    ticks(now),
			State:        state,
			IsAlive:      n == s || (n.running && n.cut == nil && s.cut == nil),
			HttpEndPoint: &gossip.EndPoint{Address: host, Port: uint32(p)},
		})
	}
	return info, nil
}

// featuresService implements ServerFeatures: the version the double
// imitates and the methods it serves.
type featuresService struct {
	features.UnimplementedServerFeaturesServer
	s *Server
}

// GetSupportedMethods answers the server version as major.minor.patch
// (ServerFeatures.cs) and the methods of the services the double serves.
func (f *featuresService) GetSupportedMethods(context.Context, *shared.Empty) (*features.SupportedMethods, error) {
	major, minor, patch, err := versionParts(f.s.c.opts.Version)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &features.SupportedMethods{EventStoreServerVersion: fmt.Sprintf("%d.%d.%d", major, minor, patch)}
	for _, m := range []string{"read", "append", "delete", "tombstone"} {
		out.Methods = append(out.Methods, &features.SupportedMethod{ServiceName: "event_store.client.streams.streams", MethodName: m})
	}
	out.Methods = append(out.Methods, &features.SupportedMethod{ServiceName: "event_store.client.gossip.gossip", MethodName: "read"})
	return out, nil
}

var (
	_ gossip.GossipServer           = (*gossipService)(nil)
	_ features.ServerFeaturesServer = (*featuresService)(nil)
)

// Index returns the node's index in its cluster (0 for a single node).
func (s *Server) Index() int { return s.id }

// NodeStatus is one node as Cluster.Status reports it.
type NodeStatus struct {
	Addr    string `json:"addr"`
	Running bool   `json:"running"`
	Leader  bool   `json:"leader"`
	CutOff  bool   `json:"cut_off"`
}

// Status is a cluster's state: its nodes, the index of its leader (-1 if
// there is none) and the number of records in its log.
type Status struct {
	Nodes   []NodeStatus `json:"nodes"`
	Leader  int          `json:"leader"`
	Records int          `json:"records"`
}

// Status returns the cluster's state.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{Leader: -1}
	if c.db != nil {
		st.Records = len(c.db.records)
	}
	for i, s := range c.nodes {
		st.Nodes = append(st.Nodes, NodeStatus{Addr: s.addr, Running: s.running, Leader: c.leader == s, CutOff: s.cut != nil})
		if c.leader == s {
			st.Leader = i
		}
	}
	return st
}
