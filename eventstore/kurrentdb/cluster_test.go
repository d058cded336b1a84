package kurrentdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/kurrentdb"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/storetest"
)

// TestClusterReadsYourWritesThroughAFollower: a Store whose connection
// string names a follower an hour behind the leader still reads what it
// just wrote, in every read: it sends requires-leader, so the follower
// answers NotLeader naming the leader and the client moves there. (Without
// the header the follower would forward the append and serve the reads
// from its own, stale, log.)
func TestClusterReadsYourWritesThroughAFollower(t *testing.T) {
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ReplicationLag: time.Hour})
	var f *kurrentdbtest.Server
	for _, n := range c.Nodes() {
		if !n.IsLeader() {
			f = n
		}
	}
	s := newStore(t, f.URL())
	ctx := testContext(t)
	stream := "ryw-" + uuid.NewString()
	res, err := s.Append(ctx, stream, eventstore.NoStream(), newEvents(2)...)
	if err != nil {
		t.Fatalf("Append through a follower = %v", err)
	}
	if got, err := s.ReadStream(ctx, stream, 0, 0); err != nil || len(got) != 2 {
		t.Errorf("ReadStream right after the append = %d events, %v; want 2", len(got), err)
	}
	if head, err := s.Head(ctx); err != nil || head != res.Position {
		t.Errorf("Head = %v, %v; want the append's position %v", head, err, res.Position)
	}
	if got := ownEvents(t, ctx, s, stream); len(got) != 2 {
		t.Errorf("ReadAll holds %d events of the stream, want 2", len(got))
	}
}

// failoverCase is a way to take a cluster's leader away in the middle of a
// run, and to bring it back.
type failoverCase struct {
	name    string
	take    func(*kurrentdbtest.Server)
	restore func(*kurrentdbtest.Server) error
}

var failovers = []failoverCase{
	{"leader stopped", (*kurrentdbtest.Server).Stop, (*kurrentdbtest.Server).Start},
	{"leader cut off", (*kurrentdbtest.Server).Isolate, func(s *kurrentdbtest.Server) error { s.Heal(); return nil }},
}

// TestClusterElectionLosesNothing: a writer appends to 30 streams with
// exact expected revisions, reading each stream back after every
// acknowledged append, while a subscriber follows the log; a third of the
// way in the leader is taken away (stopped, or cut off from the others) and
// the others elect a new one; two thirds in it comes back as a follower.
// Every append is acknowledged (the store rides the election out), every
// read after an acknowledgement sees it (read-your-writes), the log holds
// each acknowledged event exactly once, and the subscription delivers each
// exactly once, in log order, with no gap.
func TestClusterElectionLosesNothing(t *testing.T) {
	for _, fc := range failovers {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{
				ElectionDelay: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, ReplicationLag: 50 * time.Millisecond,
			})
			s := newStore(t, c.URL(), kurrentdb.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			prefix := "failover-" + uuid.NewString() + "-"
			sub := subscribe(t, ctx, s, eventstore.Position{}, prefix)

			const streams, rounds = 30, 6
			var written []eventstore.EventData
			total := streams * rounds
			var old *kurrentdbtest.Server
			for i := range total {
				switch i {
				case total / 3:
					old = c.Leader()
					fc.take(old)
				case 2 * total / 3:
					if err := fc.restore(old); err != nil {
						t.Fatal(err)
					}
				}
				stream := fmt.Sprintf("%s%d", prefix, i%streams)
				round := i / streams
				exp := eventstore.NoStream()
				if round > 0 {
					exp = eventstore.Exact(uint64(round - 1))
				}
				ev := newEvents(1)[0]
				res, err := s.Append(ctx, stream, exp, ev)
				if err != nil {
					t.Fatalf("append %d (%s at %v) = %v, want it acknowledged through the election", i, stream, exp, err)
				}
				if res.NextRevision != uint64(round) {
					t.Fatalf("append %d revision = %d, want %d", i, res.NextRevision, round)
				}
				written = append(written, ev)
				got, err := s.ReadStream(ctx, stream, uint64(round), 0)
				if err != nil || len(got) != 1 || got[0].ID != ev.ID {
					t.Fatalf("ReadStream(%s, %d) right after its append = %v, %v; want the event just written", stream, round, got, err)
				}
			}
			if c.Leader() == old {
				t.Errorf("the node taken away leads again; want it to follow after the election")
			}

			logged := ownEvents(t, ctx, s, prefix)
			checkOnce(t, "the log", written, logged)
			delivered := sub.waitFor(t, ctx, len(written))
			checkOnce(t, "the subscription", written, delivered)
			for i := 1; i < len(delivered); i++ {
				if !delivered[i-1].Position.Less(delivered[i].Position) {
					t.Fatalf("subscription delivered %s after %s: want log order", delivered[i].Position, delivered[i-1].Position)
				}
			}
		})
	}
}

