package kurrentdbtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Event numbers and expected versions as KurrentDB encodes them
// (KurrentDB.Core.Data.ExpectedVersion, EventNumber).
const (
	evNoStream     int64 = -1
	evAny          int64 = -2
	evStreamExists int64 = -4
	// deletedStream is EventNumber.DeletedStream (long.MaxValue): the event
	// number of a tombstone, and the $tb of a soft-deleted stream.
	deletedStream int64 = math.MaxInt64
)

// System stream and event type names the double writes or honours
// (KurrentDB.Core.Services.SystemStreams, SystemEventTypes).
const (
	metastreamPrefix     = "$$"
	typeStreamMetadata   = "$metadata"
	typeStreamDeleted    = "$streamDeleted"
	epochInformation     = "$epoch-information"
	typeEpochInformation = "$epoch-information"
)

// record is one prepare record of the transaction file. Every record the
// gRPC API writes is self-committed, so its log position is (Pos, Pos).
type record struct {
	Pos     int64     `json:"pos"`
	Size    int64     `json:"size"`
	Stream  string    `json:"stream"`
	Number  int64     `json:"number"`
	ID      uuid.UUID `json:"id"`
	Type    string    `json:"type"`
	JSON    bool      `json:"json,omitempty"`
	Data    []byte    `json:"data,omitempty"`
	Meta    []byte    `json:"meta,omitempty"`
	Created int64     `json:"created"` // 100 ns ticks since the Unix epoch
	// NoData marks the empty prepare KurrentDB writes for an append of zero
	// events: it takes a log position but no read ever returns it.
	NoData bool `json:"no_data,omitempty"`
}

// end is the record's post-position: where the next record starts.
func (r *record) end() int64 { return r.Pos + r.Size }

// recordSize approximates the size of a prepare record in the transaction
// file: a fixed header plus the variable parts. Only the shape matters here:
// positions strictly increase, with gaps.
func recordSize(stream, typ string, data, meta []byte) int64 {
	return int64(88 + len(stream) + len(typ) + len(data) + len(meta))
}

// streamIndex locates a stream's records in the log.
type streamIndex struct {
	events    []int // log index of each event, by event number
	tombstone int   // log index of the tombstone; -1 if none
}

// streamMeta is the part of a stream's metadata ($$stream) the server
// honours on reads (KurrentDB.Core.Data.StreamMetadata).
type streamMeta struct {
	tb       *int64
	maxCount *int64
	maxAge   *time.Duration
}

// metastreamMetadata is the fixed metadata of every $$ stream: only its last
// event is readable (SystemStreams metastream metadata, $maxCount 1).
var metastreamMetadata = streamMeta{maxCount: ptr(int64(1))}

func ptr[T any](v T) *T { return &v }

// parseMetadata parses a $metadata event's data as
// StreamMetadata.FromJsonBytes does: an invalid document, or a known key with
// a value of the wrong kind, gives empty metadata.
func parseMetadata(data []byte) streamMeta {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return streamMeta{}
	}
	var m streamMeta
	for key, dst := range map[string]**int64{"$tb": &m.tb, "$maxCount": &m.maxCount} {
		v, ok := raw[key]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return streamMeta{}
		}
		*dst = &n
	}
	if v, ok := raw["$maxAge"]; ok {
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return streamMeta{}
		}
		m.maxAge = ptr(time.Duration(n) * time.Second)
	}
	return m
}

// idInfo is an entry of the committed-events cache.
type idInfo struct {
	stream string
	number int64
}

// idCache is IndexWriter's committed-events cache (a BoundedCache): event id
// to stream and event number, filled by the writer, bounded, first entry for
// an id wins, evicted oldest first, empty after a restart.
type idCache struct {
	limit int
	queue []uuid.UUID
	byID  map[uuid.UUID]idInfo
}

func newIDCache(limit int) *idCache {
	return &idCache{limit: limit, byID: map[uuid.UUID]idInfo{}}
}

func (c *idCache) get(id uuid.UUID) (idInfo, bool) {
	info, ok := c.byID[id]
	return info, ok
}

