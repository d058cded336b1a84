package commands

import (
	"context"
	"time"

	"github.com/retrysafe/booking/domain"
)

// OpScheduleShow, OpReserveSeats, OpPlaceOrder and OpCancelOrder are the
// operations of the intent scope (METHOD route-template).
const (
	OpScheduleShow = "POST /v1/shows"
	OpReserveSeats = "POST /v1/reservations"
	OpPlaceOrder   = "POST /v1/orders"
	OpCancelOrder  = "POST /v1/orders/{id}/cancel"
)

// ScheduleShowCommand is the normalized body of POST /v1/shows.
type ScheduleShowCommand struct {
	Name     string
	StartsAt time.Time
	Capacity int
	Price    domain.Money
}

// Canonical returns the normalized command fingerprinted for the intent.
func (c ScheduleShowCommand) Canonical() map[string]any {
	return map[string]any{"name": c.Name, "starts_at": c.StartsAt.UTC().Format(time.RFC3339Nano),
		"capacity": int64(c.Capacity), "price": map[string]any{"amount": c.Price.Amount, "currency": c.Price.Currency}}
}

// ScheduleShow creates a show (admin only; the caller authorizes). Returns
// the show and how it was answered. Invalid input (including a start in the
// past by the database clock) is an Invalid error and records nothing; a
// repeat with another body is domain.ErrKeyReused (422); a repeat while the
// first is in flight waits, then domain.ErrKeyInUse; a dependency failure
// wraps domain.ErrUnavailable.
func (h *Commands) ScheduleShow(ctx context.Context, req Request, cmd ScheduleShowCommand) (domain.Show, Outcome, error) {
	validate := func(now time.Time) error {
		var probe domain.Show
		_, err := probe.Schedule(domain.ScheduleShow{ShowID: "-", Name: cmd.Name, StartsAt: cmd.StartsAt, Capacity: cmd.Capacity, Price: cmd.Price}, now)
		return err
	}
	run, err := h.beginIntent(ctx, req, cmd.Canonical(), nil, validate)
	if err != nil {
		return domain.Show{}, Outcome{}, err
	}
	ctx = run.context(ctx)
	// Run the command the intent recorded: a repeat that takes over may spell
	// the name otherwise (the same fingerprint), and the show is named as
	// the intent's first request sent it.
	return h.scheduleShow(ctx, run, showCommandOf(run.command))
}

// showCommandOf returns the ScheduleShowCommand of an intent's recorded
// command (Canonical, or the same decoded from its event).
func showCommandOf(command map[string]any) ScheduleShowCommand {
	m := normalizeJSON(command)
	str := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
	num := func(m map[string]any, k string) float64 { v, _ := m[k].(float64); return v }
	startsAt, _ := time.Parse(time.RFC3339Nano, str(m, "starts_at"))
	price, _ := m["price"].(map[string]any)
	return ScheduleShowCommand{Name: str(m, "name"), StartsAt: startsAt.UTC(), Capacity: int(num(m, "capacity")),
		Price: domain.Money{Amount: int64(num(price, "amount")), Currency: str(price, "currency")}}
}

// scheduleShow runs a show intent from wherever it stands.
func (h *core) scheduleShow(ctx context.Context, run *intentRun, cmd ScheduleShowCommand) (domain.Show, Outcome, error) {
	out := Outcome{Replayed: !run.created}
	showID := run.targetID()
	var show domain.Show
	err := h.retryConflicts(ctx, func() error {
		var s *stream
		var err error
		if show, s, err = h.loadShow(ctx, showID); err != nil || s.exists {
			return err
		}
		if err := h.awaitExecutor(ctx, run, func() (bool, error) {
			_, s, err := h.loadShow(ctx, showID)
			return err == nil && s.exists, err
		}); err != nil {
			return err
		}
		evs, err := show.Schedule(domain.ScheduleShow{ShowID: showID, Name: cmd.Name, StartsAt: cmd.StartsAt,
			Capacity: cmd.Capacity, Price: cmd.Price}, run.now)
		if err != nil {
			return h.reject(ctx, run, asDomain(err), "")
		}
		_, err = h.commit(ctx, newStream(domain.ShowStream(showID)), run.meta(run.now, ""),
			pending{DerivedID(run.cause(), "show-scheduled"), evs[0]})
		if err != nil {
			return err // a conflict: scheduled meanwhile, read it on the next try
		}
		show, _, err = h.loadShow(ctx, showID)
		return err
	})
	if err != nil {
		return domain.Show{}, out, err
	}
	return show, out, nil
}

// LoadShow returns the show with id and its loaded stream; a show that does
// not exist is the zero Show (Scheduled false).
func (h *Queries) LoadShow(ctx context.Context, id string) (domain.Show, *stream, error) {
	return h.loadShow(ctx, id)
}

// loadShow is LoadShow.
func (h *core) loadShow(ctx context.Context, id string) (domain.Show, *stream, error) {
	return loadState[domain.Show](ctx, h, domain.ShowStream(id))
}

// scheduledShow returns show id, from the cached snapshot when it holds the
// show (for what a show fixes when it is scheduled: its start, capacity and
// price; never its seats), from the stream otherwise. Returns
// domain.ErrShowNotFound.
func (h *core) scheduledShow(ctx context.Context, id string) (domain.Show, error) {
	unlock := h.shows.Lock(id)
	e := h.showCache.get(id)
	var show domain.Show
	if e.exists && e.show.Scheduled {
		show = e.view()
	}
	unlock()
	if show.Scheduled {
		return show, nil
	}
	return h.getShow(ctx, id)
}

// GetShow returns the show with id, strongly consistent (the cached
// snapshot is brought up to the stream's head first). Holds is not
// returned. Returns domain.ErrShowNotFound.
func (h *Queries) GetShow(ctx context.Context, id string) (domain.Show, error) {
	return h.getShow(ctx, id)
}

// getShow is GetShow.
func (h *core) getShow(ctx context.Context, id string) (domain.Show, error) {
	unlock := h.shows.Lock(id)
	e, err := h.refreshShow(ctx, id)
	var show domain.Show
	if e != nil {
		show = e.view()
	}
	unlock()
	if err != nil {
		return domain.Show{}, err
	}
	if !show.Scheduled {
		return domain.Show{}, domain.ErrShowNotFound
	}
	return show, nil
}
