//! Structured logs: `tracing` to stderr, level from `RUST_LOG` or the
//! config's `log.level`, each line tagged with the component.
//!
//! Every field value and message is written through
//! [`crate::text::Escaping`]: a log line often carries text another user or
//! a remote client chose (an executable's path, a library's file name, a
//! peer's message), and a newline in it would forge a log line, an ESC a
//! terminal escape. `tracing_subscriber`'s default field formatter prints
//! `%` (Display) values raw; [`EscapedFields`] formats fields the same way
//! (`name=value`, the message without its name, separated by spaces) with
//! those characters escaped.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::EnvFilter;

use crate::text::Escaping;

/// Installs the global subscriber. Safe to call more than once (tests).
pub fn init(level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("{level},aya=warn,aya_obj=warn")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_target(false)
        .fmt_fields(EscapedFields)
        .compact()
        .try_init();
}

/// The fields of a log line, formatted as `tracing_subscriber`'s default
/// does, with every value escaped (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'a> MakeVisitor<Writer<'a>> for EscapedFields {
    type Visitor = EscapedVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> Self::Visitor {
        EscapedVisitor { writer: target, empty: true, result: Ok(()) }
    }
}

/// Writes one line's fields (made by [`EscapedFields`]).
pub struct EscapedVisitor<'a> {
    writer: Writer<'a>,
    empty: bool,
    result: fmt::Result,
}

impl Visit for EscapedVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // Metadata of `log` records, already on the line.
        if name.starts_with("log.") {
            return;
        }
        if !self.empty {
            self.result = self.writer.write_char(' ');
        }
        self.empty = false;
        let name = name.strip_prefix("r#").unwrap_or(name);
        if name != "message" {
            self.result = self.result.and_then(|()| write!(self.writer, "{name}="));
        }
        self.result = self.result.and_then(|()| write!(Escaping(&mut self.writer), "{value:?}"));
    }
}

impl VisitOutput<fmt::Result> for EscapedVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for EscapedVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log lines written into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_hostile_value_stays_on_its_line_and_escapes_nothing() {
        let buf = Buffer::default();
        let sink = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_target(false)
            .without_time()
            .with_writer(move || sink.clone())
            .fmt_fields(EscapedFields)
            .compact()
            .finish();
        let exe = "/tmp/x\nERROR forged=\"line\" \x1b[2J\u{9b}0m";
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(pid = 7, exe = %exe, name = exe, event = "selected", "tracing {exe}");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(!out.contains('\x1b') && !out.contains('\u{9b}'), "{out:?}");
        assert_eq!(
            out.trim_end(),
            " INFO tracing /tmp/x\\nERROR forged=\"line\" \\u{1b}[2J\\u{9b}0m pid=7 exe=/tmp/x\\nERROR forged=\"line\" \\u{1b}[2J\\u{9b}0m \
             name=\"/tmp/x\\nERROR forged=\\\"line\\\" \\u{1b}[2J\\u{9b}0m\" event=\"selected\""
        );
    }
}
