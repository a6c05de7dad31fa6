#!/usr/bin/env bash
# Starts the PostgreSQL servers fusee-storage-postgres's tests run against,
# on loopback ports under a temporary directory, and exports their URLs.
# Source it (CI's .ci/run does, and so can a developer):
#
#   source scripts/postgres.sh     # then: cargo test -p fusee-storage-postgres
#   fusee_pg_stop                  # stops every server it started
#
# Two clusters, each a primary with two synchronous standbys
# (synchronous_standby_names = 'ANY 1 (s1, s2)': a commit returns once one
# standby has flushed it):
#
#   FUSEE_PG_URL                     the main primary: the conformance suite,
#                                    the ownership clauses, the bad-input tests
#   FUSEE_PG_STANDBY_URLS            its standbys, space-separated
#   FUSEE_PG_FAILOVER_URL            a primary the failover test stops hard
#   FUSEE_PG_FAILOVER_STANDBY_URLS   its standbys; the test promotes one
#   FUSEE_PG_SINGLE_URL              a server alone, without standbys: the
#                                    figures bench's "one node" (standbys
#                                    on the same cores and disk slow even
#                                    a `local` commit on their primary)
#
# The failover test breaks its cluster on purpose, so it has one of its own
# and every other test keeps working whatever order the tests run in.
#
# Installs PostgreSQL from Debian when it is missing (as scripts/prereqs.sh
# does clang). initdb refuses to run as root, so as root every server
# command runs as the `postgres` user the package creates.
#
# Settings: FUSEE_PG_PORT, the first port tried (default 55432; the seven
# servers take free ports from there, skipping any taken as they start);
# FUSEE_PG_DIR, where the data directories go (default: a new directory
# under /tmp).

fusee_pg_main() {
    local bindir
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1) || bindir=""
    if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
        echo "==> installing PostgreSQL (fusee-storage-postgres's tests need a server)"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
        bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
    FUSEE_PG_BIN=$bindir

    # As root, run the servers as `postgres` (initdb refuses root).
    FUSEE_PG_AS=()
    if [ "$(id -u)" -eq 0 ]; then
        FUSEE_PG_AS=(runuser -u postgres --)
    fi

    FUSEE_PG_ROOT=${FUSEE_PG_DIR:-$(mktemp -d /tmp/fusee-pg.XXXXXX)}
    mkdir -p "$FUSEE_PG_ROOT"
    chmod 755 "$FUSEE_PG_ROOT"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$FUSEE_PG_ROOT"
    fi

    # Ports are taken one at a time, as each server starts: a port free when
    # checked can be taken before the server binds it (an outgoing
    # connection's ephemeral port, another job), so a start that finds its
    # port in use moves to the next free one (fusee_pg_start).
    FUSEE_PG_NEXT_PORT=${FUSEE_PG_PORT:-55432}
    FUSEE_PG_DATA_DIRS=()
    fusee_pg_cluster main || return 1
    local main=("${FUSEE_PG_CLUSTER_PORTS[@]}")
    fusee_pg_cluster failover || return 1
    local failover=("${FUSEE_PG_CLUSTER_PORTS[@]}")
    fusee_pg_single single || return 1
    local single=$FUSEE_PG_STARTED_PORT
    local ports=("${main[@]}" "${failover[@]}" "$single")

    local url="postgresql://postgres@127.0.0.1"
    export FUSEE_PG_URL="$url:${ports[0]}/postgres"
    export FUSEE_PG_STANDBY_URLS="$url:${ports[1]}/postgres $url:${ports[2]}/postgres"
    export FUSEE_PG_FAILOVER_URL="$url:${ports[3]}/postgres"
    export FUSEE_PG_FAILOVER_STANDBY_URLS="$url:${ports[4]}/postgres $url:${ports[5]}/postgres"
    export FUSEE_PG_SINGLE_URL="$url:${ports[6]}/postgres"
    echo "==> PostgreSQL: FUSEE_PG_URL=$FUSEE_PG_URL (standbys $FUSEE_PG_STANDBY_URLS; failover cluster from port ${ports[3]}; a server alone on port ${ports[6]}; data in $FUSEE_PG_ROOT)"
}

# Appends settings to a data directory's postgresql.auto.conf, as the
# server's user; the last occurrence of a setting wins.
fusee_pg_conf() {
    local dir=$1
    shift
    printf '%s\n' "$@" | "${FUSEE_PG_AS[@]}" tee -a "$dir/postgresql.auto.conf" >/dev/null
}

