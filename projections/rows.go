package projections

import (
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// A batch is applied in three steps inside its transaction: the rows its
// events touch are loaded (one SELECT per table), the events are folded
// into them in log order in Go (an event at or below a row's revision is
// skipped), and the changed rows are written back (one multi-row upsert per
// table, guarded by "revision < excluded.revision"). The same code builds
// live and rebuilt rows.

// column is a column a projection writes, with its SQL type.
type column struct{ name, typ string }

// tableSpec describes a read-model table: cols[0] is its primary key.
// merge, when set, is the ON CONFLICT action (an aggregate); otherwise a
// conflicting row is overwritten only by a higher revision.
type tableSpec struct {
	name  string
	cols  []column
	merge string
}

// selectSQL loads rows by key ($1, text[]), columns in cols order (uuid and
// jsonb as text).
func (t *tableSpec) selectSQL() string {
	exprs := make([]string, len(t.cols))
	for i, c := range t.cols {
		switch c.typ {
		case "uuid", "jsonb":
			exprs[i] = c.name + "::text"
		default:
			exprs[i] = c.name
		}
	}
	return fmt.Sprintf("SELECT %s FROM {%s} WHERE %s = ANY($1::text[]::%s[])", strings.Join(exprs, ", "), t.name, t.cols[0].name, t.cols[0].typ)
}

// upsertSQL writes rows given as one text[] per column.
func (t *tableSpec) upsertSQL() string {
	names := make([]string, len(t.cols))
	casts := make([]string, len(t.cols))
	params := make([]string, len(t.cols))
	var sets []string
	for i, c := range t.cols {
		names[i] = c.name
		casts[i] = "u." + c.name + "::" + c.typ
		params[i] = fmt.Sprintf("$%d::text[]", i+1)
		if i > 0 {
			sets = append(sets, c.name+" = excluded."+c.name)
		}
	}
	action := "DO UPDATE SET " + strings.Join(sets, ", ") + " WHERE t.revision < excluded.revision"
	if t.merge != "" {
		action = "DO UPDATE SET " + t.merge
	}
	return fmt.Sprintf("INSERT INTO {%s} AS t (%s)\nSELECT %s FROM unnest(%s) AS u (%s)\nON CONFLICT (%s) %s",
		t.name, strings.Join(names, ", "), strings.Join(casts, ", "), strings.Join(params, ", "), strings.Join(names, ", "),
		t.cols[0].name, action)
}

// rowSet holds the rows of one table that a batch touches. Not safe for
// concurrent use.
type rowSet[R any] struct {
	spec *tableSpec
	scan func(row pgx.Row) (*R, error)
	text func(r *R) []pgtype.Text // cols order
	key  func(r *R) string

	want  map[string]bool
	fresh map[string]bool // wanted keys known to have no row (needOpened)
	rows  map[string]*R
	dirty []string // keys of changed rows, first change first
	isDir map[string]bool
	// bulk is set during a rebuild's bulk fill (bulk.go): rows then stay
	// across chunks and every row in memory is unwritten, so changes are
	// not tracked.
	bulk *bulkState
}

func newRowSet[R any](spec *tableSpec, scan func(pgx.Row) (*R, error), text func(*R) []pgtype.Text, key func(*R) string) *rowSet[R] {
	return &rowSet[R]{spec: spec, scan: scan, text: text, key: key, want: map[string]bool{}, fresh: map[string]bool{},
		rows: map[string]*R{}, isDir: map[string]bool{}}
}

// need notes that key's row is to be loaded.
func (s *rowSet[R]) need(key string) { s.want[key] = true }

// needKey notes that key's row is to be loaded unless err is set, and
// returns err; it takes a row key function's results, as in
// set.needKey(e.rowKey(prefix)).
func (s *rowSet[R]) needKey(key string, err error) error {
	if err == nil {
		s.need(key)
	}
	return err
}

// needOpened is needKey for an event that opens the stream whose id is
// key: the stream's first event (revision 0). If no earlier event of the
// batch needed key, its row is known not to exist and is not loaded: a
// table holds what its projection folded from the log up to its checkpoint
// (the checkpoint commits with the rows), and none of the stream's events
// lies there, since the batch, which starts after the checkpoint, holds the
// first. That holds only for a batch whose checkpoint fence is in its own
// transaction (a live projector): applyBatch calls loadOpened for any other.
// Not used in a bulk fill, whose rows stay across chunks.
func (s *rowSet[R]) needOpened(key string, err error) error {
	if err == nil && s.bulk == nil && !s.want[key] {
		s.fresh[key] = true
	}
	return s.needKey(key, err)
}

// get returns key's row, nil if it does not exist.
func (s *rowSet[R]) get(key string) *R { return s.rows[key] }

// put stores r (a new row, or a changed one) and marks it to be written.
func (s *rowSet[R]) put(r *R) {
	k := s.key(r)
	s.rows[k] = r
	if s.bulk != nil {
		s.bulk.last[k] = s.bulk.gen + 1 // touched by the current chunk
		return
	}
	if !s.isDir[k] {
		s.isDir[k] = true
		s.dirty = append(s.dirty, k)
	}
}

// rowLoader is the type-independent side of a rowSet.
type rowLoader interface {
	table() *tableSpec
	keys() []string
	load(rows pgx.Rows) error
	// written returns the changed rows as one text array per column, or
	// nil when nothing changed.
	written() []any
	// useCache takes the wanted rows that c holds (before keys and load);
	// keepIn puts every row of the batch into c (after the commit).
	useCache(c *rowCache)
	keepIn(c *rowCache)
	// loadOpened makes the keys needOpened marked loaded like any other:
	// a batch applied without a checkpoint fence (a rebuild's catch-up, a
	// test's redelivery) may repeat events already in the table.
	loadOpened()
}

func (s *rowSet[R]) table() *tableSpec { return s.spec }

// keys returns the wanted keys to load: not known absent, not taken from a
// cache.
func (s *rowSet[R]) keys() []string {
	out := make([]string, 0, len(s.want))
	for k := range s.want {
		if _, have := s.rows[k]; !have && !s.fresh[k] {
			out = append(out, k)
		}
	}
	return out
}

func (s *rowSet[R]) loadOpened() { clear(s.fresh) }

func (s *rowSet[R]) useCache(c *rowCache) {
	for k := range s.want {
		if r, ok := c.get(k); ok && !s.fresh[k] {
			s.rows[k] = r.(*R)
		}
	}
}

func (s *rowSet[R]) keepIn(c *rowCache) {
	for k, r := range s.rows {
		c.put(k, r)
	}
}

// rowCacheCap bounds the rows a rowCache holds.
const rowCacheCap = 4096

// rowCache holds, for one table of a live projector, rows as the
// projector's own committed transactions left them, so a later batch that
// touches them again needs no SELECT. It is exact, not a hint: the
// projector is the table's only writer while it holds its lock and its
// checkpoint fence, and every way that could change the table behind it
// empties the cache — a failed batch (which may have changed cached rows in
// memory), a new Run (after a rebuild, a lost lock or a moved checkpoint)
// and a delete (the intents view's retention). Rows are shared with the
// batch that folds them. Bound: rowCacheCap rows; eviction: first put,
// first out. Merge tables (deltas, never loaded) are not cached. Not safe
// for concurrent use (one projector, one batch at a time).
type rowCache struct {
	rows map[string]any
	ring []string
	next int
}

func newRowCache() *rowCache { return &rowCache{rows: map[string]any{}} }

func (c *rowCache) get(k string) (any, bool) {
	r, ok := c.rows[k]
	return r, ok
}

func (c *rowCache) put(k string, r any) {
	if _, ok := c.rows[k]; ok {
		c.rows[k] = r
		return
	}
	if len(c.ring) < rowCacheCap {
		c.ring = append(c.ring, k)
	} else {
		delete(c.rows, c.ring[c.next])
		c.ring[c.next] = k
		c.next = (c.next + 1) % rowCacheCap
	}
	c.rows[k] = r
}

func (c *rowCache) clear() {
	clear(c.rows)
	c.ring, c.next = c.ring[:0], 0
}

func (s *rowSet[R]) load(rows pgx.Rows) error {
	defer rows.Close()
	for rows.Next() {
		r, err := s.scan(rows)
		if err != nil {
			return err
		}
		s.rows[s.key(r)] = r
	}
	return rows.Err()
}

func (s *rowSet[R]) written() []any {
	if len(s.dirty) == 0 {
		return nil
	}
	n := len(s.dirty)
	// One allocation for every cell, column after column.
	cells := make([]pgtype.Text, len(s.spec.cols)*n)
	for j, k := range s.dirty {
		for i, v := range s.text(s.rows[k]) {
			cells[i*n+j] = v
		}
	}
	cols := make([]textArray, len(s.spec.cols))
	args := make([]any, len(cols))
	for i := range cols {
		cols[i] = newTextArray(cells[i*n : (i+1)*n : (i+1)*n])
		args[i] = &cols[i]
	}
	return args
}

// textArray is a one-dimensional text[] parameter (NULL elements where
// not Valid). As a *textArray it is a pgtype.ArrayGetter whose elements are
// *pgtype.Text, so pgx encodes it with the array codec's plan for text
// elements — the same bytes as for a []pgtype.Text — without reflection and
// without boxing an element into an interface (a pointer needs no
// allocation). It must not be nil: the projector never writes a NULL array.
//
// Where the parameter's type is unknown (OID 0: the simple protocol and
// QueryExecModeExec, which a database URL's default_query_exec_mode
// selects), pgx finds no plan for an ArrayGetter; it then encodes what
// Value returns, the []pgtype.Text itself, as it would that slice.
type textArray struct {
	vals []pgtype.Text
	dims [1]pgtype.ArrayDimension
}

// newTextArray returns the text[] of vals.
func newTextArray(vals []pgtype.Text) textArray {
	return textArray{vals: vals, dims: [1]pgtype.ArrayDimension{{Length: int32(len(vals)), LowerBound: 1}}}
}

// Dimensions implements pgtype.ArrayGetter.
func (a *textArray) Dimensions() []pgtype.ArrayDimension { return a.dims[:] }

// Index implements pgtype.ArrayGetter: a pointer to element i.
func (a *textArray) Index(i int) any { return &a.vals[i] }

// IndexType implements pgtype.ArrayGetter.
func (a *textArray) IndexType() any { return new(pgtype.Text) }

// Value implements driver.Valuer for pgx's plan of last resort (the
// parameter's type unknown): the elements as a []pgtype.Text, which pgx
// then encodes with its own plan for that slice. It is not a
// database/sql driver.Value; only pgx reads it.
func (a *textArray) Value() (driver.Value, error) { return a.vals, nil }

// scanRow scans row into dest and converts the times listed in utc to UTC;
// the error names table. A scan function returns its row with scanRow's
// error: the row is not used when the error is set.
func scanRow(row pgx.Row, table string, utc []*time.Time, dest ...any) error {
	if err := row.Scan(dest...); err != nil {
		return fmt.Errorf("scan %s: %w", table, err)
	}
	for _, t := range utc {
		*t = t.UTC()
	}
	return nil
}

// Text forms of column values (written through ::type casts).

func txt(s string) pgtype.Text        { return pgtype.Text{String: s, Valid: true} }
func txtInt(n int64) pgtype.Text      { return txt(strconv.FormatInt(n, 10)) }
func txtTime(t time.Time) pgtype.Text { return txt(t.UTC().Format(timeFormat)) }
func txtTimePtr(t *time.Time) pgtype.Text {
	if t == nil {
		return pgtype.Text{}
	}
	return txtTime(*t)
}

// timeFormat keeps microseconds, PostgreSQL's precision, truncating.
const timeFormat = "2006-01-02T15:04:05.999999Z07:00"

// micro truncates t to PostgreSQL's precision, so a time kept in Go equals
// the one read back.
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
