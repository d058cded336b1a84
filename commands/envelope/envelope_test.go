package envelope_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands/envelope"
)

func mustKeyring(t *testing.T, s string) *envelope.Keyring {
	t.Helper()
	r, err := envelope.ParseKeyring(s)
	if err != nil {
		t.Fatalf("ParseKeyring(...) error = %v", err)
	}
	return r
}

func mustGenerate(t *testing.T, id string) string {
	t.Helper()
	e, err := envelope.GenerateMasterKey(id)
	if err != nil {
		t.Fatalf("GenerateMasterKey(%q) error = %v", id, err)
	}
	return e
}

func TestDataKeySealOpen(t *testing.T) {
	t.Parallel()
	dk := envelope.NewDataKey()
	aad := []byte("booking/order/o1/payment_token")
	ct := dk.Seal([]byte("tok_visa_secret"), aad)
	if bytes.Contains(ct, []byte("tok_visa_secret")) {
		t.Fatalf("Seal(...) = %x contains the plaintext", ct)
	}
	if got, want := len(ct), 1+12+len("tok_visa_secret")+16; got != want {
		t.Errorf("len(Seal(...)) = %d, want %d (format byte, nonce, ciphertext, tag)", got, want)
	}
	pt, err := dk.Open(ct, aad)
	if err != nil || string(pt) != "tok_visa_secret" {
		t.Fatalf("Open(Seal(x)) = %q, %v; want tok_visa_secret", pt, err)
	}
	if again := dk.Seal([]byte("tok_visa_secret"), aad); bytes.Equal(again, ct) {
		t.Errorf("two Seals of one plaintext are equal: nonces must be random")
	}

	tests := []struct {
		name string
		key  *envelope.DataKey
		ct   []byte
		aad  []byte
	}{
		{"Another order's associated data does not open it.", dk, ct, []byte("booking/order/o2/payment_token")},
		{"Another field's associated data does not open it.", dk, ct, []byte("booking/order/o1/attempt/1/request_body")},
		{"Another data key does not open it.", envelope.NewDataKey(), ct, aad},
		{"A flipped bit does not open.", dk, flip(ct, len(ct)-1), aad},
		{"An unknown format byte does not open.", dk, flip(ct, 0), aad},
		{"A truncated ciphertext does not open.", dk, ct[:10], aad},
		{"Nothing does not open.", dk, nil, aad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if pt, err := tt.key.Open(tt.ct, tt.aad); !errors.Is(err, envelope.ErrDecrypt) {
				t.Errorf("Open(...) = %q, %v; want ErrDecrypt", pt, err)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

func TestDataKeyFromBytes(t *testing.T) {
	t.Parallel()
	raw := bytes.Repeat([]byte{7}, envelope.KeySize)
	a, err := envelope.DataKeyFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := envelope.DataKeyFromBytes(raw)
	if pt, err := b.Open(a.Seal([]byte("x"), nil), nil); err != nil || string(pt) != "x" {
		t.Errorf("a key made twice from the same bytes: Open = %q, %v; want x", pt, err)
	}
	if _, err := envelope.DataKeyFromBytes(raw[:16]); err == nil {
		t.Errorf("DataKeyFromBytes(16 bytes) error = nil, want an error")
	}
}

// TestRotation: data keys wrapped under master key A still unwrap after B
// was put first; new data keys are wrapped under B; once A is removed,
// what A wrapped no longer unwraps.
func TestRotation(t *testing.T) {
	t.Parallel()
	a, b := mustGenerate(t, "a"), mustGenerate(t, "b")
	aad := []byte("booking/order-key/o1")
	before := mustKeyring(t, a)
	dk := envelope.NewDataKey()
	secret := dk.Seal([]byte("tok_decline_old"), []byte("t"))
	wa := before.Wrap(dk, aad)
	if wa.KeyID != "a" {
		t.Fatalf("Wrap under keyring [a]: KeyID = %q, want a", wa.KeyID)
	}

	rotated := mustKeyring(t, b+","+a)
	if got := rotated.PrimaryID(); got != "b" {
		t.Errorf("PrimaryID() = %q, want b", got)
	}
	old, err := rotated.Unwrap(wa, aad)
	if err != nil {
		t.Fatalf("Unwrap(wrapped by a) with [b, a] error = %v", err)
	}
	if pt, err := old.Open(secret, []byte("t")); err != nil || string(pt) != "tok_decline_old" {
		t.Errorf("the unwrapped old key opens %q, %v; want tok_decline_old", pt, err)
	}
	dk2 := envelope.NewDataKey()
	wb := rotated.Wrap(dk2, aad)
	if wb.KeyID != "b" {
		t.Errorf("Wrap after rotation: KeyID = %q, want b", wb.KeyID)
	}
	if _, err := before.Unwrap(wb, aad); !errors.Is(err, envelope.ErrUnknownMasterKey) {
		t.Errorf("Unwrap(wrapped by b) with [a] error = %v, want ErrUnknownMasterKey", err)
	}

	onlyB := mustKeyring(t, b)
	if _, err := onlyB.Unwrap(wa, aad); !errors.Is(err, envelope.ErrUnknownMasterKey) {
		t.Errorf("Unwrap(wrapped by a) with [b] error = %v, want ErrUnknownMasterKey", err)
	}
	if !strings.Contains(func() string { _, err := onlyB.Unwrap(wa, aad); return err.Error() }(), `"a"`) {
		t.Errorf("the unknown-master-key error does not name the key id")
	}
	if _, err := rotated.Unwrap(wa, []byte("booking/order-key/o2")); !errors.Is(err, envelope.ErrDecrypt) {
		t.Errorf("Unwrap with another order's associated data error = %v, want ErrDecrypt", err)
	}
	// A master key with the same id but other bytes does not unwrap.
	if _, err := mustKeyring(t, mustGenerate(t, "a")).Unwrap(wa, aad); !errors.Is(err, envelope.ErrDecrypt) {
		t.Errorf("Unwrap under another key named a: error = %v, want ErrDecrypt", err)
	}
}

func TestParseKeyring(t *testing.T) {
	t.Parallel()
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))
	url32 := base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))
	k16 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	valid := []struct {
		name string
		in   string
		ids  []string
	}{
		{"One key.", "k1:" + k32, []string{"k1"}},
		{"Two keys, the first wraps.", "new:" + k32 + ",old:" + k32, []string{"new", "old"}},
		{"Spaces around entries are ignored.", " k1:" + k32 + " , k2:" + k32 + " ", []string{"k1", "k2"}},
		{"A file: one key a line, comments and blank lines skipped.", "# rotated 2030-01-01\nk2:" + k32 + "\n\nk1:" + k32 + "\n", []string{"k2", "k1"}},
		{"URL-safe base64 without padding is accepted.", "k.1_x-y:" + url32, []string{"k.1_x-y"}},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := envelope.ParseKeyring(tt.in)
			if err != nil {
				t.Fatalf("ParseKeyring(%q) error = %v", tt.in, err)
			}
			if got := strings.Join(r.IDs(), ","); got != strings.Join(tt.ids, ",") {
				t.Errorf("IDs() = %s, want %s", got, strings.Join(tt.ids, ","))
			}
			if r.PrimaryID() != tt.ids[0] || !r.Has(tt.ids[len(tt.ids)-1]) || r.Has("nope") {
				t.Errorf("PrimaryID/Has disagree with %v", tt.ids)
			}
		})
	}
	invalid := []struct {
		name, in, want string
	}{
		{"Empty is refused.", "", "no master keys"},
		{"Only commas are refused.", " , ,", "no master keys"},
		{"An entry without an id is refused.", k32, "entry 1: want id:base64"},
		{"An empty id is refused.", ":" + k32, "entry 1"},
		{"An id with other characters is refused.", "k 1:" + k32, "only letters"},
		{"A repeated id is refused.", "k:" + k32 + ",k:" + k32, "appears twice"},
		{"A short key is refused.", "k:" + k16, "16 bytes, want 32"},
		{"Bad base64 is refused.", "k:***", "not valid base64"},
		{"The second entry is named.", "a:" + k32 + ",b:xx", "entry 2 (b)"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := envelope.ParseKeyring(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseKeyring(%q) error = %v, want one containing %q", tt.in, err, tt.want)
			}
			if strings.Contains(err.Error(), k32) || strings.Contains(err.Error(), k16) {
				t.Errorf("ParseKeyring error %q shows key bytes", err)
			}
		})
	}
}

func TestGenerateMasterKey(t *testing.T) {
	t.Parallel()
	e1, e2 := mustGenerate(t, "dev-1"), mustGenerate(t, "dev-1")
	if e1 == e2 {
		t.Errorf("two generated keys are equal")
	}
	r := mustKeyring(t, e1)
	if r.PrimaryID() != "dev-1" {
		t.Errorf("PrimaryID() = %q, want dev-1", r.PrimaryID())
	}
	if _, err := envelope.GenerateMasterKey("bad id"); err == nil {
		t.Errorf("GenerateMasterKey(\"bad id\") error = nil, want an error")
	}
}
