#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the test run, from Debian's packages.
#
#   .ci/postgres.sh start DIR   install postgresql if missing, start a cluster in DIR (new or
#                               empty, e.g. "$(mktemp -d)"; it is handed to the server's user) on
#                               127.0.0.1 and a free port; print its URL on stdout
#   .ci/postgres.sh stop DIR    stop that cluster and remove DIR
#
# The server runs as the 'postgres' user when this runs as root (PostgreSQL refuses root),
# trusts local connections, and runs with fsync off: it holds test data only.
set -euo pipefail

cmd="${1:-}"
dir="${2:-}"
if [[ -z "$cmd" || -z "$dir" ]]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

as_server_user() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

bindir() {
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -n "$found" && -x "$found/initdb" ]]; then
    echo "$found"
  elif command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
  fi
}

case "$cmd" in
start)
  if [[ -z "$(bindir)" ]]; then
    if [[ "$(id -u)" != 0 ]]; then
      echo "postgres.sh: PostgreSQL is not installed and this is not root" >&2
      exit 1
    fi
    echo "postgres.sh: installing postgresql from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
  fi
  bin="$(bindir)"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  if [[ "$(id -u)" == 0 ]]; then
    chown postgres: "$dir"
  fi
  if ! as_server_user test -w "$dir"; then
    echo "postgres.sh: the server's user cannot write $dir (pass a directory of its own, e.g. \$(mktemp -d))" >&2
    exit 1
  fi
  cd "$dir"
  as_server_user "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 \
    --no-locale --no-sync >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  as_server_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >&2 || {
    cat "$dir/server.log" >&2
    exit 1
  }
  echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
  ;;
stop)
  bin="$(bindir)"
  if [[ -n "$bin" && -d "$dir/data" ]]; then
    (cd "$dir" && as_server_user "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2) || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
