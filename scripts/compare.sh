#!/usr/bin/env bash
# The README's main job: the cross-backend comparison, every backend built
# in, on a fresh Debian machine with only the Rust toolchain. Installs what
# RocksDB's build needs where it is missing (scripts/prereqs.sh), then runs
# `fusee-compare` in release with the arguments given (`--help` lists them;
# `--quick` is the short run).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/prereqs.sh
exec cargo run --release -p fusee-benches --bin fusee-compare -- "$@"
