//! How the command writes things for people: times, sizes, payloads and
//! tables.

use comfy_table::{ContentArrangement, presets};
use fusee::inspect::journal;

/// Characters a table cell shows at most: longer text (a 100 KB workflow
/// ID, a payload) is cut with `…`. JSON output is never cut.
pub(crate) const CELL_CHARS: usize = 64;

/// A time in ms since the Unix epoch as `YYYY-MM-DD HH:MM:SS.mmm` UTC; `-`
/// for 0 (no time).
pub(crate) fn time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{ms} ms"),
            |t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        )
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

/// Payload bytes of a run whose `Start` says `codec`, for a table: their
/// JSON (compact) when the codec says JSON and they parse, else hex.
pub(crate) fn payload(b: &[u8], codec: Option<u8>) -> String {
    if b.is_empty() {
        return String::new();
    }
    match codec.and_then(|c| journal::decoded_payload(b, c)) {
        Some(v) => v.to_string(),
        None => format!("0x{}", journal::hex(b)),
    }
}

/// Text the engine writes (a cancel's reason, who ended a run): as is when
/// it is UTF-8, else hex.
pub(crate) fn text(b: &[u8]) -> String {
    std::str::from_utf8(b).map_or_else(|_| format!("0x{}", journal::hex(b)), str::to_string)
}

/// A recorded value (`ctx.now()`, `random()`, `uuid()`) of `kind` for a
/// table: a time as a time, a number as a number; a custom value as a
/// payload.
pub(crate) fn recorded(kind: u8, value: &[u8], codec: Option<u8>) -> String {
    match journal::recorded(kind, value) {
        Some(journal::Recorded::Time(ms)) => time(ms),
        Some(journal::Recorded::Random(n)) => n.to_string(),
        Some(journal::Recorded::Uuid(u)) => u.hyphenated().to_string(),
        None => payload(value, codec),
    }
}

/// `s` as a table cell: [`cut`] to [`CELL_CHARS`].
pub(crate) fn cell(s: &str) -> String {
    cut(s, CELL_CHARS)
}

/// `s` for a table: control characters escaped (a newline or a terminal
/// escape in an ID must not break the table or the terminal), cut to `max`
/// characters with `…` where it was cut.
pub(crate) fn cut(s: &str, max: usize) -> String {
    let mut escaped = s.chars().flat_map(|c| {
        let e: Vec<char> = if c.is_control() {
            c.escape_default().collect()
        } else {
            vec![c]
        };
        e
    });
    let mut out: String = escaped.by_ref().take(max).collect();
    if escaped.next().is_some() {
        out.pop();
        out.push('…');
    }
    out
}

/// A table in the command's style: plain ASCII borders (the output may go
/// to a log or a file), columns sized to the terminal when there is one,
/// every cell passed through [`cut`].
pub(crate) struct Table {
    table: comfy_table::Table,
    max: usize,
}

impl Table {
    /// A table with `header`, its cells cut to [`CELL_CHARS`].
    pub(crate) fn new(header: &[&str]) -> Self {
        let mut table = comfy_table::Table::new();
        table
            .load_preset(presets::ASCII_MARKDOWN)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(header.iter().copied());
        Self {
            table,
            max: CELL_CHARS,
        }
    }

    /// The same, its cells cut to `max` characters instead (a problem's
    /// file and description are worth their width).
    pub(crate) fn cut_at(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// Adds a row.
    pub(crate) fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let max = self.max;
        self.table.add_row(
            cells
                .into_iter()
                .map(|c| cut(c.as_ref(), max))
                .collect::<Vec<_>>(),
        );
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.table.fmt(f)
    }
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
        assert_eq!(time(u64::MAX), format!("{} ms", u64::MAX));
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
    }

    #[test]
    fn payloads_values_and_text() {
        assert_eq!(payload(b"{\"a\": 1}", Some(1)), "{\"a\":1}");
        assert_eq!(payload(b"{\"a\": 1}", Some(0)), "0x7b2261223a20317d");
        assert_eq!(payload(&[0xff, 1], Some(1)), "0xff01");
        assert_eq!(payload(b"", Some(1)), "");
        assert_eq!(
            recorded(0, &1_700_000_000_000u64.to_le_bytes(), Some(1)),
            "2023-11-14 22:13:20.000"
        );
        assert_eq!(recorded(1, &7u64.to_le_bytes(), Some(1)), "7");
        assert_eq!(recorded(3, b"[1]", Some(1)), "[1]");
        assert_eq!(text(b"client"), "client");
        assert_eq!(text(&[0xff]), "0xff");
    }

    #[test]
    fn cells_are_cut_and_escaped() {
        assert_eq!(cell("abc"), "abc");
        let exact = "x".repeat(CELL_CHARS);
        assert_eq!(cell(&exact), exact);
        let long = cell(&"y".repeat(100_000));
        assert_eq!(long.chars().count(), CELL_CHARS);
        assert!(long.ends_with('…'));
        assert_eq!(cell("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
        let wide = cell(&"é".repeat(CELL_CHARS + 1));
        assert_eq!(wide.chars().count(), CELL_CHARS);
    }
}
