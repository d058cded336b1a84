package kurrentdbtest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// filter is an $all read or subscription filter (EventFilter): a stream-name
// or event-type regex or prefix set, applied after the default $all filter.
// A nil *filter is the default $all filter alone.
type filter struct {
	byType   bool
	regex    *regexp.Regexp
	prefixes []string
	// window and checkpointEvery are the search window and the checkpoint
	// interval in considered events (multiplier × window) of a filtered
	// subscription.
	window          int
	checkpointEvery int
}

// defaultAllowed is EventFilter.DefaultAllFilter: every event of a
// non-system stream, and every system event except the epoch records and
// the checkpoints and parked messages of persistent subscriptions to $all.
func defaultAllowed(r *record) bool {
	s := r.Stream
	switch {
	case !strings.HasPrefix(s, "$"):
		return true
	case s == epochInformation:
		return false
	case strings.HasPrefix(s, "$persistentsubscription-$all::") &&
		(strings.HasSuffix(s, "-checkpoint") || strings.HasSuffix(s, "-parked")):
		return false
	}
	return true
}

func (f *filter) allowed(r *record) bool {
	if r.NoData || !defaultAllowed(r) {
		return false
	}
	if f == nil {
		return true
	}
	subject := r.Stream
	if f.byType {
		subject = r.Type
	}
	if f.regex != nil {
		return f.regex.MatchString(subject)
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

// newFilter converts a read's filter option, with KurrentDB's defaults: a
// search window of 32 (ReadBatchSize) when it is "count", and the regex
// taking precedence over prefixes.
func newFilter(o *api.ReadReq_Options_FilterOptions) (*filter, error) {
	f := &filter{window: 32}
	var expr *api.ReadReq_Options_FilterOptions_Expression
	switch x := o.GetFilter().(type) {
	case *api.ReadReq_Options_FilterOptions_StreamIdentifier:
		expr = x.StreamIdentifier
	case *api.ReadReq_Options_FilterOptions_EventType:
		expr, f.byType = x.EventType, true
	default:
		return nil, status.Errorf(codes.InvalidArgument, "'%v' is not a valid filter", o.GetFilter())
	}
	if re := expr.GetRegex(); re != "" {
		compiled, err := regexp.Compile(re)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "invalid filter regex %q: %v", re, err)
		}
		f.regex = compiled
	} else {
		f.prefixes = expr.GetPrefix()
	}
	if m, ok := o.GetWindow().(*api.ReadReq_Options_FilterOptions_Max); ok {
		f.window = int(m.Max)
	}
	if o.GetCheckpointIntervalMultiplier() == 0 {
		return nil, status.Error(codes.InvalidArgument, "checkpointIntervalMultiplier must not be zero")
	}
	f.checkpointEvery = max(1, int(o.GetCheckpointIntervalMultiplier())*f.window)
	return f, nil
}

// Read implements the Streams.Read RPC (Streams.Read.cs CreateEnumerator):
// stream reads forwards and backwards, $all reads with or without a filter,
// and catch-up subscriptions to $all.
func (svc *streamsService) Read(req *api.ReadReq, ss api.Streams_ReadServer) error {
	o := req.GetOptions()
	if o.GetUuidOption() == nil {
		return status.Error(codes.InvalidArgument, "'uuidOption' is a required argument of type UUIDOption")
	}
	if err := svc.s.admitRead(ss.Context(), ss.SetTrailer); err != nil {
		return err
	}
	asString := o.GetUuidOption().GetString_() != nil
	var f *filter
	if fo, ok := o.GetFilterOption().(*api.ReadReq_Options_Filter); ok {
		var err error
		if f, err = newFilter(fo.Filter); err != nil {
			return err
		}
	}
	backwards := o.GetReadDirection() == api.ReadReq_Options_Backwards
	count, isCount := o.GetCountOption().(*api.ReadReq_Options_Count)
	if isCount && svc.s.takeUnexpected() {
		if err := ss.Send(&api.ReadResp{Content: &api.ReadResp_Checkpoint_{Checkpoint: &api.ReadResp_Checkpoint{}}}); err != nil {
			return err
		}
	}
	switch so := o.GetStreamOption().(type) {
	case *api.ReadReq_Options_Stream:
		if !isCount || f != nil {
			break
		}
		return svc.s.readStream(ss, so.Stream, backwards, count.Count, asString)
	case *api.ReadReq_Options_All:
		if isCount {
			return svc.s.readAll(ss, so.All, backwards, count.Count, f, asString)
		}
		if !backwards {
			return svc.s.subscribeAll(ss, so.All, f, asString)
		}
	}
	return status.Errorf(codes.InvalidArgument, "The combination of (%T, %T, %v, %T) is invalid.",
		o.GetStreamOption(), o.GetCountOption(), o.GetReadDirection(), o.GetFilterOption())
}

