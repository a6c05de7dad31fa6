//! What the command shows of recorded values, JSON payloads and long
//! names (issue 38): `ctx.now()` as a time, `ctx.random()` as a number,
//! `ctx.uuid()` as a UUID, JSON payloads as JSON (in tables, and as
//! `decoded` views beside the exact bytes in `--json`, which still reads
//! back to the same records); a 1 KiB workflow ID cut with `…` in tables
//! and whole in JSON.

mod common;

use common::{START_MS, build_readable, fusee, fusee_json, long_id};
use fusee::inspect::journal;
use serde_json::{Value, json};

fn stdout(args: &[&str]) -> String {
    let out = fusee(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The bytes of a journal document's bytes object, as the format says.
fn exact(bytes: &Value) -> Vec<u8> {
    if let Some(j) = bytes.get("json") {
        return serde_json::to_vec(j).expect("JSON");
    }
    let h = bytes["hex"].as_str().expect("hex");
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// `v` without its `decoded` fields.
fn without_views(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "decoded")
                .map(|(k, v)| (k.clone(), without_views(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_views).collect()),
        other => other.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_payloads_and_long_names_read_as_what_they_are() {
    let (dir, random) = build_readable("show").await;
    let d = dir.to_str().expect("utf-8");

    // --json: the exact bytes, and beside them what they mean.
    let doc = fusee_json(&["show", d, "values-1", "--json"], 0);
    assert_eq!(doc["version"], journal::VERSION);
    let records = doc["records"].as_array().expect("records");
    let values: Vec<&Value> = records.iter().filter(|r| r["kind"] == "Value").collect();
    assert_eq!(values.len(), 3, "now, random, uuid: {doc:#}");
    let now = &values[0]["value"];
    let ms = u64::from_le_bytes(exact(now).try_into().expect("8 bytes"));
    assert!((START_MS..START_MS + 60_000).contains(&ms), "{ms}");
    let when = now["decoded"].as_str().expect("a time");
    assert!(
        when.starts_with("2023-11-14T22:1") && when.ends_with('Z'),
        "{when}"
    );
    assert_eq!(values[1]["value"]["decoded"], json!(random));
    let uuid = values[2]["value"]["decoded"].as_str().expect("a UUID");
    assert_eq!(uuid.len(), 36, "{uuid}");
    assert_eq!(uuid.matches('-').count(), 4, "{uuid}");
    // The step's result and the run's: JSON whether or not the bytes are
    // serde_json's sorted form.
    let picked = json!({"zebra": random, "apple": "red"});
    for kind in ["Step", "Done"] {
        let r = records
            .iter()
            .find(|r| r["kind"] == kind)
            .expect("the record");
        let p = &r["payload"];
        assert_eq!(p.get("json").or(p.get("decoded")), Some(&picked), "{r}");
        assert_eq!(
            serde_json::from_slice::<Value>(&exact(p)).expect("JSON"),
            picked
        );
    }
    // It reads back exactly; without its views it is the round-trip form.
    let back = journal::from_json(&doc).expect("reads back");
    let redone: Vec<Value> = back.iter().map(journal::record_to_json).collect();
    assert_eq!(Value::from(redone), without_views(&doc["records"]));

    // The table: a time, a number, a UUID, JSON; no hex.
    let table = stdout(&["show", d, "values-1"]);
    assert!(table.contains("| now "), "{table}");
    assert!(table.contains(&format!(" {random} ")), "{table}");
    assert!(table.contains(uuid), "{table}");
    assert!(table.contains("2023-11-14 22:1"), "{table}");
    assert!(
        table.contains(&format!("{{\"apple\":\"red\",\"zebra\":{random}}}"))
            || table.contains(&format!("{{\"zebra\":{random},\"apple\":\"red\"}}")),
        "{table}"
    );
    assert!(!table.contains("0x"), "{table}");
    // A cancel's reason in words, not hex.
    let cancelled = stdout(&["show", d, "cancel-2"]);
    assert!(cancelled.contains("| changed my mind "), "{cancelled}");
    assert!(!cancelled.contains("0x"), "{cancelled}");

    // A 1 KiB workflow ID: cut in the runs table, whole in JSON.
    let long = long_id();
    let runs = stdout(&["runs", d]);
    assert!(runs.len() < 4096, "{} bytes of table", runs.len());
    assert!(runs.contains("| long-xxx") && runs.contains("x…"), "{runs}");
    for line in runs.lines() {
        assert!(line.chars().count() < 400, "a row of {}", line.len());
    }
    let listed = fusee_json(&["runs", d, "--json"], 0);
    assert!(
        listed
            .as_array()
            .expect("array")
            .iter()
            .any(|r| r["id"] == long.as_str()),
        "the whole ID in JSON"
    );
    let shown = stdout(&["show", d, &long]);
    assert!(shown.len() < 8192, "{} bytes", shown.len());
    assert!(shown.contains("x…"), "{shown}");
    let doc = fusee_json(&["show", d, &long, "--json"], 0);
    assert_eq!(doc["id"], long.as_str());
    let _ = std::fs::remove_dir_all(&dir);
}
