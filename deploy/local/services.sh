#!/usr/bin/env bash
# Makes Redis, PostgreSQL and (with --cluster) a three-node Redis Cluster
# available on loopback, then prints the URLs to use as shell assignments:
#
#   eval "$(deploy/local/services.sh)"
#
# Services that already answer are used as they are. Missing binaries are
# installed with apt-get. Running it twice is harmless. Progress goes to
# stderr; only the assignments go to stdout. What it starts keeps its pid
# file under IDEMGATE_LOCAL_STATE (default /tmp/idemgate-local), and
# --stop stops exactly that.
set -euo pipefail

want_cluster=0 want_topology=0 want_stop=0
for arg in "$@"; do
  case "$arg" in
    --cluster) want_cluster=1 ;;
    --topology) want_topology=1 ;;
    --stop) want_stop=1 ;;
    -h|--help)
      sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
      echo "Options: --cluster   also start a Redis Cluster on 127.0.0.1:7000-7002"
      echo "         --topology  also install nginx, pgbouncer (the topology tests start their own) and chromium (the console's browser test)"
      echo "         --stop      stop what this script started under IDEMGATE_LOCAL_STATE, and nothing else"
      exit 0 ;;
    *) echo "services.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
state_dir=${IDEMGATE_LOCAL_STATE:-/tmp/idemgate-local}
mkdir -p "$state_dir"

log() { echo "services: $*" >&2; }

apt_updated=0
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "need root to install $*; install them and run again"; exit 1
  fi
  if [ "$apt_updated" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    apt_updated=1
  fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# port_open HOST PORT: true when something accepts TCP there.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() { # wait_for DESCRIPTION COMMAND...
  local what=$1; shift
  for _ in $(seq 1 100); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "$what did not come up"; return 1
}

hostport() { # hostport URL DEFAULTPORT -> "host port"
  local rest=${1#*://}; rest=${rest#*@}; rest=${rest%%/*}; rest=${rest%%\?*}
  local host=${rest%%:*} port=$2
  [ "$rest" != "$host" ] && port=${rest##*:}
  echo "$host $port"
}

ensure_redis_binaries() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || apt_install redis-server redis-tools
}

ensure_redis() {
  read -r host port < <(hostport "$REDIS_URL" 6379)
  if port_open "$host" "$port"; then log "redis on $host:$port is up"; return; fi
  ensure_redis_binaries
  log "starting redis on $host:$port"
  redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no \
    --dir "$state_dir" --logfile "$state_dir/redis-$port.log" --pidfile "$state_dir/redis-$port.pid" >&2
  wait_for "redis" redis-cli -h "$host" -p "$port" ping
}

ensure_cluster() {
  local ports=(7000 7001 7002)
  if port_open 127.0.0.1 7000 && redis-cli -p 7000 cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
    log "redis cluster on 127.0.0.1:7000-7002 is up"
  else
    ensure_redis_binaries
    for p in "${ports[@]}"; do
      if ! port_open 127.0.0.1 "$p"; then
        mkdir -p "$state_dir/cluster-$p"
        rm -f "$state_dir/cluster-$p/nodes.conf"
        redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --cluster-enabled yes \
          --cluster-config-file "$state_dir/cluster-$p/nodes.conf" --save "" --appendonly no \
          --dir "$state_dir/cluster-$p" --logfile "$state_dir/cluster-$p/redis.log" \
          --pidfile "$state_dir/cluster-$p/redis.pid" >&2
      fi
      wait_for "redis cluster node $p" redis-cli -p "$p" ping
    done
    if ! redis-cli -p 7000 cluster info | grep -q 'cluster_state:ok'; then
      log "creating redis cluster"
      redis-cli --cluster create 127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002 \
        --cluster-replicas 0 --cluster-yes >&2
      wait_for "redis cluster" sh -c "redis-cli -p 7000 cluster info | grep -q cluster_state:ok"
    fi
  fi
  REDIS_CLUSTER_URL=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
}

pg_answers() { psql "$DATABASE_URL" -Atqc 'select 1' >/dev/null 2>&1; }

# url_user URL: the user a postgres:// URL names, postgres when none.
url_user() {
  local rest=${1#*://}
  case "$rest" in
    *@*) rest=${rest%%@*}; echo "${rest%%:*}" ;;
    *) echo postgres ;;
  esac
}

