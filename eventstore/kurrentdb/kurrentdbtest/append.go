package kurrentdbtest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// streamsService implements the gRPC Streams service on a Server.
type streamsService struct {
	api.UnimplementedStreamsServer
	s *Server
}

// decision is IndexWriter.CheckCommit's verdict on a write.
type decision int

const (
	decOK decision = iota
	decFailed
	decCorrupted
	decIdempotent
	decNotReady
)

// commitCheck is the result of checkCommit (CommitCheckResult).
type commitCheck struct {
	decision    decision
	cur         int64 // the stream's last event number as the writer sees it
	end         int64 // for a repeat: the event number of its last event
	softDeleted bool
}

// checkCommit decides whether a write of ids to stream at expected can
// commit, is a repeat, or fails, ported from IndexWriter.CheckCommit. Strong
// idempotency (an expected version below the stream's) checks every id at
// its place through the cache or the index; weak idempotency (Any,
// StreamExists) only through the bounded cache.
func (d *db) checkCommit(stream string, expected int64, ids []uuid.UUID) commitCheck {
	cur := d.lastNumber(stream, writerView)
	ok := func(softDeleted bool) commitCheck {
		return commitCheck{decision: decOK, cur: cur, softDeleted: softDeleted}
	}
	fail := commitCheck{decision: decFailed, cur: cur}
	if cur == deletedStream {
		if len(ids) > 0 {
			return fail
		}
		if expected == evAny || expected == evNoStream || expected == deletedStream {
			return ok(false)
		}
		return fail
	}
	if expected == evStreamExists {
		if d.softDeleted(stream, writerView) {
			// RequestManagerBase.Handle(ConsistencyChecksFailed) answers
			// StreamDeleted for this one (IsSoftDeleted with StreamExists).
			return commitCheck{decision: decFailed, cur: cur, softDeleted: true}
		}
		if cur < 0 && d.lastNumber(metastreamPrefix+stream, writerView) < 0 {
			return fail
		}
	}
	if expected == evAny || expected == evStreamExists {
		end := int64(-1)
		for i, id := range ids {
			info, found := d.cache.get(id)
			if !found || info.stream != stream {
				if i == 0 {
					return ok(d.softDeleted(stream, writerView))
				}
				return commitCheck{decision: decCorrupted, cur: cur}
			}
			end = info.number
		}
		if len(ids) == 0 {
			return ok(d.softDeleted(stream, writerView))
		}
		return d.repeat(stream, cur, end)
	}
	if expected < cur {
		n := expected
		for i, id := range ids {
			n++
			if info, found := d.cache.get(id); found && info.stream == stream && info.number == n {
				continue
			}
			if r := d.eventAt(stream, n, d.committed()); r != nil && r.ID == id {
				continue
			}
			if i > 0 {
				return commitCheck{decision: decCorrupted, cur: cur}
			}
			if expected == evNoStream && d.softDeleted(stream, writerView) {
				return ok(true)
			}
			return fail
		}
		if len(ids) == 0 {
			if expected == evNoStream && d.softDeleted(stream, writerView) {
				return ok(true)
			}
			return fail
		}
		return d.repeat(stream, cur, n)
	}
	if expected > cur {
		return fail
	}
	return ok(d.softDeleted(stream, writerView))
}

// deleted reports whether a failed check is answered StreamDeleted rather
// than WrongExpectedVersion (RequestManagerBase.Handle(ConsistencyChecksFailed)):
// the stream is tombstoned, or soft-deleted and expected to exist.
func (cc commitCheck) deleted(expected int64) bool {
	return cc.decision == decFailed && (cc.cur == deletedStream || (expected == evStreamExists && cc.softDeleted))
}

// repeat classifies a write whose events are all written already, the last
// at event number end: Idempotent once the index has it, IdempotentNotReady
// before.
func (d *db) repeat(stream string, cur, end int64) commitCheck {
	if d.lastNumber(stream, d.committed()) >= end {
		return commitCheck{decision: decIdempotent, cur: cur, end: end}
	}
	return commitCheck{decision: decNotReady, cur: cur, end: end}
}

// proposed is an event of an append request.
type proposed struct {
	id   uuid.UUID
	typ  string
	json bool
	data []byte
	meta []byte
}

