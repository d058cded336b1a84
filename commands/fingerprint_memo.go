package commands

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"sync"
)

// fingerprintMemoSize bounds fingerprintMemo's entries, and maxMemoKey
// (bytes) an entry's key: at most about 5 MB in all, under a megabyte for
// the service's commands (about 200 bytes an entry with the fingerprint and
// the map's overhead).
const (
	fingerprintMemoSize = 4096
	maxMemoKey          = 1024
)

// fingerprints is the process's fingerprintMemo.
var fingerprints = &fingerprintMemo{m: make(map[string]string, fingerprintMemoSize)}

// fingerprintMemo keeps recent fingerprints by the exact input that gave
// them (memoKey). Fingerprint is a pure function of its input, so a kept
// entry is right for as long as it is kept; the memo holds at most
// fingerprintMemoSize entries and starts afresh when full, which keeps the
// latest commands, the ones a retry repeats. Safe for concurrent use.
type fingerprintMemo struct {
	mu sync.Mutex
	m  map[string]string
}

// get returns the fingerprint kept for key.
func (f *fingerprintMemo) get(key string) (string, bool) {
	f.mu.Lock()
	fp, ok := f.m[key]
	f.mu.Unlock()
	return fp, ok
}

// put keeps fp for key, emptying the memo first when it is full.
func (f *fingerprintMemo) put(key, fp string) {
	f.mu.Lock()
	if len(f.m) >= fingerprintMemoSize {
		clear(f.m)
	}
	f.m[key] = fp
	f.mu.Unlock()
}

// memoKey encodes Fingerprint's input one to one: a type tag before every
// value, a length before every string and every map or slice, map members
// in sorted order. Two inputs share a key only when they are the same
// values of the same Go types, so they share a fingerprint. It reports
// false for a command holding another type or whose key would be longer
// than maxMemoKey, which is not memoized.
func memoKey(version int, operation string, command map[string]any) (string, bool) {
	var buf [256]byte // the service's commands fit: no allocation but the key's
	b := binary.AppendUvarint(buf[:0], uint64(version))
	b = appendMemoString(b, operation)
	b, ok := appendMemoValue(b, command)
	if !ok || len(b) > maxMemoKey {
		return "", false
	}
	return string(b), true
}

// appendMemoValue appends v's encoding (see memoKey) to b; false when v
// holds a type the encoding has no tag for.
func appendMemoValue(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, 'z'), true
	case bool:
		if v {
			return append(b, 't'), true
		}
		return append(b, 'f'), true
	case string:
		return appendMemoString(append(b, 's'), v), true
	case json.Number:
		return appendMemoString(append(b, 'n'), string(v)), true
	case int:
		return binary.AppendVarint(append(b, 'I'), int64(v)), true
	case int64:
		return binary.AppendVarint(append(b, 'i'), v), true
	case float64:
		return binary.AppendUvarint(append(b, 'd'), math.Float64bits(v)), true
	case map[string]any:
		return appendMemoMap(b, v)
	case []any:
		b = binary.AppendUvarint(append(b, 'a'), uint64(len(v)))
		for _, e := range v {
			var ok bool
			if b, ok = appendMemoValue(b, e); !ok {
				return b, false
			}
		}
		return b, true
	}
	return b, false
}

// appendMemoMap appends m's encoding: its size, then each member name and
// value in name order.
func appendMemoMap(b []byte, m map[string]any) ([]byte, bool) {
	b = binary.AppendUvarint(append(b, 'm'), uint64(len(m)))
	var names [8]string
	keys := names[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendMemoString(b, k)
		var ok bool
		if b, ok = appendMemoValue(b, m[k]); !ok {
			return b, false
		}
	}
	return b, true
}

// appendMemoString appends s with its length before it.
func appendMemoString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
