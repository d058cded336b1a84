package projections

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/retrysafe/booking/domain"
	"github.com/retrysafe/booking/eventstore"
)

// Reader answers queries from the read models. Each query is one statement,
// so its rows and the Position it reports (the projection's checkpoint) come
// from one snapshot: the rows reflect exactly the log up to Position. Create
// it with NewReader; it is safe for concurrent use.
type Reader struct {
	pool *pgxpool.Pool
}

// NewReader returns a Reader on pool (read models migrated).
func NewReader(pool *pgxpool.Pool) *Reader { return &Reader{pool: pool} }

// Show is a row of the show availability read model. Capacity = Available +
// Held + Ordered.
type Show struct {
	ID        string
	Name      string
	StartsAt  time.Time
	Capacity  int
	Price     domain.Money
	Available int // seats neither held nor ordered
	Held      int // seats held by reservations not ordered
	Ordered   int // seats of ordered reservations
	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ShowKey is the keyset position of a show in the list order (StartsAt,
// then ID).
type ShowKey struct {
	StartsAt time.Time
	ID       string
}

// ShowPage is a page of shows. Next is the key to continue after, nil on
// the last page. Position is the shows projection's checkpoint.
type ShowPage struct {
	Items    []Show
	Next     *ShowKey
	Position eventstore.Position
}

const sqlListShows = `SELECT cp.commit_tx, cp.prepare, s.id, s.name, s.starts_at, s.capacity, s.price_amount, s.price_currency,
       s.taken, greatest(least(coalesce(ss.ordered, 0), s.taken), 0), s.revision, s.created_at, s.updated_at
FROM (SELECT 1) AS one
LEFT JOIN projection_checkpoints cp ON cp.name = 'shows'
LEFT JOIN LATERAL (
    SELECT * FROM rm_shows
    WHERE $1::timestamptz IS NULL OR (starts_at, id) > ($1::timestamptz, $2::uuid)
    ORDER BY starts_at, id
    LIMIT $3
) s ON true
LEFT JOIN rm_show_sales ss ON ss.show_id = s.id
ORDER BY s.starts_at, s.id`

// Shows returns up to limit (>= 1) shows after the key after (nil: from
// the first), ordered by start time then id. Returns a wrapped error if the
// query fails.
func (r *Reader) Shows(ctx context.Context, after *ShowKey, limit int) (ShowPage, error) {
	var (
		page  ShowPage
		start *time.Time
		id    *uuid.UUID
	)
	var err error
	if after != nil {
		if start, id, err = keyArgs("shows", after.StartsAt, after.ID); err != nil {
			return page, err
		}
	}
	page.Items, page.Position, err = listAtCheckpoint(ctx, r.pool, "list shows", sqlListShows, []any{start, id, limit + 1}, func() ([]any, func() (Show, bool)) {
		var (
			sid                            *uuid.UUID
			name, currency                 *string
			startsAt, createdAt, updatedAt *time.Time
			capacity, taken, ordered       *int
			price, revision                *int64
		)
		return []any{&sid, &name, &startsAt, &capacity, &price, &currency, &taken, &ordered, &revision, &createdAt, &updatedAt}, func() (Show, bool) {
			if sid == nil {
				return Show{}, false
			}
			return Show{ID: sid.String(), Name: *name, StartsAt: startsAt.UTC(), Capacity: *capacity,
				Price: domain.Money{Amount: *price, Currency: *currency}, Available: *capacity - *taken, Held: *taken - *ordered,
				Ordered: *ordered, Revision: *revision, CreatedAt: createdAt.UTC(), UpdatedAt: updatedAt.UTC()}, true
		}
	})
	if err != nil {
		return ShowPage{}, err
	}
	page.Items, page.Next = cutPage(page.Items, limit, func(last Show) *ShowKey { return &ShowKey{StartsAt: last.StartsAt, ID: last.ID} })
	return page, nil
}

// keyArgs returns the query arguments of a page key (a time and an id) for
// the listing named what; an id that is not a UUID is an error.
func keyArgs(what string, at time.Time, id string) (*time.Time, *uuid.UUID, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, nil, fmt.Errorf("projections: %s: invalid key id %q", what, id)
	}
	return &at, &u, nil
}

// cutPage trims items, read with a limit of limit+1, to limit, and returns
// the key of the last item kept (made by next) when more follow, nil
// otherwise.
func cutPage[T, K any](items []T, limit int, next func(last T) *K) ([]T, *K) {
	if len(items) <= limit {
		return items, nil
	}
	return items[:limit], next(items[limit-1])
}

// Order is a row of the orders read model. Amount is in minor units.
// TicketIDs are the tickets issued; they are valid only while Status is
// confirmed. PaymentStatus is pending, succeeded, failed, unknown,
// requires_action (the customer must authenticate), refund_pending (a
// refund still being sent) or refunded; a paying charge whose refund the
// provider refused is succeeded (the charge stands). UnknownSince is when the current attempt's
// outcome became unknown (event time), nil otherwise.
type Order struct {
	ID              string
	Actor           string
	ReservationID   string
	ShowID          string
	Status          string
	FailReason      string
	ReviewReason    string
	Quantity        int
	Amount          domain.Money
	PaymentDeadline time.Time
	Attempts        int
	PaymentStatus   string
	ChargeID        string
	UnknownSince    *time.Time
	TicketIDs       []string
	Revision        int64
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// OrderKey is the keyset position of an order in the list order (newest
// CreatedAt first, then ID descending).
type OrderKey struct {
	CreatedAt time.Time
	ID        string
}

// OrderPage is a page of orders; see ShowPage.
type OrderPage struct {
	Items    []Order
	Next     *OrderKey
	Position eventstore.Position
}

const sqlListOrders = `SELECT cp.commit_tx, cp.prepare, o.id, o.actor, o.reservation_id, o.show_id, o.status, o.fail_reason,
       o.review_reason, o.quantity, o.amount, o.currency, o.payment_deadline, o.attempts, o.payment_status, o.charge_id,
       o.unknown_since, o.ticket_ids, o.revision, o.created_at, o.updated_at
FROM (SELECT 1) AS one
LEFT JOIN projection_checkpoints cp ON cp.name = 'orders'
LEFT JOIN LATERAL (
    SELECT * FROM rm_orders
    WHERE actor = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
    ORDER BY created_at DESC, id DESC
    LIMIT $4
) o ON true
ORDER BY o.created_at DESC, o.id DESC`

// Orders returns up to limit (>= 1) orders of actor after the key after
// (nil: from the newest), newest first. Returns a wrapped error if the
// query fails.
func (r *Reader) Orders(ctx context.Context, actor string, after *OrderKey, limit int) (OrderPage, error) {
	var (
		page    OrderPage
		created *time.Time
		id      *uuid.UUID
	)
	var err error
	if after != nil {
		if created, id, err = keyArgs("orders", after.CreatedAt, after.ID); err != nil {
			return page, err
		}
	}
	page.Items, page.Position, err = listAtCheckpoint(ctx, r.pool, "list orders", sqlListOrders, []any{actor, created, id, limit + 1}, func() ([]any, func() (Order, bool)) {
		var (
			oid, resID, showID                  *uuid.UUID
			act, status, failReason, review     *string
			currency, payStatus, chargeID       *string
			quantity, attempts                  *int
			amount, revision                    *int64
			deadline, unknown, createdAt, updAt *time.Time
			tickets                             []string
		)
		return []any{&oid, &act, &resID, &showID, &status, &failReason, &review, &quantity, &amount,
				&currency, &deadline, &attempts, &payStatus, &chargeID, &unknown, &tickets, &revision, &createdAt, &updAt},
			func() (Order, bool) {
				if oid == nil {
					return Order{}, false
				}
				o := Order{ID: oid.String(), Actor: *act, ReservationID: resID.String(), ShowID: showID.String(), Status: *status,
					FailReason: *failReason, ReviewReason: *review, Quantity: *quantity, Amount: domain.Money{Amount: *amount, Currency: *currency},
					PaymentDeadline: deadline.UTC(), Attempts: *attempts, PaymentStatus: *payStatus, ChargeID: *chargeID,
					TicketIDs: tickets, Revision: *revision, CreatedAt: createdAt.UTC(), UpdatedAt: updAt.UTC()}
				if unknown != nil {
					u := unknown.UTC()
					o.UnknownSince = &u
				}
				if o.TicketIDs == nil {
					o.TicketIDs = []string{}
				}
				return o, true
			}
	})
	if err != nil {
		return OrderPage{}, err
	}
	page.Items, page.Next = cutPage(page.Items, limit, func(last Order) *OrderKey { return &OrderKey{CreatedAt: last.CreatedAt, ID: last.ID} })
	return page, nil
}

// PendingIntent is an intent that is recorded, not rejected, and whose
// target is not final yet in the intents view: a show or reservation not
// created yet, an order not confirmed, failed, cancelled or in review (for a
// cancel: not cancelled, failed or in review). TargetStatus is the target's
// status in the view ("" if it does not exist there). RecordedAt is the
// intent's event time; its age is measured from it.
type PendingIntent struct {
	Stream       string
	Actor        string
	Operation    string
	TargetID     string
	TargetStatus string
	Executor     string
	LeaseUntil   time.Time
	Takeovers    int
	RecordedAt   time.Time
}

const sqlPendingIntents = `SELECT cp.commit_tx, cp.prepare, x.stream, x.actor, x.operation, x.target_id, x.status, x.executor,
       x.lease_until, x.takeovers, x.recorded_at
FROM (SELECT 1) AS one
LEFT JOIN projection_checkpoints cp ON cp.name = 'intents'
LEFT JOIN LATERAL (
    SELECT i.*, coalesce(t.status, '') AS status
    FROM rm_intents i
    LEFT JOIN rm_intent_targets t ON t.id = i.target_id
    WHERE i.rejection_status = 0
      AND NOT coalesce(CASE i.operation
            WHEN '` + opScheduleShow + `' THEN t.status IS NOT NULL
            WHEN '` + opReserveSeats + `' THEN t.status IS NOT NULL
            WHEN '` + opPlaceOrder + `' THEN t.status IN ('confirmed', 'failed', 'cancelled', 'needs_review')
            WHEN '` + opCancelOrder + `' THEN t.status IN ('cancelled', 'failed', 'needs_review')
          END, false)
    ORDER BY i.recorded_at, i.stream
    LIMIT $1
) x ON true
ORDER BY x.recorded_at, x.stream`

// PendingIntents returns up to limit (>= 1) pending intents, oldest first,
// and the intents projection's checkpoint. Returns a wrapped error if the
// query fails.
func (r *Reader) PendingIntents(ctx context.Context, limit int) ([]PendingIntent, eventstore.Position, error) {
	return listAtCheckpoint(ctx, r.pool, "pending intents", sqlPendingIntents, []any{limit}, func() ([]any, func() (PendingIntent, bool)) {
		var (
			stream, actor, op, target, status, executor *string
			lease, recorded                             *time.Time
			takeovers                                   *int
		)
		return []any{&stream, &actor, &op, &target, &status, &executor, &lease, &takeovers, &recorded}, func() (PendingIntent, bool) {
			if stream == nil {
				return PendingIntent{}, false
			}
			return PendingIntent{Stream: *stream, Actor: *actor, Operation: *op, TargetID: *target, TargetStatus: *status,
				Executor: *executor, LeaseUntil: lease.UTC(), Takeovers: *takeovers, RecordedAt: recorded.UTC()}, true
		}
	})
}

// UnknownOutcome is an order whose current payment attempt's outcome is
// unknown; Since is the event time of that PaymentOutcomeUnknown (the age
// basis).
type UnknownOutcome struct {
	OrderID string
	Actor   string
	Status  string
	Attempt int
	Since   time.Time
}

const sqlUnknownOutcomes = `SELECT cp.commit_tx, cp.prepare, o.id, o.actor, o.status, o.attempts, o.unknown_since
FROM (SELECT 1) AS one
LEFT JOIN projection_checkpoints cp ON cp.name = 'orders'
LEFT JOIN LATERAL (
    SELECT id, actor, status, attempts, unknown_since FROM rm_orders
    WHERE unknown_since IS NOT NULL
    ORDER BY unknown_since, id
    LIMIT $1
) o ON true
ORDER BY o.unknown_since, o.id`

// UnknownOutcomes returns up to limit (>= 1) orders with an unknown payment
// outcome, oldest first, and the orders projection's checkpoint. Returns a
// wrapped error if the query fails.
func (r *Reader) UnknownOutcomes(ctx context.Context, limit int) ([]UnknownOutcome, eventstore.Position, error) {
	return listAtCheckpoint(ctx, r.pool, "unknown outcomes", sqlUnknownOutcomes, []any{limit}, func() ([]any, func() (UnknownOutcome, bool)) {
		var (
			id            *uuid.UUID
			actor, status *string
			attempt       *int
			since         *time.Time
		)
		return []any{&id, &actor, &status, &attempt, &since}, func() (UnknownOutcome, bool) {
			if id == nil {
				return UnknownOutcome{}, false
			}
			return UnknownOutcome{OrderID: id.String(), Actor: *actor, Status: *status, Attempt: *attempt, Since: since.UTC()}, true
		}
	})
}

// RefundBacklog summarizes the refunds of the orders read model. Pending
// counts the refunds requested and neither succeeded nor refused (the ones
// still sent to the provider); OldestPending is the request time (event
// time) of the oldest of them, zero when there is none. InReview counts the
// refunds the provider refused because it does not know the charge; their
// orders are in needs_review. NeedsReview counts the orders in needs_review
// for any reason.
type RefundBacklog struct {
	Pending       int
	OldestPending time.Time
	InReview      int
	NeedsReview   int
}

const sqlRefundBacklog = `SELECT cp.commit_tx, cp.prepare,
    (SELECT coalesce(sum(refunds_pending), 0) FROM rm_orders WHERE refund_pending_since IS NOT NULL),
    (SELECT min(refund_pending_since) FROM rm_orders WHERE refund_pending_since IS NOT NULL),
    (SELECT coalesce(sum(refunds_refused), 0) FROM rm_orders WHERE refunds_refused > 0),
    (SELECT count(*) FROM rm_orders WHERE status = 'needs_review')
FROM (SELECT 1) AS one
LEFT JOIN projection_checkpoints cp ON cp.name = 'orders'`

// RefundBacklog returns the refund backlog and the orders projection's
// checkpoint. Each figure is one aggregate over a partial index. Returns a
// wrapped error if the query fails.
func (r *Reader) RefundBacklog(ctx context.Context) (RefundBacklog, eventstore.Position, error) {
	var (
		b               RefundBacklog
		commit, prepare *int64
		pending, review int64
		oldest          *time.Time
	)
	if err := r.pool.QueryRow(ctx, sqlRefundBacklog).Scan(&commit, &prepare, &pending, &oldest, &review, &b.NeedsReview); err != nil {
		return b, eventstore.Position{}, fmt.Errorf("projections: refund backlog: %w", err)
	}
	b.Pending, b.InReview = int(pending), int(review)
	if oldest != nil {
		b.OldestPending = oldest.UTC()
	}
	return b, position(commit, prepare), nil
}

// Checkpoint returns the checkpoint of projection name (the zero Position
// before it applied anything). Returns a wrapped error if the query fails.
func (r *Reader) Checkpoint(ctx context.Context, name string) (eventstore.Position, error) {
	var commit, prepare *int64
	err := r.pool.QueryRow(ctx, `SELECT max(commit_tx), max(prepare) FROM projection_checkpoints WHERE name = $1`, name).Scan(&commit, &prepare)
	if err != nil {
		return eventstore.Position{}, fmt.Errorf("projections: checkpoint %s: %w", name, err)
	}
	return position(commit, prepare), nil
}

// listAtCheckpoint runs query with args against pool and collects one item
// a row. Each row starts with the projection checkpoint's commit and prepare
// positions (NULL before the projection applied anything), then the columns
// whose destinations row returns; the LEFT JOIN shape of the queries gives a
// row of checkpoint only when no item matches, so row's item function
// reports false there. It returns the items (nil when none), the checkpoint,
// and an error wrapped as "projections: <what>: ..." if the query fails.
func listAtCheckpoint[T any](ctx context.Context, pool *pgxpool.Pool, what, query string, args []any,
	row func() (dest []any, item func() (T, bool))) ([]T, eventstore.Position, error) {
	var (
		out []T
		pos eventstore.Position
	)
	rows, err := pool.Query(ctx, query, args...)
	if err != nil {
		return nil, pos, fmt.Errorf("projections: %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var commit, prepare *int64
		dest, item := row()
		if err := rows.Scan(append([]any{&commit, &prepare}, dest...)...); err != nil {
			return nil, pos, fmt.Errorf("projections: %s: %w", what, err)
		}
		pos = position(commit, prepare)
		if v, ok := item(); ok {
			out = append(out, v)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, pos, fmt.Errorf("projections: %s: %w", what, err)
	}
	return out, pos, nil
}

func position(commit, prepare *int64) eventstore.Position {
	if commit == nil || prepare == nil {
		return eventstore.Position{}
	}
	return eventstore.Position{Commit: uint64(*commit), Prepare: uint64(*prepare)}
}