# fusee_pg_port_free PORT: true when no socket on this machine uses PORT
# (listening or connected: either makes the server's bind fail).
fusee_pg_port_free() {
    if command -v ss >/dev/null 2>&1; then
        ! ss -Htan "sport = :$1" 2>/dev/null | grep -q .
    else
        # No ss on a minimal machine: a connection that succeeds means a
        # listener (connected sockets are then caught by the retry below).
        ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

# Sets FUSEE_PG_TAKEN_PORT to the next free port from FUSEE_PG_NEXT_PORT.
fusee_pg_take_port() {
    local tries
    for tries in $(seq 1 1000); do
        local port=$FUSEE_PG_NEXT_PORT
        FUSEE_PG_NEXT_PORT=$((port + 1))
        if fusee_pg_port_free "$port"; then
            FUSEE_PG_TAKEN_PORT=$port
            return 0
        fi
    done
    echo "no free port for PostgreSQL from ${FUSEE_PG_PORT:-55432}"
    return 1
}

# fusee_pg_start DIR: starts the server in DIR on a free port (written into
# its configuration; the last `port` line wins), waits until it accepts
# connections, and sets FUSEE_PG_STARTED_PORT. A port taken between the
# check and the bind is the one failure retried, on the next free port.
fusee_pg_start() {
    local dir=$1 attempt lines
    for attempt in $(seq 1 20); do
        fusee_pg_take_port || return 1
        fusee_pg_conf "$dir" "port = $FUSEE_PG_TAKEN_PORT"
        lines=$(cat "$dir.log" 2>/dev/null | wc -l)
        if "${FUSEE_PG_AS[@]}" "$FUSEE_PG_BIN/pg_ctl" -D "$dir" -l "$dir.log" -w -t 60 start >/dev/null; then
            FUSEE_PG_DATA_DIRS+=("$dir")
            FUSEE_PG_STARTED_PORT=$FUSEE_PG_TAKEN_PORT
            return 0
        fi
        if ! tail -n "+$((lines + 1))" "$dir.log" | grep -q "Address already in use"; then
            break
        fi
        echo "==> PostgreSQL: port $FUSEE_PG_TAKEN_PORT was taken before the server bound it; trying the next free port"
    done
    echo "PostgreSQL in $dir did not start:"
    tail -n 20 "$dir.log"
    return 1
}

# fusee_pg_init DIR: a new data directory (its port is set as it starts).
# Durability stays on (fsync, full_page_writes): the tests check what an
# acknowledged commit promises. Small buffers: seven servers share the
# machine. Loopback only, trusted: a throwaway test server.
fusee_pg_init() {
    local dir=$1
    "${FUSEE_PG_AS[@]}" "$FUSEE_PG_BIN/initdb" -D "$dir" -U postgres --auth=trust \
        --no-sync -E UTF8 >/dev/null || return 1
    fusee_pg_conf "$dir" \
        "listen_addresses = '127.0.0.1'" \
        "unix_socket_directories = '$FUSEE_PG_ROOT'" \
        "shared_buffers = 32MB" \
        "max_connections = 300"
    echo "host all all 127.0.0.1/32 trust" \
        | "${FUSEE_PG_AS[@]}" tee -a "$dir/pg_hba.conf" >/dev/null
}

# fusee_pg_cluster NAME: a primary and two standbys; sets
# FUSEE_PG_CLUSTER_PORTS to their ports (primary first).
fusee_pg_cluster() {
    local name=$1
    local primary="$FUSEE_PG_ROOT/$name-primary"
    fusee_pg_init "$primary" || return 1
    fusee_pg_conf "$primary" \
        "wal_level = replica" \
        "max_wal_senders = 10" \
        "wal_keep_size = '256MB'" \
        "synchronous_standby_names = 'ANY 1 (s1, s2)'"
    echo "host replication all 127.0.0.1/32 trust" \
        | "${FUSEE_PG_AS[@]}" tee -a "$primary/pg_hba.conf" >/dev/null
    fusee_pg_start "$primary" || return 1
    local p=$FUSEE_PG_STARTED_PORT
    FUSEE_PG_CLUSTER_PORTS=("$p")
    local app standby
    for app in s1 s2; do
        standby="$FUSEE_PG_ROOT/$name-$app"
        # -R writes primary_conninfo (and standby.signal); the application
        # name a standby is known by must be in that line, or it never
        # counts as synchronous, so the line is written again after it.
        "${FUSEE_PG_AS[@]}" "$FUSEE_PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$p" -U postgres \
            -D "$standby" -R -X stream --no-sync >/dev/null || return 1
        # A promoted standby must not wait for synchronous standbys that
        # follow the dead primary: it commits alone until one re-attaches.
        fusee_pg_conf "$standby" \
            "primary_conninfo = 'host=127.0.0.1 port=$p user=postgres application_name=$app'" \
            "synchronous_standby_names = ''"
        fusee_pg_start "$standby" || return 1
        FUSEE_PG_CLUSTER_PORTS+=("$FUSEE_PG_STARTED_PORT")
    done
    # Both standbys must stream and count for the quorum before the tests
    # start, or the first commits wait for them.
    local i n
    for i in $(seq 1 300); do
        n=$("$FUSEE_PG_BIN/psql" -h 127.0.0.1 -p "$p" -U postgres -d postgres -Atc \
            "SELECT count(*) FROM pg_stat_replication WHERE application_name IN ('s1', 's2') AND state = 'streaming' AND sync_state IN ('sync', 'quorum')") \
            || n=0
        [ "$n" = 2 ] && return 0
        sleep 0.1
    done
    echo "the standbys of the $name cluster never became synchronous"
    return 1
}

# fusee_pg_single NAME: a server alone, configured as the primaries are but
# with no standbys and no replication; its port in FUSEE_PG_STARTED_PORT.
fusee_pg_single() {
    local dir="$FUSEE_PG_ROOT/$1"
    fusee_pg_init "$dir" || return 1
    fusee_pg_start "$dir"
}

# Stops every server this script started (immediately: they hold nothing
# worth a checkpoint) and removes their data.
fusee_pg_stop() {
    local dir
    for dir in "${FUSEE_PG_DATA_DIRS[@]}"; do
        "${FUSEE_PG_AS[@]}" "$FUSEE_PG_BIN/pg_ctl" -D "$dir" -m immediate stop >/dev/null 2>&1 || true
    done
    if [ -z "${FUSEE_PG_DIR:-}" ] && [ -n "${FUSEE_PG_ROOT:-}" ]; then
        rm -rf "$FUSEE_PG_ROOT"
    fi
    FUSEE_PG_DATA_DIRS=()
}

fusee_pg_main