// Append implements the Streams.Append RPC (Streams.Append.cs): an options
// message, then one message per event.
func (svc *streamsService) Append(ss api.Streams_AppendServer) error {
	first, err := ss.Recv()
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return status.Error(codes.Unknown, "Exception was thrown by handler. InvalidOperationException: Operation is not valid due to the current state of the object.")
	}
	stream := string(opts.GetStreamIdentifier().GetStreamName())
	expected, err := expectedVersion(opts.GetExpectedStreamRevision())
	if err != nil {
		return err
	}
	var (
		events []proposed
		size   int
	)
	for {
		msg, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		pm := msg.GetProposedMessage()
		if pm == nil {
			return status.Error(codes.Unknown, "Exception was thrown by handler. InvalidOperationException: Operation is not valid due to the current state of the object.")
		}
		typ, ok := pm.GetMetadata()["type"]
		if !ok {
			return missingMetadata(ss, "type")
		}
		contentType, ok := pm.GetMetadata()["content-type"]
		if !ok {
			return missingMetadata(ss, "content-type")
		}
		id, err := uuidFromProto(pm.GetId())
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "invalid event id: %v", err)
		}
		// Event.SizeOnDisk: data, metadata and the type as UTF-16.
		eventSize := 2*utf16Len(typ) + len(pm.GetData()) + len(pm.GetCustomMetadata())
		if limit := svc.s.c.opts.MaxAppendEventSize; limit > 0 && eventSize > limit {
			ss.SetTrailer(metadata.Pairs("exception", "maximum-append-event-size-exceeded", "maximum-append-event-size", strconv.Itoa(limit),
				"event-id", id.String(), "proposed-append-event-size", strconv.Itoa(eventSize)))
			return status.Errorf(codes.InvalidArgument, "Event with Id: %s, Size: %d, exceeds Maximum Append Event Size of %d.", id, eventSize, limit)
		}
		size += eventSize
		if size > svc.s.c.opts.MaxAppendSize {
			ss.SetTrailer(metadata.Pairs("exception", "maximum-append-size-exceeded", "maximum-append-size", strconv.Itoa(svc.s.c.opts.MaxAppendSize)))
			return status.Errorf(codes.InvalidArgument, "Maximum Append Size of %d Exceeded.", svc.s.c.opts.MaxAppendSize)
		}
		events = append(events, proposed{
			id: id, typ: typ, json: contentType == "application/json",
			data: pm.GetData(), meta: pm.GetCustomMetadata(),
		})
	}
	if stream == "" {
		return status.Error(codes.InvalidArgument, "'streamName' is a required argument")
	}
	if err := svc.s.admitWrite(ss.Context(), ss.SetTrailer); err != nil {
		return err
	}
	resp, err := svc.s.write(ss.Context(), stream, expected, events, ss.SetTrailer)
	if err != nil {
		return err
	}
	return ss.SendAndClose(resp)
}

// expectedVersion converts an append's expected revision to KurrentDB's
// expected version.
func expectedVersion(e any) (int64, error) {
	switch e := e.(type) {
	case *api.AppendReq_Options_Revision:
		return int64(e.Revision), nil
	case *api.AppendReq_Options_NoStream:
		return evNoStream, nil
	case *api.AppendReq_Options_Any:
		return evAny, nil
	case *api.AppendReq_Options_StreamExists:
		return evStreamExists, nil
	}
	return 0, status.Errorf(codes.InvalidArgument, "'%v' is not a valid expected stream revision", e)
}

func missingMetadata(ss grpc.ServerStream, key string) error {
	ss.SetTrailer(metadata.Pairs("exception", "missing-required-metadata-property", "required-metadata-properties", "type,content-type"))
	return status.Errorf(codes.InvalidArgument, "Required Metadata Property '%s' is missing", key)
}

func streamDeletedError(setTrailer func(metadata.MD), stream string) error {
	setTrailer(metadata.Pairs("exception", "stream-deleted", "stream-name", stream))
	return status.Errorf(codes.FailedPrecondition, "Event stream '%s' is deleted.", stream)
}

