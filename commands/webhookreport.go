package commands

import (
	"context"
	"sync/atomic"
)

// WebhookReport is what one provider notification did, filled in by the
// commands layer while ReceiveWebhook runs under WithWebhookReport's
// context: how many events it appended (0 for a redelivery of a fact
// already recorded), and whether it was ignored (an event the service does
// not record). The HTTP adapter counts webhooks by result from it. Safe for
// concurrent use.
type WebhookReport struct {
	appended atomic.Int64
	ignored  atomic.Bool
}

// webhookReportKey is the context key of a WebhookReport.
type webhookReportKey struct{}

// WithWebhookReport returns a copy of ctx that reports into a new
// WebhookReport, and that report.
func WithWebhookReport(ctx context.Context) (context.Context, *WebhookReport) {
	r := &WebhookReport{}
	return context.WithValue(ctx, webhookReportKey{}, r), r
}

// Appended returns how many events were appended under the report's
// context so far.
func (r *WebhookReport) Appended() int { return int(r.appended.Load()) }

// Ignored reports whether the notification was ignored: an event of a type
// the service does not record.
func (r *WebhookReport) Ignored() bool { return r.ignored.Load() }

// WebhookReportFrom returns the report ctx reports into (WithWebhookReport),
// or nil.
func WebhookReportFrom(ctx context.Context) *WebhookReport {
	r, _ := ctx.Value(webhookReportKey{}).(*WebhookReport)
	return r
}

// AddAppended counts n events appended for the notification.
func (r *WebhookReport) AddAppended(n int) { r.appended.Add(int64(n)) }

// MarkIgnored records that the notification was ignored.
func (r *WebhookReport) MarkIgnored() { r.ignored.Store(true) }

// noteAppended counts n events appended under ctx, if it reports.
func noteAppended(ctx context.Context, n int) {
	if r := WebhookReportFrom(ctx); r != nil {
		r.AddAppended(n)
	}
}

// ignoreWebhook marks the notification served under ctx as ignored, if it
// reports.
func ignoreWebhook(ctx context.Context) {
	if r := WebhookReportFrom(ctx); r != nil {
		r.MarkIgnored()
	}
}
