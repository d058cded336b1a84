package projections

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Names of the projections (the checkpoint names, and the NAME arguments of
// `booking projections rebuild`).
const (
	NameOrders       = "orders"
	NameReservations = "reservations"
	NameShows        = "shows"
	NameIntents      = "intents"
)

// Operations of intents, the "METHOD route-template" strings of
// commands.OpScheduleShow … commands.OpCancelOrder (see ARCHITECTURE.md, Key
// lineage), for pending intents.
const (
	opScheduleShow = "POST /v1/shows"
	opReserveSeats = "POST /v1/reservations"
	opPlaceOrder   = "POST /v1/orders"
	opCancelOrder  = "POST /v1/orders/{id}/cancel"
)

// Projection is one read model: its name, the tables it owns and how events
// change them. Create projections with All, Orders, Reservations, Shows and
// Intents. A Projection is immutable and safe for concurrent use.
type Projection struct {
	name   string
	tables []string
	// begin returns the projection's work on one batch.
	begin func() batchFold
}

// Name returns the projection's name, which is also its checkpoint name.
func (p *Projection) Name() string { return p.name }

// Tables returns the names of the tables the projection owns.
func (p *Projection) Tables() []string { return slices.Clone(p.tables) }

// All returns every projection. intentRetention is the intent retention
// (BOOKING_INTENT_RETENTION) that the intents view applies; see Intents.
func All(intentRetention time.Duration) []*Projection {
	return []*Projection{Orders(), Reservations(), Shows(), Intents(intentRetention)}
}

// Names returns the names of every projection, in the order of All.
func Names() []string { return []string{NameOrders, NameReservations, NameShows, NameIntents} }

// Select returns the projections of All named in names (all of them when
// names is empty), in the order of All. Returns an error naming an unknown
// name.
func Select(names []string, intentRetention time.Duration) ([]*Projection, error) {
	all := All(intentRetention)
	if len(names) == 0 {
		return all, nil
	}
	var out []*Projection
	for _, p := range all {
		if slices.Contains(names, p.name) {
			out = append(out, p)
		}
	}
	for _, n := range names {
		if !slices.Contains(Names(), n) {
			return nil, fmt.Errorf("projections: unknown read model %q (known: %s)", n, strings.Join(Names(), ", "))
		}
	}
	return out, nil
}

// queue collects follow-up statements of one transaction for one projection
// bound to concrete tables. Not safe for concurrent use.
type queue struct {
	batch *pgx.Batch
	b     *bound
	// logTime is the log clock after the batch (see projection_checkpoints.log_time).
	logTime time.Time
	// pruned, when set by finish, becomes b.pruned once the transaction
	// has committed.
	pruned time.Time
}

// add queues the statement tmpl (with {table} placeholders) with args.
func (q *queue) add(tmpl string, args ...any) { q.batch.Queue(q.b.sql(tmpl), args...) }

// bound is a projection bound to table names (the live ones, or the fresh
// tables of a rebuild), with the statements rewritten for them.
type bound struct {
	p      *Projection
	rename map[string]string // base table → actual table
	cache  map[string]string // template → SQL
	repl   *strings.Replacer
	// pruned is the latest retention cutoff up to which rows were deleted
	// in a committed transaction of this bound (the intents view; zero
	// until the first), see intentsFold.finish.
	pruned time.Time
	// caches holds a rowCache per loaded table of a live projector
	// (withCaches); nil otherwise.
	caches map[string]*rowCache
}

// withCaches gives b a rowCache for each table it loads (not the merge
// tables).
func (b *bound) withCaches() *bound {
	b.caches = map[string]*rowCache{}
	for _, l := range b.p.begin().loaders() {
		if l.table().merge == "" {
			b.caches[l.table().name] = newRowCache()
		}
	}
	return b
}

// cacheOf returns the cache of table, nil if none.
func (b *bound) cacheOf(t *tableSpec) *rowCache { return b.caches[t.name] }

// clearCaches empties every cache of b.
func (b *bound) clearCaches() {
	for _, c := range b.caches {
		c.clear()
	}
}

func bind(p *Projection, rename map[string]string) *bound {
	var pairs []string
	for _, t := range p.tables {
		actual := t
		if r, ok := rename[t]; ok {
			actual = r
		}
		pairs = append(pairs, "{"+t+"}", pgx.Identifier{actual}.Sanitize())
	}
	return &bound{p: p, rename: rename, cache: map[string]string{}, repl: strings.NewReplacer(pairs...)}
}

func (b *bound) sql(tmpl string) string {
	s, ok := b.cache[tmpl]
	if !ok {
		s = b.repl.Replace(tmpl)
		b.cache[tmpl] = s
	}
	return s
}
