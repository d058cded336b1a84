package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// median returns the median of v (NaN-free), or 0 when empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medRange formats the median of v and, with more than one figure, its range.
func medRange(v []float64, f string) string {
	if len(v) == 0 {
		return "–"
	}
	m := fmt.Sprintf(f, median(v))
	if len(v) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, fmt.Sprintf(f, slices.Min(v)), fmt.Sprintf(f, slices.Max(v)))
}

// met says whether the row's median meets its goal.
func (r *row) met() string {
	figs := r.ratio
	if len(figs) == 0 {
		figs = r.value
	}
	switch {
	case len(figs) == 0:
		return "not measured"
	case r.goalMin > 0 && median(figs) >= r.goalMin, r.goalMax > 0 && median(figs) <= r.goalMax:
		return "met"
	case r.goalMin == 0 && r.goalMax == 0:
		return "–"
	default:
		return "**not met**"
	}
}

// machine describes the machine and the PostgreSQL server.
func (e *env) machine() []string {
	cpu := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := procMeminfoGiB()
	out := []string{
		fmt.Sprintf("- CPU: %s, %d cores (runtime.NumCPU)", cpu, runtime.NumCPU()),
		fmt.Sprintf("- memory: %.1f GiB", mem),
		fmt.Sprintf("- Go: %s; %s", runtime.Version(), kernel()),
	}
	conn, err := pgx.Connect(e.ctx, e.server)
	if err != nil {
		return append(out, "- PostgreSQL: "+err.Error())
	}
	defer conn.Close(e.ctx)
	var settings []string
	for _, s := range []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers", "max_connections", "commit_delay", "max_wal_size", "wal_sync_method"} {
		var v string
		if err := conn.QueryRow(e.ctx, "SELECT current_setting($1)", s).Scan(&v); err == nil {
			settings = append(settings, s+"="+v)
		}
	}
	if vars, ok := os.LookupEnv("BOOKING_TEST_PG_SERVER_ENV"); ok {
		settings = append(settings, "malloc: "+cmp.Or(vars, "glibc's defaults"))
	}
	out = append(out, "- PostgreSQL (throwaway server of test/scripts/pg.sh, same machine, reached over "+transport(conn)+" by the service and every baseline): "+strings.Join(settings, ", "))
	out = append(out, "- the machine is shared: other processes ran meanwhile (load average at the end: "+loadavg()+"); only the ratios, each taken against a baseline measured next to it, are comparable between runs")
	return out
}

func procMeminfoGiB() float64 {
	var kb float64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %f kB", &kb)
	}
	return kb / 1048576
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	b, err := exec.Command("uname", "-sr").Output()
	if err != nil {
		return "unknown kernel"
	}
	return strings.TrimSpace(string(b))
}

// commit names the work tree's revision, marked when it had changes.
func commit() string {
	b, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown (not a git work tree)"
	}
	rev := strings.TrimSpace(string(b))
	if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
		rev += " with uncommitted changes"
	}
	return rev
}

