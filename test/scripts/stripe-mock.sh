#!/usr/bin/env bash
# stripe-mock.sh — print the path of stripe-mock (Stripe's official mock server,
# which provider/stripe's contract tests start), installing it first if missing.
#
# Usage:
#   test/scripts/stripe-mock.sh VERSION      e.g. test/scripts/stripe-mock.sh v0.203.0
#
# $BOOKING_TEST_STRIPE_MOCK, when set, is printed as is. Otherwise the first
# stripe-mock of VERSION (as `go version -m` reports its module) on PATH or in
# GOBIN (default GOPATH/bin) is printed; if there is none, VERSION is installed
# into GOBIN with `go install github.com/stripe/stripe-mock@VERSION` (through
# the module proxy; about a minute) and printed. Progress goes to stderr.
#
# Environment: GO (default go).
set -euo pipefail

PROG="stripe-mock.sh"
GO="${GO:-go}"
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

(($# == 1)) || die "usage: $PROG VERSION"
version="$1"

if [[ -n "${BOOKING_TEST_STRIPE_MOCK:-}" ]]; then
	[[ -x "$BOOKING_TEST_STRIPE_MOCK" ]] || die "BOOKING_TEST_STRIPE_MOCK=$BOOKING_TEST_STRIPE_MOCK is not an executable"
	printf '%s\n' "$BOOKING_TEST_STRIPE_MOCK"
	exit 0
fi

gobin="$("$GO" env GOBIN)"
[[ -n "$gobin" ]] || gobin="$("$GO" env GOPATH | cut -d: -f1)/bin"

# is_version BIN: BIN is a stripe-mock built from module version $version.
is_version() {
	[[ -x "$1" ]] && "$GO" version -m "$1" 2>/dev/null |
		awk -v v="$version" '$1 == "mod" && $2 == "github.com/stripe/stripe-mock" && $3 == v {found = 1} END {exit !found}'
}

for bin in "$(command -v stripe-mock 2>/dev/null || true)" "$gobin/stripe-mock"; do
	if [[ -n "$bin" ]] && is_version "$bin"; then
		printf '%s\n' "$bin"
		exit 0
	fi
done

printf '%s: installing github.com/stripe/stripe-mock@%s into %s\n' "$PROG" "$version" "$gobin" >&2
GOBIN="$gobin" "$GO" install "github.com/stripe/stripe-mock@$version" >&2 ||
	die "go install github.com/stripe/stripe-mock@$version failed"
is_version "$gobin/stripe-mock" || die "$gobin/stripe-mock is not stripe-mock $version after go install"
printf '%s\n' "$gobin/stripe-mock"
