//! The engine under deterministic simulation (`fusee::testing::sim`).
//!
//! Environment:
//! - `FUSEE_SIM_SEEDS`: seeds run by `seeds_pass` (default 300), from
//!   `FUSEE_SIM_FIRST` (default 0).
//! - `FUSEE_SIM_SABOTAGE_SEEDS`: seeds each sabotage may take to be caught
//!   (default 2,000; the bound).
//! - `FUSEE_SIM_CANCEL_SEEDS`: seeds run by `cancels_with_a_grace_pass`
//!   (default 100).
//! - `FUSEE_SIM_SEED` (and `FUSEE_SIM_SABOTAGE`, `FUSEE_SIM_CANCELS=1`):
//!   the seed `replay` runs, as a failure prints it.

use std::time::Instant;

use fusee::testing::sim::{Sabotage, SimConfig, SimDisk, SimFailure, run};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn seeds_pass() {
    let first = env_u64("FUSEE_SIM_FIRST", 0);
    let seeds = env_u64("FUSEE_SIM_SEEDS", 300);
    let started = Instant::now();
    let mut actions = 0u64;
    let mut cuts = 0u64;
    let mut on_file = 0u64;
    let (mut overlapped, mut out_of_turn) = (0u64, 0u64);
    let mut chunks = 0u64;
    let mut served = 0u64;
    let mut gone = 0u64;
    let mut let_go = 0u64;
    let mut failures: Vec<SimFailure> = Vec::new();
    for seed in first..first + seeds {
        match run(&SimConfig::new(seed)) {
            Ok(r) => {
                actions += u64::from(r.actions);
                cuts += u64::from(r.power_cuts);
                on_file += u64::from(r.disk == SimDisk::File);
                overlapped += u64::from(r.flushes_overlapped);
                out_of_turn += u64::from(r.flushes_out_of_turn);
                chunks += u64::from(r.chunks_checked);
                served += u64::from(r.chunks_served);
                gone += u64::from(r.streams_gone);
                let_go += u64::from(r.streams_let_go);
            }
            Err(f) => failures.push(f),
        }
    }
    println!(
        "{seeds} seeds from {first} ({on_file} on the file backend): {actions} actions, {cuts} power cuts, \
         {overlapped} flushes begun beside another, {out_of_turn} back out of turn, {chunks} stream \
         chunks checked, {served} served to subscribers, {gone} subscriptions found their chunks \
         let go, {let_go} streams read back without them, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if let Some(f) = failures.first() {
        for f in &failures {
            eprintln!("{f}");
        }
        panic!("{} of {seeds} seeds failed; the first: {f}", failures.len());
    }
    // The memory disk takes two flushes at once: enough seeds must have
    // had tickets come back out of turn, or that path went untested.
    if seeds >= 100 {
        assert!(chunks > 0, "no stream chunk was checked in {seeds} seeds");
        assert!(served > 0, "no stream chunk was served in {seeds} seeds");
        assert!(
            gone > 0,
            "no subscription found its chunks let go in {seeds} seeds"
        );
        assert!(
            let_go > 0,
            "no stream was read back with its chunks let go in {seeds} seeds"
        );
        assert!(
            out_of_turn > 0,
            "no flush ticket came back out of turn in {seeds} seeds ({overlapped} overlapped)"
        );
    }
}

/// Clients cancel runs with a grace, steps in flight: every seed passes
/// (no step attempt of a cancelled run starts after its grace; runs end
/// cancelled or terminated), and cancels did land with steps in flight.
/// `FUSEE_SIM_CANCEL_SEEDS` seeds (default 100).
#[test]
fn cancels_with_a_grace_pass() {
    let seeds = env_u64("FUSEE_SIM_CANCEL_SEEDS", 100);
    let (mut acked, mut in_flight) = (0u64, 0u64);
    let mut failures: Vec<SimFailure> = Vec::new();
    for seed in 0..seeds {
        match run(&SimConfig::new(seed).with_cancels()) {
            Ok(r) => {
                acked += u64::from(r.cancels_acked);
                in_flight += u64::from(r.cancels_with_steps_in_flight);
            }
            Err(f) => failures.push(f),
        }
    }
    println!("{seeds} seeds: {acked} cancels acknowledged, {in_flight} with steps in flight");
    if let Some(f) = failures.first() {
        for f in &failures {
            eprintln!("{f}");
        }
        panic!("{} of {seeds} seeds failed; the first: {f}", failures.len());
    }
    if seeds >= 50 {
        assert!(in_flight > 0, "no cancel landed with a step in flight");
    }
}

#[test]
fn every_sabotage_is_caught() {
    let budget = env_u64("FUSEE_SIM_SABOTAGE_SEEDS", 2000);
    let mut missed = Vec::new();
    for sabotage in Sabotage::ALL {
        let caught =
            (0..budget).find_map(|seed| run(&SimConfig::new(seed).sabotage(sabotage)).err());
        match caught {
            Some(f) => println!(
                "{sabotage:?}: caught by seed {} ({}): {}",
                f.seed, f.check, f.detail
            ),
            None => missed.push(sabotage),
        }
    }
    assert!(
        missed.is_empty(),
        "not caught within {budget} seeds: {missed:?}"
    );
}

/// Runs the seed a failure printed (`FUSEE_SIM_SEED`, with
/// `FUSEE_SIM_SABOTAGE` if it named one); seed 0 without them.
#[test]
fn replay() {
    let seed = env_u64("FUSEE_SIM_SEED", 0);
    let mut config = SimConfig::new(seed);
    if let Ok(name) = std::env::var("FUSEE_SIM_SABOTAGE") {
        let s = Sabotage::ALL
            .into_iter()
            .find(|s| format!("{s:?}") == name)
            .unwrap_or_else(|| panic!("no sabotage {name:?}; one of {:?}", Sabotage::ALL));
        config = config.sabotage(s);
    }
    if std::env::var("FUSEE_SIM_CANCELS").is_ok_and(|v| v == "1") {
        config = config.with_cancels();
    }
    match run(&config) {
        Ok(report) => println!("{report:?}"),
        Err(f) => panic!("{f}"),
    }
}