// causes says, per row, why its goal is not met where it is not: the
// analysis at the time of writing, printed only for rows that miss their
// goal; revise it with the figures.
var causes = map[string]string{
	"P1":  "an append writes four entries (a heap row and three index entries: log order, stream and revision, event id) where the raw insert writes two, and takes the stream's advisory lock and probes the stream's last revision and the batch's ids first. A plain INSERT of the same row into events, without any of that work, ran at 0.83-0.85x of the raw insert at one client and 0.71-0.74x at 32 (pgbench over the Unix socket; BENCHMARKS.md, hand-written part): the three indexes alone keep P1 below 0.9x. Each serves reads that would otherwise scan the log (eventstore/pgstore/doc.go).",
	"P2":  "the service and PostgreSQL share 2 cores and both are CPU-bound: the rate sits at its CPU ceiling (above), and PostgreSQL takes as much CPU per booking as the service, or more. A booking commits 3 times on the request path (P2s; 5 statements): the reservation's unit (its intent, SeatsHeld and the fresh ReservationHeld, batched per show), the order's unit (its intent, the claim, OrderPlaced, ReservationOrdered, the first attempt's lease and the key row) and the payment's result with the delete of the order's key; the background adds its statements (P2s). PostgreSQL's CPU is spread thin (perf: no function above 2%): it goes to per-statement work (planning, executor set-up, catalog and buffer lookups), and eventstore_append_multi with its nested statements takes most of the service's statement time (pg_stat_statements; BENCHMARKS.md, hand-written part). So 0.06x needs both shares cut: PostgreSQL's alone, at the raw rate of this run, caps P2 near 0.05x. BENCH_PROFILE_DIR shows where the service's CPU goes (pgx round trips and socket syscalls, HTTP and JSON through reflection, garbage collection, the simulator, the relay).",
	"P2s": "a booking commits 3 times on the request path: the reservation's unit (batched per show), the order's unit and the payment's result, which also deletes the order's data key in its transaction (the fifth statement; no batched delete is left to share out). The whole service adds its background work, which is mostly per second (projector rounds, the shared reader, checkpoints), the webhook of each payment (whose repeat of the result, when it wins the race, is one more unit) and the erasure recorded for each ended order.",
	"P2h": "a hold is 2 commits (its IntentRecorded, and its share of the show's batched unit with its ReservationHeld) and the service CPU shown above (HTTP, body decoding, the RFC 8785 fingerprint, the batch): on 2 cores shared with PostgreSQL that bounds holds near 0.2 of the raw insert rate. Closing the gap needs the holds' intent records in the batch's unit too, which would answer a concurrent repeat by a race instead of 409 in use.",
	"P3":  "both read the order's tail after the kept order (one query); a replay also reads and decodes its body and fingerprints it (a body fingerprinted lately is answered from commands.Fingerprint's memo, not canonicalized again). A kept, young intent is not read again (core.keptTarget), and nothing kept is decoded twice; an order that ended is answered without starting its payment's drive. The two kinds alternate in short slices, so a drift of the machine weighs on both.",
	"P4":  "PostgreSQL's CPU: the rebuild's own process uses about a third of the two cores' time per event (above), and the rest goes to PostgreSQL serving the ordered read, ingesting COPY and building the indexes, where the raw read only reads. Cutting the process's CPU by a fifth (decoding events with goccy/go-json) left the ratio within its range (BENCHMARKS.md, hand-written part).",
	"P5":  "its figures vary widely on a busy machine (see the range).",
	"P6":  "in dev mode the simulator and the embedded NATS server keep about 7.5 KB per booking (every charge and webhook event, an index of every subject of stream BOOKING), some 100 MB over three repetitions, beside the service's bounded caches (about 50 MB); with no default memory limit in dev mode the heap grows to up to twice what is live. With external NATS and provider the default limit (119 MiB, sized for about one collection a second at 180 bookings/s) and the binary's mapped code (about 30 MB) make the peak: a limit that met 100 MB would collect more often.",
	"P2g": "a collection comes when the heap has grown by what was live (about 50 MB with external NATS and provider) or reaches the limit; at 250-300 bookings/s the service allocates 65-85 MB a second (260-290 KB per booking, a fifth of it pgx's parameter and message buffers, which pgx shrinks after each large statement), and the default limit leaves about 55 MB above the live heap, so both bounds are under a second of allocation. The first repetition, with the warm-up's smaller heap, collects most often.",
	"P2r": "the third repetition carries the state of the first two: the caches as they fill (P2m) and, in dev mode, the simulator's and the embedded NATS server's (about 150 MB live by the third), which every collection marks. The ratio also moves with the machine (compare the raw rates of the repetitions).",
	"P2m": "the heap kept after a collection grows while the process's bounded caches fill: the written set (65,536 event ids, about 6 MB), the show snapshots' holds (8,192), the kept reservations (4,096) and the projections' row cache; a repetition of P2 is about 4,500 bookings (warm-up included), and the caches fill only after about 8,000, so the third repetition still carries more than the first (compare the heap profiles BENCH_PROFILE_DIR keeps per repetition with go tool pprof -base).",
}