// readStream reads a stream forwards or backwards
// (IndexReader.ReadStreamEventsForward/BackwardInternal, paged by the
// ReadStreamForwards/Backwards enumerators until count events).
func (s *Server) readStream(ss api.Streams_ReadServer, o *api.ReadReq_Options_StreamOptions, backwards bool, count uint64, asString bool) error {
	stream := string(o.GetStreamIdentifier().GetStreamName())
	if stream == "" {
		return status.Error(codes.InvalidArgument, "'streamName' is a required argument")
	}
	if count == 0 {
		// Ensure.Positive(maxCount) throws in the reader.
		return status.Error(codes.Unknown, "Unexpected ReadStreamResult: Error")
	}
	s.c.mu.Lock()
	d := s.c.db
	now := s.c.opts.Now()
	v := s.viewLocked(time.Now())
	last := d.lastNumber(stream, v)
	m := d.metadataOf(stream, v)
	if last == deletedStream {
		s.c.mu.Unlock()
		return streamDeletedError(ss.SetTrailer, stream)
	}
	if last == evNoStream || (m.tb != nil && *m.tb == deletedStream) {
		s.c.mu.Unlock()
		return ss.Send(&api.ReadResp{Content: &api.ReadResp_StreamNotFound_{StreamNotFound: &api.ReadResp_StreamNotFound{
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(stream)},
		}}})
	}
	low := minNumber(m, last)
	var out []*record
	if backwards {
		from := last
		if r, ok := o.GetRevisionOption().(*api.ReadReq_Options_StreamOptions_Revision); ok {
			from = min(int64(min(r.Revision, uint64(deletedStream))), last)
		}
		for n := from; n >= low && uint64(len(out)) < count; n-- {
			if r := d.eventAt(stream, n, v); r != nil && !expired(m, r, now) {
				out = append(out, r)
			}
		}
	} else {
		from := int64(0)
		switch r := o.GetRevisionOption().(type) {
		case *api.ReadReq_Options_StreamOptions_Revision:
			from = int64(min(r.Revision, uint64(deletedStream)))
		case *api.ReadReq_Options_StreamOptions_End:
			from = last + 1
		}
		for n := max(from, low); n <= last && uint64(len(out)) < count; n++ {
			if r := d.eventAt(stream, n, v); r != nil && !expired(m, r, now) {
				out = append(out, r)
			}
		}
	}
	s.c.mu.Unlock()
	for _, r := range out {
		if err := ss.Send(eventResp(r, asString)); err != nil {
			return err
		}
	}
	return nil
}

