#!/usr/bin/env bash
# Installs what a fresh Debian machine with only the Rust toolchain lacks to
# build this workspace: clang and libclang-dev, which RocksDB's build script
# (bindgen) needs. Sourced by both README commands (scripts/compare.sh and
# scripts/test.sh), so either works first on a fresh machine. Does nothing
# when they are there; uses sudo when not root.
set -euo pipefail

need_clang() {
    command -v clang >/dev/null 2>&1 || return 0
    ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || return 0
    return 1
}

if need_clang; then
    echo "==> installing clang and libclang-dev (RocksDB's build needs them)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-dev >/dev/null
fi
