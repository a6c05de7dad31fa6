#!/usr/bin/env bash
# Runs every test in the workspace, on a fresh Debian machine with only the
# Rust toolchain installed: installs what RocksDB's build needs (clang,
# libclang-dev) when it is missing, then checks formatting and lints and runs
# the tests of every crate with every backend feature on.
#
# Stress and fuzz counts have CI-sized defaults; raise them by hand:
#   FUSEE_FUZZ_ITERS          record decoder fuzz-smoke inputs      (1,000,000)
#                             (format decoders: 200,000 each)
#   FUSEE_PROPTEST_CASES      record round-trip cases               (20,000)
#   FUSEE_MODEL_STEPS         table / wheel model steps             (200,000)
#   FUSEE_SHARD_SEEDS         shard replay-equivalence sequences    (40)
#   FUSEE_TIMER_RUNS          sleepers in the shard timer model     (3,000)
#   FUSEE_SEGMENT_EXHAUSTIVE  segments cut and flipped at every byte (4)
#   FUSEE_CONFORMANCE_SCALE   percent of the suite's heavy counts   (100)
#   FUSEE_POWER_LOSS_SEEDS    file-backend power-loss seeds         (10,000)
#   FUSEE_SIGKILL_RUNS        SIGKILLs per backend                  (50)
#   FUSEE_RUN_PROGRAMS        RunMachine property-test programs     (2,000)
#   FUSEE_DAMAGE_PAGES        redb pages / RocksDB offsets damaged  (per file, bounded)
#   FUSEE_ENGINE_SIGKILL_RUNS engine SIGKILLs per backend           (20)
#   FUSEE_PARKED_RUNS         sleepers of the engine parking test   (100,000)
#   FUSEE_SCHEDULE_DAYS       days of the every-minute schedule     (7)
#   FUSEE_SCHEDULE_CRASHES    crashes during them                   (20)
#   FUSEE_QUEUE_ITEMS         items through the limited queue       (10,000)
#   FUSEE_QUEUE_CRASHES       crashes while they go through         (20)
#   FUSEE_SIM_SEEDS           simulator seeds (from FUSEE_SIM_FIRST) (300)
#   FUSEE_SIM_SABOTAGE_SEEDS  seeds each sabotage may take          (2,000)
#   FUSEE_LEASE_RUNS          runs per round of the lease takeover  (120)
#   FUSEE_LEASE_ROUNDS        takedowns in the lease takeover       (2)
# FUSEE_SEED (and FUSEE_CONFORMANCE_SEED) replay the seed a failure printed;
# a simulator failure prints its own command (FUSEE_SIM_SEED=...).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase prints the seconds since the script started, so a slow CI run
# shows where its time went (on a fresh machine, RocksDB's C++ build inside
# the clippy phase is most of it).
phase() { echo "==> $1 (at ${SECONDS} s)"; }

source scripts/prereqs.sh

phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
phase "cargo test"
cargo test --workspace --all-features
phase "all tests passed"
