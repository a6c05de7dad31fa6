//! How the command writes things for people: times, sizes, payloads and
//! tables.

use comfy_table::{ContentArrangement, Table, presets};

/// A time in ms since the Unix epoch as `YYYY-MM-DD HH:MM:SS.mmm` UTC; `-`
/// for 0 (no time).
pub(crate) fn time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The date of day `z` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A byte count with a binary unit (`1.5 MiB`).
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Payload bytes for a table: their JSON text (compact) when they are JSON,
/// else hex; cut to `max` characters.
pub(crate) fn payload(b: &[u8], max: usize) -> String {
    let text = match serde_json::from_slice::<serde_json::Value>(b) {
        Ok(v) => v.to_string(),
        Err(_) if b.is_empty() => String::new(),
        Err(_) => format!("0x{}", fusee::inspect::journal::hex(b)),
    };
    cut(&text, max)
}

/// `s` cut to `max` characters, with `…` where it was cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A table with `header`, in the command's style: plain ASCII borders (the
/// output may go to a log or a file), columns sized to the terminal when
/// there is one.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_sizes() {
        assert_eq!(time(0), "-");
        assert_eq!(time(1), "1970-01-01 00:00:00.001");
        assert_eq!(time(951_782_400_123), "2000-02-29 00:00:00.123");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13:20.000");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(payload(b"{\"a\": 1}", 40), "{\"a\":1}");
        assert_eq!(payload(&[0xff, 1], 40), "0xff01");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
