//! `fusee disk-check DIR`: how long a write and its flush take on the disk
//! under `DIR`, per flush method and write size.
//!
//! For each method (`fdatasync`, `fsync`, and writes through a file opened
//! with `O_DSYNC`) and each size, a file is preallocated (written with
//! zeros and synced, so the timed flushes write data, not the file's
//! allocation), then `samples` writes of that size go to consecutive
//! offsets (wrapping within the file), each followed by its flush, and
//! each timed. The file is removed afterwards. Percentiles are of those
//! samples: p99.9 means something from 1,000 samples on.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use crate::output::{emit, emit_json};
use crate::progress::Bar;
use crate::{CliError, fmt};

/// `fusee disk-check`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// A directory on the disk to check (a temporary file is written there
    /// and removed).
    dir: PathBuf,
    /// Timed writes per method and size.
    #[arg(long, default_value_t = 1000)]
    samples: usize,
    /// Write sizes in bytes (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [512u64, 4096, 65_536, 1 << 20])]
    sizes: Vec<u64>,
    /// JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// How a write is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    DataSync,
    FullSync,
    ODsync,
}

impl Method {
    const ALL: [Method; 3] = [Method::DataSync, Method::FullSync, Method::ODsync];

    fn name(self) -> &'static str {
        match self {
            Method::DataSync => "fdatasync",
            Method::FullSync => "fsync",
            Method::ODsync => "O_DSYNC",
        }
    }
}

/// Percentiles of one method and size, in microseconds.
struct Figures {
    method: Method,
    size: u64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

/// The `q` quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The temporary file, removed when dropped (also on an error).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> CliError {
    CliError::Other(format!("{what} {}: {e}", path.display()))
}

/// Times `samples` writes of `size` bytes with `method` in `path`.
fn measure(
    path: &Path,
    method: Method,
    size: u64,
    samples: usize,
    bar: &Bar,
) -> Result<Figures, CliError> {
    // Up to 64 MiB of file, at least 16 writes' worth: offsets wrap in it.
    let slots = (64u64 << 20)
        .div_ceil(size)
        .clamp(16, samples.max(16) as u64);
    let file_len = slots * size;
    {
        let f = File::create(path).map_err(|e| io_err("creating", path, e))?;
        let zeros = vec![0u8; (1 << 20).min(file_len) as usize];
        let mut at = 0;
        while at < file_len {
            let n = (file_len - at).min(zeros.len() as u64) as usize;
            f.write_all_at(&zeros[..n], at)
                .map_err(|e| io_err("preallocating", path, e))?;
            at += n as u64;
        }
        f.sync_all().map_err(|e| io_err("syncing", path, e))?;
    }
    let mut opts = OpenOptions::new();
    opts.write(true);
    if method == Method::ODsync {
        opts.custom_flags(libc::O_DSYNC);
    }
    let f = opts.open(path).map_err(|e| io_err("opening", path, e))?;
    let buf: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
    let mut micros = Vec::with_capacity(samples);
    for i in 0..samples {
        let at = (i as u64 % slots) * size;
        let start = Instant::now();
        f.write_all_at(&buf, at)
            .map_err(|e| io_err("writing", path, e))?;
        match method {
            Method::DataSync => f.sync_data(),
            Method::FullSync => f.sync_all(),
            Method::ODsync => Ok(()),
        }
        .map_err(|e| io_err("flushing", path, e))?;
        micros.push(start.elapsed().as_secs_f64() * 1e6);
        bar.inc();
    }
    micros.sort_by(f64::total_cmp);
    Ok(Figures {
        method,
        size,
        p50: quantile(&micros, 0.5),
        p99: quantile(&micros, 0.99),
        p999: quantile(&micros, 0.999),
        max: micros.last().copied().unwrap_or(0.0),
    })
}

/// Refuses a directory an engine holds: the measurement would slow it and
/// be skewed by it.
fn check_not_held(dir: &Path) -> Result<(), CliError> {
    let lock = dir.join("LOCK");
    if !dir.join(fusee::storage::identity::MARKER).exists() {
        return Ok(());
    }
    let Ok(f) = File::open(&lock) else {
        return Ok(());
    };
    match f.try_lock_shared() {
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::Other(format!(
            "{} is held by a running engine (its lock is taken): measure another directory \
             on the same disk, or stop the engine",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// `fusee disk-check DIR`.
pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    if args.samples == 0 || args.sizes.is_empty() || args.sizes.contains(&0) {
        return Err(CliError::Usage(
            "--samples and every --sizes value must be at least 1".into(),
        ));
    }
    let dir = &args.dir;
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(CliError::Other(format!(
                "{}: not a directory",
                dir.display()
            )));
        }
        Err(e) => return Err(io_err("cannot use", dir, e)),
    }
    check_not_held(dir)?;
    let scratch = Scratch(dir.join(format!(".fusee-disk-check-{}", std::process::id())));
    let total = (Method::ALL.len() * args.sizes.len() * args.samples) as u64;
    let bar = Bar::new(total, "writes");
    let mut all = Vec::new();
    for &size in &args.sizes {
        for method in Method::ALL {
            bar.message(format!("{} {}", method.name(), fmt::bytes(size)));
            all.push(measure(&scratch.0, method, size, args.samples, &bar)?);
        }
    }
    bar.finish();
    drop(scratch);
    // The fastest method: the lowest geometric mean of its p50s over sizes.
    let score = |m: Method| {
        let v: Vec<f64> = all
            .iter()
            .filter(|f| f.method == m)
            .map(|f| f.p50.max(1e-3).ln())
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let fastest = Method::ALL
        .into_iter()
        .min_by(|a, b| score(*a).total_cmp(&score(*b)))
        .unwrap_or(Method::DataSync);
    if args.json {
        let rows: Vec<_> = all
            .iter()
            .map(|f| {
                json!({"method": f.method.name(), "size": f.size, "p50_us": f.p50,
                    "p99_us": f.p99, "p999_us": f.p999, "max_us": f.max})
            })
            .collect();
        emit_json(&json!({
            "dir": dir.display().to_string(),
            "samples": args.samples,
            "results": rows,
            "fastest": fastest.name(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = fmt::Table::new(&["method", "size", "p50 µs", "p99 µs", "p99.9 µs", "max µs"]);
    for f in &all {
        t.row([
            f.method.name().to_string(),
            fmt::bytes(f.size),
            format!("{:.0}", f.p50),
            format!("{:.0}", f.p99),
            format!("{:.0}", f.p999),
            format!("{:.0}", f.max),
        ]);
    }
    emit(&format!(
        "{t}\nfastest on this disk: {} (lowest median over the sizes; {} samples each)\n",
        fastest.name(),
        args.samples
    ))?;
    Ok(ExitCode::SUCCESS)
}
