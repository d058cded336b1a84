// Package envelopetest builds master keys and keyrings of package envelope
// for tests, failing the test instead of returning an error.
package envelopetest

import (
	"strings"
	"testing"

	"github.com/retrysafe/booking/commands/envelope"
)

// MasterKey returns a new random master key entry "id:base64"
// (envelope.GenerateMasterKey). It fails tb for an invalid id.
func MasterKey(tb testing.TB, id string) string {
	tb.Helper()
	e, err := envelope.GenerateMasterKey(id)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// Keyring returns the keyring of the master key entries, the first of which
// wraps new data keys (envelope.ParseKeyring of the entries joined by
// commas). It fails tb for an invalid entry.
func Keyring(tb testing.TB, entries ...string) *envelope.Keyring {
	tb.Helper()
	r, err := envelope.ParseKeyring(strings.Join(entries, ","))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}
