//! `fusee verify DIR`: the backend's own check of every file and checksum
//! (its `verify` module), then the core's (every shard rebuilt, every
//! stored frame decoded), all read-only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fusee::Backend;
use fusee::inspect::InspectError;
use serde_json::json;

use crate::output::{emit, emit_json};
use crate::progress::Bar;
use crate::store::{Request, backend_of, gather};
use crate::{CliError, fmt};

/// Characters a problem's cell shows: paths and descriptions in full,
/// bounded only against names made to flood a terminal.
const VERIFY_CHARS: usize = 1024;

/// One problem, whichever layer found it.
struct Found {
    /// `storage` (the backend's files and rows) or `core` (decoding).
    layer: &'static str,
    kind: String,
    file: Option<PathBuf>,
    offset: Option<u64>,
    lsn: Option<u64>,
    shard: Option<u32>,
    run: Option<u64>,
    what: String,
}

/// A backend's problem (the file and key-value backends' `Problem`s have
/// the same fields).
#[cfg_attr(
    not(any(feature = "file", feature = "redb", feature = "rocksdb")),
    allow(unused_macros)
)]
macro_rules! found {
    ($p:expr) => {{
        let p = $p;
        Found {
            layer: "storage",
            kind: p.kind.into(),
            file: Some(p.file),
            offset: p.offset,
            lsn: p.lsn,
            shard: p.shard,
            run: None,
            what: p.what,
        }
    }};
}

#[cfg(any(feature = "redb", feature = "rocksdb"))]
fn from_kv(p: fusee_storage_kv::verify::Problem) -> Found {
    found!(p)
}

/// The backend's check of the store in `dir`.
// A build without directory backends (live mode only) keeps the refusal.
#[cfg_attr(
    not(any(feature = "file", feature = "redb", feature = "rocksdb")),
    allow(unused_variables, unreachable_code)
)]
fn storage_problems(dir: &Path, backend: Backend) -> Result<Vec<Found>, CliError> {
    let refused = |error| InspectError::Storage { shard: None, error };
    let bar = Bar::new(0, "rows");
    #[cfg_attr(
        not(any(feature = "redb", feature = "rocksdb")),
        allow(unused_variables, unused_mut)
    )]
    let mut tick = || bar.inc();
    let found = match backend {
        #[cfg(feature = "file")]
        Backend::File => fusee_storage_file::verify::verify_dir(dir)
            .map_err(refused)?
            .into_iter()
            .map(|p| found!(p))
            .collect(),
        #[cfg(feature = "redb")]
        Backend::Redb => fusee_storage_redb::verify::verify_dir(dir, &mut tick)
            .map_err(refused)?
            .into_iter()
            .map(from_kv)
            .collect(),
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => fusee_storage_rocksdb::verify::verify_dir(dir, &mut tick)
            .map_err(refused)?
            .into_iter()
            .map(from_kv)
            .collect(),
        // Memory stores have no directory; a backend added later needs its
        // own check here before verify can vouch for it. (`backend_of`
        // refused the backends this build leaves out.)
        #[allow(unreachable_patterns)]
        other => {
            return Err(CliError::Other(format!(
                "{}: verify cannot check a {other} store",
                dir.display()
            )));
        }
    };
    bar.finish();
    Ok(found)
}

/// Where an inspect error points.
fn locate(e: &InspectError) -> (Option<PathBuf>, Option<u64>, Option<u64>, String) {
    match e {
        InspectError::Storage {
            error: fusee::StorageError::CorruptFile { file, what, at },
            ..
        } => (
            Some(PathBuf::from(file)),
            Some(*at),
            None,
            (*what).to_string(),
        ),
        InspectError::Damaged { lsn, .. } => (None, None, *lsn, e.to_string()),
        other => (None, None, None, other.to_string()),
    }
}

