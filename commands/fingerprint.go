package commands

import (
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
	"golang.org/x/text/unicode/norm"
)

// CanonicalVersion is the version of the canonical form used for new intents.
// A repeat is fingerprinted under the version stored with its intent, so a
// deploy that changes the canonical form never turns retries into 422s.
const CanonicalVersion = 1

// Fingerprint returns the hex SHA-256 of the canonical form, version version,
// of a command of operation. Version 1 is the RFC 8785 (JCS) serialization
// of {"cmd": command, "op": operation, "v": 1} with every string of command
// in Unicode Normalization Form C (UAX #15): property order and whitespace
// never matter, numbers are compared by value, and strings that differ only
// in their normalization are the same. The normalization exists only here,
// for the comparison: commands, events and answers keep strings as sent.
// command must hold only JSON values (strings, integers as int64 within
// ±(2^53−1), maps and slices of those). Returns an error for an unknown
// version, a value JSON cannot hold (NaN, a channel) and an object with two
// member names equal in NFC.
//
// A fingerprint computed lately is answered from a bounded memo keyed by the
// exact input (fingerprintMemo), so a client's retry is not canonicalized
// again.
func Fingerprint(version int, operation string, command map[string]any) (string, error) {
	key, memo := memoKey(version, operation, command)
	if memo {
		if fp, ok := fingerprints.get(key); ok {
			return fp, nil
		}
	}
	fp, err := fingerprint(version, operation, command)
	if err == nil && memo {
		fingerprints.put(key, fp)
	}
	return fp, err
}

// fingerprint is Fingerprint without the memo.
func fingerprint(version int, operation string, command map[string]any) (string, error) {
	switch version {
	case 1:
		cmd, err := nfcValue(command)
		if err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
		raw, err := json.Marshal(map[string]any{"v": 1, "op": operation, "cmd": cmd})
		if err != nil {
			return "", fmt.Errorf("fingerprint: %w", err)
		}
		canon, err := jcs.Transform(raw)
		if err != nil {
			return "", fmt.Errorf("fingerprint: canonicalize: %w", err)
		}
		return sha256Hex(canon), nil
	default:
		return "", fmt.Errorf("fingerprint: unknown canonical form version %d", version)
	}
}

// nfcValue returns a copy of the JSON value v with every string, member
// names included, in Normalization Form C. An object with two member names
// that differ as sent but are equal in NFC has no canonical form (RFC 8785
// §3.2.3 wants unique names; the copy would keep one of the two by map
// order): nfcValue returns an error naming them.
func nfcValue(v any) (any, error) {
	switch v := v.(type) {
	case string:
		return norm.NFC.String(v), nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			nk := norm.NFC.String(k)
			if _, dup := out[nk]; dup {
				return nil, fmt.Errorf("member name %q of an object is equal in NFC to another of its names", k)
			}
			ne, err := nfcValue(e)
			if err != nil {
				return nil, err
			}
			out[nk] = ne
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			ne, err := nfcValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = ne
		}
		return out, nil
	default:
		return v, nil
	}
}

// normalizeJSON round-trips a command through JSON so that a freshly built
// command compares equal to one decoded from a stored event (numbers become
// float64, as encoding/json decodes them).
func normalizeJSON(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		return m
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		return m
	}
	return out
}

// nfcCommand is nfcValue on a command (nil when two of its names are equal
// in NFC).
func nfcCommand(m map[string]any) map[string]any {
	v, _ := nfcValue(m)
	out, _ := v.(map[string]any)
	return out
}