// checkOnce fails t unless got holds exactly the events of want, each once.
func checkOnce(t *testing.T, where string, want []eventstore.EventData, got []eventstore.RecordedEvent) {
	t.Helper()
	seen := map[string]int{}
	for _, e := range got {
		seen[e.ID]++
	}
	for _, e := range want {
		switch n := seen[e.ID]; n {
		case 1:
		case 0:
			t.Errorf("%s lacks acknowledged event %s", where, e.ID)
		default:
			t.Errorf("%s holds event %s %d times", where, e.ID, n)
		}
		delete(seen, e.ID)
	}
	for id := range seen {
		t.Errorf("%s holds event %s nobody acknowledged", where, id)
	}
	if len(got) != len(want) {
		t.Errorf("%s holds %d events, want %d", where, len(got), len(want))
	}
}

// TestClusterSubscriptionOnAFollower: a subscription through a follower's
// address is served by that follower (subscriptions do not require the
// leader), behind by its replication lag, and delivers every event once.
func TestClusterSubscriptionOnAFollower(t *testing.T) {
	const lag = 300 * time.Millisecond
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ReplicationLag: lag})
	var f *kurrentdbtest.Server
	for _, n := range c.Nodes() {
		if !n.IsLeader() {
			f = n
		}
	}
	s := newStore(t, f.URL())
	ctx := testContext(t)
	prefix := "follower-sub-" + uuid.NewString()
	sub := subscribe(t, ctx, s, eventstore.Position{}, prefix)
	var acked []eventstore.EventData
	for i := range 5 {
		ev := newEvents(1)[0]
		if _, err := s.Append(ctx, fmt.Sprintf("%s-%d", prefix, i), eventstore.NoStream(), ev); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, ev)
	}
	checkOnce(t, "the follower's subscription", acked, sub.waitFor(t, ctx, len(acked)))
}

// TestClusterProcessElectionOnCommand: the double's command runs a
// three-node cluster in a process of its own; its control endpoint stops the
// leader (an election follows) and starts the node again as a follower; a
// Store rides it out; a SIGKILL and a restart on the data file keep the log.
func TestClusterProcessElectionOnCommand(t *testing.T) {
	p := kurrentdbtest.StartProcessWith(t, doubleBin, kurrentdbtest.ProcessOptions{
		DataFile: t.TempDir() + "/log", Nodes: 3, ElectionDelay: 300 * time.Millisecond,
	})
	s := newStore(t, p.URL())
	ctx := testContext(t)
	stream := "process-" + uuid.NewString()
	if _, err := s.Append(ctx, stream, eventstore.NoStream(), newEvents(1)...); err != nil {
		t.Fatal(err)
	}
	stopped, err := p.StopLeader()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, stream, eventstore.Exact(0), newEvents(1)...); err != nil {
		t.Fatalf("Append through the election = %v", err)
	}
	st, err := p.Status()
	if err != nil || st.Leader < 0 || st.Leader == stopped || st.Nodes[stopped].Running {
		t.Fatalf("Status after the election = %+v, %v; want a new leader, node %d stopped", st, err, stopped)
	}
	if err := p.StartNode(stopped); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Status(); err != nil || !st.Nodes[stopped].Running || st.Nodes[stopped].Leader {
		t.Fatalf("Status after the restart = %+v, %v; want node %d running as a follower", st, err, stopped)
	}
	p.Kill()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, ctx, func() error {
		got, err := s.ReadStream(ctx, stream, 0, 0)
		if err != nil || len(got) != 2 {
			return fmt.Errorf("ReadStream after the restart = %d events, %v; want 2", len(got), err)
		}
		return nil
	})
}

// TestClusterReaderFollowsAnElection: a Store that only reads, connected to
// the leader, goes on reading after the leader stops. Client v4 does not
// reconnect after a read that fails to open (Client-Go#190), so the Store
// replaces the client itself.
func TestClusterReaderFollowsAnElection(t *testing.T) {
	c := kurrentdbtest.NewTestCluster(t, 3, kurrentdbtest.Options{ElectionDelay: 300 * time.Millisecond})
	writer := newStore(t, c.URL())
	reader := newStore(t, c.URL())
	ctx := testContext(t)
	stream := "reader-" + uuid.NewString()
	if _, err := writer.Append(ctx, stream, eventstore.NoStream(), newEvents(1)...); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.ReadAll(ctx, eventstore.Position{}, 10); err != nil {
		t.Fatal(err)
	}
	c.Leader().Stop()
	if _, err := writer.Append(ctx, stream, eventstore.Exact(0), newEvents(1)...); err != nil {
		t.Fatalf("Append through the election = %v", err)
	}
	for i := range 3 {
		if got, err := reader.ReadStream(ctx, stream, 0, 0); err != nil || len(got) != 2 {
			t.Fatalf("read %d after the leader stopped = %d events, %v; want 2", i, len(got), err)
		}
		if _, err := reader.ReadAll(ctx, eventstore.Position{}, 10); err != nil {
			t.Fatalf("ReadAll %d after the leader stopped = %v", i, err)
		}
	}
}
