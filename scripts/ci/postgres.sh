#!/usr/bin/env bash
# Throwaway PostgreSQL server for CI / local test runs.
#
#   scripts/ci/postgres.sh start DIR   -> prints ONE line on stdout:
#                                         postgres://postgres@127.0.0.1:PORT/forelead_test
#   scripts/ci/postgres.sh stop DIR    -> stops the server and removes DIR
#
# Everything except that URL goes to stderr, so `URL=$(postgres.sh start "$d")`
# is safe.
#
# Layout inside DIR (DIR must be empty or not exist on first start):
#   DIR/data          PGDATA (initdb, owned by the server user)
#   DIR/socket        unix socket directory
#   DIR/postgres.log  server log (dumped to stderr if startup fails)
#   DIR/port, DIR/url, DIR/bindir, DIR/.forelead-postgres  bookkeeping
#
# Details:
#   * Finds initdb/pg_ctl on PATH, then /usr/lib/postgresql/*/bin (newest);
#     if neither has them and we are root, runs `apt-get install postgresql`.
#   * Postgres refuses to run as root: when run as root, the server runs as
#     the OS user $FORELEAD_PG_OS_USER (default: postgres), created with
#     useradd if missing. When run as a normal user, it runs as that user.
#   * The database superuser role is always `postgres` (initdb -U postgres),
#     whatever the OS user is. Auth is `trust` for local sockets and
#     127.0.0.1 only; the server listens on 127.0.0.1 only. fsync stays on.
#   * Port: first free one from 55432 upward ($FORELEAD_PG_PORT_BASE to
#     override); if another process grabs it in the meantime, the next one
#     is tried. A DIR keeps its port from `start` to `stop`, even while its
#     server is stopped: the port is claimed by a symlink
#     $CLAIMS/PORT -> DIR, so a server started beside it (another test file
#     running at the same time) never takes the port of one that is only
#     stopped, and the stopped one comes back on the same port. A claim whose
#     DIR is gone is stale and is taken over.
#   * `start` on a DIR whose server is already running just prints its URL
#     again; `stop` on a missing DIR is a no-op.
set -euo pipefail

PROG="postgres.sh"
DB_NAME="forelead_test"
DB_ROLE="postgres"
PORT_BASE="${FORELEAD_PG_PORT_BASE:-55432}"
PORT_TRIES=50
READY_TIMEOUT=30      # seconds
MARKER=".forelead-postgres"
CLAIMS="${TMPDIR:-/tmp}/forelead-pg-ports-$(id -u)"

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }

usage() {
  cat >&2 <<EOF
usage: $0 start DIR   start a throwaway PostgreSQL in DIR, print its URL on stdout
       $0 stop DIR    stop it and remove DIR
EOF
  exit 2
}

# ---------------------------------------------------------------- binaries --

BINDIR=""

# Sets BINDIR to a directory containing initdb and pg_ctl, or returns 1.
find_pg_bindir() {
  local p d
  if p="$(command -v initdb 2>/dev/null)" && [[ -n "$p" ]]; then
    # Resolve symlinks (e.g. /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb)
    # so that psql/pg_isready of the same version are found next to it.
    d="$(dirname "$(readlink -f "$p")")"
    if [[ -x "$d/pg_ctl" && -x "$d/postgres" ]]; then BINDIR="$d"; return 0; fi
    d="$(dirname "$p")"
    if [[ -x "$d/pg_ctl" && -x "$d/postgres" ]]; then BINDIR="$d"; return 0; fi
  fi
  # Newest version first.
  local -a dirs=()
  mapfile -t dirs < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -rV)
  for d in "${dirs[@]}"; do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then
      BINDIR="$d"; return 0
    fi
  done
  return 1
}

install_postgres() {
  [[ "$(id -u)" -eq 0 ]] ||
    die "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin, and not running as root so cannot apt-get install them. Install the 'postgresql' package or put initdb/pg_ctl on PATH."
  command -v apt-get >/dev/null 2>&1 ||
    die "PostgreSQL server binaries not found and apt-get is not available to install them."
  log "PostgreSQL server binaries not found; installing with apt-get (this takes a minute)..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 ||
    die "'apt-get update' failed (see output above); cannot install PostgreSQL."
  apt-get install -y -qq --no-install-recommends postgresql >&2 ||
    die "'apt-get install postgresql' failed (see output above)."
}

# Client tool of the same version as the server if possible, else from PATH.
client_bin() {
  if [[ -x "$BINDIR/$1" ]]; then
    printf '%s\n' "$BINDIR/$1"
  elif command -v "$1" >/dev/null 2>&1; then
    command -v "$1"
  else
    return 1
  fi
}

