#!/usr/bin/env bash
# promtool.sh — run Prometheus's promtool without installing a Prometheus server.
#
# Usage:
#   deploy/promtool.sh ARGS...     e.g. deploy/promtool.sh test rules deploy/prometheus/alerts_test.yml
#
# promtool is taken from $PROMTOOL, else from bin/promtool in the work tree.
# When neither exists and apt-get does, promtool is extracted from Debian's
# `prometheus` package into bin/promtool: `apt-get download` fetches the
# .deb and `dpkg-deb -x` unpacks it into a temporary folder. Nothing is
# installed: no package, no service unit, no user, no service enabled or
# started (the package itself would enable and start a Prometheus server).
# Only when apt-get is missing is a promtool on PATH used. Debian 12 ships
# promtool 2.42.
set -euo pipefail

PROG="promtool.sh"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/bin/promtool"

die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

# fetch_promtool unpacks promtool from Debian's prometheus package into
# bin/promtool. It refreshes the package lists (apt-get update, root only)
# when the package is not found in them. It runs in a subshell, whose exit
# removes the temporary folder.
fetch_promtool() (
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	# apt-get downloads as user _apt where it can write the folder.
	chmod 0777 "$tmp"
	printf '%s: unpacking promtool from Debian package prometheus into bin/promtool (nothing is installed)\n' "$PROG" >&2
	if ! (cd "$tmp" && apt-get download -q prometheus >&2); then
		((EUID == 0)) || die "apt-get download prometheus failed; run apt-get update as root, or set PROMTOOL to a promtool binary"
		DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
		(cd "$tmp" && apt-get download -q prometheus >&2) || die "apt-get download prometheus failed"
	fi
	deb=("$tmp"/prometheus_*.deb)
	[[ -f "${deb[0]}" ]] || die "apt-get download left no prometheus_*.deb"
	dpkg-deb -x "${deb[0]}" "$tmp/root" || die "dpkg-deb -x ${deb[0]} failed"
	[[ -x "$tmp/root/usr/bin/promtool" ]] || die "the prometheus package has no usr/bin/promtool"
	mkdir -p "$(dirname "$LOCAL")"
	install -m 0755 "$tmp/root/usr/bin/promtool" "$LOCAL.tmp"
	mv -f "$LOCAL.tmp" "$LOCAL"
)

find_promtool() {
	if [[ -n "${PROMTOOL:-}" ]]; then
		[[ -x "$PROMTOOL" ]] || die "PROMTOOL=$PROMTOOL is not an executable"
		printf '%s\n' "$PROMTOOL"
		return 0
	fi
	if [[ ! -x "$LOCAL" ]] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
		fetch_promtool || exit 1
	fi
	if [[ -x "$LOCAL" ]]; then
		printf '%s\n' "$LOCAL"
		return 0
	fi
	command -v promtool 2>/dev/null ||
		die "promtool not found and apt-get is unavailable: set PROMTOOL to a promtool binary (Prometheus's release archives ship one)"
}

bin="$(find_promtool)"
exec "$bin" "$@"
