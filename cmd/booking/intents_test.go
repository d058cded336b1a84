package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/retrysafe/booking/cmd/booking/internal/explaintext"
	"github.com/retrysafe/booking/migrations/pgtest"
)

// TestIntentsExplainNothingFoundExitsOne: `booking intents explain` for an
// actor with no intent under the key exits 1 (a lookup that found nothing,
// docs/cli.md), not 0, with a message naming the actor and the key it
// looked up; the text output is empty, and --json still prints the API's
// empty document, so a script reads the answer from the exit status.
func TestIntentsExplainNothingFoundExitsOne(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	for _, asJSON := range []bool{false, true} {
		args := []string{"intents", "explain", "--database-url", db, "--actor", "bob", "--key", `"order-1"`}
		if asJSON {
			args = append(args, "--json")
		}
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		if !errors.Is(err, explaintext.ErrNoIntent) || exitCode(err) != exitFailure {
			t.Errorf("booking %v = %v, want %q, exit %d", args, err, explaintext.ErrNoIntent, exitFailure)
			continue
		}
		if want := `no intent of actor "bob" under Idempotency-Key "order-1"`; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("booking %v = %q, want it to begin %q", args, err, want)
		}
		var doc struct{ Items []json.RawMessage }
		switch {
		case !asJSON && stdout.Len() != 0:
			t.Errorf("booking %v printed %q, want nothing on stdout", args, stdout.String())
		case asJSON && (json.Unmarshal(stdout.Bytes(), &doc) != nil || doc.Items == nil || len(doc.Items) != 0):
			t.Errorf("booking %v printed %q, want {\"items\": []}", args, stdout.String())
		}
	}
}
