//! Who may open a directory: one owner at a time for as long as any part
//! lives, and only a directory this backend made (issue 19, items 1, 4, 5).

use std::path::Path;

use fusee_storage::{CheckpointStore, IndexChange, LogStore, RunStore, Storage, StorageError};
use fusee_storage_file::{Create, FileOptions, FileStorage};

mod common;
use common::TempDir;

fn open(dir: &Path) -> Result<FileStorage, StorageError> {
    FileStorage::open(dir, FileOptions::default())
}

fn existing_only() -> FileOptions {
    FileOptions {
        create: Create::Never,
        ..FileOptions::default()
    }
}

/// The bug of issue 19 item 1: `open_storage(..)?.open_shard(0)?` dropped
/// the storage and its lock while the parts kept writing, so a second open
/// got the same shard and the two writers broke the log for good.
#[test]
fn parts_that_outlive_their_storage_keep_the_directory_locked() {
    let t = TempDir::new("fusee-own");
    let mut parts = open(&t.0).unwrap().open_shard(0).unwrap();
    parts.log.append(1, b"one").unwrap();
    parts.log.flush().unwrap();
    match open(&t.0) {
        Err(StorageError::Locked { path }) => {
            assert!(
                path.contains("fusee-own"),
                "the error names the directory: {path}"
            )
        }
        Err(e) => panic!("a second open while parts live must be Locked; found {e}"),
        Ok(_) => panic!("a second open while parts live must be Locked; it opened"),
    }
    parts.log.append(2, b"two").unwrap();
    parts.log.flush().unwrap();
    drop(parts);
    let s = open(&t.0).expect("the lock is free once the last part dropped");
    let p = s.open_shard(0).unwrap();
    assert_eq!(
        p.log.last_lsn(),
        2,
        "both records of the only writer are there"
    );
}

#[test]
fn a_closed_storage_keeps_the_lock_while_parts_live() {
    let t = TempDir::new("fusee-own");
    let s = open(&t.0).unwrap();
    let parts = s.open_shard(3).unwrap();
    s.close().unwrap();
    assert!(
        matches!(open(&t.0), Err(StorageError::Locked { .. })),
        "closing the storage must not free the lock while a part lives"
    );
    drop(parts);
    drop(open(&t.0).expect("free once the parts dropped"));
    drop(s);
}

#[test]
fn an_open_storage_locks_out_a_second_one_in_this_process() {
    let t = TempDir::new("fusee-own");
    let s = open(&t.0).unwrap();
    let second = open(&t.0);
    assert!(
        matches!(second, Err(StorageError::Locked { .. })),
        "found {second:?}"
    );
    drop(s);
    drop(open(&t.0).expect("free once the first dropped"));
}

#[test]
fn a_directory_this_backend_did_not_make_is_refused_with_nothing_written() {
    let t = TempDir::new("fusee-own");
    // Another program's files.
    std::fs::create_dir_all(&t.0).unwrap();
    std::fs::write(t.0.join("notes.txt"), b"mine").unwrap();
    let r = open(&t.0);
    assert!(
        matches!(r, Err(StorageError::NotAStore { .. })),
        "a non-empty directory without a marker: found {r:?}"
    );
    let names: Vec<_> = std::fs::read_dir(&t.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["notes.txt".to_string()], "nothing was added");

    // Another backend's store.
    let other = TempDir::new("fusee-own");
    std::fs::create_dir_all(&other.0).unwrap();
    let marker = fusee_storage::identity::Identity {
        backend: "redb".into(),
        format: 1,
    };
    std::fs::write(other.0.join("FUSEE"), marker.encode()).unwrap();
    match open(&other.0) {
        Err(StorageError::WrongBackend {
            found, expected, ..
        }) => assert_eq!((found.as_str(), expected), ("redb", "file")),
        r => panic!("another backend's store must be WrongBackend; found {r:?}"),
    }

    // A damaged marker.
    let damaged = TempDir::new("fusee-own");
    drop(open(&damaged.0).unwrap());
    let path = damaged.0.join("FUSEE");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[12] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    match open(&damaged.0) {
        Err(StorageError::CorruptFile { file, .. }) => assert!(file.ends_with("FUSEE"), "{file}"),
        r => panic!("a damaged marker must be CorruptFile naming it; found {r:?}"),
    }

    // The empty path, which every call would read as the current directory.
    assert!(matches!(
        open(Path::new("")),
        Err(StorageError::NotAStore { .. })
    ));

    // A file where the directory belongs.
    let file = TempDir::new("fusee-own");
    std::fs::write(&file.0, b"x").unwrap();
    assert!(matches!(open(&file.0), Err(StorageError::NotAStore { .. })));
    std::fs::remove_file(&file.0).unwrap();
}

#[test]
fn opening_an_existing_store_only_refuses_a_missing_one() {
    let t = TempDir::new("fusee-own");
    let r = FileStorage::open(&t.0, existing_only());
    assert!(
        matches!(r, Err(StorageError::NotFound { .. })),
        "found {r:?}"
    );
    assert!(!t.0.exists(), "nothing was created");
    drop(open(&t.0).unwrap());
    drop(FileStorage::open(&t.0, existing_only()).expect("it exists now"));
}

#[test]
fn the_same_misuse_gets_the_contract_error() {
    let t = TempDir::new("fusee-own");
    let s = open(&t.0).unwrap();
    let mut p = s.open_shard(0).unwrap();
    let r = p
        .checkpoint
        .commit(&mut p.runs, IndexChange::Delta(&[0; 33]), b"c");
    assert!(
        matches!(r, Err(StorageError::Misuse { call: "commit", .. })),
        "a partial index record: found {r:?}"
    );
    let blob = p.runs.append(b"frame").unwrap();
    let mut wrong = blob;
    wrong.len += 1;
    assert!(
        matches!(p.runs.release(wrong), Err(StorageError::UnknownBlob { .. })),
        "releasing a frame that does not exist"
    );
    wrong = blob;
    wrong.offset += 1;
    assert!(matches!(
        p.runs.release(wrong),
        Err(StorageError::UnknownBlob { .. })
    ));
    p.runs.release(blob).expect("the real frame releases");
}
