//! Text from other processes and from the network, made safe to print.
//!
//! Service and executable names come from any local user
//! (`OTEL_SERVICE_NAME`, a file name), paths and queries from any remote
//! client: printed as they are, a newline forges a line of a log or of the
//! exporter's span output, an ESC (or a C1 control such as U+009B, CSI)
//! starts a terminal escape sequence, a bidirectional override reorders
//! what a reader sees. Every text output (the stdout span line, every log
//! line through [`crate::logging`]) writes such text through [`Printable`]:
//! those characters become Rust-style escapes (`\n`, `\r`, `\t`, `\u{1b}`,
//! `\u{202e}`), everything else (printable UTF-8, spaces, quotes,
//! backslashes) is kept as is.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` is escaped: control characters (C0, DEL, C1), the line and
/// paragraph separators some viewers break lines at, and the invisible
/// marks that reorder or hide text (bidirectional controls, zero-width
/// characters, the byte-order mark).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
        )
}

/// Writes `c` as an escape.
fn escape(c: char, out: &mut impl fmt::Write) -> fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c => write!(out, "\\u{{{:x}}}", u32::from(c)),
    }
}

/// Text that prints with [`needs_escape`] characters escaped.
#[derive(Debug, Clone, Copy)]
pub struct Printable<'a>(pub &'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Escaping(f).write_str(self.0)
    }
}

/// `s` with [`needs_escape`] characters escaped; borrowed when none is.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    // Writing to a String cannot fail.
    let _ = Escaping(&mut out).write_str(s);
    Cow::Owned(out)
}

/// A writer that escapes what is written to it, as it is written (so a
/// `Display` or `Debug` value is escaped without being collected first).
pub struct Escaping<W>(pub W);

impl<W: fmt::Write> fmt::Write for Escaping<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut start = 0;
        for (i, c) in s.char_indices() {
            if needs_escape(c) {
                self.0.write_str(&s[start..i])?;
                escape(c, &mut self.0)?;
                start = i + c.len_utf8();
            }
        }
        self.0.write_str(&s[start..])
    }
}

/// `%XX` escapes decoded (RFC 3986); anything else, a `%` without two hex
/// digits after it included, kept as it is. The bytes may be any: the
/// caller says what text they become.
pub fn percent_decode(b: &[u8]) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_and_terminal_escapes_are_escaped() {
        assert_eq!(printable("web\n2026-01-01 SERVER forged"), "web\\n2026-01-01 SERVER forged");
        assert_eq!(printable("a\r\tb"), "a\\r\\tb");
        assert_eq!(printable("\x1b[2J\x1b]0;title\x07"), "\\u{1b}[2J\\u{1b}]0;title\\u{7}");
        assert_eq!(printable("c1\u{9b}31m del\u{7f}"), "c1\\u{9b}31m del\\u{7f}");
        assert_eq!(printable("ab\u{202e}cd\u{2028}e\u{200b}\u{feff}"), "ab\\u{202e}cd\\u{2028}e\\u{200b}\\u{feff}");
    }

    #[test]
    fn printable_text_is_kept_as_is() {
        for s in ["checkout", "python3.11", "café", "サービス", "a b \"c\" 'd' \\n", "ü\u{301}", ""] {
            assert!(matches!(printable(s), Cow::Borrowed(_)), "{s:?}");
            assert_eq!(Printable(s).to_string(), s);
        }
    }

    #[test]
    fn display_values_are_escaped_as_written() {
        let mut out = String::new();
        let name = "x\ny";
        write!(Escaping(&mut out), "{name} and {:?}", 'z').unwrap();
        assert_eq!(out, "x\\ny and 'z'");
        assert_eq!(format!("[{}]", Printable("\u{0}")), "[\\u{0}]");
    }
}
