package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/projections/notify"
)

// maxNATSReports bounds the violations reported per kind (missing,
// duplicated, unknown, gap).
const maxNATSReports = 20

// natsMsg is what the check keeps of one message of stream BOOKING.
type natsMsg struct {
	id, stream string
	revision   uint64
	seq        uint64
}

// readNATS reads every message of JetStream stream BOOKING on the server at
// natsURL with an ordered consumer, up to the last sequence the stream had
// when the read began. Each message is keyed by its payload's event id (the
// Nats-Msg-Id header when the payload has none), with Booking-Stream and
// Booking-Revision. It returns an error if the server or stream cannot be
// reached or a message cannot be read within ctx.
func readNATS(ctx context.Context, natsURL string) ([]natsMsg, error) {
	nc, err := nats.Connect(natsURL, nats.Name("booking audit"), nats.Timeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, notify.StreamName)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", notify.StreamName, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", notify.StreamName, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("consumer on %s: %w", notify.StreamName, err)
	}
	var out []natsMsg
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return out, fmt.Errorf("fetch from %s: %w", notify.StreamName, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return out, err
			}
			h := m.Headers()
			var p notify.Payload
			_ = json.Unmarshal(m.Data(), &p)
			id := p.ID
			if id == "" {
				id = h.Get(notify.HeaderMsgID)
			}
			rev, _ := strconv.ParseUint(h.Get(notify.HeaderRevision), 10, 64)
			out = append(out, natsMsg{id: id, stream: h.Get(notify.HeaderStream), revision: rev, seq: md.Sequence.Stream})
			if md.Sequence.Stream >= last {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return out, fmt.Errorf("fetch from %s: %w", notify.StreamName, err)
		}
		if n == 0 && ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
}

// checkNATS compares the stream with the log's publishable events.
func checkNATS(ctx context.Context, natsURL string, events []eventstore.RecordedEvent, rep *Report, row *Row, violate func(Rule, string, ...any)) {
	msgs, err := readNATS(ctx, natsURL)
	if err != nil {
		violate(NATS, "read stream %s: %v", notify.StreamName, err)
		return
	}
	rep.Messages = len(msgs)
	want := map[string]eventstore.RecordedEvent{}
	var order []string
	for _, e := range events {
		if _, ok, _ := notify.Subject(e.Stream, e.Type); ok {
			want[e.ID] = e
			order = append(order, e.ID)
		}
	}
	rep.Published = len(order)
	row.Checked = len(order)
	seen := map[string]int{}
	revs := map[string][]uint64{}
	var unknown []string
	for _, m := range msgs {
		seen[m.id]++
		if _, ok := want[m.id]; !ok {
			unknown = append(unknown, fmt.Sprintf("message %d (%s@%d, id %q) names no publishable event of the log", m.seq, m.stream, m.revision, m.id))
			continue
		}
		if seen[m.id] == 1 {
			revs[m.stream] = append(revs[m.stream], m.revision)
		}
	}
	var missing, dup []string
	for _, id := range order {
		e := want[id]
		switch n := seen[id]; {
		case n == 0:
			missing = append(missing, fmt.Sprintf("event %s (%s@%d, %s) missing from the stream", id, e.Stream, e.Revision, e.Type))
		case n > 1:
			dup = append(dup, fmt.Sprintf("event %s (%s@%d, %s) in the stream %d times", id, e.Stream, e.Revision, e.Type, n))
		}
	}
	var gaps []string
	streams := make([]string, 0, len(revs))
	for s := range revs {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	first := map[string]uint64{}
	for _, id := range order {
		e := want[id]
		if r, ok := first[e.Stream]; !ok || e.Revision < r {
			first[e.Stream] = e.Revision
		}
	}
	for _, s := range streams {
		rs := revs[s]
		sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
		next := first[s]
		for _, r := range rs {
			if r == next+1 {
				gaps = append(gaps, fmt.Sprintf("%s: revision %d missing from the stream", s, next))
			} else if r > next {
				gaps = append(gaps, fmt.Sprintf("%s: revisions %d to %d missing from the stream", s, next, r-1))
			}
			next = r + 1
		}
	}
	for _, list := range [][]string{missing, dup, unknown, gaps} {
		for i, v := range list {
			if i == maxNATSReports {
				violate(NATS, "… and %d more like: %s", len(list)-maxNATSReports, v)
				break
			}
			violate(NATS, "%s", v)
		}
	}
}
