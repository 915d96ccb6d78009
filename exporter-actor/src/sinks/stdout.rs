//! One readable line per span on standard output, for trying ringtail out.
//!
//! `2026-11-29T23:59:59.123Z SERVER python3.11 "GET /users/*" GET /users/7 404 1.234ms trace=… span=… peer=127.0.0.1:5555`
//!
//! A database call names its system, database and response status (the
//! server's code, else `OK` or `ERROR`) where an HTTP span has its method,
//! path and status:
//!
//! `2026-11-29T23:59:59.123Z CLIENT shop "SELECT users" postgresql shop 42601 1.234ms trace=… span=… peer=10.0.0.5:5432`
//!
//! One span is one line whatever its text holds: the service name comes
//! from any local user (`OTEL_SERVICE_NAME`, an executable's name), the
//! path and query from any client, so every text field is written through
//! [`Printable`] (a newline or an ESC in them is escaped, never printed).

use std::io::Write;

use ipc_schema::{Call, HttpCall, SpanKind};
use runtime_kit::text::Printable;

use crate::batch::Spans;

/// Formats Unix-epoch ns as RFC 3339 UTC with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let ms = (ns / 1_000_000) % 1000;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// An HTTP exchange: its method, path and query, status.
fn http(h: &HttpCall<&str>) -> String {
    let query = h.query.map(|q| format!("?{}", Printable(q))).unwrap_or_default();
    format!("{} {}{query} {}", Printable(h.method_original.unwrap_or(h.method)), Printable(h.path), h.status)
}

/// The line for one span.
pub fn line(batch: &Spans<'_>, i: usize) -> String {
    let s = &batch.spans[i];
    let service = Printable(batch.resources.get(s.resource as usize).map_or("unknown_service", |r| r.service_name.as_str()));
    let kind = match s.kind {
        SpanKind::Server => "SERVER",
        SpanKind::Client => "CLIENT",
        SpanKind::Producer => "PRODUCER",
        SpanKind::Consumer => "CONSUMER",
    };
    let dur_ms = s.end_unix_ns.saturating_sub(s.start_unix_ns) as f64 / 1e6;
    let parent = if s.parent_span_id != 0 { format!(" parent={:016x}", s.parent_span_id) } else { String::new() };
    // The client of a server span, the peer of a client span.
    let (peer, port) = match (s.kind, &s.call) {
        (SpanKind::Server, Call::Http(h) | Call::Rpc(h, _)) => (h.client_address, h.client_port),
        (SpanKind::Server, Call::Db(_) | Call::Messaging(_)) => ("", 0),
        (SpanKind::Client | SpanKind::Producer | SpanKind::Consumer, _) => (s.peer_address, s.peer_port),
    };
    // What the request was and how it ended; the RPC status of gRPC
    // spans: the experimental code when that set is followed (alone or
    // with the stable one), else the stable name.
    let (what, rpc) = match &s.call {
        Call::Db(c) => {
            let status = c.status_code.unwrap_or(if s.error { "ERROR" } else { "OK" });
            (format!("{} {} {}", Printable(c.system), Printable(c.namespace.unwrap_or("-")), Printable(status)), None)
        }
        Call::Messaging(c) => {
            let status = c.error_type.unwrap_or(if s.error { "ERROR" } else { "OK" });
            let messages = c.message_count.map(|n| format!(" {n}msg")).unwrap_or_default();
            (format!("{} {}{messages} {}", Printable(c.system), Printable(c.destination.unwrap_or("-")), Printable(status)), None)
        }
        Call::Http(h) => (http(h), None),
        Call::Rpc(h, r) => (http(h), Some(r)),
    };
    let rpc = rpc
        .and_then(|r| match (r.experimental, r.code, r.status) {
            (true, Some(code), _) => Some(format!(" rpc={code}")),
            (false, _, Some(name)) => Some(format!(" rpc={}", Printable(name))),
            _ => None,
        })
        .unwrap_or_default();
    format!(
        "{} {kind} {service} {:?} {what} {dur_ms:.3}ms trace={:032x} span={:016x}{parent} peer={}:{port}{rpc}",
        rfc3339(s.start_unix_ns),
        s.name,
        s.trace_id,
        s.span_id,
        Printable(peer),
    )
}

