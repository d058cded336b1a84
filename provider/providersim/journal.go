package providersim

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The state file. With Config.DataDir set, everything a restart must not
// forget is kept in DataDir/StateFile, an append-only journal:
//
//	line 1:  <crc> {"format":"booking-provider-sim","version":2}
//	line n:  <crc> {record}
//
// where <crc> is the CRC-32C (Castagnoli) of the JSON that follows it, as 8
// lowercase hex digits, and each line ends with "\n". A record is a JSON
// object whose members are upserts, applied in this order:
//
//	"charge":         a charge object as Stripe shows it; it replaces the
//	                  charge with that id, or adds it
//	"payment_intent": a PaymentIntent object as GET /v1/payment_intents/{id}
//	                  shows it (latest_charge not expanded), plus
//	                  "sim_idempotency_key" and "sim_created_ns" (its
//	                  creation on the base clock, for the search lag); it
//	                  replaces the PaymentIntent with that id, or adds it at
//	                  the end
//	"refund":         a refund object; added at the end
//	"key":            an idempotency record {"key","endpoint","fingerprint"
//	                  (hex SHA-256 of the endpoint and the canonical
//	                  parameters),"status","body" (base64 of the saved
//	                  answer, replayed byte for byte),"request_id",
//	                  "committed","expires" (RFC 3339, simulator clock)}
//	"clock_offset_ns": the simulator clock's offset from the base clock
//
// A commit appends one record with what it changed and the key's saved
// answer; a clock change appends {"clock_offset_ns"}. Each line is written
// and fsynced before the request is answered, so nothing the simulator
// ever answered is lost by a crash. A write that fails is cut off again
// and the request answers 500 (saving nothing); if even that fails, every
// later commit answers 500 until a restart.
//
// At start the journal is read and then compacted: the current state
// (every PaymentIntent with its charge, every refund, the idempotency
// records still inside their retention, the clock offset) is written to a
// temporary file, fsynced, and renamed over the journal, and the directory
// is fsynced. POST /_sim/reset compacts to an empty state the same way. A
// last line without its "\n" is a write that a crash cut short, never
// acknowledged: it is dropped. A version 1 file (the simulator's earlier
// charges API) is moved aside to StateFile+".v1" with a warning, and the
// simulator starts empty. Anything else that does not read back (a bad
// checksum, bad JSON, an unknown member, a reference to an unknown object,
// a missing header) stops the start with an error that names the file and
// the line. A lock file (DataDir/LockFile, flock) keeps a second process
// from using the same directory.
//
// Not kept: webhook events and their deliveries (a delivery pending at a
// restart is not resumed; the service finds outcomes by querying), faults,
// and requests in flight (they never committed).
const (
	// StateFile is the journal's file name inside Config.DataDir.
	StateFile = "state.journal"
	// LockFile is the lock file's name inside Config.DataDir.
	LockFile = "state.lock"

	journalFormat  = "booking-provider-sim"
	journalVersion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one line of the journal.
type record struct {
	Format  string        `json:"format,omitempty"`
	Version int           `json:"version,omitempty"`
	Charge  *Charge       `json:"charge,omitempty"`
	Intent  *intentRecord `json:"payment_intent,omitempty"`
	Refund  *Refund       `json:"refund,omitempty"`
	Key     *keyRecord    `json:"key,omitempty"`
	Offset  *int64        `json:"clock_offset_ns,omitempty"`
}

// empty reports whether r changes nothing.
func (r record) empty() bool {
	return r.Charge == nil && r.Intent == nil && r.Refund == nil && r.Key == nil && r.Offset == nil
}

// intentRecord is a PaymentIntent as stored, with what only the
// simulator knows of it.
type intentRecord struct {
	PaymentIntent
	SimIdempotencyKey string `json:"sim_idempotency_key,omitempty"`
	SimCreatedNS      int64  `json:"sim_created_ns"`
}

func newIntentRecord(it *intent) *intentRecord {
	return &intentRecord{PaymentIntent: *it.pi, SimIdempotencyKey: it.key, SimCreatedNS: it.createdAt.UnixNano()}
}

// keyRecord is a saved idempotency key as stored.
type keyRecord struct {
	Key         string    `json:"key"`
	Endpoint    string    `json:"endpoint"`
	Fingerprint string    `json:"fingerprint"`
	Status      int       `json:"status"`
	Body        []byte    `json:"body"`
	RequestID   string    `json:"request_id"`
	Committed   time.Time `json:"committed"`
	Expires     time.Time `json:"expires"`
}

func newKeyRecord(key string, e *keyEntry) *keyRecord {
	return &keyRecord{Key: key, Endpoint: e.endpoint, Fingerprint: hex.EncodeToString(e.fingerprint[:]), Status: e.status,
		Body: e.body, RequestID: e.requestID, Committed: e.committed.UTC(), Expires: e.expires.UTC()}
}

// journal is the open state file. Not safe for concurrent use: the Server
// calls it with its mutex held, so lines are in commit order.
type journal struct {
	dir, path string
	f         *os.File // open for appending; nil once closed
	size      int64    // bytes known to be written and synced
	unlock    func() error
	broken    error // sticky: a failed write that could not be cut off
	closed    bool
	// movedAside names where a version 1 file was moved at open, or "".
	movedAside string
}

// CorruptError reports a state file that does not read back. Path names the
// file and Line the first bad line (1-based; 0 for the file as a whole).
type CorruptError struct {
	Path   string
	Line   int
	Reason string
}

// Error says which file and line, why, and what an operator can do.
func (e *CorruptError) Error() string {
	where := e.Path
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	return fmt.Sprintf("providersim: state file %s is corrupt: %s (move the file away to start with no payments)", where, e.Reason)
}

// openJournal locks dir (creating it) and reads its journal, returning the
// records after the header (none for a new directory) and how many bytes of
// a torn last line it dropped. The journal is not open for appending until
// rewrite.
func openJournal(dir string) (*journal, []record, int, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, 0, fmt.Errorf("providersim: data directory: %w", err)
	}
	unlock, err := lockDir(filepath.Join(dir, LockFile))
	if err != nil {
		return nil, nil, 0, err
	}
	j := &journal{dir: dir, path: filepath.Join(dir, StateFile), unlock: unlock}
	data, err := os.ReadFile(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return j, nil, 0, nil
	}
	if err != nil {
		j.close()
		return nil, nil, 0, fmt.Errorf("providersim: read state file: %w", err)
	}
	recs, torn, err := parseJournal(j.path, data)
	var old *oldVersionError
	if errors.As(err, &old) {
		// The earlier charges API's state cannot become PaymentIntents.
		if err = os.Rename(j.path, j.path+".v1"); err == nil {
			j.movedAside = j.path + ".v1"
			return j, nil, 0, nil
		}
	}
	if err != nil {
		j.close()
		return nil, nil, 0, err
	}
	return j, recs, torn, nil
}