// write checks and performs one append (StorageWriterService.WritePrepares
// after IndexWriter.CheckCommit) and builds its reply.
func (s *Server) write(ctx context.Context, stream string, expected int64, events []proposed, setTrailer func(metadata.MD)) (*api.AppendResp, error) {
	ids := make([]uuid.UUID, len(events))
	for i, e := range events {
		ids[i] = e.id
	}
	s.c.mu.Lock()
	now := s.c.opts.Now()
	cc := s.c.db.checkCommit(stream, expected, ids)
	switch cc.decision {
	case decFailed, decCorrupted:
		s.c.mu.Unlock()
		if cc.deleted(expected) {
			return nil, streamDeletedError(setTrailer, stream)
		}
		return wrongExpectedVersion(expected, cc.cur), nil
	case decIdempotent:
		resp := success(cc.end, s.c.db.readEvent(stream, cc.end, s.c.db.committed(), now))
		s.c.mu.Unlock()
		return resp, nil
	case decNotReady:
		// The original write is not replicated yet: drop this one and let
		// the client time out and retry.
		if h := s.c.hold; h != nil {
			h.dropped++
			if h.releaseAfterDropped > 0 && h.dropped >= h.releaseAfterDropped {
				s.c.releaseLocked()
			}
		}
		s.c.mu.Unlock()
		return nil, s.dropWrite(ctx)
	}
	last, lastIdx, err := s.commitLocked(stream, cc, events, now)
	if err != nil {
		s.c.mu.Unlock()
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.c.mu.Unlock()
	if err := s.waitIndexed(ctx, lastIdx); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		resp := success(cc.cur, nil)
		resp.GetSuccess().PositionOption = &api.AppendResp_Success_Position{Position: &api.AppendResp_Position{
			CommitPosition: uint64(last.Pos), PreparePosition: uint64(last.Pos),
		}}
		return resp, nil
	}
	return success(last.Number, last), nil
}

// commitLocked writes events after a decOK check: one self-committed prepare
// per event (an empty prepare for zero events), then the soft undelete that
// writing to a soft-deleted stream, or to the metastream of one, implies
// (StorageWriterService.SoftUndeleteStream, SoftUndeleteMetastream). It
// returns the last record written for the events and its log index.
func (s *Server) commitLocked(stream string, cc commitCheck, events []proposed, now time.Time) (*record, int, error) {
	d := s.c.db
	index := s.c.hold == nil
	created := ticks(now)
	metaOfSoftDeleted := strings.HasPrefix(stream, metastreamPrefix) &&
		d.softDeleted(strings.TrimPrefix(stream, metastreamPrefix), writerView)
	var (
		last    *record
		lastIdx int
	)
	if len(events) == 0 {
		last = &record{Stream: stream, Number: cc.cur, ID: uuid.New(), Created: created, NoData: true}
		i, err := d.add(last, index)
		if err != nil {
			return nil, 0, err
		}
		lastIdx = i
	}
	for i, e := range events {
		r := &record{
			Stream: stream, Number: cc.cur + 1 + int64(i), ID: e.id, Type: e.typ, JSON: e.json,
			Data: e.data, Meta: e.meta, Created: created,
		}
		idx, err := d.add(r, index)
		if err != nil {
			return nil, 0, err
		}
		d.cache.put(e.id, idInfo{stream: stream, number: r.Number})
		last, lastIdx = r, idx
	}
	if cc.softDeleted {
		if err := s.softUndeleteLocked(stream, cc.cur+1, now); err != nil {
			return nil, 0, err
		}
	}
	if metaOfSoftDeleted {
		original := strings.TrimPrefix(stream, metastreamPrefix)
		if err := s.softUndeleteLocked(original, d.lastNumber(original, writerView)+1, now); err != nil {
			return nil, 0, err
		}
	}
	if index {
		s.c.notifyLocked()
	}
	return last, lastIdx, nil
}

// softUndeleteLocked rewrites the last metadata of stream with $tb set to
// from, keeping its other keys (StorageWriterService.SoftUndeleteRawMeta);
// metadata that is not a JSON object is left alone.
func (s *Server) softUndeleteLocked(stream string, from int64, now time.Time) error {
	d := s.c.db
	meta := metastreamPrefix + stream
	metaLast := d.lastNumber(meta, writerView)
	var raw map[string]json.RawMessage
	if r := d.eventAt(meta, metaLast, writerView); r != nil {
		if err := json.Unmarshal(r.Data, &raw); err != nil || raw == nil {
			return nil
		}
	} else {
		return nil
	}
	raw["$tb"] = json.RawMessage(strconv.FormatInt(from, 10))
	data, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	r := &record{
		Stream: meta, Number: metaLast + 1, ID: uuid.New(), Type: typeStreamMetadata, JSON: true,
		Data: data, Created: ticks(now),
	}
	if _, err := d.add(r, s.c.hold == nil); err != nil {
		return err
	}
	d.cache.put(r.ID, idInfo{stream: meta, number: r.Number})
	return nil
}

