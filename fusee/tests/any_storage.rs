//! `AnyStorage` keeps the contract: the conformance suite over the memory
//! backend reached through it, and a commit that mixes backends refused.

use fusee::storage::conformance::{Capabilities, Harness, MemoryHarness};
use fusee::storage::{MemoryStorage, Storage};
use fusee::{AnyStorage, Backend, StorageConfig, open_storage};

/// The memory harness, through `AnyStorage`.
struct AnyMemory(MemoryHarness);

fn memory(s: &AnyStorage) -> &MemoryStorage {
    match s {
        AnyStorage::Memory(m) => m,
        #[allow(unreachable_patterns)]
        _ => panic!("not the memory backend"),
    }
}

impl Harness for AnyMemory {
    type S = AnyStorage;

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn open(&mut self) -> AnyStorage {
        open_storage(&StorageConfig::new(Backend::Memory, "unused"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn reopen(&mut self, s: AnyStorage) -> AnyStorage {
        s.close().unwrap_or_else(|e| panic!("{e}"));
        AnyStorage::Memory(memory(&s).reopen())
    }

    fn crash(&mut self, s: AnyStorage) -> AnyStorage {
        AnyStorage::Memory(memory(&s).crash())
    }

    fn fail_next_flush(&mut self, s: &AnyStorage, shard: u32) {
        memory(s).fail_next_flush(shard);
    }

    fn fail_next_commit(&mut self, s: &AnyStorage, shard: u32) {
        memory(s).fail_next_commit(shard);
    }

    fn crash_in_commit(&mut self, s: &AnyStorage, shard: u32, step: u32) {
        memory(s).crash_in_commit(shard, step);
    }
}

fusee::storage::conformance_suite!(any_memory, || AnyMemory(MemoryHarness::new()));

/// A commit given another backend's run store changes nothing and says so.
#[cfg(feature = "redb")]
#[test]
fn mixed_backends_are_misuse() {
    use fusee::storage::{CheckpointStore, IndexChange, StorageError};
    let dir = std::env::temp_dir().join(format!("fusee-any-mixed-{}", std::process::id()));
    let m =
        open_storage(&StorageConfig::new(Backend::Memory, &dir)).unwrap_or_else(|e| panic!("{e}"));
    let r =
        open_storage(&StorageConfig::new(Backend::Redb, &dir)).unwrap_or_else(|e| panic!("{e}"));
    let mut pm = m.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    let mut pr = r.open_shard(0).unwrap_or_else(|e| panic!("{e}"));
    let e = pm
        .checkpoint
        .commit(&mut pr.runs, IndexChange::Delta(&[]), b"x");
    assert!(matches!(e, Err(StorageError::Misuse { .. })), "{e:?}");
    assert_eq!(pm.recovered.checkpoint, None);
    drop((pm, pr, m, r));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory of one backend opened as another is a named error, with
/// nothing written; so are a missing store when only existing ones may
/// open, and the empty path (issue 19 item 4).
#[cfg(all(feature = "file", feature = "redb"))]
#[test]
fn another_backends_store_a_missing_one_and_the_empty_path_are_refused() {
    use fusee::storage::StorageError;
    use fusee::{OpenError, StorageConfig};
    let root = std::env::temp_dir().join(format!("fusee-any-identity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let refused = |config: StorageConfig| match open_storage(&config) {
        Err(OpenError::Storage { error, .. }) => error,
        Ok(_) => panic!("{config:?} opened"),
        Err(e) => panic!("{config:?}: {e}"),
    };
    for (made, other) in [
        (Backend::Redb, Backend::File),
        (Backend::File, Backend::Redb),
    ] {
        let dir = root.join(made.name());
        let s = open_storage(&StorageConfig::new(made, &dir)).expect("create");
        s.close().expect("close");
        drop(s);
        let before: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        match refused(StorageConfig::new(other, &dir)) {
            StorageError::WrongBackend {
                found, expected, ..
            } => assert_eq!((found.as_str(), expected), (made.name(), other.name())),
            e => panic!("{other} on a {made} store: expected WrongBackend, found {e}"),
        }
        let after: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(before, after, "{other} wrote into a {made} store");
    }
    for backend in [Backend::File, Backend::Redb] {
        let missing = root.join("missing").join(backend.name());
        assert!(matches!(
            refused(StorageConfig::new(backend, &missing).existing_only()),
            StorageError::NotFound { .. }
        ));
        assert!(
            !missing.exists(),
            "{backend} created what it was told only to open"
        );
        assert!(matches!(
            refused(StorageConfig::new(backend, "")),
            StorageError::NotAStore { .. }
        ));
    }
    let _ = std::fs::remove_dir_all(&root);
}