/// `fusee verify DIR`.
pub(crate) fn verify(
    dir: &Path,
    expected: Option<Backend>,
    json: bool,
) -> Result<ExitCode, CliError> {
    let backend = match backend_of(dir) {
        Ok(b) => b,
        // A damaged marker is damage like any other: a problem, exit 1.
        Err(CliError::Inspect(InspectError::Storage {
            error: fusee::StorageError::CorruptFile { file, what, at },
            ..
        })) => {
            let found = vec![Found {
                layer: "storage",
                kind: "marker".into(),
                file: Some(PathBuf::from(file)),
                offset: Some(at),
                lsn: None,
                shard: None,
                run: None,
                what: what.to_string(),
            }];
            return report(dir, None, &found, 0, json);
        }
        Err(e) => return Err(e),
    };
    if let Some(want) = expected
        && want != backend
    {
        return Err(CliError::Other(format!(
            "{}: it holds a store of the {backend} backend, not {want}",
            dir.display()
        )));
    }
    let mut found = storage_problems(dir, backend)?;
    // The core's checks need a store the backend can open at all.
    let openable = !found
        .iter()
        .any(|f| f.kind == "engine" || f.kind == "marker");
    let mut checked = 0;
    if openable {
        match gather(dir, expected, Request::Verify) {
            Ok((_, g)) => {
                checked = g.checked;
                for p in g.problems {
                    let (file, offset, lsn, what) = locate(&p.error);
                    // The backend's check named this file and offset already.
                    let known = file.is_some()
                        && found.iter().any(|f| f.file == file && f.offset == offset);
                    if !known {
                        found.push(Found {
                            layer: "core",
                            kind: "decode".into(),
                            file,
                            offset,
                            lsn,
                            shard: Some(p.shard),
                            run: p.run,
                            what,
                        });
                    }
                }
            }
            // Opening the store at all failed where the backend's own check
            // found nothing: a problem of its own.
            Err(CliError::Inspect(e)) if found.is_empty() => {
                let (file, offset, lsn, what) = locate(&e);
                found.push(Found {
                    layer: "core",
                    kind: "open".into(),
                    file,
                    offset,
                    lsn,
                    shard: None,
                    run: None,
                    what,
                });
            }
            Err(_) => {}
        }
    }
    report(dir, Some(backend), &found, checked, json)
}

/// Prints what `verify` found and returns its exit status.
fn report(
    dir: &Path,
    backend: Option<Backend>,
    found: &[Found],
    checked: u64,
    json: bool,
) -> Result<ExitCode, CliError> {
    match write_report(dir, backend, found, checked, json) {
        // A reader that closed the pipe still gets the verdict.
        Ok(()) | Err(CliError::Closed) => Ok(if found.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }),
        Err(e) => Err(e),
    }
}

fn write_report(
    dir: &Path,
    backend: Option<Backend>,
    found: &[Found],
    checked: u64,
    json: bool,
) -> Result<(), CliError> {
    let name = backend.map_or("unknown", Backend::name);
    if json {
        let problems: Vec<_> = found
            .iter()
            .map(|f| {
                json!({
                    "layer": f.layer,
                    "kind": f.kind,
                    "file": f.file.as_ref().map(|p| p.display().to_string()),
                    "offset": f.offset,
                    "lsn": f.lsn,
                    "shard": f.shard,
                    "run": f.run,
                    "what": f.what,
                })
            })
            .collect();
        return emit_json(&json!({
            "dir": dir.display().to_string(),
            "backend": name,
            "ok": found.is_empty(),
            "records_and_frames_checked": checked,
            "problems": problems,
        }));
    }
    if found.is_empty() {
        return emit(&format!(
            "ok: {name} store {}: no problem ({checked} records and frames decoded)\n",
            dir.display()
        ));
    }
    let mut t = fmt::Table::new(&["layer", "kind", "file", "offset", "LSN", "shard", "what"])
        .cut_at(VERIFY_CHARS);
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    for f in found {
        t.row([
            f.layer.to_string(),
            f.kind.clone(),
            f.file
                .as_ref()
                .map_or("-".into(), |p| p.display().to_string()),
            opt(f.offset),
            opt(f.lsn),
            opt(f.shard.map(u64::from)),
            match f.run {
                Some(run) => format!("run {run}: {}", f.what),
                None => f.what.clone(),
            },
        ]);
    }
    emit(&format!(
        "{t}\n{} problem(s) in {name} store {}\n",
        found.len(),
        dir.display()
    ))
}