# ------------------------------------------------------------------- users --

PG_USER=""

choose_user() {
  if [[ "$(id -u)" -ne 0 ]]; then
    PG_USER="$(id -un)"
    return
  fi
  PG_USER="${FORELEAD_PG_OS_USER:-postgres}"
  [[ "$PG_USER" != "root" ]] || die "FORELEAD_PG_OS_USER must not be root: PostgreSQL refuses to run as root."
  if ! id -u "$PG_USER" >/dev/null 2>&1; then
    log "creating system user '$PG_USER' to run the server (postgres refuses to run as root)"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$PG_USER" >&2 ||
      die "could not create OS user '$PG_USER' with useradd."
  fi
}

# Run a command as PG_USER (directly if we already are that user).
as_pg() {
  if [[ "$(id -un)" == "$PG_USER" ]]; then
    "$@"
  elif command -v runuser >/dev/null 2>&1; then
    runuser -u "$PG_USER" -- "$@"
  elif command -v setpriv >/dev/null 2>&1; then
    setpriv --reuid="$PG_USER" --regid="$(id -g "$PG_USER")" --init-groups -- "$@"
  else
    die "need runuser or setpriv (util-linux) to run commands as '$PG_USER'."
  fi
}

# ------------------------------------------------------------------- ports --

# True if something accepts TCP connections on 127.0.0.1:$1.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Claims port $1 for DIR $2 (see the header); true if DIR holds the claim now.
# Every claim is made under one lock (flock, released when the subshell exits, also if it is
# killed): two starts that found the same stale claim would otherwise both take it over, one
# removing the other's new claim before making its own.
claim_port() { # PORT DIR
  mkdir -p "$CLAIMS"
  (
    flock 9 || exit 1
    claim="$CLAIMS/$1"
    ln -sn "$2" "$claim" 2>/dev/null && exit 0
    owner="$(readlink "$claim" 2>/dev/null)" || exit 1
    [[ "$owner" == "$2" ]] && exit 0
    [[ -e "$owner/$MARKER" ]] && exit 1
    log "port $1 was claimed by $owner, which is gone; taking it over"
    ln -snf "$2" "$claim"
  ) 9>"$CLAIMS/.lock"
}

