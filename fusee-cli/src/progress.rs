//! Progress bars on stderr for long work (indicatif). They draw only when
//! stderr is a terminal, so scripts and tests see nothing of them, and
//! stdout carries only the command's output.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps, or a spinner when the length is unknown.
pub(crate) struct Bar(ProgressBar);

impl Bar {
    /// A bar counting `len` `unit`s.
    pub(crate) fn new(len: u64, unit: &str) -> Self {
        let bar = ProgressBar::new(len);
        // The template is a constant: it parses, so the default style is only
        // a fallback that never shows.
        let style = ProgressStyle::with_template(&format!(
            "{{spinner}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}} ({{elapsed}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Self(bar)
    }

    /// Says what is being worked on.
    pub(crate) fn message(&self, msg: String) {
        self.0.set_message(msg);
    }

    /// Sets the bar's length (once it is known).
    pub(crate) fn length(&self, len: u64) {
        self.0.set_length(len);
    }

    /// Starts counting again from 0 (a second pass over the same steps).
    pub(crate) fn reset_position(&self) {
        self.0.set_position(0);
    }

    /// One step done.
    pub(crate) fn inc(&self) {
        self.0.inc(1);
    }

    /// Done: the bar is cleared.
    pub(crate) fn finish(&self) {
        self.0.finish_and_clear();
    }
}
