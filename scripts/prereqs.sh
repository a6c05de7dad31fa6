#!/usr/bin/env bash
# Installs what a fresh Debian machine with only the Rust toolchain lacks to
# build this workspace: clang and libclang-dev, which RocksDB's build script
# (bindgen) needs, and libssl-dev and pkg-config, which the engine
# comparison's peer (duroxide, through sqlx's native-tls) links against;
# chromium and chromium-driver, which fusee-server's browser test drives
# headless on loopback; and prometheus, the real server the telemetry test
# points at a test engine's exposition and queries.
# Sourced by both README commands (scripts/compare.sh and scripts/test.sh),
# so either works first on a fresh machine. Does nothing when they are
# there; uses sudo when not root.
set -euo pipefail

missing=()
if ! command -v clang >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
    missing+=(clang libclang-dev)
fi
if ! command -v pkg-config >/dev/null 2>&1; then
    missing+=(pkg-config)
fi
if ! pkg-config --exists openssl 2>/dev/null; then
    missing+=(libssl-dev)
fi

if ! command -v chromium >/dev/null 2>&1; then
    missing+=(chromium)
fi
if ! command -v chromedriver >/dev/null 2>&1; then
    missing+=(chromium-driver)
fi
# prometheus goes in alone, without its recommended exporters; the package
# cannot start its own daemon here (no init), and the test starts its own
# on loopback.
need_prometheus=0
command -v prometheus >/dev/null 2>&1 || need_prometheus=1

if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> installing ${missing[*]} (RocksDB's build, the peer engine's TLS, the browser and scrape tests need them)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$need_prometheus" -eq 1 ]; then
    echo "==> installing prometheus (the telemetry test's scrape)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    [ "${#missing[@]}" -gt 0 ] || $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
