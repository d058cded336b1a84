package kurrentdbtest

import (
	"time"

	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tfPos is a position in the transaction file (TFPos): commit, then
// prepare.
type tfPos struct{ commit, prepare int64 }

// headOfTF is TFPos.HeadOfTf, the checkpoint of a subscription from the
// start before it has seen anything; firstRecord is TFPos.FirstRecordOfTf.
var (
	headOfTF    = tfPos{-1, -1}
	firstRecord = tfPos{0, 0}
)

func (a tfPos) less(b tfPos) bool { return tfLess(a.commit, a.prepare, b.commit, b.prepare) }

// at is the position of a record, (Pos, Pos): every record is self-committed.
func at(r *record) tfPos { return tfPos{r.Pos, r.Pos} }

// readBatchSize is Enumerator.DefaultReadBatchSize: the page size of a
// subscription's catch-up reads, and the default search window of a
// filtered one.
const readBatchSize = 32

// lastIndexedPosition is IndexCommitter.LastIndexedPosition in view v: the
// log position of the last record v sees, -1 if there is none.
func (d *db) lastIndexedPosition(v view) int64 {
	if v <= 0 {
		return -1
	}
	return d.records[v-1].Pos
}

// allPage is one forward $all read of a subscription's catch-up
// (IndexReadAllResult): the events the filter allows, the position the read
// started at, the position the next read starts at, whether it reached the
// end of the indexed log, and how many events it considered.
type allPage struct {
	events     []*record
	current    tfPos
	next       tfPos
	end        bool
	considered int
}

// readAllPage reads $all forwards from pos as
// AllReader.ReadAllEventsForwardInternal does on self-committed records: up
// to maxCount allowed events among at most window considered ones (every
// event at or after pos, allowed or not), stopping at the end of the indexed
// log. The next read starts after the last considered record, with prepare
// position 0 (nextPos = TFPos(post-position, 0)). A pos inside a record is
// refused (ReadAllResult.InvalidPosition).
func (d *db) readAllPage(v view, pos tfPos, maxCount, window int, f *filter) (allPage, error) {
	if !d.validPosition(pos.commit) {
		return allPage{}, errInvalidPosition
	}
	pg := allPage{current: pos, next: pos}
	last := d.lastIndexedPosition(v)
	nextCommit := pos.commit
	i := d.firstAtOrAfter(nextCommit, 0)
	for len(pg.events) < maxCount && pg.considered < window {
		if nextCommit > last || i >= int(v) {
			pg.end = true
			break
		}
		r := d.records[i]
		i++
		nextCommit = r.end()
		if r.NoData || at(r).less(pos) {
			continue
		}
		pg.considered++
		if f.allowed(r) {
			pg.events = append(pg.events, r)
		}
		pg.next = tfPos{r.end(), 0}
	}
	return pg, nil
}

// allSubscription is one catch-up subscription to $all being served: the
// position of the last event or checkpoint sent on (checkpoint, the
// enumerator's), and the last event and checkpoint the client got, which
// MoveNextAsync keeps from going backwards or repeating.
type allSubscription struct {
	s        *Server
	d        *db
	ss       api.Streams_ReadServer
	f        *filter // nil: unfiltered (Enumerator.AllSubscription)
	asString bool

	checkpoint     tfPos
	lastEvent      *tfPos
	lastCheckpoint *tfPos
}

// subscribeAll serves a catch-up subscription to $all as
// Enumerator.AllSubscription and Enumerator.AllSubscriptionFiltered do: a
// confirmation; then, when the start is before the last indexed record, a
// catch-up in pages from the start (events after it, exclusive; a start
// inside a record fails with InvalidPosition after the confirmation); then
// caught_up and live events. A start at or past the last indexed record
// goes live at once and skips every event at or before it, even one written
// later below a start past the end of the log. A filtered subscription
// sends checkpoints: every multiplier × window considered events during the
// catch-up (the position of the last event sent or the page's start, whose
// prepare position is 0), one when going live, and one at every
// multiplier × window events written while live; a checkpoint that would
// not move forward is not sent.
func (s *Server) subscribeAll(ss api.Streams_ReadServer, o *api.ReadReq_Options_AllOptions, f *filter, asString bool) error {
	s.c.mu.Lock()
	d := s.c.db
	v := s.viewLocked(time.Now())
	confirmed := int(v) // records the node reads later are live events
	last := d.lastIndexedPosition(v)
	checkpoint := headOfTF
	switch p := o.GetAllOption().(type) {
	case *api.ReadReq_Options_AllOptions_Position:
		checkpoint = tfPos{int64(p.Position.GetCommitPosition()), int64(p.Position.GetPreparePosition())}
	case *api.ReadReq_Options_AllOptions_End:
		checkpoint = tfPos{last, last}
	}
	s.c.mu.Unlock()
	if err := ss.Send(&api.ReadResp{Content: &api.ReadResp_Confirmation{Confirmation: &api.ReadResp_SubscriptionConfirmation{
		SubscriptionId: uuid.NewString(),
	}}}); err != nil {
		return err
	}
	sub := &allSubscription{s: s, d: d, ss: ss, f: f, asString: asString, checkpoint: checkpoint}
	if checkpoint.less(tfPos{last, last}) {
		if err := sub.catchUp(); err != nil {
			return err
		}
	}
	return sub.live(confirmed)
}

// interval is a filtered subscription's checkpoint interval in events.
func (sub *allSubscription) interval() int { return sub.f.checkpointEvery }

// catchUp reads the log in pages from the checkpoint to the end of the
// indexed log (AllSubscription.CatchUp, AllSubscriptionFiltered.CatchUp).
func (sub *allSubscription) catchUp() error {
	window := int(^uint(0) >> 1)
	if sub.f != nil {
		window = sub.f.window
	}
	pos := sub.checkpoint
	if pos.commit < 0 && pos.prepare < 0 {
		pos = firstRecord
	}
	counter := 0
	for {
		sub.s.c.mu.Lock()
		if sub.s.c.db != sub.d {
			sub.s.c.mu.Unlock()
			return status.Error(codes.Unavailable, "server restarted")
		}
		pg, err := sub.d.readAllPage(sub.s.viewLocked(time.Now()), pos, readBatchSize, window, sub.f)
		sub.s.c.mu.Unlock()
		if err != nil {
			return err
		}
		for _, r := range pg.events {
			if !sub.checkpoint.less(at(r)) {
				continue
			}
			if err := sub.sendEvent(r); err != nil {
				return err
			}
			sub.checkpoint = at(r)
		}
		if sub.f == nil {
			if pg.end {
				return nil
			}
			pos = pg.next
			continue
		}
		if sub.checkpoint.less(pg.current) && pg.current.less(pg.next) {
			sub.checkpoint = pg.current
		}
		counter += pg.considered
		if pg.end {
			if sub.checkpoint.less(firstRecord) && firstRecord.less(pg.next) {
				sub.checkpoint = firstRecord
			}
			return sub.sendCheckpoint(sub.checkpoint)
		}
		if counter >= sub.interval() {
			counter %= sub.interval()
			if err := sub.sendCheckpoint(sub.checkpoint); err != nil {
				return err
			}
		}
		pos = pg.next
	}
}

// live sends caught_up, then every event indexed from log index from on
// that is after the checkpoint and allowed, and for a filtered subscription
// a checkpoint at every interval-th event written (SubscriptionsService
// counts them all, allowed or not), until the call ends or the server stops
// (AllSubscription.GoLive, AllSubscriptionFiltered.GoLive).
func (sub *allSubscription) live(from int) error {
	if err := sub.ss.Send(&api.ReadResp{Content: &api.ReadResp_CaughtUp_{CaughtUp: &api.ReadResp_CaughtUp{}}}); err != nil {
		return err
	}
	next, counter := from, 0
	for {
		sub.s.c.mu.Lock()
		if sub.s.c.db != sub.d { // restarted under us
			sub.s.c.mu.Unlock()
			return status.Error(codes.Unavailable, "server restarted")
		}
		now := time.Now()
		v := int(sub.s.viewLocked(now))
		batch := append([]*record(nil), sub.d.records[min(next, v):v]...)
		changed, stopped := sub.s.c.changed, sub.s.stopped
		lag := sub.s.nextVisibleLocked(now)
		sub.s.c.mu.Unlock()
		for _, r := range batch {
			next++
			if r.NoData {
				continue
			}
			if sub.checkpoint.less(at(r)) && sub.f.allowed(r) {
				if err := sub.sendEvent(r); err != nil {
					return err
				}
				sub.checkpoint = at(r)
			}
			if sub.f == nil {
				continue
			}
			if counter++; counter >= sub.interval() {
				counter = 0
				if !at(r).less(sub.checkpoint) {
					if err := sub.sendCheckpoint(at(r)); err != nil {
						return err
					}
					sub.checkpoint = at(r)
				}
			}
		}
		if len(batch) > 0 {
			continue
		}
		var replicated <-chan time.Time
		if lag > 0 {
			replicated = time.After(lag)
		}
		select {
		case <-changed:
		case <-replicated:
		case <-stopped:
			return status.Error(codes.Unavailable, "server stopped")
		case <-sub.ss.Context().Done():
			return status.FromContextError(sub.ss.Context().Err()).Err()
		}
	}
}

// sendEvent sends r unless it is not after the last event sent.
func (sub *allSubscription) sendEvent(r *record) error {
	p := at(r)
	if sub.lastEvent != nil && !sub.lastEvent.less(p) {
		return nil
	}
	sub.lastEvent = &p
	return sub.ss.Send(eventResp(r, sub.asString))
}

// sendCheckpoint sends a checkpoint at p unless there is none yet (the head
// of the log) or it is not after the last checkpoint sent.
func (sub *allSubscription) sendCheckpoint(p tfPos) error {
	if p == headOfTF || (sub.lastCheckpoint != nil && !sub.lastCheckpoint.less(p)) {
		return nil
	}
	sub.lastCheckpoint = &p
	return sub.ss.Send(&api.ReadResp{Content: &api.ReadResp_Checkpoint_{Checkpoint: &api.ReadResp_Checkpoint{
		CommitPosition: uint64(p.commit), PreparePosition: uint64(p.prepare),
	}}})
}
