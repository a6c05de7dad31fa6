//! A workflow ID (or any name) as one URL path segment: the one encoder
//! the client and the console share, so both address the run they name.
//!
//! Every byte but ASCII letters, digits, `-`, `_` and `~` is
//! percent-encoded, `.` included: a segment `.` or `..` would otherwise be
//! read as a dot segment (`/runs/..` is `/`), and an ID with a tab or a
//! line break would lose it to URL parsing (`new\nline` became `newline`,
//! another run). The server's path extractor decodes it back whole.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The bytes kept as they are: RFC 3986's unreserved set less `.`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'~');

/// `s` percent-encoded as one path segment (see the module docs).
pub(crate) fn path_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_controls_and_separators_stay_inside_the_segment() {
        assert_eq!(path_segment("order-1_a~b"), "order-1_a~b");
        assert_eq!(path_segment("."), "%2E");
        assert_eq!(path_segment(".."), "%2E%2E");
        assert_eq!(path_segment("new\nline\t"), "new%0Aline%09");
        assert_eq!(path_segment("a/b?c#d e%"), "a%2Fb%3Fc%23d%20e%25");
        assert_eq!(path_segment("заказ"), "%D0%B7%D0%B0%D0%BA%D0%B0%D0%B7");
        assert_eq!(path_segment(""), "");
    }
}
