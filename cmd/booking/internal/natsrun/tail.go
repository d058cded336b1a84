package natsrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrysafe/booking/cmd/booking/internal/configerr"
	"github.com/retrysafe/booking/projections/notify"
)

// TailConfig is the configuration of `booking notifications tail`, the
// reference subscriber of stream BOOKING.
type TailConfig struct {
	// URL is BOOKING_NATS_URL, the server that holds stream BOOKING.
	URL string
	// Durable is the durable consumer's name; instances sharing it share
	// the work.
	Durable string
	// Subject filters the stream (booking.v1.> or narrower).
	Subject string
	// JSON prints each notification's payload as one line of JSON instead
	// of the summary line.
	JSON bool
	// AckWait is the redelivery timeout of an unacknowledged notification.
	AckWait time.Duration
	// ProcessedHorizon is how long message ids stay in the processed set.
	ProcessedHorizon time.Duration
	// TracerProvider records a span per notification processed, in the
	// trace the notification carries; nil: none.
	TracerProvider trace.TracerProvider
}

// Tail consumes notifications with a notify.Subscriber (duplicates dropped
// by Nats-Msg-Id, per-entity order by revision, gaps reported), keeping its
// processed set and effect table in pool, until ctx is done. It writes one
// line per applied notification to out (see writeNotification) and its
// reports (gaps, stale revisions, a summary at the end) to log. A missing
// stream or an unreachable server is an error naming BOOKING_NATS_URL; the
// end of ctx is not an error.
func Tail(ctx context.Context, cfg TailConfig, pool *pgxpool.Pool, out io.Writer, log *slog.Logger) error {
	nc, err := Connect(cfg.URL, "booking notifications tail", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	if _, err := js.Stream(ctx, notify.StreamName); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return configerr.New("BOOKING_NATS_URL", "no stream %s on %s (start `booking serve` first)", notify.StreamName, cfg.URL)
		}
		return configerr.New("BOOKING_NATS_URL", "stream %s: %v", notify.StreamName, err)
	}

	var mu sync.Mutex // one line at a time
	sub := notify.NewSubscriber(js, pool, notify.SubscriberConfig{
		Durable: cfg.Durable, Subject: cfg.Subject, AckWait: cfg.AckWait, ProcessedHorizon: cfg.ProcessedHorizon,
		Logger: log, TracerProvider: cfg.TracerProvider,
		Applied: func(n *notify.Notification) {
			mu.Lock()
			defer mu.Unlock()
			writeNotification(out, n, cfg.JSON)
		},
	})
	log.Info("tailing notifications", "nats", cfg.URL, "durable", cfg.Durable, "subject", cfg.Subject)
	err = sub.Run(ctx)
	st := sub.Stats()
	log.Info("tail stopped", "applied", st.Applied, "duplicates", st.Duplicates, "stale", st.Stale,
		"gaps", st.Gaps, "deferred", st.Deferred, "redelivered", st.Redelivered, "malformed", st.Malformed, "errors", st.Errors)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// writeNotification prints n as one line: the payload as compact JSON
// with a "correlation_id" member added (the Booking-Request-Id header, the
// event's correlation_id; absent when the message has none), or
// "occurred_at subject stream@revision id=… position=…" plus
// " correlation_id=…" when the header is present and " gap=true" when it
// was applied after missing revisions. The correlation id is quoted
// (strconv.Quote) when it has spaces, quotes or non-printable characters.
func writeNotification(w io.Writer, n *notify.Notification, asJSON bool) {
	if asJSON {
		var b bytes.Buffer
		if err := json.Compact(&b, n.Body); err != nil {
			b.Reset()
			b.Write(bytes.ReplaceAll(n.Body, []byte("\n"), nil))
		} else if n.CorrelationID != "" && bytes.HasSuffix(b.Bytes(), []byte("}")) {
			id, _ := json.Marshal(n.CorrelationID)
			b.Truncate(b.Len() - 1)
			if !bytes.HasSuffix(b.Bytes(), []byte("{")) {
				b.WriteByte(',')
			}
			b.WriteString(`"correlation_id":`)
			b.Write(id)
			b.WriteByte('}')
		}
		b.WriteByte('\n')
		w.Write(b.Bytes())
		return
	}
	cid := ""
	if n.CorrelationID != "" {
		v := n.CorrelationID
		if strings.ContainsAny(v, " \"=\\") || !isPrint(v) {
			v = strconv.Quote(v)
		}
		cid = " correlation_id=" + v
	}
	gap := ""
	if n.Gap {
		gap = " gap=true"
	}
	fmt.Fprintf(w, "%s %s %s@%d id=%s position=%s%s%s\n",
		n.OccurredAt.UTC().Format(time.RFC3339Nano), n.Subject, n.Stream, n.Revision, n.MsgID, n.Position, cid, gap)
}

// isPrint reports whether s is printable ASCII.
func isPrint(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
