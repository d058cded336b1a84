package kurrentdbtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// leaderCtx marks calls as requiring the leader, as KurrentDB's header
// requires-leader does (client v4 never sends it itself).
func leaderCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "requires-leader", "true")
}

// follower returns a node of c that is not its leader.
func follower(t *testing.T, c *kurrentdbtest.Cluster) *kurrentdbtest.Server {
	t.Helper()
	for _, n := range c.Nodes() {
		if !n.IsLeader() {
			return n
		}
	}
	t.Fatal("the cluster has no follower")
	return nil
}

// TestClusterGossipFindsTheLeader: with gossip seeds (every node) or DNS
// discovery on one node, the real client reads the gossip and connects to
// the leader, whichever seed it asks.
func TestClusterGossipFindsTheLeader(t *testing.T) {
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ReplicationLag: time.Hour})
	for _, url := range []string{c.URL(), c.DiscoverURL()} {
		t.Run(url, func(t *testing.T) {
			ctx, cl, stream := testContext(t), newClient(t, url), newStream("gossip")
			mustAppend(t, ctx, cl, stream, esdb.NoStream{}, event("A"))
			// Followers lag an hour: the event reads back only from the
			// leader.
			if got := mustRead(t, ctx, cl, stream, esdb.ReadStreamOptions{}, 10); len(got) != 1 {
				t.Errorf("ReadStream through %s = %d events, want 1 (the client reads from the leader)", url, len(got))
			}
		})
	}
}

// TestClusterFollowerLagsForwardsAndRedirects: a client connected to a
// follower reads only what has been replicated to it (an hour behind here)
// and has its writes forwarded to the leader; with requires-leader the
// follower answers NotLeader naming the leader, which the client follows.
func TestClusterFollowerLagsForwardsAndRedirects(t *testing.T) {
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ReplicationLag: time.Hour})
	f := follower(t, c)
	ctx, stream := testContext(t), newStream("follower")
	onFollower := newClient(t, f.URL())
	// Forwarded to the leader: written and acknowledged.
	mustAppend(t, ctx, onFollower, stream, esdb.NoStream{}, event("A"))
	if _, err := readStream(ctx, onFollower, stream, esdb.ReadStreamOptions{}, 10); err == nil {
		t.Fatalf("ReadStream on a follower an hour behind = found, want not found (not replicated yet)")
	}
	_, err := readStream(leaderCtx(ctx), onFollower, stream, esdb.ReadStreamOptions{}, 10)
	wantCode(t, err, esdb.ErrorCodeNotLeader)
	// The client reconnected to the leader the answer named.
	if got := mustRead(t, ctx, onFollower, stream, esdb.ReadStreamOptions{}, 10); len(got) != 1 {
		t.Errorf("ReadStream after NotLeader = %d events, want 1 (read on the leader)", len(got))
	}
	// A write with requires-leader on a follower is refused too.
	onFollower2 := newClient(t, f.URL())
	_, err = onFollower2.AppendToStream(leaderCtx(ctx), stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(0)}, event("B"))
	wantCode(t, err, esdb.ErrorCodeNotLeader)
}

// TestClusterForwardTimeoutAndNoLeader: a follower cut off from the others
// forwards a write to a leader it cannot reach and answers Aborted after the
// forward timeout; once it has given up on its leader it answers "Server Is
// Not Ready"; healed, it forwards again.
func TestClusterForwardTimeoutAndNoLeader(t *testing.T) {
	const delay = 2 * time.Second
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ElectionDelay: delay, ForwardTimeout: 200 * time.Millisecond})
	f := follower(t, c)
	ctx, stream := testContext(t), newStream("forward")
	cl := newClient(t, f.URL())
	f.Isolate()
	_, err := cl.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("A"))
	if s, ok := status.FromError(errors.Unwrap(err)); !ok || s.Code() != codes.Aborted || s.Message() != "Operation timed out: Forwarding timeout" {
		t.Fatalf("AppendToStream on a cut-off follower = %v, want Aborted \"Operation timed out: Forwarding timeout\"", err)
	}
	storetest.Eventually(t, ctx, func() error {
		_, err := cl.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("A"))
		if err == nil || !strings.Contains(err.Error(), "Server Is Not Ready") {
			return errors.New("still forwarding: " + errString(err))
		}
		return nil
	})
	f.Heal()
	storetest.Eventually(t, ctx, func() error {
		_, err := cl.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("A"))
		return err
	})
}

