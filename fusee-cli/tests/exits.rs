//! How the command ends (issue 29): every bad argument exits 2 with a
//! message naming it, and a reader that closes stdout early (`| head`)
//! ends every command quietly: no panic, no error text, exit 0 (and
//! `verify` keeps its verdict).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::{build_readable, fusee, temp_dir};

/// `fusee args` exits 2, saying something that contains each of `words`.
fn usage_error(args: &[&str], words: &[&str]) {
    let out = fusee(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "fusee {args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "fusee {args:?}: {w:?} not in {err}");
    }
    assert!(out.stdout.is_empty(), "fusee {args:?} wrote on stdout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_argument_exits_2_with_a_clear_message() {
    let (dir, _) = build_readable("usage").await;
    let d = dir.to_str().expect("utf-8");
    let missing = temp_dir("usage-missing");
    let m = missing.to_str().expect("utf-8");
    // On a store, and before any store is looked at.
    usage_error(&["runs", d, "--status", "bogus"], &["--status", "bogus"]);
    usage_error(&["runs", m, "--status", "bogus"], &["--status", "bogus"]);
    usage_error(&["runs", d, "--limit", "many"], &["--limit"]);
    usage_error(&["runs", d, "--limit", "-1"], &[]);
    usage_error(&["inspect", d, "--backend", "floppy"], &["floppy"]);
    usage_error(&["show", d], &["ID"]);
    usage_error(&["no-such-command"], &["no-such-command"]);
    usage_error(&["disk-check", d, "--samples", "0"], &["--samples"]);
    usage_error(&["disk-check", m, "--sizes", "0"], &["--sizes"]);
    if cfg!(feature = "compare") {
        usage_error(&["compare", "--no-such-flag"], &["--no-such-flag"]);
        usage_error(&["compare", "--samples", "lots"], &["--samples"]);
    }
    // Not bad arguments: a store that is not there is exit 3.
    assert_eq!(fusee(&["runs", m]).status.code(), Some(3));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `fusee args` with its stdout closed before it writes: the exit
/// status and stderr.
fn with_stdout_closed(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fusee"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fusee binary runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("it ends");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_every_command_quietly() {
    let (dir, _) = build_readable("pipe").await;
    let d = dir.to_str().expect("utf-8");
    let scratch = temp_dir("pipe-disk");
    std::fs::create_dir_all(&scratch).expect("mkdir");
    let s = scratch.to_str().expect("utf-8");
    let long = common::long_id();
    for args in [
        vec!["inspect", d],
        vec!["inspect", d, "--json"],
        vec!["runs", d],
        vec!["runs", d, "--limit", "2000"],
        vec!["runs", d, "--json"],
        vec!["show", d, "values-1"],
        vec!["show", d, &long, "--json"],
        vec!["verify", d],
        vec!["verify", d, "--json"],
        vec!["disk-check", s, "--samples", "2", "--sizes", "512"],
        vec![
            "disk-check",
            s,
            "--samples",
            "2",
            "--sizes",
            "512",
            "--json",
        ],
        vec!["--help"],
        vec!["runs", "--help"],
    ] {
        let (code, err) = with_stdout_closed(&args);
        let shown: Vec<&str> = args.iter().map(|a| &a[..a.len().min(40)]).collect();
        assert_eq!(code, Some(0), "fusee {shown:?}: {err}");
        assert!(err.is_empty(), "fusee {shown:?} said: {err}");
    }

    if cfg!(feature = "compare") {
        let (code, err) = with_stdout_closed(&["compare", "--", "--help"]);
        assert_eq!((code, err.as_str()), (Some(0), ""));
    }

    // As the issue hit it: more output than a pipe holds, 256 bytes read.
    for args in [vec!["runs", d, "--json"], vec!["show", d, &long, "--json"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fusee"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs");
        let mut head = [0u8; 256];
        child
            .stdout
            .as_mut()
            .expect("stdout")
            .read_exact(&mut head)
            .expect("256 bytes");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}: {err}", args[0]);
        assert!(err.is_empty(), "{}: {err}", args[0]);
    }

    // verify keeps its verdict on a closed pipe: a damaged store is exit 1.
    let damaged = temp_dir("pipe-damaged");
    common::copy_dir(&dir, &damaged);
    std::fs::write(damaged.join("FUSEE"), b"not a marker").expect("damage");
    let dd = damaged.to_str().expect("utf-8");
    assert_eq!(fusee(&["verify", dd]).status.code(), Some(1));
    let (code, err) = with_stdout_closed(&["verify", dd]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.is_empty(), "{err}");
    for p in [&dir, &scratch, &damaged] {
        let _ = std::fs::remove_dir_all(p);
    }
}
