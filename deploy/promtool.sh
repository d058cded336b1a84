#!/usr/bin/env bash
# promtool.sh — run Prometheus's promtool, installing it first if it is missing.
#
# Usage:
#   deploy/promtool.sh ARGS...     e.g. deploy/promtool.sh test rules deploy/prometheus/alerts_test.yml
#
# promtool is taken from $PROMTOOL, else from PATH. As root on Debian, a missing
# promtool is installed with Debian's `prometheus` package (it ships
# /usr/bin/promtool; Debian 12 has 2.42), with a policy-rc.d that keeps the
# package from starting its server. Anyone else is told how to install it.
set -euo pipefail

PROG="promtool.sh"
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

find_promtool() {
	if [[ -n "${PROMTOOL:-}" ]]; then
		[[ -x "$PROMTOOL" ]] || die "PROMTOOL=$PROMTOOL is not an executable"
		printf '%s\n' "$PROMTOOL"
		return 0
	fi
	command -v promtool 2>/dev/null || true
}

install_promtool() {
	command -v apt-get >/dev/null 2>&1 || die "promtool not found and apt-get is unavailable; install Prometheus's promtool or set PROMTOOL"
	((EUID == 0)) || die "promtool not found. Install it with:
  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
  or set PROMTOOL to a promtool binary."
	printf '%s: promtool not found; installing Debian package prometheus with apt-get\n' "$PROG" >&2
	# In a subshell, so that the temporary policy-rc.d (which keeps the package from
	# starting a Prometheus server) is removed however apt-get ends.
	(
		policy=/usr/sbin/policy-rc.d
		if [[ ! -e "$policy" ]]; then
			trap 'rm -f "$policy"' EXIT
			printf '#!/bin/sh\n# temporary, written by %s\nexit 101\n' "$PROG" >"$policy"
			chmod 755 "$policy"
		fi
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q >&2 &&
			apt-get install -y -q --no-install-recommends prometheus >&2
	) || die "apt-get install prometheus failed (exit $?)"
}

bin="$(find_promtool)"
if [[ -z "$bin" ]]; then
	install_promtool
	bin="$(find_promtool)"
	[[ -n "$bin" ]] || die "the prometheus package was installed but promtool is not on PATH"
fi
exec "$bin" "$@"
