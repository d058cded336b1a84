package keystore_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/commands/envelope"
	"github.com/retrysafe/booking/commands/envelope/envelopetest"
	"github.com/retrysafe/booking/commands/keystore"
	"github.com/retrysafe/booking/eventstore"
	"github.com/retrysafe/booking/eventstore/pgstore"
	"github.com/retrysafe/booking/migrations/pgtest"
)

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, pgtest.NewDatabase(t))
}

// newStore returns a store on a new database whose keyring holds one
// generated master key named master, the database, and its clock's now.
func newStore(t *testing.T, master string) (*keystore.Store, *pgxpool.Pool, time.Time) {
	t.Helper()
	pool := newPool(t)
	return keystore.New(pool, envelopetest.Keyring(t, envelopetest.MasterKey(t, master))), pool, dbNow(t, pool)
}

func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func rows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM order_keys").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var tokenAAD = []byte("token")

// TestLifecycle: a key is created with the held token, read back, kept
// when created again, placed (token dropped, due at the deadline) and
// shredded; then nothing sealed under it opens.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, now := newStore(t, "m1")
	order := uuid.NewString()

	if _, ok, err := s.Key(ctx, order); ok || err != nil {
		t.Fatalf("Key(unknown order) = ok %v, %v; want false, nil", ok, err)
	}
	if _, exists, err := s.HeldToken(ctx, order); exists || err != nil {
		t.Fatalf("HeldToken(unknown order) = exists %v, %v; want false, nil", exists, err)
	}

	dk := envelope.NewDataKey()
	sealed := dk.Seal([]byte("tok_visa_lifecycle"), tokenAAD)
	got, err := s.Create(ctx, order, "", dk, sealed, now.Add(24*time.Hour))
	if err != nil || got != dk {
		t.Fatalf("Create(new order) = %p, %v; want the given key", got, err)
	}
	var raw []byte
	if err := pool.QueryRow(ctx, "SELECT wrapped_key || coalesce(held_token, '') FROM order_keys").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("tok_visa_lifecycle")) {
		t.Errorf("the key row holds the token in clear")
	}

	// Created again (a retry with another fresh key): the first stays.
	other := envelope.NewDataKey()
	again, err := s.Create(ctx, order, "", other, other.Seal([]byte("tok_other"), tokenAAD), now.Add(time.Hour))
	if err != nil {
		t.Fatalf("Create(existing order) error = %v", err)
	}
	if pt, err := again.Open(sealed, tokenAAD); err != nil || string(pt) != "tok_visa_lifecycle" {
		t.Errorf("Create(existing order) returned a key that opens %q, %v; want the first key", pt, err)
	}
	held, exists, err := s.HeldToken(ctx, order)
	if err != nil || !exists || !bytes.Equal(held, sealed) {
		t.Fatalf("HeldToken = %x, %v, %v; want the first sealed token", held, exists, err)
	}
	key, ok, err := s.Key(ctx, order)
	if err != nil || !ok {
		t.Fatalf("Key = ok %v, %v", ok, err)
	}
	if pt, err := key.Open(held, tokenAAD); err != nil || string(pt) != "tok_visa_lifecycle" {
		t.Fatalf("Key(order).Open(HeldToken) = %q, %v", pt, err)
	}

	deadline := now.Add(15 * time.Minute)
	if err := s.Placed(ctx, order, deadline); err != nil {
		t.Fatal(err)
	}
	if held, exists, err := s.HeldToken(ctx, order); err != nil || !exists || held != nil {
		t.Errorf("HeldToken after Placed = %x, %v, %v; want nil, true, nil", held, exists, err)
	}
	var shredAt time.Time
	if err := pool.QueryRow(ctx, "SELECT shred_at FROM order_keys WHERE order_id = $1", order).Scan(&shredAt); err != nil {
		t.Fatal(err)
	}
	if !shredAt.Equal(deadline) {
		t.Errorf("shred_at after Placed = %s, want the deadline %s", shredAt, deadline)
	}
	// A later deadline never postpones shredding.
	if err := s.Placed(ctx, order, deadline.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT shred_at FROM order_keys WHERE order_id = $1", order).Scan(&shredAt); err != nil || !shredAt.Equal(deadline) {
		t.Errorf("shred_at after a second Placed = %s, %v; want %s", shredAt, err, deadline)
	}

	for range 2 { // idempotent
		if err := s.Shred(ctx, order); err != nil {
			t.Fatalf("Shred error = %v", err)
		}
	}
	if _, ok, err := s.Key(ctx, order); ok || err != nil {
		t.Errorf("Key after Shred = ok %v, %v; want false, nil", ok, err)
	}
	if n := rows(t, pool); n != 0 {
		t.Errorf("order_keys has %d rows after Shred, want 0", n)
	}
	if err := s.Placed(ctx, order, deadline); err != nil {
		t.Errorf("Placed after Shred error = %v, want a no-op", err)
	}
	if n := rows(t, pool); n != 0 {
		t.Errorf("Placed after Shred recreated a row")
	}
}

