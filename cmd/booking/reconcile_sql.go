package main

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/domain"
)

// pgPendingOrders implements commands.PendingOrders with SQL over the
// event store's own tables (no read model): the order streams that have no
// ending event, or a charge with a RefundRequested and neither a
// RefundSucceeded nor a RefundRefused (a refund the provider refused is
// parked with its order in review, never sent again).
type pgPendingOrders struct{ pool *pgxpool.Pool }

// pendingOrdersSQL groups the events of order streams by stream. It reads
// every order event, which is fine at this service's scale; a partial index
// on events (stream) WHERE type IN (…) or a small work table would bound it.
// Refunds are counted by distinct charge id (only refund events are decoded),
// since a refund the provider makes after refusing it adds a RefundSucceeded
// to the RefundRefused of the same charge.
const pendingOrdersSQL = `
SELECT stream
FROM events
WHERE stream LIKE 'order-%' AND stream > $1
GROUP BY stream
HAVING count(*) FILTER (WHERE type IN ('OrderConfirmed', 'OrderFailed', 'OrderCancelled', 'OrderNeedsReview')) = 0
    OR count(DISTINCT convert_from(data, 'UTF8')::jsonb ->> 'charge_id') FILTER (WHERE type = 'RefundRequested')
     > count(DISTINCT convert_from(data, 'UTF8')::jsonb ->> 'charge_id') FILTER (WHERE type IN ('RefundSucceeded', 'RefundRefused'))
ORDER BY stream
LIMIT $2`

// PendingOrders returns up to limit order ids after after (by stream name), ascending.
func (p pgPendingOrders) PendingOrders(ctx context.Context, after string, limit int) ([]string, error) {
	from := ""
	if after != "" {
		from = domain.OrderStream(after)
	}
	rows, err := p.pool.Query(ctx, pendingOrdersSQL, from, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var stream string
		if err := rows.Scan(&stream); err != nil {
			return nil, err
		}
		ids = append(ids, strings.TrimPrefix(stream, "order-"))
	}
	return ids, rows.Err()
}