// writeReport writes BENCHMARKS.md.
func (e *env) writeReport(took time.Duration) error {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	mode := fmt.Sprintf("full: %d repetitions of every row, HTTP windows of %s after %s of warm-up, pgbench baselines of %s", e.o.reps, e.o.dur, e.o.warm, e.o.rawDur)
	if e.o.quick {
		mode = fmt.Sprintf("quick (BENCH_QUICK=1): %d repetition, HTTP windows of %s, pgbench baselines of %s — for a smoke pass, not for figures", e.o.reps, e.o.dur, e.o.rawDur)
	}
	w("# Benchmarks")
	w("")
	w("Written by `make bench` (test/scripts/benchrun; see [docs/benchmarks.md](docs/benchmarks.md)). Do not edit by hand: run it again. The last section, %q, is written by hand and kept as it is by every run.", keptHeading)
	w("")
	w("- commit: %s", commit())
	w("- date: %s; the whole run took %s", time.Now().UTC().Format(time.RFC3339), took.Round(time.Second))
	w("- mode: %s", mode)
	w("")
	w("## Machine")
	w("")
	for _, l := range e.machine() {
		w("%s", l)
	}
	w("")
	w("## Results")
	w("")
	w("Figures are the median of the repetitions with the range in parentheses. A ratio is the row's rate over its baseline's rate measured next to it in this run (for P2s and P6 the figure itself is set against the goal).")
	w("")
	w("| id | measure | figure | baseline | ratio | goal | |")
	w("|---|---|---|---|---|---|---|")
	for _, r := range e.results {
		fig, base, ratio := "–", "–", "–"
		f := "%.0f"
		if r.unit == "statements" || r.unit == "commits" || r.unit == "x" || r.unit == "GC/s" {
			f = "%.2f"
		}
		if len(r.value) > 0 {
			fig = medRange(r.value, f) + " " + r.unit
		}
		if len(r.base) > 0 {
			base = medRange(r.base, "%.0f") + "/s"
		}
		if len(r.ratio) > 0 && r.unit != "statements" && r.unit != "commits" {
			ratio = medRange(r.ratio, "%.3f") + "×"
		}
		w("| %s | %s | %s | %s | %s | %s | %s |", r.id, r.measure, fig, base, ratio, r.goal, r.met())
	}
	w("")
	w("## Details")
	w("")
	for _, r := range e.results {
		if len(r.extra) == 0 && r.note == "" {
			continue
		}
		w("- **%s** %s", r.id, r.measure)
		if r.note != "" {
			w("  - %s", r.note)
		}
		if len(r.cpuMs) > 0 {
			cpu := median(r.cpuMs)
			w("  - where the time goes (medians): service CPU %.1f ms per operation, so the service alone could not pass %.0f operations/s on %d cores with nothing else running; %.1f database transactions (each statement outside a transaction is one) and %.2f WAL syncs per operation, against 1 and at most 1 for a raw insert",
				cpu, float64(runtime.NumCPU())*1000/cpu, runtime.NumCPU(), median(r.txs), median(r.syncs))
			if all := cpu + median(r.pgMs) + median(r.clientMs); len(r.pgMs) > 0 && !math.IsNaN(all) {
				most := float64(runtime.NumCPU()) * 1000 / all
				w("  - the ceiling the CPU implies: with PostgreSQL's %.1f ms and the load's clients' %.1f ms, an operation takes %.1f ms of CPU in all, so %d cores allow at most %.0f operations/s, %.3f× the raw rate's median (%.0f/s)",
					median(r.pgMs), median(r.clientMs), all, runtime.NumCPU(), most, most/median(r.base), median(r.base))
			}
		}
		for _, x := range r.extra {
			w("  - %s", x)
		}
	}
	w("")
	var gaps []string
	seen := map[string]bool{}
	for _, r := range e.results {
		if c, ok := causes[r.id]; ok && r.met() == "**not met**" && !seen[r.id] {
			seen[r.id] = true
			gaps = append(gaps, fmt.Sprintf("- **%s**: %s", r.id, c))
		}
	}
	if len(gaps) > 0 {
		w("## Gaps and their causes")
		w("")
		w("As analysed with profiles of these rows (BENCH_PROFILE_DIR) and the statement counts (test/scripts/benchrun/report.go, `causes`); revise them when the figures move.")
		w("")
		for _, g := range gaps {
			w("%s", g)
		}
		w("")
	}
	w("## Method")
	w("")
	w("All rows run in one sitting on one throwaway PostgreSQL server (test/scripts/pg.sh: durability settings at their defaults, fsync and synchronous commit on), which the service, the Go benchmarks and pgbench all reach over its Unix socket, as a service reaches a PostgreSQL on its own machine (`BENCH_PG_TCP=1`: over TCP on 127.0.0.1 instead).")
	w("")
	w("- Raw-insert baseline (P2, P2h): pgbench, one-row `INSERT` into a table with `UNIQUE (actor, key)`, %d clients, measured right before each repetition of the row.", clients)
	w("- P1, P7: `go test -bench` in eventstore/pgstore; each benchmark measures its own baseline in the same run (P1: the same number of raw UNIQUE inserts on the same pool and concurrency; P7: appends at 30k events stored). BenchmarkAppendNewStreams keeps reporting `x_of_raw_insert`.")
	w("- P2: `booking serve` (bin/booking from `make build`) in dev mode (in-process simulator, embedded NATS) on its own ports and a fresh database; a closed-loop Go client (test/scripts/benchrun) with %d HTTP connections books one seat per booking over %d shows: `POST /v1/reservations`, then `POST /v1/orders` paying `tok_visa` with `Prefer: wait=10`, each repeated with its key on 202, 409 in-use, 429 or 5xx (none expected). Bookings completed inside the window are counted; latency is per whole booking. The per-actor retry budget is lifted for the run (BOOKING_RETRY_BUDGET_RATE).", clients, p2Shows)
	w("- P2s: the test functions whose name contains `Statement` (found in the `_test.go` files), run by name with `go test -v` in their packages; the statement-budget tests log `statements per booking: request path N`, `commits per booking: request path N` and `statements per booking: whole service N` (statements and commits, the transactions that write, counted with internal/sqlcount).")
	w("- P2h: %d HTTP clients each repeatedly holding one seat (`POST /v1/reservations`) on one show of capacity 1,000,000.", clients)
	w("- P3: one completed order; %d connections `GET /v1/orders/{id}` and repeat the original `POST /v1/orders` with its key and body (each answered as a replay), each for half a window, in %d slices each alternating GET, replay, replay, GET, … (after a warm-up of each); with profiles asked for, a window of each runs first, profiled and not counted.", clients, p3Slices)
	w("- P4: `go test -bench ^BenchmarkRebuild` in projections with BOOKING_BENCH_EVENTS=%d; metric `x_of_raw_read` (rebuild over a raw ordered read of the same log in the same run).", e.o.rebuildEvents)
	w("- P5: `go test -bench ^BenchmarkRelay$` in projections/notify; the baseline is JetStream async publishing of the same messages with acks to the same embedded server in the same run.")
	w("- P6: VmHWM from /proc/PID/status of `booking serve`, reset (`/proc/PID/clear_refs` 5) before each P2 repetition and read after it; then again with an external `nats-server` (bin/nats-server) and `booking provider-sim`.")
	w("- P2r, P2g, P2m: the P2 repetitions of each mode run back to back on one service (its database, caches and heap carried over). P2r is the third repetition's bookings/s over the first's; P2g the collector's cycles (`go_gc_duration_seconds_count` of the service's `/metrics` on its admin listener) per second of warm-up and window; P2m the heap in use (runtime.MemStats HeapInuse; HeapAlloc, the live objects, in the details) after a collection forced at the end of each repetition (`/debug/pprof/heap?gc=1&debug=1` on the admin listener), with the third repetition's over the first's as the ratio. The service CPU per booking is /proc/PID/stat's user+system time (what `process_cpu_seconds_total` reports) over the bookings, warm-up included.")
	w("")
	w("Every figure above is as this run wrote it, on the commit named at the top.")
	old, err := os.ReadFile(e.o.out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if kept := keptSection(string(old)); kept != "" {
		w("")
		b.WriteString(kept)
	}
	return os.WriteFile(e.o.out, []byte(b.String()), 0o644)
}

// keptHeading is the heading of the report's hand-written section: how the
// figures came about, and figures measured outside make bench.
const keptHeading = "How the figures came about"

// keptSection returns the hand-written section of a report (its "## "
// heading keptHeading up to the next "## " heading or the end, ending in
// one newline), or "" when report has none.
func keptSection(report string) string {
	head := "## " + keptHeading + "\n"
	i := strings.Index(report, "\n"+head)
	if i < 0 {
		if !strings.HasPrefix(report, head) {
			return ""
		}
	} else {
		i++
	}
	sec := report[i:]
	if j := strings.Index(sec[len(head):], "\n## "); j >= 0 {
		sec = sec[:len(head)+j+1]
	}
	return strings.TrimRight(sec, "\n") + "\n"
}

// transport names how conn reaches its server: its Unix socket or TCP.
func transport(conn *pgx.Conn) string {
	if strings.HasPrefix(conn.Config().Host, "/") {
		return "its Unix socket"
	}
	return "TCP (" + conn.Config().Host + ")"
}
