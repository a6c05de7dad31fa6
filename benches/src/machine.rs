//! What a result depends on besides the workload: the machine, the disk and
//! filesystem under the data directory, the toolchain and build, the
//! command line and the date, so a run can be reproduced.
//!
//! Everything is read from `/proc`, `/sys` and `rustc -V`; whatever cannot
//! be read is reported as `unknown` rather than failing the run.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

const UNKNOWN: &str = "unknown";

/// The machine and environment of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cpus: usize,
    /// Total memory (`/proc/meminfo`), e.g. `7.8 GiB`.
    pub memory: String,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// The data directory, canonical.
    pub dir: String,
    /// The block device holding it, its mount point, and whether the
    /// kernel calls it rotational (`/proc/mounts`, `/sys/block`).
    pub disk: String,
    /// The filesystem type and mount options of that mount.
    pub filesystem: String,
    /// `rustc -V` of the toolchain on the path.
    pub rustc: String,
    /// `release` when built with optimisations, else `debug` (figures from
    /// a debug build are not comparable).
    pub profile: &'static str,
}

impl Machine {
    /// Probes the machine for a run whose data lives in `dir`.
    pub fn probe(dir: &Path) -> Self {
        let dir = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_path_buf())
            .display()
            .to_string();
        let (disk, filesystem) = mount_of(&dir);
        Self {
            cpu: cpu_model(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory: memory(),
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            dir,
            disk,
            filesystem,
            rustc: Command::new("rustc")
                .arg("-V")
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map_or_else(|| UNKNOWN.into(), |s| s.trim().to_string()),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        }
    }

    /// `(label, value)` pairs in report order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CPU", format!("{} ({} logical CPUs)", self.cpu, self.cpus)),
            ("memory", self.memory.clone()),
            ("kernel", self.kernel.clone()),
            ("data directory", self.dir.clone()),
            ("disk", self.disk.clone()),
            ("filesystem", self.filesystem.clone()),
            ("rustc", self.rustc.clone()),
            ("build profile", self.profile.to_string()),
        ]
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| UNKNOWN.into(), |s| s.trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| UNKNOWN.into())
}

fn memory() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!("{:.1} GiB", kib / (1024.0 * 1024.0)))
        })
        .unwrap_or_else(|| UNKNOWN.into())
}

/// `(disk, filesystem)` descriptions of the mount holding `dir`: the
/// `/proc/mounts` entry with the longest mount point that prefixes it.
fn mount_of(dir: &str) -> (String, String) {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return (UNKNOWN.into(), UNKNOWN.into());
    };
    let mut best: Option<(&str, &str, &str, &str)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [dev, point, fstype, opts, ..] = f.as_slice() else {
            continue;
        };
        let inside = *point == "/"
            || dir == *point
            || dir
                .strip_prefix(*point)
                .is_some_and(|rest| rest.starts_with('/'));
        if inside && best.is_none_or(|b| point.len() >= b.1.len()) {
            best = Some((dev, point, fstype, opts));
        }
    }
    let Some((dev, point, fstype, opts)) = best else {
        return (UNKNOWN.into(), UNKNOWN.into());
    };
    let rotational = dev
        .strip_prefix("/dev/")
        .map(|name| {
            // A partition's queue lives on its parent device.
            let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
            let base = base
                .strip_suffix('p')
                .filter(|b| b.ends_with(|c: char| c.is_ascii_digit()))
                .unwrap_or(base);
            let r = read_trim(&format!("/sys/block/{name}/queue/rotational"));
            if r == UNKNOWN {
                read_trim(&format!("/sys/block/{base}/queue/rotational"))
            } else {
                r
            }
        })
        .map_or("unknown", |r| match r.as_str() {
            "0" => "non-rotational",
            "1" => "rotational",
            _ => "unknown",
        });
    (
        format!("{dev} mounted on {point} ({rotational})"),
        format!("{fstype} ({opts})"),
    )
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC` (the civil
/// calendar by days since 1970-01-01, proleptic Gregorian).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil, shifted so eras start on 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
        assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
    }

    #[test]
    fn probe_names_the_root_mount() {
        let m = Machine::probe(Path::new("/"));
        assert!(!m.filesystem.is_empty() && m.cpus >= 1, "{m:?}");
    }
}
