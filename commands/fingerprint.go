package commands

import (
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
)

// CanonicalVersion is the version of the canonical form used for new intents.
// A repeat is fingerprinted under the version stored with its intent, so a
// deploy that changes the canonical form never turns retries into 422s.
const CanonicalVersion = 1

// Fingerprint returns the hex SHA-256 of the canonical form, version version,
// of a normalized command of operation. Version 1 is the RFC 8785 (JCS)
// serialization of {"cmd": command, "op": operation, "v": 1}: property order
// and whitespace never matter and numbers are compared by value. command
// must hold only JSON values (strings already NFC-normalized by the caller,
// integers as int64 within ±(2^53−1), maps and slices of those). Returns an
// error for an unknown version.
func Fingerprint(version int, operation string, command map[string]any) (string, error) {
	switch version {
	case 1:
		raw, err := json.Marshal(map[string]any{"v": 1, "op": operation, "cmd": command})
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
