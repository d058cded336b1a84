package commands

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestFingerprintMemoAnswersAsComputed: a fingerprint answered from the
// memo is the one computed without it, for inputs whose Go types differ but
// whose JSON is the same (and so whose fingerprints agree) and for inputs
// whose encodings could run together without lengths; every input, asked
// twice, is kept after the first time.
func TestFingerprintMemoAnswersAsComputed(t *testing.T) {
	t.Parallel()
	cmds := []map[string]any{
		{"quantity": int64(2), "show_id": fpShowID},
		{"quantity": 2, "show_id": fpShowID},
		{"quantity": float64(2), "show_id": fpShowID},
		{"quantity": json.Number("2.0"), "show_id": fpShowID},
		{"quantity": "2", "show_id": fpShowID},
		{"a": "bc", "d": ""},
		{"a": "b", "cd": ""},
		{"ab": "c", "d": ""},
		{"a": []any{"b", "c"}},
		{"a": []any{"bc"}},
		{"a": map[string]any{"b": nil, "c": true}},
		{"a": map[string]any{"b": false, "c": nil}},
		{"payment": map[string]any{"token_sha256": sha256Hex([]byte("tok_visa"))}, "reservation_id": fpShowID},
	}
	for _, cmd := range cmds {
		want, err := fingerprint(CanonicalVersion, OpReserveSeats, cmd)
		if err != nil {
			t.Fatalf("fingerprint(%v): %v", cmd, err)
		}
		for i := range 2 {
			got, err := Fingerprint(CanonicalVersion, OpReserveSeats, cmd)
			if err != nil || got != want {
				t.Errorf("Fingerprint(%v) call %d = %q, %v; want %q computed without the memo", cmd, i+1, got, err, want)
			}
		}
		key, ok := memoKey(CanonicalVersion, OpReserveSeats, cmd)
		if _, kept := fingerprints.get(key); !ok || !kept {
			t.Errorf("memoKey(%v) = _, %v, kept %v; want a kept key", cmd, ok, kept)
		}
	}
	seen := map[string]int{}
	for i, cmd := range cmds {
		key, _ := memoKey(CanonicalVersion, OpReserveSeats, cmd)
		if j, dup := seen[key]; dup {
			t.Errorf("memoKey of %v equals memoKey of %v; want one key per input", cmd, cmds[j])
		}
		seen[key] = i
	}
}

// TestFingerprintMemoIsBoundedAndSkipsOtherTypes: the memo never holds more
// than fingerprintMemoSize entries, and a command holding a type memoKey has
// no tag for, or too long for a key, is never kept.
func TestFingerprintMemoIsBoundedAndSkipsOtherTypes(t *testing.T) {
	t.Parallel()
	f := &fingerprintMemo{m: map[string]string{}}
	for i := range fingerprintMemoSize + 10 {
		f.put(fmt.Sprint(i), "fp")
		if n := len(f.m); n > fingerprintMemoSize {
			t.Fatalf("after %d puts the memo holds %d entries, want at most %d", i+1, n, fingerprintMemoSize)
		}
	}
	if _, ok := f.get(fmt.Sprint(fingerprintMemoSize + 9)); !ok {
		t.Errorf("the latest entry is not kept")
	}
	type other struct{ A string }
	if _, ok := memoKey(CanonicalVersion, "op", map[string]any{"x": other{"a"}}); ok {
		t.Errorf("memoKey of a struct value reports ok; want not memoized")
	}
	if _, ok := memoKey(CanonicalVersion, "op", map[string]any{"x": []any{"a", make(chan int)}}); ok {
		t.Errorf("memoKey of a channel in a slice reports ok; want not memoized")
	}
	if _, ok := memoKey(CanonicalVersion, "op", map[string]any{"name": strings.Repeat("x", maxMemoKey)}); ok {
		t.Errorf("memoKey of a %d-byte name reports ok; want not memoized (keys are at most %d bytes)", maxMemoKey, maxMemoKey)
	}
	if _, ok := memoKey(CanonicalVersion, "op", map[string]any{"name": strings.Repeat("x", maxMemoKey/2)}); !ok {
		t.Errorf("memoKey of a %d-byte name reports not ok; want memoized", maxMemoKey/2)
	}
}
