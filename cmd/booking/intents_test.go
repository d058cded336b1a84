package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/explaintext"
	"github.com/retrysafe/booking/cmd/booking/internal/storage"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore/kurrentdb/kurrentdbtest"
	"github.com/retrysafe/booking/eventstore/pgcoord"
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

// TestIntentsExplainReadsTheConfiguredEventStore: on a deployment whose
// event store is KurrentDB (--event-store, BOOKING_EVENT_STORE), booking
// intents explain reads the intent from it — exit 0 with the show intent
// and its target — and the same database read as the PostgreSQL store
// holds no intent (exit 1), so the answer comes from the store named.
func TestIntentsExplainReadsTheConfiguredEventStore(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	spec := kurrentdbtest.NewTest(t, kurrentdbtest.Options{}).URL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	elog, err := storage.OpenEventLog(spec, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer elog.Close()
	h := commands.New(commands.DefaultConfig(), elog.Store, pgcoord.NewClock(pool), nil, commands.NewRegistry(), nil)
	show, _, err := h.ScheduleShow(ctx, commands.Request{Actor: "admin", Operation: commands.OpScheduleShow, Key: "show-1"},
		commands.ScheduleShowCommand{Name: "Concert", StartsAt: time.Date(2030, 1, 1, 20, 0, 0, 0, time.UTC), Capacity: 10,
			Price: domain.Money{Amount: 1000, Currency: "EUR"}})
	if err != nil {
		t.Fatalf("ScheduleShow on KurrentDB: %v", err)
	}

	args := []string{"intents", "explain", "--database-url", db, "--event-store", spec, "--actor", "admin", "--key", "show-1", "--json"}
	var stdout, stderr bytes.Buffer
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("booking %v = %v, want exit 0", args, err)
	}
	var doc struct {
		Items []struct {
			Operation string
			Target    struct{ Kind, ID string }
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || len(doc.Items) != 1 ||
		doc.Items[0].Operation != commands.OpScheduleShow || doc.Items[0].Target.Kind != "show" || doc.Items[0].Target.ID != show.ID {
		t.Errorf("booking %v printed %s, want the one %s intent of show %s", args, stdout.String(), commands.OpScheduleShow, show.ID)
	}

	args = []string{"intents", "explain", "--database-url", db, "--event-store", "postgres", "--actor", "admin", "--key", "show-1"}
	if err := run(ctx, args, &stdout, &stderr); !errors.Is(err, explaintext.ErrNoIntent) || exitCode(err) != exitFailure {
		t.Errorf("booking %v = %v, want %q, exit %d (the intent is on KurrentDB only)", args, err, explaintext.ErrNoIntent, exitFailure)
	}
}
