package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/cmd/booking/internal/httpapi"
	"github.com/retrysafe/booking/commands"
	"github.com/retrysafe/booking/eventstore/pgstore"
)

type intentsCmd struct {
	Explain intentsExplainCmd `cmd:"" help:"Explain an actor's intents under an idempotency key: each one's durable timeline from the event log."`
}

// intentsExplainCmd is `booking intents explain`: what GET /v1/intents?key=K
// answers the actor, for an operator. It only reads the event store.
type intentsExplainCmd struct {
	Actor       string        `name:"actor" required:"" help:"The actor id (the token's name in BOOKING_API_TOKENS, never the token)."`
	Key         string        `name:"key" required:"" help:"The Idempotency-Key, as the client sent it (an sf-string \"abc\" is unescaped)."`
	JSON        bool          `name:"json" help:"Print the JSON document GET /v1/intents answers instead of text."`
	DatabaseURL string        `name:"database-url" env:"DATABASE_URL" help:"PostgreSQL URL of the event store."`
	Retention   time.Duration `name:"intent-retention" env:"BOOKING_INTENT_RETENTION" default:"24h" help:"The service's intent retention (for expires_at)."`
}

// Run reads the actor's intent streams under the key and prints them.
func (c *intentsExplainCmd) Run(e *env) error {
	key, err := httpapi.ParseKey(c.Key)
	if err != nil {
		return configError("--key", "%v", err)
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
	cfg := commands.DefaultConfig()
	cfg.IntentRetention = c.Retention
	h := commands.New(cfg, pgstore.New(pool), nil, nil, commands.NewRegistry(), nil)
	xs, err := h.ExplainIntents(e.ctx, c.Actor, key)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	doc := httpapi.ExplainDocument(xs)
	if c.JSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	printExplanations(e.stdout, c.Actor, doc)
	return nil
}

// printExplanations writes doc for a human: one block per intent, its
// outcome, then its timeline, payment attempts and refunds.
func printExplanations(w io.Writer, actor string, doc httpapi.IntentsDocument) {
	if len(doc.Items) == 0 {
		fmt.Fprintf(w, "no intent of actor %q under this key (never recorded, past retention, or another actor's)\n", actor)
		return
	}
	for i, x := range doc.Items {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  (%s)\n", x.Operation, x.Stream)
		fmt.Fprintf(w, "  recorded     %s, expires %s (service clock)\n", x.RecordedAt.Format(time.RFC3339Nano), x.ExpiresAt.Format(time.RFC3339))
		if x.CorrelationID != "" {
			fmt.Fprintf(w, "  request      %s\n", x.CorrelationID)
		}
		fmt.Fprintf(w, "  fingerprint  %s (canonical form v%d)\n", x.Fingerprint, x.CanonicalVersion)
		fmt.Fprintf(w, "  target       %s %s (%s)\n", x.Target.Kind, x.Target.ID, x.Target.Path)
		out := fmt.Sprintf("%s, %s → a repeat is answered %d", x.Outcome.State, x.Outcome.Result, x.Outcome.Status)
		if x.Outcome.Code != "" && x.Outcome.Code != x.Outcome.Result {
			out += " " + x.Outcome.Code
		}
		fmt.Fprintf(w, "  outcome      %s\n", out)
		fmt.Fprintln(w, "  timeline")
		for _, t := range x.Timeline {
			var d []string
			add := func(k, v string) {
				if v != "" {
					d = append(d, k+"="+v)
				}
			}
			if t.Attempt > 0 {
				add("attempt", fmt.Sprint(t.Attempt))
			}
			add("provider_key", t.ProviderKey)
			add("executor", t.Executor)
			if t.LeaseUntil != nil {
				add("lease_until", t.LeaseUntil.Format(time.RFC3339Nano))
			}
			add("charge", t.ChargeID)
			add("refund_key", t.RefundKey)
			add("observed_by", t.ObservedBy)
			add("code", t.Code)
			add("reason", t.Reason)
			add("resource", t.ResourceID)
			add("request", t.RequestID)
			add("client_request", t.ClientRequestID)
			fmt.Fprintf(w, "    %-13s %s  %-26s %s@%d  %s\n", t.Position, t.At.Format("15:04:05.000"), t.Step, t.Stream, t.Revision, strings.Join(d, " "))
		}
		for _, p := range x.Payments {
			fmt.Fprintf(w, "  attempt %d    key %s: %s", p.Attempt, p.ProviderKey, p.Outcome)
			if p.ChargeID != "" {
				fmt.Fprintf(w, " (charge %s)", p.ChargeID)
			}
			fmt.Fprintf(w, "; %d unknown outcome(s), %d lease takeover(s), %d reconciliation(s); positions %s\n",
				p.Unknown, p.LeaseTakeovers, len(p.Reconciliations), strings.Join(p.Positions, " "))
			for _, r := range p.Reconciliations {
				fmt.Fprintf(w, "               reconciled at %s by %s: %s %s\n", r.Position, r.ObservedBy, r.Outcome, r.ChargeID)
			}
		}
		for _, r := range x.Refunds {
			fmt.Fprintf(w, "  refund       %s of charge %s (%s, key %s): %s\n", fmtMoney(r.Amount.Amount, r.Amount.Currency), r.ChargeID, r.Reason, r.Key, r.Status)
		}
	}
}

func fmtMoney(amount int64, currency string) string { return fmt.Sprintf("%d %s", amount, currency) }