// put adds id as BoundedCache.PutRecord(throwOnDuplicate: false) does: it
// first evicts the oldest keys while full, then queues the key and keeps an
// existing entry.
func (c *idCache) put(id uuid.UUID, info idInfo) {
	for len(c.queue) >= c.limit && len(c.queue) > 0 {
		delete(c.byID, c.queue[0])
		c.queue = c.queue[1:]
	}
	c.queue = append(c.queue, id)
	if _, ok := c.byID[id]; !ok {
		c.byID[id] = info
	}
}

// view selects what a lookup sees: the writer sees every written record
// (KurrentDB's pre-committed stream versions, writerView); a reader sees the
// first n records of the log (view(n)): on the leader the indexed
// (committed and replicated) ones, on a follower those replicated to it.
type view int

// writerView sees every record written.
const writerView view = -1

// db is the log: records in transaction-file order, the stream index and the
// writer's caches. Records below indexed are readable on the leader;
// indexedAt holds when each was indexed, which a follower's replication lag
// is measured from. It is guarded by the Cluster's mutex.
type db struct {
	records   []*record
	streams   map[string]*streamIndex
	indexed   int
	indexedAt []time.Time
	end       int64 // the writer checkpoint: position of the next record
	cache     *idCache
	file      *os.File
}

func newDB(cacheLimit int) *db {
	return &db{streams: map[string]*streamIndex{}, cache: newIDCache(cacheLimit)}
}

// committed is the leader's reader view: every indexed record.
func (d *db) committed() view { return view(d.indexed) }

// indexTo marks the first n records indexed at t (records indexed already
// keep their time).
func (d *db) indexTo(n int, t time.Time) {
	for len(d.indexedAt) < n {
		d.indexedAt = append(d.indexedAt, t)
	}
	d.indexed = n
}

// replicatedBy returns the view of a follower that receives each record
// lag after the leader indexed it, at now: the indexed records indexed at or
// before now − lag.
func (d *db) replicatedBy(now time.Time, lag time.Duration) view {
	if lag <= 0 {
		return d.committed()
	}
	cut := now.Add(-lag)
	return view(sort.Search(d.indexed, func(i int) bool { return d.indexedAt[i].After(cut) }))
}

// visible reports whether the record at log index i can be read in v.
func (d *db) visible(i int, v view) bool { return v < 0 || i < int(v) }

// lastNumber returns a stream's last event number in v: evNoStream if it has
// none, deletedStream if it is tombstoned.
func (d *db) lastNumber(stream string, v view) int64 {
	st := d.streams[stream]
	if st == nil {
		return evNoStream
	}
	if st.tombstone >= 0 && d.visible(st.tombstone, v) {
		return deletedStream
	}
	n := len(st.events) - 1
	for n >= 0 && !d.visible(st.events[n], v) {
		n--
	}
	return int64(n)
}

// eventAt returns the record of a stream's event number n in v, ignoring
// metadata (IndexReader.ReadPrepare), or nil.
func (d *db) eventAt(stream string, n int64, v view) *record {
	st := d.streams[stream]
	if st == nil || n < 0 || n >= int64(len(st.events)) || !d.visible(st.events[n], v) {
		return nil
	}
	return d.records[st.events[n]]
}

// metadataOf returns the metadata of stream in v: a metastream's is fixed,
// any other's is parsed from the last event of its metastream.
func (d *db) metadataOf(stream string, v view) streamMeta {
	if strings.HasPrefix(stream, metastreamPrefix) {
		return metastreamMetadata
	}
	meta := metastreamPrefix + stream
	if r := d.eventAt(meta, d.lastNumber(meta, v), v); r != nil {
		return parseMetadata(r.Data)
	}
	return streamMeta{}
}

// softDeleted reports whether stream's $tb is deletedStream in v.
func (d *db) softDeleted(stream string, v view) bool {
	m := d.metadataOf(stream, v)
	return m.tb != nil && *m.tb == deletedStream
}

// minNumber is the lowest event number a read may return under m
// ($maxCount and $tb), for a stream whose last event number is last.
func minNumber(m streamMeta, last int64) int64 {
	low := int64(0)
	if m.maxCount != nil {
		low = max(low, last-*m.maxCount+1)
	}
	if m.tb != nil {
		low = max(low, *m.tb)
	}
	return low
}

// expired reports whether r is older than m's $maxAge at now.
func expired(m streamMeta, r *record, now time.Time) bool {
	return m.maxAge != nil && r.Created < ticks(now.Add(-*m.maxAge))
}

