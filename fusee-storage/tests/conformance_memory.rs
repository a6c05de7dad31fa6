//! The memory backend runs the whole conformance suite (`cargo test -p
//! fusee-storage --features conformance`). Heavy counts follow
//! `FUSEE_CONFORMANCE_SCALE` (percent, default 100); the random-sequence
//! clause takes its seed from `FUSEE_CONFORMANCE_SEED`.

fusee_storage::conformance_suite!(memory, fusee_storage::conformance::MemoryHarness::new);

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
