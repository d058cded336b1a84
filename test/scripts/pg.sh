#!/usr/bin/env bash
# pg.sh — a local PostgreSQL server from the system's binaries, for tests and `make run`.
#
# Usage:
#   pg.sh throwaway [--] CMD [ARGS...]
#       Start a fresh server in a temporary directory on a free random port of
#       127.0.0.1, run CMD with the variables below exported, then always stop the
#       server and remove the directory (also on Ctrl-C/SIGTERM). Exits with CMD's
#       exit status. Durability settings stay at their defaults (fsync,
#       synchronous_commit, full_page_writes on) so crash tests are honest.
#         BOOKING_TEST_DATABASE_URL  postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
#         BOOKING_TEST_PG_BINDIR     PostgreSQL bin directory (initdb, pg_ctl, psql, ...)
#         BOOKING_TEST_PG_DATADIR    the server's data directory (PGDATA)
#         BOOKING_TEST_PG_CTL        an executable: `$BOOKING_TEST_PG_CTL stop|start|...`
#                                    (same actions as `pg.sh ctl`), runs as the right user
#         BOOKING_TEST_PG_PORT       the TCP port
#         BOOKING_TEST_PG_SOCKET_URL the same database over the server's Unix socket
#                                    (postgres://postgres@/postgres?host=DIR&port=PORT&...)
#         BOOKING_TEST_PG_LOG        the server log file
#         BOOKING_TEST_PG_SERVER_ENV the server's malloc setting (MALLOC_TOP_PAD_=BYTES, or empty)
#   pg.sh dev-up DATADIR [PORT]
#       Persistent server for development: initdb if DATADIR is missing or empty,
#       start it if it is not running (idempotent), create database `booking` if
#       missing, print its DATABASE_URL on stdout (everything else goes to stderr).
#       PORT defaults to 5433.
#   pg.sh dev-down DATADIR
#       Stop the server of DATADIR (fast shutdown). Does nothing if it is not running.
#   pg.sh ctl DATADIR start|stop [fast|smart|immediate]|restart|status|url
#       Control an existing data directory as the user that owns it. `stop immediate`
#       simulates a crash (no shutdown checkpoint; crash recovery on the next start).
#       `status` exits 0 when running, 3 when not. `url` prints the database URL.
#   pg.sh bindir
#       Print the bin directory, installing PostgreSQL first if needed (as root).
#
# Environment:
#   PG_BINDIR          use this bin directory instead of searching for one
#   PG_SH_KEEP=1       throwaway: keep the temporary directory (the server is still stopped)
#   PG_SH_QUIET=1      throwaway: fewer messages
#   PG_MALLOC_TOP_PAD  bytes of free memory glibc's malloc keeps at the top of each server
#                      process's heap (MALLOC_TOP_PAD_); default 4194304, empty for glibc's
#                      own (128 KiB). A server takes it when it starts (dev-up leaves a
#                      running one as it is). See docs/operations.md, "PostgreSQL's allocator".
#
# Works as root (the server refuses to run as root: initdb/pg_ctl then run through
# `runuser -u postgres` from inside a postgres-owned directory) and as any other user
# (run directly). Binaries: $PG_BINDIR, else the highest /usr/lib/postgresql/*/bin, else
# `pg_config --bindir`, else initdb on PATH; as root, a missing server is installed
# with apt-get.
set -euo pipefail

PROG="pg.sh"
# runuser, useradd and friends live in sbin, which minimal PATHs (env -i, cron) lack.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
CONF_NAME="booking.conf" # our settings, included from postgresql.conf
LOG_NAME="server.log"    # server log, inside the data directory

log() { [[ "${PG_SH_QUIET:-}" == 1 ]] || printf '%s: %s\n' "$PROG" "$*" >&2; }
warn() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

# MALLOC_TOP_PAD is the server's MALLOC_TOP_PAD_ (see PG_MALLOC_TOP_PAD above).
MALLOC_TOP_PAD="${PG_MALLOC_TOP_PAD-4194304}"
if [[ ! "$MALLOC_TOP_PAD" =~ ^[0-9]*$ ]]; then
	warn "PG_MALLOC_TOP_PAD=$MALLOC_TOP_PAD: want a number of bytes, or empty for glibc's default"
	exit 2
