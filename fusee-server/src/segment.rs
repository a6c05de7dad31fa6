//! Text (a workflow ID, a name, a message) as one URL path segment or
//! query value: the one encoder the client and the console share, so both
//! address the run they name.
//!
//! Every byte but ASCII letters, digits, `-`, `.`, `_` and `~` is
//! percent-encoded. A URL parser would otherwise drop tabs and line breaks
//! (`new\nline` became `newline`, another run) and split at `/`, `?` and
//! `#`. The segments `.` and `..` stay dot segments however spelled
//! (`%2E` is one too): the client refuses to send them, the console writes
//! them escaped (`console::path_segment`), and a start refuses such IDs.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The bytes kept as they are: RFC 3986's unreserved set (`.` too: a
/// route's own segments hold one, `openapi.json`, and an encoded `.`
/// would not make a lone `.` any less a dot segment).
const KEPT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` percent-encoded (see the module docs).
pub(crate) fn encode(s: &str) -> String {
    utf8_percent_encode(s, KEPT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_separators_stay_inside_the_segment() {
        assert_eq!(encode("order-1_a~b"), "order-1_a~b");
        assert_eq!(encode("openapi.json"), "openapi.json");
        assert_eq!(encode("new\nline\t"), "new%0Aline%09");
        assert_eq!(encode("a/b?c#d e%"), "a%2Fb%3Fc%23d%20e%25");
        assert_eq!(encode("заказ"), "%D0%B7%D0%B0%D0%BA%D0%B0%D0%B7");
        assert_eq!(encode(""), "");
    }
}