// readAll reads $all forwards from a position (inclusive) or backwards from
// one (exclusive: records that end at or before it), only indexed records,
// through the filter (AllReader.ReadAllEventsForward/BackwardInternal).
func (s *Server) readAll(ss api.Streams_ReadServer, o *api.ReadReq_Options_AllOptions, backwards bool, count uint64, f *filter, asString bool) error {
	if count == 0 {
		return status.Error(codes.Unknown, "Unexpected ReadAllResult: Error")
	}
	s.c.mu.Lock()
	d := s.c.db
	v := s.viewLocked(time.Now())
	var out []*record
	switch p := o.GetAllOption().(type) {
	case *api.ReadReq_Options_AllOptions_Position:
		commit, prepare := int64(p.Position.GetCommitPosition()), int64(p.Position.GetPreparePosition())
		if !d.validPosition(commit) {
			s.c.mu.Unlock()
			return errInvalidPosition
		}
		if backwards {
			out = d.scanBackwards(v, d.firstAtOrAfter(commit, prepare)+1, commit, prepare, count, f)
		} else {
			out = d.scanForwards(v, d.firstAtOrAfter(commit, prepare), count, f)
		}
	case *api.ReadReq_Options_AllOptions_End:
		if !backwards {
			break
		}
		out = d.scanBackwards(v, int(v), d.end, d.end, count, f)
	default: // Start
		if backwards {
			break
		}
		out = d.scanForwards(v, 0, count, f)
	}
	s.c.mu.Unlock()
	for _, r := range out {
		if err := ss.Send(eventResp(r, asString)); err != nil {
			return err
		}
	}
	return nil
}

var errInvalidPosition = status.Error(codes.InvalidArgument, "Trying to read from an invalid position.")

// scanForwards returns up to count records of v from log index i on that f
// allows.
func (d *db) scanForwards(v view, i int, count uint64, f *filter) []*record {
	var out []*record
	for ; i < int(v) && uint64(len(out)) < count; i++ {
		if r := d.records[i]; f.allowed(r) {
			out = append(out, r)
		}
	}
	return out
}

// scanBackwards returns up to count records of v below log index i, in
// descending order, whose post-position is at or before (commit, prepare),
// that f allows.
func (d *db) scanBackwards(v view, i int, commit, prepare int64, count uint64, f *filter) []*record {
	var out []*record
	for i = min(i, int(v)) - 1; i >= 0 && uint64(len(out)) < count; i-- {
		r := d.records[i]
		if tfLess(commit, prepare, r.end(), r.end()) {
			continue
		}
		if f.allowed(r) {
			out = append(out, r)
		}
	}
	return out
}

// eventResp converts a record as ResponseConverter.ConvertToReadEvent does:
// the system metadata type, created (ticks since the Unix epoch) and
// content-type, the data and custom metadata as written, and the record's
// position (Pos, Pos), which stream reads carry too (KurrentDB 22.6+).
func eventResp(r *record, asString bool) *api.ReadResp {
	contentType := "application/octet-stream"
	if r.JSON {
		contentType = "application/json"
	}
	data, meta := r.Data, r.Meta
	if data == nil {
		data = []byte{}
	}
	if meta == nil {
		meta = []byte{}
	}
	return &api.ReadResp{Content: &api.ReadResp_Event{Event: &api.ReadResp_ReadEvent{
		Event: &api.ReadResp_ReadEvent_RecordedEvent{
			Id:               uuidToProto(r.ID, asString),
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(r.Stream)},
			StreamRevision:   uint64(r.Number),
			PreparePosition:  uint64(r.Pos),
			CommitPosition:   uint64(r.Pos),
			Metadata: map[string]string{
				"type":         r.Type,
				"created":      strconv.FormatInt(r.Created, 10),
				"content-type": contentType,
			},
			CustomMetadata: meta,
			Data:           data,
		},
		Position: &api.ReadResp_ReadEvent_CommitPosition{CommitPosition: uint64(r.Pos)},
	}}}
}

// String describes the filter for errors and logs.
func (f *filter) String() string {
	if f == nil {
		return "default $all filter"
	}
	what := "stream"
	if f.byType {
		what = "event type"
	}
	if f.regex != nil {
		return fmt.Sprintf("%s regex %s", what, f.regex)
	}
	return fmt.Sprintf("%s prefixes %v", what, f.prefixes)
}
