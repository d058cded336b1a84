package pgstore

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/retrysafe/booking/eventstore"
)

// multiParamOIDs are the types of eventstore_append_multi's parameters
// (migration 00013), in order.
var multiParamOIDs = []uint32{pgtype.TextArrayOID, pgtype.Int2ArrayOID, pgtype.Int8ArrayOID, pgtype.Int4ArrayOID,
	pgtype.UUIDArrayOID, pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.ByteaArrayOID, pgtype.Int4OID}

// BenchmarkAppendParams builds the parameters of an order's unit (three
// streams, four events) and encodes them as pgx encodes a prepared
// statement's arguments (binary format, one type map per connection):
// the client's share of an append's CPU that does not wait for the server.
func BenchmarkAppendParams(b *testing.B) {
	s := &Store{}
	ev := func(typ string) eventstore.EventData {
		return eventstore.EventData{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, Data: benchData,
			Metadata: []byte(`{"actor":"actor-1","intent":"intent-1","occurred_at":"2026-12-06T16:00:00Z","schema_version":1}`)}
	}
	id := uuid.Must(uuid.NewV7()).String()
	unit := []eventstore.StreamAppend{
		{Stream: "intent-" + id, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("Began"), ev("Claimed")}},
		{Stream: "order-" + id, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("Placed")}},
		{Stream: "attempt-" + id, Expected: eventstore.Exact(3), Events: []eventstore.EventData{ev("Started")}},
	}
	m := pgtype.NewMap()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		a, err := newMultiArgs(unit)
		if err != nil {
			b.Fatal(err)
		}
		buf = buf[:0]
		for i, p := range s.multiParams(a, false) {
			if buf, err = m.Encode(multiParamOIDs[i], pgtype.BinaryFormatCode, p, buf); err != nil {
				b.Fatalf("parameter %d: %v", i+1, err)
			}
		}
	}
}