// TestShredDue deletes exactly the rows whose shred_at has passed by the
// database clock.
func TestShredDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, now := newStore(t, "m1")
	var due, later []string
	for i := range 5 {
		id := uuid.NewString()
		at := now.Add(-time.Duration(i+1) * time.Minute)
		if i%2 == 1 {
			at = now.Add(time.Hour)
			later = append(later, id)
		} else {
			due = append(due, id)
		}
		if _, err := s.Create(ctx, id, "", envelope.NewDataKey(), nil, at); err != nil {
			t.Fatal(err)
		}
	}
	// A placed order whose deadline passed is due too.
	placed := uuid.NewString()
	if _, err := s.Create(ctx, placed, "", envelope.NewDataKey(), []byte("x"), now.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Placed(ctx, placed, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	due = append(due, placed)

	n, err := s.ShredDue(ctx, dbNow(t, pool))
	if err != nil || n != int64(len(due)) {
		t.Fatalf("ShredDue() = %d, %v; want %d", n, err, len(due))
	}
	for _, id := range due {
		if _, ok, _ := s.Key(ctx, id); ok {
			t.Errorf("order %s: key still there after ShredDue", id)
		}
	}
	for _, id := range later {
		if _, ok, err := s.Key(ctx, id); !ok || err != nil {
			t.Errorf("order %s: key not due was shredded (ok %v, %v)", id, ok, err)
		}
	}
	if n, err := s.ShredDue(ctx, dbNow(t, pool)); n != 0 || err != nil {
		t.Errorf("ShredDue() again = %d, %v; want 0, nil", n, err)
	}
	// Every deleted key left its erasure to record, and no other.
	erased, err := s.Erasures(ctx, 100)
	if err != nil || len(erased) != len(due) {
		t.Fatalf("Erasures = %v, %v; want the %d keys deleted", erased, err, len(due))
	}
	for _, id := range due {
		if _, ok := erased[id]; !ok {
			t.Errorf("Erasures lack the deleted key of %s", id)
		}
	}
}

// TestErasuresAreLeftByEveryDelete: Shred and ShredMany leave, in the same
// statement, the erasure of each key they delete (its time by the database
// clock), none for an order without a key and none twice;
// ForgetErasures drops them, idempotently, and names each erasure it
// dropped in one call only; Erasures honours its limit.
func TestErasuresAreLeftByEveryDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, _ := newStore(t, "m1")
	a, b, c, none := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, id := range []string{a, b, c} {
		if _, err := s.Create(ctx, id, "", envelope.NewDataKey(), nil, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	before := dbNow(t, pool)
	if err := s.Shred(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.ShredMany(ctx, []string{b, c, none}); err != nil {
		t.Fatal(err)
	}
	if err := s.ShredMany(ctx, []string{a, b}); err != nil { // deleted already: nothing new
		t.Fatal(err)
	}
	after := dbNow(t, pool)
	got, err := s.Erasures(ctx, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("Erasures = %v, %v; want a, b and c", got, err)
	}
	for _, id := range []string{a, b, c} {
		if at, ok := got[id]; !ok || at.Before(before) || at.After(after) || at.Location() != time.UTC {
			t.Errorf("erasure of %s at %v (present %t), want a UTC time within [%s, %s]", id, at, ok, before, after)
		}
	}
	if two, err := s.Erasures(ctx, 2); err != nil || len(two) != 2 {
		t.Errorf("Erasures(limit 2) = %v, %v; want 2", two, err)
	}
	for i, want := range [][]string{slices.Sorted(slices.Values([]string{a, c})), nil} {
		got, err := s.ForgetErasures(ctx, []string{a, c})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("ForgetErasures(a, c), call %d, dropped %v; want %v (each erasure dropped by one call)", i+1, got, want)
		}
	}
	if got, err := s.Erasures(ctx, 10); err != nil || len(got) != 1 || got[b].IsZero() {
		t.Errorf("Erasures after forgetting a and c = %v, %v; want only b", got, err)
	}
}

// TestUnplaced lists the keys that still hold a token, were created at or
// before the time asked and name their intent, oldest first; not a key
// without an intent, one placed, or one newer.
func TestUnplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, now := newStore(t, "m1")
	held, placed, noIntent, noToken := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, r := range []struct {
		id, intent string
		token      []byte
	}{{held, "intent-a", []byte("x")}, {placed, "intent-b", []byte("x")}, {noIntent, "", []byte("x")}, {noToken, "intent-d", nil}} {
		if _, err := s.Create(ctx, r.id, r.intent, envelope.NewDataKey(), r.token, now.Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Placed(ctx, placed, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Unplaced(ctx, now.Add(-time.Minute), 10); err != nil || len(got) != 0 {
		t.Fatalf("Unplaced(a minute before they were made) = %v, %v; want none", got, err)
	}
	got, err := s.Unplaced(ctx, dbNow(t, pool), 10)
	if err != nil || len(got) != 1 || got[held] != "intent-a" {
		t.Fatalf("Unplaced(now) = %v, %v; want only %s of intent-a", got, err, held)
	}
	if got, err := s.Unplaced(ctx, dbNow(t, pool), 0); err != nil || len(got) != 0 {
		t.Errorf("Unplaced(limit 0) = %v, %v; want none", got, err)
	}
}

// TestMasterKeyRotation: keys wrapped under master key a stay readable when
// b is put first; new keys are wrapped by b; removing a is refused by
// CheckMasterKeys while a still wraps keys.
func TestMasterKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	a, b := envelopetest.MasterKey(t, "a"), envelopetest.MasterKey(t, "b")
	old := keystore.New(pool, envelopetest.Keyring(t, a))
	now := dbNow(t, pool)
	o1 := uuid.NewString()
	dk1 := envelope.NewDataKey()
	secret := dk1.Seal([]byte("tok_visa_rotation"), tokenAAD)
	if _, err := old.Create(ctx, o1, "", dk1, secret, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	rotated := keystore.New(pool, envelopetest.Keyring(t, b, a))
	if err := rotated.CheckMasterKeys(ctx); err != nil {
		t.Errorf("CheckMasterKeys with [b, a] = %v, want nil", err)
	}
	k1, ok, err := rotated.Key(ctx, o1)
	if err != nil || !ok {
		t.Fatalf("Key(o1) with [b, a] = ok %v, %v", ok, err)
	}
	if pt, err := k1.Open(secret, tokenAAD); err != nil || string(pt) != "tok_visa_rotation" {
		t.Errorf("old key opens %q, %v", pt, err)
	}
	o2 := uuid.NewString()
	if _, err := rotated.Create(ctx, o2, "", envelope.NewDataKey(), nil, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	use, err := rotated.MasterKeyUse(ctx)
	if err != nil || use["a"] != 1 || use["b"] != 1 {
		t.Errorf("MasterKeyUse() = %v, %v; want a:1 b:1", use, err)
	}

	onlyB := keystore.New(pool, envelopetest.Keyring(t, b))
	if err := onlyB.CheckMasterKeys(ctx); err == nil {
		t.Errorf("CheckMasterKeys with [b] while a wraps a key = nil, want an error")
	}
	if _, _, err := onlyB.Key(ctx, o1); !errors.Is(err, envelope.ErrUnknownMasterKey) {
		t.Errorf("Key(o1) with [b] error = %v, want ErrUnknownMasterKey", err)
	}
	if err := onlyB.Shred(ctx, o1); err != nil {
		t.Fatal(err)
	}
	if err := onlyB.CheckMasterKeys(ctx); err != nil {
		t.Errorf("CheckMasterKeys with [b] once a wraps nothing = %v, want nil", err)
	}
}

// TestWrappedKeyBoundToOrder: a wrapped key moved to another order's row
// does not unwrap.
func TestWrappedKeyBoundToOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, now := newStore(t, "m")
	o1, o2 := uuid.NewString(), uuid.NewString()
	for _, o := range []string{o1, o2} {
		if _, err := s.Create(ctx, o, "", envelope.NewDataKey(), nil, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE order_keys SET wrapped_key = (SELECT wrapped_key FROM order_keys WHERE order_id = $1) WHERE order_id = $2`, o1, o2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Key(ctx, o2); !errors.Is(err, envelope.ErrDecrypt) {
		t.Errorf("Key(o2) with o1's wrapped key: error = %v, want ErrDecrypt", err)
	}
}

// erasureRows returns how many erasures of orderID are left to record.
func erasureRows(t *testing.T, pool *pgxpool.Pool, orderID string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM order_key_erasures WHERE order_id = $1", orderID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAppendShreddingKey: a unit that ends an order deletes its key and
// leaves its erasure to record in the transaction of its events; the same
// unit repeated byte for byte (its outcome unknown) succeeds and deletes
// and records nothing more, also once the erasure was recorded and
// forgotten; a unit that loses its race writes neither; an order without a
// key gets its events and no erasure.
func TestAppendShreddingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, _ := newStore(t, "m1")
	u := keystore.Units{Events: pgstore.New(pool), Keys: s}
	order, lost, none := uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, id := range []string{order, lost} {
		if _, err := s.Create(ctx, id, "", envelope.NewDataKey(), nil, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	ended := func(id string, exp eventstore.ExpectedRevision) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: "order-" + id, Expected: exp, Events: []eventstore.EventData{
			{ID: uuid.NewSHA1(uuid.NameSpaceURL, []byte(id)).String(), Type: "OrderConfirmed", Data: []byte(`{}`), Metadata: []byte(`{}`)}}}
	}
	unit := ended(order, eventstore.NoStream())
	events := func(id string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE stream = $1", "order-"+id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func(when string, id string, key bool, erasures, evs int) {
		t.Helper()
		_, has, err := s.Key(ctx, id)
		if err != nil || has != key || erasureRows(t, pool, id) != erasures || events(id) != evs {
			t.Errorf("%s: order %s key %t (%v), %d erasures, %d events; want key %t, %d erasures, %d events",
				when, id, has, err, erasureRows(t, pool, id), events(id), key, erasures, evs)
		}
	}

	if _, err := u.AppendShreddingKey(ctx, order, unit); err != nil {
		t.Fatal(err)
	}
	check("after the unit", order, false, 1, 1)
	if res, err := u.AppendShreddingKey(ctx, order, unit); err != nil || len(res) != 1 || res[0].NextRevision != 0 {
		t.Fatalf("the unit repeated = %+v, %v; want the stored revision 0", res, err)
	}
	check("after a repeat", order, false, 1, 1)
	if dropped, err := s.ForgetErasures(ctx, []string{order}); err != nil || len(dropped) != 1 {
		t.Fatalf("ForgetErasures = %v, %v; want the order's erasure dropped", dropped, err)
	}
	if _, err := u.AppendShreddingKey(ctx, order, unit); err != nil {
		t.Fatal(err)
	}
	check("after a repeat once the erasure was recorded", order, false, 0, 1)

	// A unit at a revision the stream left: nothing written.
	if _, err := u.Events.Append(ctx, "order-"+lost, eventstore.NoStream(),
		eventstore.EventData{ID: uuid.NewString(), Type: "OrderPlaced", Data: []byte(`{}`), Metadata: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := u.AppendShreddingKey(ctx, lost, ended(lost, eventstore.NoStream())); !errors.Is(err, eventstore.ErrWrongExpectedRevision) {
		t.Fatalf("a unit that lost its race = %v, want a revision conflict", err)
	}
	check("after a lost race", lost, true, 0, 1)

	if _, err := u.AppendShreddingKey(ctx, none, ended(none, eventstore.NoStream())); err != nil {
		t.Fatal(err)
	}
	check("an order without a key", none, false, 0, 1)
}

// TestAppendCreatingKeyRepeatMakesNoKeyAgain: the unit that creates an
// order's key creates it with its events; repeated byte for byte (its
// answer lost) it creates nothing, also once the key was deleted in
// between (the order ended while the repeat was on its way), so a deleted
// key is never made again.
func TestAppendCreatingKeyRepeatMakesNoKeyAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool, _ := newStore(t, "m1")
	u := keystore.Units{Events: pgstore.New(pool), Keys: s}
	order := uuid.NewString()
	ev := func(typ string) eventstore.EventData {
		return eventstore.EventData{ID: uuid.NewString(), Type: typ, Data: []byte(`{}`), Metadata: []byte(`{}`)}
	}
	unit := []eventstore.StreamAppend{
		{Stream: "intent-" + order, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("IntentRecorded")}},
		{Stream: "order-" + order, Expected: eventstore.NoStream(), Events: []eventstore.EventData{ev("OrderPlaced")}},
	}
	create := func() {
		t.Helper()
		res, err := u.AppendCreatingKey(ctx, order, "intent-"+order, envelope.NewDataKey(), nil, time.Now().Add(time.Hour), unit...)
		if err != nil || len(res) != 2 || res[0].NextRevision != 0 || res[1].NextRevision != 0 {
			t.Fatalf("AppendCreatingKey = %+v, %v; want revision 0 on both streams", res, err)
		}
	}
	hasKey := func(when string, want bool) {
		t.Helper()
		if _, has, err := s.Key(ctx, order); err != nil || has != want {
			t.Errorf("%s: key %t (%v), want %t", when, has, err, want)
		}
	}

	create()
	hasKey("after the unit", true)
	create()
	hasKey("after a repeat", true)
	if err := s.Shred(ctx, order); err != nil {
		t.Fatal(err)
	}
	hasKey("after the delete", false)
	create()
	hasKey("after a repeat that came after the delete", false)
}