// success builds a successful append reply: the stream's revision after the
// write and the position of r, or no position when r is nil (the event can
// no longer be read, as KurrentDB answers a repeat whose events $tb hides).
func success(revision int64, r *record) *api.AppendResp {
	ok := &api.AppendResp_Success{}
	if revision < 0 {
		ok.CurrentRevisionOption = &api.AppendResp_Success_NoStream{NoStream: &shared.Empty{}}
	} else {
		ok.CurrentRevisionOption = &api.AppendResp_Success_CurrentRevision{CurrentRevision: uint64(revision)}
	}
	if r == nil {
		ok.PositionOption = &api.AppendResp_Success_NoPosition{NoPosition: &shared.Empty{}}
	} else {
		ok.PositionOption = &api.AppendResp_Success_Position{Position: &api.AppendResp_Position{
			CommitPosition: uint64(r.Pos), PreparePosition: uint64(r.Pos),
		}}
	}
	return &api.AppendResp{Result: &api.AppendResp_Success_{Success: ok}}
}

// wrongExpectedVersion builds the WrongExpectedVersion reply with both the
// current and the 20.6.0 fields filled, carrying the stream's current
// revision, never the expected one (Streams.Append.cs).
func wrongExpectedVersion(expected, cur int64) *api.AppendResp {
	w := &api.AppendResp_WrongExpectedVersion{}
	switch expected {
	case evAny:
		w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedAny{ExpectedAny: &shared.Empty{}}
		w.ExpectedRevisionOption_20_6_0 = &api.AppendResp_WrongExpectedVersion_Any_20_6_0{Any_20_6_0: &shared.Empty{}}
	case evStreamExists:
		w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: &shared.Empty{}}
		w.ExpectedRevisionOption_20_6_0 = &api.AppendResp_WrongExpectedVersion_StreamExists_20_6_0{StreamExists_20_6_0: &shared.Empty{}}
	case evNoStream:
		w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: &shared.Empty{}}
		w.ExpectedRevisionOption_20_6_0 = &api.AppendResp_WrongExpectedVersion_ExpectedRevision_20_6_0{ExpectedRevision_20_6_0: ^uint64(0)}
	default:
		w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedRevision{ExpectedRevision: uint64(expected)}
		w.ExpectedRevisionOption_20_6_0 = &api.AppendResp_WrongExpectedVersion_ExpectedRevision_20_6_0{ExpectedRevision_20_6_0: uint64(expected)}
	}
	if cur == evNoStream {
		w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
		w.CurrentRevisionOption_20_6_0 = &api.AppendResp_WrongExpectedVersion_NoStream_20_6_0{NoStream_20_6_0: &shared.Empty{}}
	} else {
		w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(cur)}
		w.CurrentRevisionOption_20_6_0 = &api.AppendResp_WrongExpectedVersion_CurrentRevision_20_6_0{CurrentRevision_20_6_0: uint64(cur)}
	}
	return &api.AppendResp{Result: &api.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: w}}
}

// Delete implements Streams.Delete, a soft delete: after the expected
// revision check it writes {"$tb": long.MaxValue} as the stream's metadata
// (StorageWriterService, WriteDelete without HardDelete).
func (svc *streamsService) Delete(ctx context.Context, req *api.DeleteReq) (*api.DeleteResp, error) {
	o := req.GetOptions()
	pos, err := svc.deleteStream(ctx, o.GetStreamIdentifier(), o.GetExpectedStreamRevision(), false)
	if err != nil {
		return nil, err
	}
	return &api.DeleteResp{PositionOption: &api.DeleteResp_Position_{Position: &api.DeleteResp_Position{CommitPosition: pos, PreparePosition: pos}}}, nil
}

// Tombstone implements Streams.Tombstone, a hard delete: after the expected
// revision check it writes a $streamDeleted tombstone at event number
// long.MaxValue; the stream can never be written or read again.
func (svc *streamsService) Tombstone(ctx context.Context, req *api.TombstoneReq) (*api.TombstoneResp, error) {
	o := req.GetOptions()
	pos, err := svc.deleteStream(ctx, o.GetStreamIdentifier(), o.GetExpectedStreamRevision(), true)
	if err != nil {
		return nil, err
	}
	return &api.TombstoneResp{PositionOption: &api.TombstoneResp_Position_{Position: &api.TombstoneResp_Position{CommitPosition: pos, PreparePosition: pos}}}, nil
}

