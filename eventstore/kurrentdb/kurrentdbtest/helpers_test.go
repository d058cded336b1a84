package kurrentdbtest_test

import (
	"context"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
)

// realURLEnv names the variable with the connection string of a real
// KurrentDB server to hold the double to.
const realURLEnv = "BOOKING_TEST_KURRENTDB_URL"

// target is a KurrentDB the contract runs against: the double, or a real
// server.
type target struct {
	name   string
	url    string
	client *esdb.Client
	double *kurrentdbtest.Server // nil for a real server
}

// targets returns the double, and a real server when realURLEnv is set.
func targets(t *testing.T) []target {
	t.Helper()
	srv := kurrentdbtest.NewTest(t, kurrentdbtest.Options{})
	out := []target{{name: "double", url: srv.URL(), client: newClient(t, srv.URL()), double: srv}}
	if url := os.Getenv(realURLEnv); url != "" {
		out = append(out, target{name: "real", url: url, client: newClient(t, url)})
	}
	return out
}

// newClient returns a silent client for url (kurrentdb:// is rewritten to
// esdb://, which is all v4 parses), closed when t ends.
func newClient(t testing.TB, url string) *esdb.Client {
	t.Helper()
	if rest, ok := strings.CutPrefix(url, "kurrentdb"); ok {
		url = "esdb" + rest
	}
	cfg, err := esdb.ParseConnectionString(url)
	if err != nil {
		t.Fatalf("ParseConnectionString(%s) = %v", url, err)
	}
	cfg.Logger = esdb.NoopLogging()
	c, err := esdb.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient(%s) = %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// begin starts a contract case against tg: its context, tg's client and a
// new stream named after prefix.
func (tg target) begin(t testing.TB, prefix string) (context.Context, *esdb.Client, string) {
	t.Helper()
	return testContext(t), tg.client, newStream(prefix)
}

func newStream(prefix string) string { return "contract-" + prefix + "-" + uuid.NewString() }

// event returns a JSON event of type typ with a fresh id.
func event(typ string) esdb.EventData {
	return esdb.EventData{
		EventID: uuid.New(), EventType: typ, ContentType: esdb.ContentTypeJson,
		Data: []byte(`{"n": 1}`), Metadata: []byte(`{"m":true}`),
	}
}

func events(typ string, n int) []esdb.EventData {
	out := make([]esdb.EventData, n)
	for i := range out {
		out[i] = event(typ)
	}
	return out
}

func mustAppend(t testing.TB, ctx context.Context, c *esdb.Client, stream string, expected esdb.ExpectedRevision, evs ...esdb.EventData) *esdb.WriteResult {
	t.Helper()
	res, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: expected}, evs...)
	if err != nil {
		t.Fatalf("AppendToStream(%s, %T%v, %d events) = %v, want success", stream, expected, expected, len(evs), err)
	}
	return res
}

// wantWEV fails t unless err is a WrongExpectedVersion whose current
// revision (only carried by the message text in client v4) is current.
// appendWEV appends events to stream at expected and fails t unless the
// append is refused with WrongExpectedVersion naming the current revision.
func appendWEV(t testing.TB, ctx context.Context, c *esdb.Client, stream string, expected esdb.ExpectedRevision, current string, events ...esdb.EventData) {
	t.Helper()
	_, err := c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: expected}, events...)
	wantWEV(t, err, current)
}

func wantWEV(t testing.TB, err error, current string) {
	t.Helper()
	var esErr *esdb.Error
	if !errors.As(err, &esErr) || esErr.Code() != esdb.ErrorCodeWrongExpectedVersion {
		t.Fatalf("AppendToStream error = %v, want WrongExpectedVersion", err)
	}
	m := regexp.MustCompile(`but got '([^']*)'`).FindStringSubmatch(err.Error())
	if m == nil || m[1] != current {
		t.Fatalf("WrongExpectedVersion %q, want current revision %q", err, current)
	}
}

func wantCode(t testing.TB, err error, code esdb.ErrorCode) {
	t.Helper()
	var esErr *esdb.Error
	if !errors.As(err, &esErr) || esErr.Code() != code {
		t.Fatalf("error = %v, want esdb error code %d", err, code)
	}
}

// readStream reads up to count events of stream and returns them, or the
// error of opening the read or of any Recv.
func readStream(ctx context.Context, c *esdb.Client, stream string, opts esdb.ReadStreamOptions, count uint64) ([]*esdb.RecordedEvent, error) {
	rs, err := c.ReadStream(ctx, stream, opts, count)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*esdb.RecordedEvent
	for {
		e, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e.OriginalEvent())
	}
}

func mustRead(t testing.TB, ctx context.Context, c *esdb.Client, stream string, opts esdb.ReadStreamOptions, count uint64) []*esdb.RecordedEvent {
	t.Helper()
	out, err := readStream(ctx, c, stream, opts, count)
	if err != nil {
		t.Fatalf("ReadStream(%s, %+v, %d) = %v, want events", stream, opts, count, err)
	}
	return out
}

// readAll reads up to count events of $all and returns them.
func readAll(t testing.TB, ctx context.Context, c *esdb.Client, opts esdb.ReadAllOptions, count uint64) []*esdb.RecordedEvent {
	t.Helper()
	rs, err := c.ReadAll(ctx, opts, count)
	if err != nil {
		t.Fatalf("ReadAll(%+v, %d) = %v", opts, count, err)
	}
	defer rs.Close()
	var out []*esdb.RecordedEvent
	for {
		e, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ReadAll(%+v, %d).Recv() = %v", opts, count, err)
		}
		out = append(out, e.OriginalEvent())
	}
}

// streamOf returns the events of $all that belong to stream, in log
// order, reading forwards from the start.
func streamOf(t testing.TB, ctx context.Context, c *esdb.Client, stream string) []*esdb.RecordedEvent {
	t.Helper()
	var out []*esdb.RecordedEvent
	for _, e := range readAll(t, ctx, c, esdb.ReadAllOptions{From: esdb.Start{}}, 1<<20) {
		if e.StreamID == stream {
			out = append(out, e)
		}
	}
	return out
}

func ids(evs []*esdb.RecordedEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		out[i] = e.EventID
	}
	return out
}

func dataIDs(evs []esdb.EventData) []uuid.UUID {
	out := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		out[i] = e.EventID
	}
	return out
}

func numbers(evs []*esdb.RecordedEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.EventNumber
	}
	return out
}

// setMetadata writes raw stream metadata JSON to $$stream with Any.
func setMetadata(t testing.TB, ctx context.Context, c *esdb.Client, stream, json string) *esdb.WriteResult {
	t.Helper()
	return mustAppend(t, ctx, c, "$$"+stream, esdb.Any{}, esdb.EventData{
		EventID: uuid.New(), EventType: "$metadata", ContentType: esdb.ContentTypeJson, Data: []byte(json),
	})
}