# Drops the claims DIR $1 holds.
release_ports() { # DIR
  local claim
  for claim in "$CLAIMS"/*; do
    [[ -L "$claim" && "$(readlink "$claim")" == "$1" ]] && rm -f -- "$claim"
  done
  return 0
}

# ------------------------------------------------------------------- start --

URL=""

db_url() { printf 'postgres://%s@127.0.0.1:%s/%s' "$DB_ROLE" "$1" "$DB_NAME"; }

# True if PID exists and is not a zombie (pg_ctl's own check is kill(pid, 0),
# which a killed-but-unreaped postmaster still passes).
pid_alive() {
  local state
  [[ "$1" =~ ^[0-9]+$ ]] || return 1
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

postmaster_pid() { head -n1 "$1/data/postmaster.pid" 2>/dev/null; }

server_running() { # DIR
  [[ -f "$1/data/postmaster.pid" ]] || return 1
  pid_alive "$(postmaster_pid "$1")" || return 1
  as_pg "$BINDIR/pg_ctl" status -D "$1/data" >/dev/null 2>&1
}

wait_ready() { # PORT
  local port="$1" isready psql i
  isready="$(client_bin pg_isready || true)"
  psql="$(client_bin psql || true)"
  for ((i = 0; i < READY_TIMEOUT * 5; i++)); do
    if [[ -n "$isready" ]]; then
      "$isready" -q -h 127.0.0.1 -p "$port" -U "$DB_ROLE" -d postgres && return 0
    elif [[ -n "$psql" ]]; then
      "$psql" -X -q -h 127.0.0.1 -p "$port" -U "$DB_ROLE" -d postgres -c 'select 1' >/dev/null 2>&1 && return 0
    else
      port_in_use "$port" && return 0
    fi
    sleep 0.2
  done
  return 1
}

create_db() { # PORT
  local port="$1" psql exists
  psql="$(client_bin psql)" || die "psql not found (looked in $BINDIR and on PATH); cannot create database $DB_NAME."
  local -a q=("$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$DB_ROLE" -d postgres)
  exists="$("${q[@]}" -tAc "select 1 from pg_database where datname = '$DB_NAME'")" ||
    die "could not connect to the server on 127.0.0.1:$port as role $DB_ROLE to create $DB_NAME."
  if [[ "$exists" != "1" ]]; then
    "${q[@]}" -c "create database $DB_NAME" >&2 || die "'create database $DB_NAME' failed."
  fi
}

cmd_start() {
  local dir="$1"
  [[ "$dir" == /* ]] || dir="$PWD/$dir"
  dir="${dir%/}"
  [[ -n "$dir" ]] || die "refusing to use / as the server directory."

  # Socket path must fit in sun_path (107 bytes): DIR/socket/.s.PGSQL.NNNNN
  local sockpath="$dir/socket/.s.PGSQL.55432"
  ((${#sockpath} <= 100)) ||
    die "directory path is too long for a unix socket (${#sockpath} > 100 chars): $dir. Use a shorter one, e.g. \$(mktemp -d)."

  find_pg_bindir || { install_postgres; find_pg_bindir; } ||
    die "PostgreSQL installed, but initdb/pg_ctl still not found on PATH or in /usr/lib/postgresql/*/bin."
  log "using PostgreSQL binaries in $BINDIR ($("$BINDIR/postgres" --version))"
  choose_user

  # Prepare DIR.
  if [[ -e "$dir" && ! -d "$dir" ]]; then die "$dir exists and is not a directory."; fi
  mkdir -p "$dir"
  if [[ ! -e "$dir/$MARKER" ]]; then
    if [[ -n "$(ls -A "$dir")" ]]; then
      die "$dir is not empty and was not created by this script; refusing to use it. Pass an empty or non-existent directory."
    fi
    : >"$dir/$MARKER"
  fi
  printf '%s\n' "$BINDIR" >"$dir/bindir"
  mkdir -p "$dir/socket"
  if [[ "$(id -u)" -eq 0 ]]; then
    chown -R "$PG_USER:" "$dir" || die "could not chown $dir to $PG_USER."
  fi
  chmod 700 "$dir"
  as_pg test -w "$dir" ||
    die "OS user '$PG_USER' cannot write to $dir (is a parent directory private to root? e.g. TMPDIR under /root). Use a directory under /tmp."

  # Already running? Then just print the URL again.
  if server_running "$dir" && [[ -f "$dir/port" ]]; then
    local port
    port="$(<"$dir/port")"
    log "server in $dir is already running on port $port"
    wait_ready "$port" || die "server in $dir is running but not accepting connections on 127.0.0.1:$port; see $dir/postgres.log"
    create_db "$port"
    URL="$(db_url "$port")"
    return
  fi

  # initdb (skipped if DIR already holds a cluster from an earlier start).
  if [[ ! -f "$dir/data/PG_VERSION" ]]; then
    local -a locale_opt=(--no-locale)
    if locale -a 2>/dev/null | grep -qixE 'c\.utf-?8'; then locale_opt=(--locale=C.UTF-8); fi
    log "initdb into $dir/data as OS user '$PG_USER' (superuser role '$DB_ROLE')"
    if ! (cd "$dir" && as_pg "$BINDIR/initdb" -D "$dir/data" -U "$DB_ROLE" --encoding=UTF8 \
      "${locale_opt[@]}" --auth-local=trust --auth-host=trust >"$dir/initdb.log" 2>&1); then
      cat "$dir/initdb.log" >&2 || true
      die "initdb failed (output above, also in $dir/initdb.log)."
    fi
    # Trust only local sockets and 127.0.0.1 (initdb's default also has ::1 and replication).
    cat >"$dir/data/pg_hba.conf" <<'EOF'
# Written by scripts/ci/postgres.sh: throwaway test server, no passwords.
# TYPE  DATABASE  USER  ADDRESS        METHOD
local   all       all                  trust
host    all       all   127.0.0.1/32   trust
EOF
    cat >>"$dir/data/postgresql.conf" <<EOF

# --- scripts/ci/postgres.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/socket'
EOF
    [[ "$(id -u)" -ne 0 ]] || chown "$PG_USER:" "$dir/data/pg_hba.conf" "$dir/data/postgresql.conf"
  fi

  # Start on the port DIR had, else on the first free unclaimed one; retry on
  # the next one if we lose a race.
  local port="$PORT_BASE" tries=0 started=""
  [[ -s "$dir/port" ]] && port="$(<"$dir/port")"
  while ((tries < PORT_TRIES)); do
    if ! claim_port "$port" "$dir"; then
      port=$((port + 1)); tries=$((tries + 1)); continue
    fi
    if port_in_use "$port"; then
      rm -f -- "$CLAIMS/$port"
      port=$((port + 1)); tries=$((tries + 1)); continue
    fi
    log "starting server on 127.0.0.1:$port (log: $dir/postgres.log)"
    local logstart=0
    [[ -f "$dir/postgres.log" ]] && logstart="$(wc -l <"$dir/postgres.log")"
    if (cd "$dir" && as_pg "$BINDIR/pg_ctl" start -D "$dir/data" -l "$dir/postgres.log" \
      -w -t "$READY_TIMEOUT" -o "-p $port" >&2); then
      started=1
      break
    fi
    if tail -n +"$((logstart + 1))" "$dir/postgres.log" 2>/dev/null | grep -qiE 'could not (bind|create any TCP)|address already in use'; then
      log "port $port is taken; trying the next one"
      rm -f -- "$CLAIMS/$port"
      port=$((port + 1)); tries=$((tries + 1)); continue
    fi
    log "---- last lines of $dir/postgres.log ----"
    tail -n 40 "$dir/postgres.log" >&2 2>/dev/null || true
    die "PostgreSQL failed to start (see log above; data directory $dir/data)."
  done
  [[ -n "$started" ]] || die "no free TCP port on 127.0.0.1 in $PORT_BASE..$((PORT_BASE + PORT_TRIES - 1))."
  printf '%s\n' "$port" >"$dir/port"

  if ! wait_ready "$port"; then
    tail -n 40 "$dir/postgres.log" >&2 2>/dev/null || true
    die "server started but did not accept connections on 127.0.0.1:$port within ${READY_TIMEOUT}s."
  fi
  create_db "$port"
  URL="$(db_url "$port")"
  printf '%s\n' "$URL" >"$dir/url"
  log "ready: $URL"
}