// deleteStream is Delete (hard false) and Tombstone (hard true) after the
// request is unpacked: the expected revision check, then the delete of the
// stream id names. It returns the log position of the record written.
func (svc *streamsService) deleteStream(ctx context.Context, id *shared.StreamIdentifier, expected any, hard bool) (uint64, error) {
	exp, err := deleteExpected(expected)
	if err != nil {
		return 0, err
	}
	r, err := svc.s.delete(ctx, string(id.GetStreamName()), exp, hard)
	if err != nil {
		return 0, err
	}
	return uint64(r.Pos), nil
}

func deleteExpected(e any) (int64, error) {
	switch e := e.(type) {
	case *api.DeleteReq_Options_Revision:
		return int64(e.Revision), nil
	case *api.TombstoneReq_Options_Revision:
		return int64(e.Revision), nil
	case *api.DeleteReq_Options_NoStream, *api.TombstoneReq_Options_NoStream:
		return evNoStream, nil
	case *api.DeleteReq_Options_Any, *api.TombstoneReq_Options_Any:
		return evAny, nil
	case *api.DeleteReq_Options_StreamExists, *api.TombstoneReq_Options_StreamExists:
		return evStreamExists, nil
	}
	return 0, status.Errorf(codes.InvalidArgument, "'%v' is not a valid expected stream revision", e)
}

func (s *Server) delete(ctx context.Context, stream string, expected int64, hard bool) (*record, error) {
	setTrailer := func(md metadata.MD) { grpc.SetTrailer(ctx, md) } //nolint:errcheck // best effort, as in a handler
	op := "Delete"
	if hard {
		op = "Tombstone"
	}
	if err := s.admitWrite(ctx, setTrailer); err != nil {
		return nil, err
	}
	wev := func(cur int64) error {
		setTrailer(metadata.Pairs("exception", "wrong-expected-version", "stream-name", stream,
			"expected-version", strconv.FormatInt(expected, 10), "actual-version", strconv.FormatInt(cur, 10)))
		return status.Errorf(codes.FailedPrecondition, "%s failed due to WrongExpectedVersion. Stream: %s, Expected version: %d, Actual version: %d", op, stream, expected, cur)
	}
	s.c.mu.Lock()
	d := s.c.db
	now := s.c.opts.Now()
	cc := d.checkCommit(stream, expected, []uuid.UUID{uuid.New()})
	if cc.decision != decOK {
		s.c.mu.Unlock()
		if cc.deleted(expected) {
			return nil, streamDeletedError(setTrailer, stream)
		}
		return nil, wev(cc.cur)
	}
	r := &record{Stream: stream, Number: deletedStream, ID: uuid.New(), Type: typeStreamDeleted, Created: ticks(now)}
	if !hard {
		meta := metastreamPrefix + stream
		metaLast := d.lastNumber(meta, writerView)
		if d.lastNumber(stream, writerView) < 0 && metaLast < 0 {
			s.c.mu.Unlock()
			return nil, wev(evNoStream)
		}
		r = &record{
			Stream: meta, Number: metaLast + 1, ID: uuid.New(), Type: typeStreamMetadata, JSON: true,
			Data: fmt.Appendf(nil, `{"$tb":%d}`, deletedStream), Created: ticks(now),
		}
	}
	idx, err := d.add(r, s.c.hold == nil)
	if err != nil {
		s.c.mu.Unlock()
		return nil, status.Error(codes.Internal, err.Error())
	}
	if s.c.hold == nil {
		s.c.notifyLocked()
	}
	s.c.mu.Unlock()
	if err := s.waitIndexed(ctx, idx); err != nil {
		return nil, err
	}
	return r, nil
}

// uuidFromProto reads an event id in either form the protocol allows.
func uuidFromProto(id *shared.UUID) (uuid.UUID, error) {
	if st := id.GetStructured(); st != nil {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(st.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(b[8:], uint64(st.GetLeastSignificantBits()))
		return uuid.UUID(b), nil
	}
	if s := id.GetString_(); s != "" {
		return uuid.Parse(s)
	}
	return uuid.Nil, errors.New("missing id")
}

// uuidToProto writes an event id in the form the read asked for.
func uuidToProto(id uuid.UUID, asString bool) *shared.UUID {
	if asString {
		return &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}}
	}
	return &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{
		MostSignificantBits:  int64(binary.BigEndian.Uint64(id[:8])),
		LeastSignificantBits: int64(binary.BigEndian.Uint64(id[8:])),
	}}}
}

// utf16Len returns the length of s in UTF-16 code units, as .NET's
// string.Length counts it.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}