// oldVersionError is a journal of version 1, the earlier charges API.
type oldVersionError struct{}

func (*oldVersionError) Error() string { return "providersim: state file of version 1" }

// parseJournal checks and decodes a journal's bytes.
func parseJournal(path string, data []byte) ([]record, int, error) {
	corrupt := func(line int, format string, args ...any) ([]record, int, error) {
		return nil, 0, &CorruptError{Path: path, Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	torn := 0
	if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
		torn = len(data) - i - 1
		data = data[:i+1]
	}
	if len(data) == 0 {
		return corrupt(0, "no header line")
	}
	lines := bytes.Split(data[:len(data)-1], []byte{'\n'})
	var recs []record
	for i, line := range lines {
		n := i + 1
		sum, js, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(sum) != 8 {
			return corrupt(n, "want a line <crc32c hex> <json>")
		}
		want, err := strconv.ParseUint(string(sum), 16, 32)
		if err != nil {
			return corrupt(n, "want a line <crc32c hex> <json>")
		}
		if got := crc32.Checksum(js, castagnoli); uint32(want) != got {
			return corrupt(n, "checksum %08x, the line's content sums to %08x", want, got)
		}
		var r record
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil || dec.More() {
			return corrupt(n, "not a record: %v", err)
		}
		if n == 1 {
			if r.Format != journalFormat {
				return corrupt(n, "header names format %q, want %q", r.Format, journalFormat)
			}
			if r.Version == 1 {
				return nil, 0, &oldVersionError{}
			}
			if r.Version != journalVersion {
				return corrupt(n, "format version %d, this build reads %d", r.Version, journalVersion)
			}
			continue
		}
		if r.Format != "" || r.Version != 0 {
			return corrupt(n, "a second header")
		}
		recs = append(recs, r)
	}
	return recs, torn, nil
}

// encodeLine returns r as one journal line.
func encodeLine(r record) []byte {
	js := encodeJSON(r)
	line := make([]byte, 0, len(js)+10)
	line = fmt.Appendf(line, "%08x ", crc32.Checksum(js, castagnoli))
	line = append(line, js...)
	return append(line, '\n')
}

// append writes r and syncs it. On error nothing of r remains in the file
// (or the journal is broken and refuses every later append).
func (j *journal) append(r record) error {
	if j.broken != nil {
		return j.broken
	}
	if j.closed || j.f == nil {
		return errors.New("providersim: state file closed")
	}
	line := encodeLine(r)
	_, err := j.f.Write(line)
	if err == nil {
		err = j.f.Sync()
		if err != nil {
			// After a failed fsync the file's content is unknown: refuse
			// every later commit rather than risk a gap.
			j.broken = fmt.Errorf("providersim: state file %s: sync failed earlier: %w", j.path, err)
			return j.broken
		}
		j.size += int64(len(line))
		return nil
	}
	if terr := j.f.Truncate(j.size); terr != nil {
		j.broken = fmt.Errorf("providersim: state file %s: a failed write could not be cut off: %w", j.path, errors.Join(err, terr))
		return j.broken
	}
	return fmt.Errorf("providersim: state file %s: %w", j.path, err)
}

// rewrite replaces the journal with the header and recs, crash-safely: a
// temporary file is written and synced, renamed over the journal, and the
// directory synced. Then the journal is open for appending. If the
// temporary file cannot be written, the journal stays as it was.
func (j *journal) rewrite(recs []record) error {
	if j.closed {
		return errors.New("providersim: state file closed")
	}
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("providersim: write state file: %w", err)
	}
	var buf bytes.Buffer
	buf.Write(encodeLine(record{Format: journalFormat, Version: journalVersion}))
	for _, r := range recs {
		buf.Write(encodeLine(r))
	}
	size := int64(buf.Len())
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("providersim: write state file %s: %w", j.path, err)
	}
	// From here the new file is in place: appends go to it, never to the
	// replaced one.
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
	if err := syncDir(j.dir); err != nil {
		j.broken = fmt.Errorf("providersim: state file %s: sync of its directory failed: %w", j.path, err)
		return j.broken
	}
	if j.f, err = os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return fmt.Errorf("providersim: open state file: %w", err)
	}
	j.size, j.broken = size, nil
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// close closes the journal and releases the directory's lock. Idempotent.
func (j *journal) close() {
	j.closed = true
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
	if j.unlock != nil {
		j.unlock()
		j.unlock = nil
	}
}

