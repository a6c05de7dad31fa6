//! The memory backend runs the whole conformance suite (`cargo test -p
//! fusee-storage --features conformance`), twice: as it comes, and with
//! flushes split and two in flight. Heavy counts follow
//! `FUSEE_CONFORMANCE_SCALE` (percent, default 100); the random-sequence
//! clause takes its seed from `FUSEE_CONFORMANCE_SEED`.

fusee_storage::conformance_suite!(memory, fusee_storage::conformance::MemoryHarness::new);

// Again with every flush split for real and two tickets out at once: the
// clauses that use tickets see them deferred, and `log_flushes_overlap`
// runs.
fusee_storage::conformance_suite!(
    memory_overlapping,
    fusee_storage::conformance::MemoryHarness::overlapping
);

/// The macro expands every clause the suite lists, once.
#[test]
fn every_clause_is_listed() {
    assert_eq!(memory::CLAUSES, fusee_storage::conformance::CLAUSES);
    let mut names = memory::CLAUSES.to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        memory::CLAUSES.len(),
        "a clause is listed twice"
    );
}
