#!/usr/bin/env bash
# bench.sh — run Go benchmarks and write a report (stdout and a file).
#
# Usage: bench.sh OUTFILE [--] CMD [ARGS...]     (CMD is the `go test -bench` command)
#
# Meant to run inside `pg.sh throwaway`. The report has a header that describes the
# machine and the server (commit, Go, CPU, PostgreSQL), then, unless
# BENCH_BASELINE=0, a pgbench baseline measured on the same server, then CMD's output.
# Machine figures drift from run to run, so benchmarks should report ratios to a
# baseline measured in the same run; the pgbench result is exported to CMD as
#   BOOKING_BENCH_PG_BASELINE_TPS   one-row INSERTs into a table with a UNIQUE
#                                   (actor, key) constraint, synchronous commit on,
#                                   BENCH_BASELINE_CLIENTS clients (default 8) for
#                                   BENCH_BASELINE_SECONDS seconds (default 5)
# Everything here (the baseline and CMD) reaches the server over its Unix socket
# (BOOKING_TEST_PG_SOCKET_URL, when pg.sh gives one) unless BENCH_PG_TCP=1: the way a
# service reaches a PostgreSQL on its own machine, and cheaper for both sides than
# TCP over loopback.
# The file is written as OUTFILE.tmp and renamed when CMD succeeds; on failure it is
# kept as OUTFILE.failed. Exits with CMD's exit status.
set -euo pipefail

(($# >= 2)) || {
	echo "usage: bench.sh OUTFILE [--] CMD [ARGS...]" >&2
	exit 2
}
out="$1"
shift
[[ "$1" == "--" ]] && shift

tmp="$out.tmp"
: >"$tmp"
report() { tee -a "$tmp"; }

{
	echo "# booking benchmark report"
	echo "# date:      $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	if rev="$(git rev-parse --short HEAD 2>/dev/null)"; then
		git diff --quiet HEAD 2>/dev/null || rev+=" (uncommitted changes)"
	else
		rev="unknown"
	fi
	echo "# commit:    $rev"
	echo "# go:        $(go version 2>/dev/null || echo unknown)"
	echo "# cpu:       $(sed -n 's/^model name[[:space:]]*: //p;T;q' /proc/cpuinfo 2>/dev/null) x $(nproc)"
	echo "# memory:    $(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo 2>/dev/null)"
	echo "# command:   $*"
} | report

if [[ -n "${BOOKING_TEST_PG_SOCKET_URL:-}" && "${BENCH_PG_TCP:-0}" != 1 ]]; then
	export BOOKING_TEST_DATABASE_URL="$BOOKING_TEST_PG_SOCKET_URL"
fi
echo "# database:  ${BOOKING_TEST_DATABASE_URL:-none}" | report
baseline=""
have_pg=0
if [[ -n "${BOOKING_TEST_DATABASE_URL:-}" && -n "${BOOKING_TEST_PG_BINDIR:-}" ]]; then
	have_pg=1
	psql=(env "PGOPTIONS=-c client_min_messages=warning" "$BOOKING_TEST_PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$BOOKING_TEST_DATABASE_URL")
	echo "# postgres:  $("${psql[@]}" -Atc 'SHOW server_version') (fsync=$("${psql[@]}" -Atc 'SHOW fsync'), synchronous_commit=$("${psql[@]}" -Atc 'SHOW synchronous_commit'), max_connections=$("${psql[@]}" -Atc 'SHOW max_connections'))" | report
fi
if [[ "${BENCH_BASELINE:-1}" != 0 ]] && ((have_pg)); then
	clients="${BENCH_BASELINE_CLIENTS:-8}"
	seconds="${BENCH_BASELINE_SECONDS:-5}"
	script="$(mktemp)"
	printf '%s\n' "INSERT INTO bench_baseline (actor, key) VALUES (:client_id, gen_random_uuid()::text) ON CONFLICT DO NOTHING;" >"$script"
	"${psql[@]}" -c 'DROP TABLE IF EXISTS bench_baseline; CREATE TABLE bench_baseline (id bigserial PRIMARY KEY, actor int NOT NULL, key text NOT NULL, UNIQUE (actor, key))'
	if pgb="$("$BOOKING_TEST_PG_BINDIR/pgbench" -n -f "$script" -c "$clients" -j "$clients" -T "$seconds" "$BOOKING_TEST_DATABASE_URL" 2>&1)"; then
		baseline="$(sed -n 's/^tps = \([0-9]*\).*/\1/p' <<<"$pgb" | tail -n 1)"
	else
		echo "$pgb" >&2
	fi
	"${psql[@]}" -c 'DROP TABLE IF EXISTS bench_baseline' || true
	rm -f "$script"
	if [[ -n "$baseline" ]]; then
		echo "# baseline:  pgbench one-row INSERT with UNIQUE (actor, key), $clients clients, ${seconds}s: $baseline TPS" | report
		export BOOKING_BENCH_PG_BASELINE_TPS="$baseline"
	else
		echo "# baseline:  pgbench failed (see above)" | report
	fi
fi
echo | report

set +e
"$@" 2>&1 | report
rc="${PIPESTATUS[0]}"
set -e

summary="$(grep -E '^Benchmark' "$tmp" || echo "(no benchmark lines)")"
printf '\n# summary\n%s\n' "$summary" | report

if ((rc == 0)); then
	mv -f "$tmp" "$out"
	echo "bench.sh: report written to $out" >&2
else
	mv -f "$tmp" "$out.failed"
	echo "bench.sh: benchmarks failed (exit $rc); partial report in $out.failed" >&2
fi
exit "$rc"