/// Writes every exported span of a batch, one line each.
pub fn write(batch: &Spans<'_>, out: &mut impl Write) -> std::io::Result<()> {
    for (i, s) in batch.spans.iter().enumerate() {
        if s.export_trace {
            writeln!(out, "{}", line(batch, i))?;
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    use ipc_schema::{ServiceResource, SpanBatch};

    #[test]
    fn a_hostile_name_or_path_stays_one_line_and_escapes_nothing() {
        let forged = "web\n2026-01-01T00:00:00.000Z SERVER bank \"GET /pay\" GET /pay 200 1.000ms\x1b[2J\u{9b}1m\u{202e}";
        let res = ServiceResource {
            service_name: forged.into(),
            service_instance_id: "h:1".into(),
            host_name: "h".into(),
            pid: 1,
            executable_name: "x\ny".into(),
            extra: vec![],
        };
        let mut span = crate::meters::tests::span("/a", 1, 200);
        let h = crate::meters::tests::http_mut(&mut span);
        h.path = "/a\r\nb".into();
        h.query = Some("q=\x1b]0;t\x07".into());
        let batch = SpanBatch::of(vec![res], &[span]);
        let mut out = Vec::new();
        write(&Spans::of_own(&batch), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(!out.trim_end().chars().any(runtime_kit::text::needs_escape), "{out:?}");
        assert!(
            out.contains(" SERVER web\\n2026-01-01T00:00:00.000Z SERVER bank \"GET /pay\" GET /pay 200 1.000ms\\u{1b}[2J\\u{9b}1m\\u{202e} \"GET /a\" GET /a\\r\\nb?q=\\u{1b}]0;t\\u{7} 200 "),
            "{out}"
        );
    }

    #[test]
    fn a_database_call_names_its_system_database_and_status_not_http() {
        let res = crate::meters::tests::res("shop");
        let ok = crate::meters::tests::db_span(2, None);
        let mut failed = crate::meters::tests::db_span(2, Some("42601"));
        failed.span_id = 2;
        if let Some(c) = crate::meters::tests::db_mut(&mut failed) {
            c.namespace = Some("sh\nop".into());
        }
        let mut unknown = crate::meters::tests::db_span(2, None);
        unknown.error = true;
        if let Some(c) = crate::meters::tests::db_mut(&mut unknown) {
            c.namespace = None;
        }
        let batch = SpanBatch::of(vec![res], &[ok, failed, unknown]);
        let mut out = Vec::new();
        write(&Spans::of_own(&batch), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out:?}");
        assert!(lines[0].contains(" CLIENT shop \"SELECT users\" postgresql shop OK 2.000ms trace="), "{out}");
        assert!(lines[0].ends_with(" peer=10.0.0.5:5432"), "{out}");
        assert!(lines[1].contains(" \"SELECT users\" postgresql sh\\nop 42601 2.000ms "), "{out}");
        assert!(lines[2].contains(" \"SELECT users\" postgresql - ERROR 2.000ms "), "{out}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_995_264_880_261_349), "2026-11-29T23:34:24.880Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_messaging_span_is_its_kind_system_destination_and_messages() {
        let res = crate::meters::tests::res("shop");
        let mut s = crate::meters::tests::msg_span(4, Some("receive"), Some(7), None);
        s.start_unix_ns = 0;
        s.end_unix_ns = 4_000_000;
        let b =
            SpanBatch::of(vec![res.clone()], &[s, crate::meters::tests::msg_span(4, Some("send"), None, Some("NOT_LEADER_OR_FOLLOWER"))]);
        let spans = crate::batch::Spans::of_own(&b);
        let line = line(&spans, 0);
        assert!(line.contains(" CONSUMER shop \"poll orders\" kafka orders 7msg OK 4.000ms "), "{line}");
        assert!(line.ends_with(" peer=10.0.0.9:9092"), "{line}");
        let line = super::line(&spans, 1);
        assert!(line.contains(" PRODUCER shop \"send orders\" kafka orders NOT_LEADER_OR_FOLLOWER "), "{line}");
    }
}