// restoreLocked applies the journal's records to an empty server, checking
// that every reference resolves, then forgets the keys already expired.
func (s *Server) restoreLocked(path string, recs []record) error {
	for i, r := range recs {
		bad := func(format string, args ...any) error {
			return &CorruptError{Path: path, Line: i + 2, Reason: fmt.Sprintf(format, args...)}
		}
		if err := s.restoreObjectsLocked(r, bad); err != nil {
			return err
		}
		if k := r.Key; k != nil {
			fp, err := hex.DecodeString(k.Fingerprint)
			if err != nil || len(fp) != 32 {
				return bad("key %q: fingerprint %q", k.Key, k.Fingerprint)
			}
			e := &keyEntry{endpoint: k.Endpoint, status: k.Status, body: k.Body, requestID: k.RequestID,
				committed: k.Committed, expires: k.Expires}
			copy(e.fingerprint[:], fp)
			s.keys[k.Key] = e
		}
		if r.Offset != nil {
			s.offset = time.Duration(*r.Offset)
		}
	}
	now := s.nowLocked()
	for k, e := range s.keys {
		if !now.Before(e.expires) {
			delete(s.keys, k)
		}
	}
	return nil
}

// restoreObjectsLocked applies r's charge, PaymentIntent and refund, then
// checks that their references resolve.
func (s *Server) restoreObjectsLocked(r record, bad func(string, ...any) error) error {
	if r.Charge != nil {
		ch := cloneCharge(r.Charge)
		if !strings.HasPrefix(ch.ID, "ch_") {
			return bad("charge id %q", ch.ID)
		}
		s.chargeByID[ch.ID] = &ch
	}
	if r.Intent != nil {
		pi := clonePI(&r.Intent.PaymentIntent)
		if !strings.HasPrefix(pi.ID, "pi_") {
			return bad("payment intent id %q", pi.ID)
		}
		switch id := pi.LatestCharge.(type) {
		case nil:
		case string:
			if s.chargeByID[id] == nil {
				return bad("payment intent %s: latest_charge %q unknown", pi.ID, id)
			}
		default:
			return bad("payment intent %s: latest_charge is not an id", pi.ID)
		}
		s.applyLocked(change{intent: &intent{pi: &pi, key: r.Intent.SimIdempotencyKey, createdAt: time.Unix(0, r.Intent.SimCreatedNS)}})
	}
	if r.Charge != nil && s.intentByID[r.Charge.PaymentIntent] == nil {
		return bad("charge %s of unknown payment intent %q", r.Charge.ID, r.Charge.PaymentIntent)
	}
	if r.Refund != nil {
		re := cloneRefund(r.Refund)
		if !strings.HasPrefix(re.ID, "re_") || s.refundByID[re.ID] != nil {
			return bad("refund id %q", re.ID)
		}
		if s.chargeByID[re.Charge] == nil || s.intentByID[re.PaymentIntent] == nil {
			return bad("refund %s of unknown charge %q or payment intent %q", re.ID, re.Charge, re.PaymentIntent)
		}
		s.applyLocked(change{refund: &re})
	}
	return nil
}

