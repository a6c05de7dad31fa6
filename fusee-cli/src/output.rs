//! Everything the command writes on stdout goes through here, so that a
//! reader that stops early (`fusee runs DIR | head`) ends the command
//! quietly: a closed pipe is [`CliError::Closed`], which exits 0 with no
//! message, as Unix tools do. (Rust ignores SIGPIPE, so a plain `println!`
//! would panic on it instead.)

use std::io::Write;

use crate::CliError;

/// Writes `text` on stdout and flushes it.
pub(crate) fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => CliError::Closed,
            _ => CliError::Other(format!("cannot write to stdout: {e}")),
        })
}

/// Writes `value` as pretty JSON on stdout, with a final newline.
pub(crate) fn emit_json(value: &serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Other(format!("cannot write JSON: {e}")))?;
    emit(&(text + "\n"))
}

/// Says `text` on stderr; an error writing it is dropped (there is nowhere
/// left to say it).
pub(crate) fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
