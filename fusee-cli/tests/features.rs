//! A directory of a backend this build of the command leaves out is
//! refused with the Cargo feature to enable (issue 29). Run in a build
//! without a backend (`cargo test -p fusee-cli --no-default-features
//! --features file,redb --test features`), it checks that backend's
//! refusal; in every build, that a backend it has is not refused so.

mod common;

use common::{fusee, temp_dir};
use fusee::storage::identity::{Identity, MARKER};

/// A directory holding only a marker of `backend`.
fn marked(backend: &str) -> std::path::PathBuf {
    let dir = temp_dir(&format!("marked-{backend}"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let id = Identity {
        backend: backend.into(),
        format: 1,
    };
    std::fs::write(dir.join(MARKER), id.encode()).expect("marker");
    dir
}

#[test]
fn a_backend_left_out_is_refused_with_its_feature() {
    for (backend, built) in [
        ("file", cfg!(feature = "file")),
        ("redb", cfg!(feature = "redb")),
        ("rocksdb", cfg!(feature = "rocksdb")),
    ] {
        let dir = marked(backend);
        let d = dir.to_str().expect("utf-8");
        for cmd in ["inspect", "runs", "verify"] {
            let out = fusee(&[cmd, d]);
            let err = String::from_utf8_lossy(&out.stderr);
            let hint = format!("--features {backend}");
            if built {
                // Read and found wanting (no shards, no files), not refused.
                assert!(!err.contains(&hint), "{cmd} {backend}: {err}");
            } else {
                assert_eq!(out.status.code(), Some(3), "{cmd} {backend}: {err}");
                assert!(
                    err.contains(&hint) && err.contains(&format!("a {backend} store")),
                    "{cmd} {backend}: {err}"
                );
            }
        }
        let out = fusee(&["show", d, "some-id"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.contains(&format!("--features {backend}")),
            !built,
            "show {backend}: {err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn compare_left_out_says_which_feature() {
    let out = fusee(&["compare", "--", "--help"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "compare") {
        assert_eq!(out.status.code(), Some(0), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(err.contains("--features compare"), "{err}");
    }
}

#[test]
fn live_mode_left_out_says_which_feature() {
    // Nothing listens on port 9 of loopback (discard): a live build fails
    // to connect (exit 3); a build without `live` names the feature.
    let out = fusee(&["runs", "--url", "http://127.0.0.1:9"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(
        err.contains("--features live"),
        !cfg!(feature = "live"),
        "{err}"
    );
}
