//! The memory backend runs the whole conformance suite (`cargo test -p
//! fusee-storage --features conformance`). Heavy counts follow
//! `FUSEE_CONFORMANCE_SCALE` (percent, default 100); the random-sequence
//! clause takes its seed from `FUSEE_CONFORMANCE_SEED`.

fusee_storage::conformance_suite!(memory, fusee_storage::conformance::MemoryHarness::new);

/// The macro's clause list and [`fusee_storage::conformance::CLAUSES`] agree.
#[test]
fn every_clause_is_listed() {
    assert_eq!(fusee_storage::conformance::CLAUSES.len(), 24);
}