func errString(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// TestClusterElectionAfterLeaderStops: when the leader stops, the others
// have no leader for the election delay ("Server Is Not Ready" to writes),
// then elect one; the log is intact; the stopped node rejoins as a follower.
func TestClusterElectionAfterLeaderStops(t *testing.T) {
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ElectionDelay: 300 * time.Millisecond})
	ctx := testContext(t)
	old := c.Leader()
	cl := newClient(t, c.URL())
	stream := newStream("election")
	mustAppend(t, ctx, cl, stream, esdb.NoStream{}, event("A"))
	old.Stop()
	if c.Leader() != nil {
		t.Fatalf("a leader right after the leader stopped, want an election first")
	}
	other := c.Nodes()[(indexOf(c, old)+1)%3]
	_, err := newClient(t, other.URL()).AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(0)}, event("B"))
	if err == nil || !strings.Contains(err.Error(), "Server Is Not Ready") {
		t.Errorf("AppendToStream during the election = %v, want Unavailable \"Server Is Not Ready\"", err)
	}
	leader, err := c.AwaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == old {
		t.Fatalf("the stopped node leads")
	}
	// The client rediscovers the cluster and goes on where it was.
	storetest.Eventually(t, ctx, func() error {
		_, err := cl.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(0)}, event("B"))
		return err
	})
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	if old.IsLeader() || c.Leader() != leader {
		t.Errorf("the restarted node took the lead, want it to follow %s", leader.Addr())
	}
	if got := mustRead(t, ctx, newClient(t, c.URL()), stream, esdb.ReadStreamOptions{}, 10); len(got) != 2 {
		t.Errorf("ReadStream after the election = %d events, want 2", len(got))
	}
}

// TestClusterCutOffLeaderStepsDown: a leader cut off from the others cannot
// commit (its writes time out, nothing written) and gives up after the
// election delay; the others elect a new leader, which the client finds.
func TestClusterCutOffLeaderStepsDown(t *testing.T) {
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ElectionDelay: 500 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	ctx := testContext(t)
	old := c.Leader()
	onOld := newClient(t, old.URL())
	stream := newStream("cutoff")
	old.Isolate()
	_, err := onOld.AppendToStream(leaderCtx(ctx), stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("A"))
	wantCode(t, err, esdb.ErrorAborted)
	leader, err := c.AwaitLeader(ctx)
	if err != nil || leader == old {
		t.Fatalf("AwaitLeader = %v, %v; want another node", leader, err)
	}
	storetest.Eventually(t, ctx, func() error {
		_, err := onOld.AppendToStream(leaderCtx(ctx), stream, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("A"))
		if err == nil || !strings.Contains(err.Error(), "Server Is Not Ready") {
			return errors.New("the cut-off leader still answers as leader: " + errString(err))
		}
		return nil
	})
	if _, err := readStream(ctx, newClient(t, c.URL()), stream, esdb.ReadStreamOptions{}, 1); err == nil {
		t.Errorf("the write the cut-off leader timed out is in the log, want nothing written")
	}
	mustAppend(t, ctx, newClient(t, c.URL()), stream, esdb.NoStream{}, event("B"))
}

// indexOf returns the index of node n in c.
func indexOf(c *kurrentdbtest.Cluster, n *kurrentdbtest.Server) int {
	for i, m := range c.Nodes() {
		if m == n {
			return i
		}
	}
	return -1
}
