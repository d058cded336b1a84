package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/config"
	"github.com/retrysafe/booking/cmd/booking/internal/explaintext"
	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
)

type intentsCmd struct {
	Explain intentsExplainCmd `cmd:"" help:"Explain an actor's intents under an idempotency key: each one's durable timeline from the event log."`
}

// intentsExplainCmd is `booking intents explain`: what GET /v1/intents?key=K
// answers the actor, for an operator. It only reads the event store the
// service runs on (--event-store): PostgreSQL's, or KurrentDB.
type intentsExplainCmd struct {
	Actor       string        `name:"actor" required:"" help:"The actor id (the token's name in BOOKING_API_TOKENS, never the token)."`
	Key         string        `name:"key" required:"" help:"The Idempotency-Key, as the client sent it (an sf-string \"abc\" is unescaped)."`
	JSON        bool          `name:"json" help:"Print the JSON document GET /v1/intents answers instead of text."`
	DatabaseURL string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL of the service's database (the event store unless --event-store names KurrentDB)."`
	EventStore  string        `name:"event-store" env:"BOOKING_EVENT_STORE" default:"postgres" help:"The service's event store: postgres, or a kurrentdb://, kurrentdb+discover://, esdb:// or esdb+discover:// connection string."`
	Retention   time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"The service's intent retention (for expires_at)."`
}

// Run reads the actor's intent streams under the key and prints them; when
// there is none it returns explaintext.NoIntent's error (exit status 1).
func (c *intentsExplainCmd) Run(e *env) error {
	if strings.TrimSpace(c.Actor) == "" {
		return configError("--actor", "is empty; want the actor id, such as alice")
	}
	key, err := httpapi.ParseKey(c.Key)
	if err != nil {
		return configError("--key", "%v", err)
	}
	if c.Retention <= 0 {
		return configError("BOOKING_INTENT_RETENTION", "must be a positive duration such as 24h")
	}
	if err := config.CheckEventStore(c.EventStore); err != nil {
		return err
	}
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(e.ctx, c.DatabaseURL)
	if err != nil {
		return configError("DATABASE_URL", "%v", err)
	}
	defer pool.Close()
	if err := pool.Ping(e.ctx); err != nil {
		return databaseError(err)
	}
	elog, err := openEventLog(c.EventStore, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer elog.close()
	cfg := commands.DefaultConfig()
	cfg.IntentRetention = c.Retention
	h := commands.New(cfg, elog.Store, nil, nil, commands.NewRegistry(), nil)
	xs, err := h.ExplainIntents(e.ctx, c.Actor, key)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	doc := httpapi.ExplainDocument(xs)
	if c.JSON { // {"items": []} too: the exit status says whether any was found
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
	} else {
		explaintext.Print(e.stdout, doc)
	}
	return explaintext.NoIntent(c.Actor, key, doc)
}
