#!/usr/bin/env bash
# fuzz.sh — the module's Go fuzz targets, found in the source, run one after the other.
#
# Usage:
#   fuzz.sh list
#       Print every fuzz target as "PACKAGE-DIR TARGET", one a line: each
#       `func FuzzX(f *testing.F)` in a *_test.go file. This is the one list;
#       nothing else needs to be kept in step with it.
#   fuzz.sh check
#       Fail unless docs/tests.md names every target (in backquotes) and every
#       target has its seed corpus directory testdata/fuzz/TARGET beside it.
#   fuzz.sh run FUZZTIME [GO-TEST-FLAGS...]
#       `check`, then run each target for FUZZTIME (`go test -run '^$' -fuzz
#       '^TARGET$' -fuzztime FUZZTIME`; go test fuzzes one target per package
#       at a time), and print a summary line per target: its time, the
#       executions, the new interesting inputs and whether it failed. Exits 1
#       if any target failed; a failing input is saved by go test under
#       PACKAGE-DIR/testdata/fuzz/TARGET/, where it stays a regression test.
#
# Environment: GO (default go); FUZZ_ONLY, an extended regular expression:
# `run` fuzzes only the targets whose names match it (default: all).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
GO="${GO:-go}"

list() {
	# grep prints FILE:func FuzzX(f *testing.F) {; the package is the file's directory.
	grep -rE --include='*_test.go' --exclude-dir=.git --exclude-dir=.data --exclude-dir=bin \
		'^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
		sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#./\1 \2#' |
		sort
}

check() {
	local status=0 dir target
	while read -r dir target; do
		if ! grep -q "\`$target\`" docs/tests.md; then
			echo "fuzz.sh: docs/tests.md does not list the fuzz target \`$target\` ($dir)" >&2
			status=1
		fi
		if ! compgen -G "$dir/testdata/fuzz/$target/*" >/dev/null; then
			echo "fuzz.sh: $dir/testdata/fuzz/$target/ has no seed corpus" >&2
			status=1
		fi
	done < <(list)
	return "$status"
}

run() {
	local fuzztime="$1"
	shift
	check
	local failed=0 dir target start secs line execs interesting summary=()
	fuzz_log="$(mktemp)"
	trap 'rm -f "$fuzz_log"' EXIT
	local log="$fuzz_log"
	while read -r dir target; do
		if [[ -n "${FUZZ_ONLY:-}" && ! "$target" =~ $FUZZ_ONLY ]]; then
			continue
		fi
		echo "=== fuzz $dir $target for $fuzztime"
		start=$SECONDS
		corpus_before="$(ls "$dir/testdata/fuzz/$target" 2>/dev/null | sort)"
		if "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$@" "$dir" 2>&1 | tee "$log"; then
			result=ok
		elif [[ "$(ls "$dir/testdata/fuzz/$target" 2>/dev/null | sort)" == "$corpus_before" ]] &&
			grep -qx '    context deadline exceeded' "$log"; then
			# Go 1.26's fuzzing coordinator can report the end of a duration
			# -fuzztime as "context deadline exceeded" when a worker is
			# mid-input on a busy machine (golang/go#75804, fixed in Go 1.27).
			# It wrote no failing input, so nothing crashed: say so, do not fail.
			result="ok (coordinator deadline race, golang/go#75804; no failing input)"
		else
			result=FAIL
			failed=1
		fi
		secs=$((SECONDS - start))
		# The last progress line: "fuzz: elapsed: 5m0s, execs: 123 (410/sec), new interesting: 7 (total: 30)".
		line="$(grep -E '^fuzz: elapsed: .*execs: ' "$log" | tail -n 1 || true)"
		execs="$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$line")"
		interesting="$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$line")"
		summary+=("$(printf '%-16s %-26s %6ss %12s execs %5s new interesting  %s' "$dir" "$target" "$secs" "${execs:-?}" "${interesting:-?}" "$result")")
	done < <(list)
	echo
	echo "=== fuzz summary (FUZZTIME=$fuzztime)"
	printf '%s\n' "${summary[@]}"
	return "$failed"
}

case "${1:-}" in
list) list ;;
check) check ;;
run)
	[[ $# -ge 2 ]] || { echo "usage: fuzz.sh run FUZZTIME [GO-TEST-FLAGS...]" >&2; exit 2; }
	shift
	run "$@"
	;;
*)
	echo "usage: fuzz.sh list | check | run FUZZTIME [GO-TEST-FLAGS...]" >&2
	exit 2
	;;
esac