# -------------------------------------------------------------------- stop --

cmd_stop() {
  local dir="$1"
  [[ "$dir" == /* ]] || dir="$PWD/$dir"
  dir="${dir%/}"
  [[ -n "$dir" ]] || die "refusing to stop/remove /."
  if [[ ! -e "$dir" ]]; then
    log "$dir does not exist; nothing to stop"
    return 0
  fi
  if [[ ! -e "$dir/$MARKER" ]]; then
    if [[ -z "$(ls -A "$dir" 2>/dev/null)" ]]; then
      rmdir "$dir"; return 0
    fi
    die "$dir was not created by '$PROG start' (no $MARKER file); refusing to delete it."
  fi

  if [[ -f "$dir/data/postmaster.pid" ]] && ! pid_alive "$(postmaster_pid "$dir")"; then
    log "server in $dir is not running (stale postmaster.pid, PID $(postmaster_pid "$dir"))"
  elif [[ -f "$dir/data/postmaster.pid" ]]; then
    [[ -s "$dir/bindir" ]] && BINDIR="$(<"$dir/bindir")"
    if [[ -z "$BINDIR" || ! -x "$BINDIR/pg_ctl" ]]; then
      find_pg_bindir || die "pg_ctl not found; cannot stop the server in $dir/data. Kill PID $(postmaster_pid "$dir") manually, then re-run stop."
    fi
    PG_USER="$(stat -c %U "$dir/data")"
    [[ "$PG_USER" != "root" ]] || die "$dir/data is owned by root; that cannot be our server."
    log "stopping server in $dir (pg_ctl stop -m fast as '$PG_USER')"
    if ! (cd "$dir" && as_pg "$BINDIR/pg_ctl" stop -D "$dir/data" -m fast -w -t 30 >&2); then
      if as_pg "$BINDIR/pg_ctl" status -D "$dir/data" >/dev/null 2>&1; then
        log "fast shutdown failed; trying immediate shutdown"
        as_pg "$BINDIR/pg_ctl" stop -D "$dir/data" -m immediate -w -t 30 >&2 ||
          die "could not stop the server in $dir/data (PID $(postmaster_pid "$dir")); not removing $dir."
      else
        log "server was not running (stale postmaster.pid)"
      fi
    fi
  fi
  rm -rf -- "$dir"
  release_ports "$dir"
  log "removed $dir"
}

# -------------------------------------------------------------------- main --

[[ $# -eq 2 && -n "$2" ]] || usage
case "$1" in
  start)
    # All of cmd_start's output goes to stderr; only the URL reaches stdout.
    # (Child processes such as the postmaster never inherit our stdout, so
    # `$(postgres.sh start DIR)` returns as soon as the URL is printed.)
    cmd_start "$2" >&2
    printf '%s\n' "$URL"
    ;;
  stop)
    cmd_stop "$2" >&2
    ;;
  *) usage ;;
esac