pg_bindir() {
  if command -v initdb >/dev/null; then dirname "$(readlink -f "$(command -v initdb)")"; return; fi
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

# as_pg_owner COMMAND...: runs a PostgreSQL server command as the owner of
# the clusters this script creates: the user postgres when run as root
# (initdb and postgres refuse root), else the user running it.
as_pg_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_postgres() {
  read -r host port < <(hostport "$DATABASE_URL" 5432)
  command -v psql >/dev/null || apt_install postgresql-client
  if pg_answers; then log "postgresql on $host:$port is up"; return; fi
  local own=0
  if ! port_open "$host" "$port"; then
    # A cluster of this script's own, under the state directory: a
    # distribution's cluster (Debian's main) is never edited, and any port
    # can be taken beside it.
    if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
      apt_install postgresql
    fi
    local bin data user
    bin=$(pg_bindir) data=$state_dir/postgres-$port user=$(url_user "$DATABASE_URL")
    if [ "$(id -u)" = 0 ]; then chmod 755 "$state_dir"; fi
    if [ ! -s "$data/PG_VERSION" ]; then
      log "creating a postgresql cluster in $data"
      mkdir -p "$data"
      [ "$(id -u)" = 0 ] && chown postgres:postgres "$data"
      chmod 700 "$data"
      as_pg_owner "$bin/initdb" -D "$data" -U "$user" --auth=trust -E UTF8 --no-sync >"$state_dir/postgres-$port.initdb.log" 2>&1 ||
        { log "initdb failed; see $state_dir/postgres-$port.initdb.log"; exit 1; }
    fi
    log "starting postgresql on $host:$port ($data)"
    as_pg_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
      -o "-c listen_addresses=$host -p $port -c unix_socket_directories=$data" start >&2
    own=1
  fi
  if ! pg_answers; then
    # The server is up but the database (or trust) is missing.
    local db=${DATABASE_URL##*/}; db=${db%%\?*}
    log "creating database $db"
    if [ "$own" = 1 ]; then
      psql -h "$host" -p "$port" -U "$(url_user "$DATABASE_URL")" -d postgres -Atqc "create database \"$db\"" >&2
    else
      su postgres -c "psql -Atqc \"select 1 from pg_database where datname='$db'\" | grep -q 1 || createdb '$db'" >&2 || true
    fi
    wait_for "postgresql database $db" pg_answers
  fi
}

# running PID: true while the process runs (a zombie has ended).
running() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

wait_gone() { # wait_gone PID NAME
  for _ in $(seq 1 300); do
    running "$1" || return 0
    sleep 0.1
  done
  log "$2 (pid $1) did not end"; return 1
}

# stop_pidfile FILE NAME: stops the process whose pid FILE holds, when it
# is still NAME, and waits for it to end.
stop_pidfile() {
  local file=$1 name=$2 pid
  pid=$(head -n 1 "$file" 2>/dev/null) || return 0
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
    log "stopping $name (pid $pid, $file)"
    kill "$pid"
    wait_gone "$pid" "$name"
  fi
  rm -f "$file"
}

# stop_all: stops what this script started under the state directory, by
# its pid files: Redis, the Redis Cluster's nodes and its own PostgreSQL
# clusters, whose data it keeps.
stop_all() {
  local f data pid
  for f in "$state_dir"/redis-*.pid "$state_dir"/cluster-*/redis.pid; do
    if [ -e "$f" ]; then stop_pidfile "$f" redis-server; fi
  done
  for data in "$state_dir"/postgres-*; do
    [ -s "$data/postmaster.pid" ] || continue
    log "stopping postgresql ($data)"
    pid=$(head -n 1 "$data/postmaster.pid")
    as_pg_owner "$(pg_bindir)/pg_ctl" -D "$data" -m fast -w -t 60 stop >&2 || stop_pidfile "$data/postmaster.pid" postgres
    wait_gone "$pid" postgres
  done
  return 0
}

# The topology tests start private nginx, PgBouncer and Redis Sentinel
# processes on free ports; they need only the binaries. Package scripts must
# not start the system's own copies, so invoke-rc.d is told not to. The
# console's browser test (tools/browsertest) drives Debian's
# headless chromium.
ensure_topology_binaries() {
  local missing=()
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || missing+=(nginx)
  [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || missing+=(pgbouncer)
  [ -x /usr/bin/chromium ] || command -v chromium >/dev/null || missing+=(chromium)
  [ ${#missing[@]} = 0 ] && return
  local policy=/usr/sbin/policy-rc.d added=0
  if [ "$(id -u)" = 0 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && added=1
  fi
  apt_install "${missing[@]}"
  [ "$added" = 1 ] && rm -f "$policy"
  return 0
}

if [ "$want_stop" = 1 ]; then
  stop_all
  exit 0
fi

ensure_redis
ensure_postgres
[ "$want_topology" = 1 ] && ensure_topology_binaries
[ "$want_cluster" = 1 ] && ensure_cluster

printf 'REDIS_URL=%q\n' "$REDIS_URL"
printf 'DATABASE_URL=%q\n' "$DATABASE_URL"
[ "$want_cluster" = 1 ] && printf 'REDIS_CLUSTER_URL=%q\n' "$REDIS_CLUSTER_URL"
exit 0
