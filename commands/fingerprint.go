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
		if a, b, ok := nfcNamesCollide(command); ok {
			return "", fmt.Errorf("fingerprint: member names %q and %q of one object are equal in NFC", a, b)
		}
		raw, err := json.Marshal(map[string]any{"v": 1, "op": operation, "cmd": nfcValue(command)})
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
// names included, in Normalization Form C.
func nfcValue(v any) any {
	switch v := v.(type) {
	case string:
		return norm.NFC.String(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[norm.NFC.String(k)] = nfcValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = nfcValue(e)
		}
		return out
	default:
		return v
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

// nfcNamesCollide reports two member names of one object of the JSON value
// v that differ as sent but are equal in NFC: nfcValue would keep only one
// of the two members, picked by map order, so such a value has no canonical
// form (RFC 8785 §3.2.3 wants unique names).
func nfcNamesCollide(v any) (a, b string, ok bool) {
	switch v := v.(type) {
	case map[string]any:
		var seen map[string]string
		for k, e := range v {
			if !norm.NFC.IsNormalString(k) {
				if seen == nil {
					seen = make(map[string]string, len(v))
					for n := range v {
						seen[n] = n
					}
				}
				nk := norm.NFC.String(k)
				if other, dup := seen[nk]; dup && other != k {
					return min(k, other), max(k, other), true
				}
				seen[nk] = k
			}
			if a, b, ok := nfcNamesCollide(e); ok {
				return a, b, true
			}
		}
	case []any:
		for _, e := range v {
			if a, b, ok := nfcNamesCollide(e); ok {
				return a, b, true
			}
		}
	}
	return "", "", false
}

// nfcCommand is nfcValue on a command.
func nfcCommand(m map[string]any) map[string]any {
	out, _ := nfcValue(m).(map[string]any)
	return out
}
