//! Snapshots of the human output and of the JSON schemas, as plain files in
//! `tests/snapshots/`, compared after normalising what varies between runs
//! (the store's path; in `inspect` and `verify`, every number). Run with
//! `FUSEE_SNAPSHOTS=update` to write them again after a deliberate change.

mod common;

use std::path::{Path, PathBuf};

use common::{build, fusee};
use serde_json::Value;

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

/// Compares `text` with the snapshot `name`, or writes it when updating.
fn check(name: &str, text: &str) {
    let path = snapshot_dir().join(name);
    if std::env::var("FUSEE_SNAPSHOTS").as_deref() == Ok("update") {
        std::fs::write(&path, text).expect("write snapshot");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (FUSEE_SNAPSHOTS=update writes it)", path.display()));
    assert_eq!(
        text,
        want,
        "{name} differs from {} (FUSEE_SNAPSHOTS=update writes it after a deliberate change)",
        path.display()
    );
}

/// Every run of ASCII digits as `N`.
fn no_numbers(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

/// The schema of a JSON value: objects keep their keys, arrays their first
/// element's schema, scalars become their type's name.
fn schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), schema(v))).collect()),
        Value::Array(a) => Value::Array(a.first().map(schema).into_iter().collect()),
        Value::String(_) => "string".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => "null".into(),
    }
}

fn stdout(args: &[&str], dir: &str) -> String {
    let out = fusee(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).replace(dir, "<DIR>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_output_and_json_schemas() {
    let dir = build("file", "snapshots").await;
    let d = dir.to_str().expect("utf-8");
    check("runs.txt", &stdout(&["runs", d], d));
    check("show.txt", &stdout(&["show", d, "ok-1"], d));
    check("inspect.txt", &no_numbers(&stdout(&["inspect", d], d)));
    check("verify.txt", &no_numbers(&stdout(&["verify", d], d)));
    for (name, args) in [
        ("runs.schema.json", vec!["runs", d, "--json"]),
        ("show.schema.json", vec!["show", d, "ok-1", "--json"]),
        ("inspect.schema.json", vec!["inspect", d, "--json"]),
        ("verify.schema.json", vec!["verify", d, "--json"]),
    ] {
        let v: Value = serde_json::from_str(&stdout(&args, d)).expect("JSON");
        let text = serde_json::to_string_pretty(&schema(&v)).expect("JSON") + "\n";
        check(name, &text);
    }
    // The journal's records, field by field (schema of every kind shown).
    let v: Value = serde_json::from_str(&stdout(&["show", d, "ok-1", "--json"], d)).expect("JSON");
    let kinds: Vec<Value> = v["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(schema)
        .collect();
    check(
        "show.records.schema.json",
        &(serde_json::to_string_pretty(&Value::Array(kinds)).expect("JSON") + "\n"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}