// readEvent returns the record of event n of stream as a reader sees it,
// honouring deletion and metadata (IndexReader.ReadEvent), or nil.
func (d *db) readEvent(stream string, n int64, v view, now time.Time) *record {
	last := d.lastNumber(stream, v)
	m := d.metadataOf(stream, v)
	if last == deletedStream || last == evNoStream || (m.tb != nil && *m.tb == deletedStream) {
		return nil
	}
	if n < minNumber(m, last) || n > last {
		return nil
	}
	r := d.eventAt(stream, n, v)
	if r == nil || expired(m, r, now) {
		return nil
	}
	return r
}

// ticks returns t as .NET ticks (100 ns) since the Unix epoch, the form of
// the "created" metadata (EpochExtensions.ToTicksSinceEpoch).
func ticks(t time.Time) int64 { return t.UnixNano() / 100 }

// add appends r to the log at the writer checkpoint, indexes it when index is
// true, updates the stream index and persists it. It returns r's log index.
func (d *db) add(r *record, index bool) (int, error) {
	r.Pos = d.end
	if r.Size == 0 {
		r.Size = recordSize(r.Stream, r.Type, r.Data, r.Meta)
	}
	if d.file != nil {
		line, err := json.Marshal(r)
		if err != nil {
			return 0, err
		}
		if _, err := d.file.Write(append(line, '\n')); err != nil {
			return 0, fmt.Errorf("kurrentdbtest: write data file: %w", err)
		}
	}
	d.place(r)
	if index && d.indexed == len(d.records)-1 {
		d.indexTo(len(d.records), time.Now())
	}
	return len(d.records) - 1, nil
}

// place puts a record already positioned into the log and the stream index.
func (d *db) place(r *record) {
	d.records = append(d.records, r)
	d.end = r.end()
	if r.NoData {
		return
	}
	st := d.streams[r.Stream]
	if st == nil {
		st = &streamIndex{tombstone: -1}
		d.streams[r.Stream] = st
	}
	if r.Number == deletedStream {
		st.tombstone = len(d.records) - 1
		return
	}
	st.events = append(st.events, len(d.records)-1)
}

// load reads the records of a data file into an empty db and indexes them
// all. A torn last line (the process died while writing it) is cut off.
func (d *db) load(f *os.File) error {
	r := bufio.NewReader(f)
	var good int64
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				if err := f.Truncate(good); err != nil {
					return fmt.Errorf("kurrentdbtest: cut torn record: %w", err)
				}
			}
			break
		}
		if err != nil {
			return fmt.Errorf("kurrentdbtest: read data file: %w", err)
		}
		var rec record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("kurrentdbtest: data file record at byte %d: %w", good, err)
		}
		if rec.Pos != d.end {
			return fmt.Errorf("kurrentdbtest: data file record at byte %d has position %d, want %d", good, rec.Pos, d.end)
		}
		d.place(&rec)
		good += int64(len(line))
	}
	d.indexTo(len(d.records), time.Time{})
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		return fmt.Errorf("kurrentdbtest: seek data file: %w", err)
	}
	return nil
}

// firstAtOrAfter returns the log index of the first record whose position
// (Pos, Pos) is at or after (commit, prepare), or len(records).
func (d *db) firstAtOrAfter(commit, prepare int64) int {
	lo, hi := 0, len(d.records)
	for lo < hi {
		mid := (lo + hi) / 2
		if tfLess(d.records[mid].Pos, d.records[mid].Pos, commit, prepare) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// validPosition reports whether a reader may start at commit: the start of
// the log, a record boundary, or at or past the writer checkpoint. Any other
// commit position points into the middle of a record, which KurrentDB
// refuses ("Trying to read from an invalid position.").
func (d *db) validPosition(commit int64) bool {
	if commit <= 0 || commit >= d.end {
		return true
	}
	i := d.firstAtOrAfter(commit, 0)
	return i < len(d.records) && d.records[i].Pos == commit
}

// tfLess compares transaction-file positions (TFPos): commit, then prepare.
func tfLess(c1, p1, c2, p2 int64) bool { return c1 < c2 || (c1 == c2 && p1 < p2) }