fi

usage() {
	sed -n '2,/^set -euo pipefail$/{/^#/!d;s/^# \{0,1\}//;p}' "$SELF" >&2
	exit 2
}

# ---------------------------------------------------------------------------
# Binaries

BINDIR=""

# find_bindir sets BINDIR to a directory that holds initdb, pg_ctl and postgres,
# or leaves it empty.
find_bindir() {
	BINDIR=""
	local d cand=()
	if [[ -n "${PG_BINDIR:-}" ]]; then
		[[ -x "$PG_BINDIR/initdb" && -x "$PG_BINDIR/pg_ctl" ]] || die "PG_BINDIR=$PG_BINDIR has no initdb/pg_ctl"
		BINDIR="$PG_BINDIR"
		return 0
	fi
	# Highest major version first (sort -V understands 9.6 < 15 < 16).
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]] && cand+=("$d")
	done
	if ((${#cand[@]} > 0)); then
		BINDIR="$(printf '%s\n' "${cand[@]}" | sort -V | tail -n 1)"
		return 0
	fi
	if command -v pg_config >/dev/null 2>&1; then
		d="$(pg_config --bindir 2>/dev/null || true)"
		if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			BINDIR="$d"
			return 0
		fi
	fi
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		BINDIR="$(dirname "$(command -v initdb)")"
	fi
	return 0
}

# enabled_units prints the systemd units enabled on this machine, one a line,
# sorted (nothing where systemctl is missing); it reads the unit files, so it
# works without a running systemd.
enabled_units() {
	command -v systemctl >/dev/null 2>&1 || return 0
	systemctl list-unit-files --state=enabled --no-legend 2>/dev/null | awk '{print $1}' | sort
}

# install_postgres installs the distribution's PostgreSQL server with apt-get
# and leaves no service running or enabled: a policy-rc.d (when none exists)
# keeps the package from starting its cluster, and the units the install
# enabled (postgresql.service) are disabled again. The tests run their own
# servers in their own directories and ports.
install_postgres() {
	command -v apt-get >/dev/null 2>&1 || die "PostgreSQL server binaries not found and apt-get is unavailable; install PostgreSQL or set PG_BINDIR"
	log "PostgreSQL server binaries not found; installing with apt-get (this takes a minute)"
	local policy=/usr/sbin/policy-rc.d created_policy=0 rc=0
	if [[ ! -e "$policy" ]]; then
		printf '#!/bin/sh\n# temporary, written by %s: do not start services during install\nexit 101\n' "$PROG" >"$policy"
		chmod 755 "$policy"
		created_policy=1
	fi
	local before
	before="$(enabled_units)"
	{
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q &&
			apt-get install -y -q --no-install-recommends postgresql
	} >&2 || rc=$?
	((created_policy)) && rm -f "$policy"
	((rc == 0)) || die "apt-get install postgresql failed (exit $rc)"
	local unit
	while IFS= read -r unit; do
		[[ -n "$unit" ]] || continue
		log "disabling $unit, which the install enabled (make test starts its own servers)"
		systemctl disable --quiet "$unit" >&2 || die "systemctl disable $unit failed"
	done < <(comm -13 <(printf '%s\n' "$before") <(enabled_units))
}

# need_bindir sets BINDIR, installing PostgreSQL when running as root.
need_bindir() {
	find_bindir
	[[ -n "$BINDIR" ]] && return 0
	if ((EUID == 0)); then
		install_postgres
		find_bindir
		[[ -n "$BINDIR" ]] || die "PostgreSQL was installed but no initdb/pg_ctl was found under /usr/lib/postgresql/*/bin"
		return 0
	fi
	die "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found.
  Install them with:  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
  or point PG_BINDIR at a directory that holds them."
}

# ---------------------------------------------------------------------------
# Running as the right user

# ensure_postgres_user makes sure the `postgres` system user exists and that we can
# switch to it (root only).
ensure_postgres_user() {
	command -v runuser >/dev/null 2>&1 || die "runuser (util-linux) not found; it is needed to run PostgreSQL as root"
	getent passwd postgres >/dev/null 2>&1 && return 0
	log "creating system user postgres"
	useradd --system --user-group --no-create-home --home-dir /nonexistent \
		--shell /usr/sbin/nologin postgres ||
		die "could not create the postgres user"
}

# as_owner DIR CMD...: run CMD from inside DIR as the user that owns DIR when we
# are root (postgres when DIR is root-owned), or directly otherwise.
as_owner() {
	local dir="$1" user
	shift
	if ((EUID == 0)); then
		user="$(stat -c %U "$dir")"
		[[ "$user" == root || "$user" == UNKNOWN ]] && user=postgres
		(cd "$dir" && runuser -u "$user" -- "$@")
	else
		(cd "$dir" && "$@")
	fi
}

# own_dir DIR: when root, give DIR to postgres and check that postgres can reach it.
own_dir() {
	local dir="$1"
	((EUID == 0)) || return 0
	ensure_postgres_user
	chown postgres: "$dir"
	if ! runuser -u postgres -- test -w "$dir" 2>/dev/null; then
		die "user postgres cannot reach $dir (a parent directory is not searchable by others?);
  put the data directory somewhere else, e.g. PG_DATA=/var/tmp/booking-pg"
	fi
}

# ---------------------------------------------------------------------------
# Ports and configuration

# port_in_use PORT: true when something listens on TCP PORT (any address).
port_in_use() {
	local port="$1" f line hex
	if command -v ss >/dev/null 2>&1; then
		[[ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ]]
		return
	fi
	# No iproute2 (fresh minimal images): read the kernel's tables; state 0A = LISTEN.
	for f in /proc/net/tcp /proc/net/tcp6; do
		[[ -r "$f" ]] || continue
		while read -r _ line _ state _; do
			[[ "$state" == 0A ]] || continue
			hex="${line##*:}"
			((16#$hex == port)) && return 0
		done < <(tail -n +2 "$f")
	done
	return 1
}

# random_free_port prints a port in [20000, 32000) (below Linux's ephemeral range)
# that nothing listens on.
random_free_port() {
	local i port
	for ((i = 0; i < 100; i++)); do
		port=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		port_in_use "$port" || {
			echo "$port"
			return 0
		}
	done
	die "no free TCP port found"
}

# write_conf DATADIR PORT SOCKETDIR MAXCONN: (re)write our settings file. The
# server reads it at start, so `pg_ctl start` needs no options.
write_conf() {
	local datadir="$1" port="$2" sockdir="$3" maxconn="$4"
	local conf="$datadir/$CONF_NAME"
	if ! grep -q "^include_if_exists = '$CONF_NAME'" "$datadir/postgresql.conf"; then
		printf "\n# Added by test/scripts/pg.sh\ninclude_if_exists = '%s'\n" "$CONF_NAME" >>"$datadir/postgresql.conf"
	fi
	cat >"$conf" <<EOF
# Written by test/scripts/pg.sh; rewritten when pg.sh picks a port.
# Durability settings (fsync, synchronous_commit, full_page_writes) stay at their
# defaults so that crash tests are honest.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sockdir'
max_connections = $maxconn
EOF
	((EUID == 0)) && chown "$(stat -c %u:%g "$datadir")" "$conf"
	return 0
}

# conf_port DATADIR: the port our settings file names.
conf_port() {
	local p
	p="$(sed -n 's/^port = \([0-9][0-9]*\)$/\1/p' "$1/$CONF_NAME" 2>/dev/null | tail -n 1)"
	[[ -n "$p" ]] || die "no port in $1/$CONF_NAME (not a data directory made by pg.sh?)"
	echo "$p"
}

# running_port DATADIR: the port of the running server (postmaster.pid line 4).
running_port() {
	sed -n 4p "$1/postmaster.pid" 2>/dev/null
}

db_url() { # PORT DBNAME
	printf 'postgres://postgres@127.0.0.1:%s/%s?sslmode=disable\n' "$1" "$2"
}

# ---------------------------------------------------------------------------
# Server control (needs BINDIR)

# is_running DATADIR: pg_ctl status exit 0 = running.
is_running() {
	[[ -f "$1/PG_VERSION" ]] || return 1
	as_owner "$1" "$BINDIR/pg_ctl" -D "$1" status >/dev/null 2>&1
}

# do_initdb DATADIR [EXTRA...]: initialise an empty DATADIR.
do_initdb() {
	local datadir="$1" out
	shift
	own_dir "$datadir"
	chmod 700 "$datadir"
	if ! out="$(as_owner "$datadir" "$BINDIR/initdb" -D "$datadir" -U postgres -A trust \
		-E UTF8 --locale=C --no-instructions "$@" 2>&1)"; then
		printf '%s\n' "$out" >&2
		die "initdb failed for $datadir"
	fi
}

# start_server DATADIR: start (pg_ctl -w), print the log tail on failure.
start_server() {
	local datadir="$1"
	# The pad is set, or glibc's default restored, whatever the caller's environment holds.
	local vars=(-u MALLOC_TOP_PAD_)
	[[ -z "$MALLOC_TOP_PAD" ]] || vars+=("MALLOC_TOP_PAD_=$MALLOC_TOP_PAD")
	if as_owner "$datadir" env "${vars[@]}" "$BINDIR/pg_ctl" -D "$datadir" -l "$datadir/$LOG_NAME" \
		-w -t 120 -s start >/dev/null 2>&1; then
		return 0
	fi
	warn "server did not start; last lines of $datadir/$LOG_NAME:"
	tail -n 15 "$datadir/$LOG_NAME" >&2 2>/dev/null || true
	return 1
}

# stop_server DATADIR [MODE]: stop if running; escalate fast → immediate → SIGKILL.
stop_server() {
	local datadir="$1" mode="${2:-fast}" pid
	is_running "$datadir" || return 0
	as_owner "$datadir" "$BINDIR/pg_ctl" -D "$datadir" -m "$mode" -w -t 60 -s stop >/dev/null 2>&1 && return 0
	is_running "$datadir" || return 0
	warn "pg_ctl stop -m $mode failed; trying immediate"
	as_owner "$datadir" "$BINDIR/pg_ctl" -D "$datadir" -m immediate -w -t 30 -s stop >/dev/null 2>&1 && return 0
	pid="$(sed -n 1p "$datadir/postmaster.pid" 2>/dev/null || true)"
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		warn "killing postmaster $pid"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	return 0
}

# ---------------------------------------------------------------------------
# Process-tree helpers for throwaway

# descendants PID: print all descendant pids of PID (from /proc, no procps needed).
descendants() {
	local root="$1" pid stat ppid line
	declare -A kids=()
	for stat in /proc/[0-9]*/stat; do
		pid="${stat#/proc/}"
		pid="${pid%/stat}"
		{ read -r line <"$stat"; } 2>/dev/null || continue
		line="${line##*) }" # fields after "pid (comm) "
		read -r _ ppid _ <<<"$line"
		kids[$ppid]+=" $pid"
	done
	local queue=("$root") cur
	while ((${#queue[@]} > 0)); do
		cur="${queue[0]}"
		queue=("${queue[@]:1}")
		for pid in ${kids[$cur]:-}; do
			echo "$pid"
			queue+=("$pid")
		done
	done
}

# kill_tree PID: SIGTERM PID and its descendants, SIGKILL what is left after 10 s.
kill_tree() {
	local root="$1" pids i alive p
	pids="$root $(descendants "$root" | tr '\n' ' ')"
	# shellcheck disable=SC2086
	kill -TERM $pids 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		alive=""
		for p in $pids; do kill -0 "$p" 2>/dev/null && alive+=" $p"; done
		[[ -z "$alive" ]] && return 0
		sleep 0.1
	done
	warn "killing processes that ignored SIGTERM:$alive"
	# shellcheck disable=SC2086
	kill -KILL $alive 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# Subcommands

TW_BASE=""      # throwaway temporary directory
TW_DATA=""      # its data directory
TW_CHILD=""     # pid of CMD
TW_CLEANED=0

tw_cleanup() {
	local rc=$?
	((TW_CLEANED)) && return 0
	TW_CLEANED=1
	trap '' INT TERM HUP
	if [[ -n "$TW_DATA" && -d "$TW_DATA" ]]; then
		if ((rc != 0)) && [[ -s "$TW_DATA/$LOG_NAME" ]]; then
			warn "exit status $rc; last lines of the server log:"
			tail -n 20 "$TW_DATA/$LOG_NAME" | sed 's/^/    /' >&2 || true
		fi
		stop_server "$TW_DATA" fast || true
	fi
	if [[ -n "$TW_BASE" && -d "$TW_BASE" ]]; then
		if [[ "${PG_SH_KEEP:-}" == 1 ]]; then
			warn "kept $TW_BASE (PG_SH_KEEP=1)"
		else
			rm -rf -- "$TW_BASE"
		fi
	fi
	log "server stopped, temporary directory removed"
	return 0
}

tw_signal() { # NAME NUMBER
	warn "caught SIG$1; stopping the command, the server and cleaning up"
	trap '' INT TERM HUP
	[[ -n "$TW_CHILD" ]] && kill_tree "$TW_CHILD"
	exit $((128 + $2))
}

cmd_throwaway() {
	[[ "${1:-}" == "--" ]] && shift
	(($# > 0)) || usage
	need_bindir

	trap tw_cleanup EXIT
	trap 'tw_signal INT 2' INT
	trap 'tw_signal TERM 15' TERM
	trap 'tw_signal HUP 1' HUP

	local tmp="${TMPDIR:-/tmp}"
	TW_BASE="$(mktemp -d "$tmp/booking-pg.XXXXXX")"
	if ((EUID == 0)) && ! { ensure_postgres_user && chown postgres: "$TW_BASE" && runuser -u postgres -- test -w "$TW_BASE"; } 2>/dev/null; then
		rm -rf -- "$TW_BASE"
		TW_BASE="$(mktemp -d /tmp/booking-pg.XXXXXX)" # TMPDIR not reachable for postgres
	fi
	chmod 755 "$TW_BASE" # others (the postgres user, clients) may look inside; data/ stays 0700
	own_dir "$TW_BASE"
	TW_DATA="$TW_BASE/data"
	mkdir "$TW_DATA"
	# --no-sync: initdb's final flush only matters for an OS crash; the server keeps
	# its durability defaults.
	do_initdb "$TW_DATA" --no-sync

	local attempt port="" started=0
	for attempt in 1 2 3 4 5; do
		port="$(random_free_port)"
		write_conf "$TW_DATA" "$port" "$TW_BASE" 300
		if start_server "$TW_DATA"; then
			started=1
			break
		fi
		warn "start attempt $attempt on port $port failed; retrying on another port"
	done
	((started)) || die "could not start PostgreSQL after 5 attempts"

	# An executable that controls this server as the right user.
	local ctl="$TW_BASE/ctl"
	printf '#!/usr/bin/env bash\n# Controls the throwaway server: start|stop [fast|smart|immediate]|restart|status|url\nPG_MALLOC_TOP_PAD=%q exec %q ctl %q "$@"\n' \
		"$MALLOC_TOP_PAD" "$SELF" "$TW_DATA" >"$ctl"
	chmod 755 "$ctl"

	export BOOKING_TEST_DATABASE_URL
	BOOKING_TEST_DATABASE_URL="$(db_url "$port" postgres)"
	export BOOKING_TEST_PG_BINDIR="$BINDIR"
	export BOOKING_TEST_PG_DATADIR="$TW_DATA"
	export BOOKING_TEST_PG_CTL="$ctl"
	export BOOKING_TEST_PG_PORT="$port"
	export BOOKING_TEST_PG_SOCKET_URL="postgres://postgres@/postgres?host=$TW_BASE&port=$port&sslmode=disable"
	export BOOKING_TEST_PG_LOG="$TW_DATA/$LOG_NAME"
	export BOOKING_TEST_PG_SERVER_ENV="${MALLOC_TOP_PAD:+MALLOC_TOP_PAD_=$MALLOC_TOP_PAD}"
	log "PostgreSQL $("$BINDIR/postgres" -V | awk '{print $3}') on 127.0.0.1:$port (data $TW_DATA)"
	log "BOOKING_TEST_DATABASE_URL=$BOOKING_TEST_DATABASE_URL"

	# Run CMD in the background and wait for it, so that a signal to this script is
	# handled at once (bash defers traps while a foreground child runs). <&0 keeps
	# stdin (a background job would otherwise read /dev/null).
	local rc=0
	"$@" <&0 &
	TW_CHILD=$!
	wait "$TW_CHILD" || rc=$?
	TW_CHILD=""
	exit "$rc"
}

cmd_dev_up() {
	local datadir="${1:-}" port="${2:-5433}" rport url
	[[ -n "$datadir" ]] || usage
	[[ "$port" =~ ^[0-9]+$ ]] || die "port must be a number, got '$port'"
	need_bindir
	mkdir -p "$datadir"
	datadir="$(cd "$datadir" && pwd)"

	if [[ ! -f "$datadir/PG_VERSION" ]]; then
		[[ -z "$(ls -A "$datadir")" ]] || die "$datadir is neither empty nor a PostgreSQL data directory"
		log "initialising $datadir"
		do_initdb "$datadir"
	fi

	# Unix socket in the data directory when its path is short enough (limit 107 bytes).
	local sockdir="$datadir"
	((${#datadir} + 20 > 100)) && sockdir=""

	if is_running "$datadir"; then
		rport="$(running_port "$datadir")"
		if [[ -n "$rport" && "$rport" != "$port" ]]; then
			warn "already running on port $rport (not $port); using $rport"
		fi
		port="${rport:-$port}"
		log "already running on 127.0.0.1:$port"
	else
		port_in_use "$port" && die "port $port is in use by another program; pick another, e.g. PG_PORT=5434"
		write_conf "$datadir" "$port" "$sockdir" 200
		log "starting PostgreSQL on 127.0.0.1:$port (log: $datadir/$LOG_NAME)"
		start_server "$datadir" || die "could not start PostgreSQL in $datadir"
	fi

	local psql=("$BINDIR/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres)
	if [[ "$("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'booking'")" != 1 ]]; then
		log "creating database booking"
		"$BINDIR/createdb" -h 127.0.0.1 -p "$port" -U postgres booking
	fi
	url="$(db_url "$port" booking)"
	echo "$url"
}

cmd_dev_down() {
	local datadir="${1:-}"
	[[ -n "$datadir" ]] || usage
	if [[ ! -f "$datadir/PG_VERSION" ]]; then
		log "no data directory at $datadir; nothing to stop"
		return 0
	fi
	cmd_ctl "$datadir" stop
}

cmd_ctl() {
	local datadir="${1:-}" action="${2:-}"
	[[ -n "$datadir" && -n "$action" ]] || usage
	[[ -f "$datadir/PG_VERSION" ]] || die "$datadir is not a PostgreSQL data directory"
	datadir="$(cd "$datadir" && pwd)"
	need_bindir
	case "$action" in
	start)
		if is_running "$datadir"; then
			log "already running"
			return 0
		fi
		start_server "$datadir" || die "could not start the server of $datadir"
		log "started on 127.0.0.1:$(conf_port "$datadir")"
		;;
	stop)
		local mode="${3:-fast}"
		case "$mode" in fast | smart | immediate) ;; *) die "stop mode must be fast, smart or immediate" ;; esac
		if ! is_running "$datadir"; then
			log "not running"
			return 0
		fi
		stop_server "$datadir" "$mode"
		log "stopped ($mode)"
		;;
	restart)
		stop_server "$datadir" fast
		start_server "$datadir" || die "could not start the server of $datadir"
		log "restarted"
		;;
	status)
		if is_running "$datadir"; then
			echo "running on 127.0.0.1:$(running_port "$datadir")"
			return 0
		fi
		echo "not running"
		return 3
		;;
	url) db_url "$(conf_port "$datadir")" postgres ;;
	*) die "unknown action '$action' (start|stop [fast|smart|immediate]|restart|status|url)" ;;
	esac
}

main() {
	local sub="${1:-}"
	(($# > 0)) && shift
	case "$sub" in
	throwaway) cmd_throwaway "$@" ;;
	dev-up) cmd_dev_up "$@" ;;
	dev-down) cmd_dev_down "$@" ;;
	ctl) cmd_ctl "$@" ;;
	bindir)
		need_bindir
		echo "$BINDIR"
		;;
	-h | --help | help | "") usage ;;
	*) die "unknown subcommand '$sub' (throwaway, dev-up, dev-down, ctl, bindir)" ;;
	esac
}

main "$@"