// snapshotLocked returns the records of the current state: each
// PaymentIntent with its charge, in creation order, the refunds in
// creation order, the live keys (by key), the clock offset.
func (s *Server) snapshotLocked() []record {
	recs := make([]record, 0, len(s.intents)+len(s.refunds)+len(s.keys)+1)
	for _, it := range s.intents {
		r := record{Intent: newIntentRecord(it)}
		if id, ok := it.pi.LatestCharge.(string); ok {
			r.Charge = s.chargeByID[id]
		}
		recs = append(recs, r)
	}
	for _, re := range s.refunds {
		recs = append(recs, record{Refund: re})
	}
	now := s.nowLocked()
	keys := make([]string, 0, len(s.keys))
	for k, e := range s.keys {
		if !e.inFlight && now.Before(e.expires) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		recs = append(recs, record{Key: newKeyRecord(k, s.keys[k])})
	}
	if s.offset != 0 {
		off := int64(s.offset)
		recs = append(recs, record{Offset: &off})
	}
	return recs
}

// persistLocked appends r to the journal, if the simulator has one.
func (s *Server) persistLocked(r record) error {
	if s.journal == nil || r.empty() {
		return nil
	}
	return s.journal.append(r)
}

// persistOffsetLocked records the clock offset.
func (s *Server) persistOffsetLocked() error {
	off := int64(s.offset)
	return s.persistLocked(record{Offset: &off})
}
