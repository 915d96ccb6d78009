//! The OpenTelemetry RPC semantic conventions for gRPC, as pure functions.
//!
//! Two sets exist, and `OTEL_SEMCONV_STABILITY_OPT_IN` chooses (semconv
//! `docs/rpc`, "Existing RPC instrumentations that are using v1.37.0 ..."):
//! `rpc` emits the stable set only, `rpc/dup` emits both (and wins over
//! `rpc`); without either an instrumentation keeps what it emitted before.
//! ringtail emitted no RPC spans before, so the caller picks the default
//! ([`Mode::from_opt_in`]); the natural one is [`Mode::Stable`].
//!
//! **Stable** (the conventions' registry names the status attribute
//! `rpc.response.status_code`, a string: [`STABLE_STATUS_CODE`];
//! `tests/tests/semconv.rs` checks every key against the registry):
//! - `rpc.system.name = "grpc"`; `rpc.method` fully qualified
//!   (`package.Service/Method`), `_OTHER` when the method is not
//!   recognised (then `rpc.method_original`); `rpc.response.status_code` = the
//!   status name (`OK`, `NOT_FOUND`); `error.type` = that name when the
//!   status is an error, else a low-cardinality identifier.
//! - Span name: `{rpc.method}`, or `{rpc.system.name}` when the method is
//!   `_OTHER` or unknown.
//! - Errors: a client span fails on every status but `OK`; a server span
//!   only on `UNKNOWN`, `DEADLINE_EXCEEDED`, `UNIMPLEMENTED`, `INTERNAL`,
//!   `UNAVAILABLE`, `DATA_LOSS`.
//! - Metrics: `rpc.server.call.duration` / `rpc.client.call.duration`,
//!   histograms in `s`, advised boundaries `[0.005 .. 10]`.
//!
//! **Experimental** (semconv up to 1.37):
//! - `rpc.system = "grpc"`, `rpc.service` (`package.Service`),
//!   `rpc.method` (`Method`), `rpc.grpc.status_code` (integer).
//! - Span name `package.Service/Method`; the same error table.
//! - Metrics: `rpc.server.duration` / `rpc.client.duration` in `ms`; the
//!   spec advises no boundaries, so the SDK default ones (made for ms).
//!
//! In `dup` mode both attribute sets go on the span; the one key they
//! share, `rpc.method`, carries the stable (fully qualified) value.
//!
//! Recognised methods: a passive observer cannot know a server's method
//! list, so a method counts as recognised unless the server answered
//! `UNIMPLEMENTED` (what gRPC servers answer for unknown methods) or the
//! path does not have gRPC's `/Service/Method` shape.

use std::borrow::Cow;

use ipc_schema::{RpcCall, SpanKind, Text};

use super::conn::grpc_path;
use super::{End, Role, StreamDone};
use crate::operation::RpcSpan;

/// Which set of conventions to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The stable conventions only.
    Stable,
    /// The pre-1.38 experimental conventions only.
    Experimental,
    /// Both (`rpc/dup`).
    Dup,
}

impl Mode {
    /// The mode `OTEL_SEMCONV_STABILITY_OPT_IN`'s value asks for
    /// (comma-separated; `rpc/dup` wins over `rpc`), `default` when it
    /// names neither.
    pub fn from_opt_in(value: Option<&str>, default: Mode) -> Mode {
        let mut mode = default;
        for v in value.unwrap_or("").split(',').map(str::trim) {
            match v {
                "rpc/dup" => return Mode::Dup,
                "rpc" => mode = Mode::Stable,
                _ => {}
            }
        }
        mode
    }

    /// Whether the stable set is emitted.
    pub fn stable(self) -> bool {
        matches!(self, Mode::Stable | Mode::Dup)
    }

    /// Whether the experimental set is emitted.
    pub fn experimental(self) -> bool {
        matches!(self, Mode::Experimental | Mode::Dup)
    }
}

/// `rpc.system.name` (stable) and `rpc.system` (experimental).
pub const SYSTEM: &str = "grpc";
/// The stable status attribute.
pub const STABLE_STATUS_CODE: &str = "rpc.response.status_code";
/// The experimental (integer) status attribute.
pub const EXPERIMENTAL_STATUS_CODE: &str = "rpc.grpc.status_code";
/// `rpc.method` when the method is not recognised.
pub const OTHER: &str = "_OTHER";

/// gRPC status codes 0..=16 by name (grpc/doc/statuscodes.md).
pub const STATUS_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// OK.
pub const OK: i32 = 0;
/// CANCELLED.
pub const CANCELLED: i32 = 1;
/// UNKNOWN.
pub const UNKNOWN: i32 = 2;
/// UNIMPLEMENTED.
pub const UNIMPLEMENTED: i32 = 12;
/// INTERNAL.
pub const INTERNAL: i32 = 13;
/// UNAVAILABLE.
pub const UNAVAILABLE: i32 = 14;

/// The name of a status code, if it is one of the 17.
pub fn status_name(code: i32) -> Option<&'static str> {
    usize::try_from(code).ok().and_then(|i| STATUS_NAMES.get(i).copied())
}

/// The stable attribute's value: the name, or the number as text for a
/// code outside the table.
pub fn status_text(code: i32) -> Cow<'static, str> {
    match status_name(code) {
        Some(n) => Cow::Borrowed(n),
        None => Cow::Owned(code.to_string()),
    }
}

/// Whether `code` makes a span of `role` an error (the tables of the
/// gRPC conventions, the same in both sets).
pub fn is_error(role: Role, code: i32) -> bool {
    match role {
        Role::Client => code != OK,
        // UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS.
        Role::Server => matches!(code, 2 | 4 | 12 | 13 | 14 | 15),
    }
}

/// The status a gRPC library reports for a stream reset with an HTTP/2
/// error code (gRPC's PROTOCOL-HTTP2.md, "Errors").
pub fn status_from_rst(code: u32) -> i32 {
    match code {
        0x7 => UNAVAILABLE, // REFUSED_STREAM
        0x8 => CANCELLED,   // CANCEL
        0xb => 8,           // ENHANCE_YOUR_CALM: RESOURCE_EXHAUSTED
        0xc => 7,           // INADEQUATE_SECURITY: PERMISSION_DENIED
        _ => INTERNAL,
    }
}

/// The status a gRPC client reports for an HTTP status without a
/// `grpc-status` (gRPC's http-grpc-status-mapping.md).
pub fn status_from_http(status: u16) -> i32 {
    match status {
        400 => INTERNAL,
        401 => 16, // UNAUTHENTICATED
        403 => 7,  // PERMISSION_DENIED
        404 => UNIMPLEMENTED,
        429 | 502 | 503 | 504 => UNAVAILABLE,
        _ => UNKNOWN,
    }
}

/// What the conventions need of a finished gRPC stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The traced side.
    pub role: Role,
    /// `package.Service` when the path has gRPC's shape.
    pub service: Option<String>,
    /// `Method` when the path has gRPC's shape.
    pub method: Option<String>,
    /// The stable `rpc.method`: `package.Service/Method` or [`OTHER`].
    pub full_method: Cow<'static, str>,
    /// `rpc.method_original` when `full_method` is [`OTHER`].
    pub method_original: Option<String>,
    /// `grpc-status`, or the status a gRPC library derives from a reset,
    /// a refused stream or a non-200 HTTP status; `None` when nothing says.
    pub status_code: Option<i32>,
    /// Span status ERROR.
    pub is_error: bool,
    /// `error.type` when `is_error`.
    pub error_type: Option<Cow<'static, str>>,
}

/// The conventions' view of a stream; `None` when it is not gRPC.
pub fn outcome(d: &StreamDone) -> Option<Outcome> {
    let g = d.grpc.as_ref()?;
    let status_code = g.status_code.or(match d.end {
        End::Reset { code: Some(c), .. } => Some(status_from_rst(c)),
        End::Reset { code: None, .. } => Some(INTERNAL),
        End::GoAway { .. } => Some(UNAVAILABLE),
        _ => match d.status {
            Some(s) if s != 200 => Some(status_from_http(s)),
            _ => None,
        },
    });
    let (service, method) = match grpc_path(&d.path) {
        Some((s, m)) => (Some(s.to_owned()), Some(m.to_owned())),
        None => (None, None),
    };
    let unrecognised = d.role == Role::Server && status_code == Some(UNIMPLEMENTED);
    let (full_method, method_original) = match (&service, &method) {
        (Some(s), Some(m)) if !unrecognised => (Cow::Owned(format!("{s}/{m}")), None),
        _ => (Cow::Borrowed(OTHER), Some(d.path.strip_prefix('/').unwrap_or(&d.path).to_owned())),
    };
    let is_error = match status_code {
        Some(c) => is_error(d.role, c),
        // No status at all: the call did not finish as gRPC calls do.
        None => true,
    };
    let error_type = is_error.then(|| match status_code {
        Some(c) => status_text(c),
        None => Cow::Borrowed("_OTHER"),
    });
    Some(Outcome { role: d.role, service, method, full_method, method_original, status_code, is_error, error_type })
}

/// The span name (the same string in every mode for recognised methods:
/// stable `{rpc.method}` = experimental `$package.$service/$method`).
pub fn span_name(o: &Outcome) -> Cow<'static, str> {
    if o.full_method == OTHER {
        Cow::Borrowed(SYSTEM)
    } else {
        o.full_method.clone()
    }
}

/// An attribute value: a literal, or the call's own text.
pub type Value = ipc_schema::Value<Text>;

fn s(v: impl Into<Cow<'static, str>>) -> Value {
    Value::Str(Text::from(v.into()))
}

/// Span attributes of the RPC conventions for `mode` (the HTTP call adds
/// the connection ones, `server.address`, `server.port`, `client.address`,
/// `network.peer.*`, and `network.protocol.version`).
pub fn span_attributes(mode: Mode, o: &Outcome) -> Vec<(&'static str, Value)> {
    let mut a = Vec::with_capacity(10);
    if mode.experimental() {
        a.push(("rpc.system", s(SYSTEM)));
        if let Some(sv) = &o.service {
            a.push(("rpc.service", s(sv.clone())));
        }
        if !mode.stable() {
            if let Some(m) = &o.method {
                a.push(("rpc.method", s(m.clone())));
            }
        }
        if let Some(c) = o.status_code {
            a.push((EXPERIMENTAL_STATUS_CODE, Value::Int(i64::from(c))));
        }
    }
    if mode.stable() {
        a.push(("rpc.system.name", s(SYSTEM)));
        a.push(("rpc.method", s(o.full_method.clone())));
        if let Some(orig) = &o.method_original {
            a.push(("rpc.method_original", s(orig.clone())));
        }
        if let Some(c) = o.status_code {
            a.push((STABLE_STATUS_CODE, s(status_text(c))));
        }
        if let Some(e) = &o.error_type {
            a.push(("error.type", s(e.clone())));
        }
    }
    a.push(("network.protocol.name", s("http")));
    a
}

/// What the conventions make of a finished stream, for its span and the
/// RPC metrics; `None` when it is not gRPC. Every gRPC rule is applied
/// here, once: the exporter takes the [`RpcCall`] as it is.
pub fn describe(mode: Mode, d: &StreamDone) -> Option<RpcSpan> {
    let o = outcome(d)?;
    let recognised = o.full_method != OTHER;
    let call = RpcCall {
        stable: mode.stable(),
        experimental: mode.experimental(),
        system: Text::Static(SYSTEM),
        method: o.full_method.clone().into(),
        service_method: match (&o.service, &o.method) {
            (Some(sv), Some(m)) if recognised => Some((sv.clone().into(), m.clone().into())),
            _ => None,
        },
        code: o.status_code,
        status: o.status_code.map(|c| status_text(c).into()),
        error_type: o.error_type.clone().map(Text::from),
    };
    Some(RpcSpan {
        name: span_name(&o).into(),
        error: o.is_error,
        attributes: span_attributes(mode, &o).into_iter().map(|(k, v)| (Text::Static(k), v)).collect(),
        call,
    })
}

// The metrics' definitions live in `ipc_schema::rpc`, read by the exporter
// too; it records a span in the set(s) whose attributes
// [`span_attributes`] gave it, and takes the metric attributes from them.
pub use ipc_schema::rpc::{Metric, Set, EXPERIMENTAL_BUCKETS, METRICS, STABLE_BUCKETS};

/// The duration histograms `mode` records for spans of `role`.
pub fn metrics(mode: Mode, role: Role) -> Vec<Metric> {
    let kind = match role {
        Role::Server => SpanKind::Server,
        Role::Client => SpanKind::Client,
    };
    METRICS
        .iter()
        .filter(|m| match m.set {
            Set::Stable => mode.stable(),
            Set::Experimental => mode.experimental(),
        })
        .filter(|m| m.kind == kind)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Grpc;
    use super::*;

    fn stream(role: Role, path: &str, status: Option<u16>, grpc_status: Option<i32>, end: End) -> StreamDone {
        StreamDone {
            stream_id: 1,
            role,
            start_ns: 0,
            end_ns: 1,
            method: "POST".into(),
            path: path.into(),
            query: None,
            scheme: Some("http".into()),
            authority: None,
            status,
            content_type: Some("application/grpc".into()),
            user_agent: None,
            traceparent: None,
            tracestate: None,
            grpc: Some(Grpc { service: None, method: None, status_code: grpc_status, message: None }),
            end,
            request_body_bytes: 0,
            response_body_bytes: 0,
            headers_incomplete: false,
        }
    }

    fn get<'a>(a: &'a [(&'static str, Value)], k: &str) -> Option<&'a Value> {
        a.iter().find(|(n, _)| *n == k).map(|(_, v)| v)
    }

    #[test]
    fn opt_in() {
        assert_eq!(Mode::from_opt_in(None, Mode::Stable), Mode::Stable);
        assert_eq!(Mode::from_opt_in(Some("http"), Mode::Experimental), Mode::Experimental);
        assert_eq!(Mode::from_opt_in(Some("http, rpc"), Mode::Experimental), Mode::Stable);
        assert_eq!(Mode::from_opt_in(Some("rpc,rpc/dup"), Mode::Stable), Mode::Dup);
        assert_eq!(Mode::from_opt_in(Some("rpc/dup,rpc"), Mode::Stable), Mode::Dup);
        assert_eq!(Mode::from_opt_in(Some("database/dup"), Mode::Stable), Mode::Stable);
    }

    #[test]
    fn status_names_and_errors() {
        assert_eq!(status_name(0), Some("OK"));
        assert_eq!(status_name(5), Some("NOT_FOUND"));
        assert_eq!(status_name(16), Some("UNAUTHENTICATED"));
        assert_eq!(status_name(17), None);
        assert_eq!(status_name(-1), None);
        assert_eq!(status_text(99), "99");
        let server_errors: Vec<i32> = (0..17).filter(|c| is_error(Role::Server, *c)).collect();
        assert_eq!(server_errors, vec![2, 4, 12, 13, 14, 15]);
        assert!((1..17).all(|c| is_error(Role::Client, c)));
        assert!(!is_error(Role::Client, 0));
        assert_eq!(status_from_rst(8), CANCELLED);
        assert_eq!(status_from_rst(7), UNAVAILABLE);
        assert_eq!(status_from_rst(0), INTERNAL);
        assert_eq!(status_from_http(404), UNIMPLEMENTED);
        assert_eq!(status_from_http(503), UNAVAILABLE);
        assert_eq!(status_from_http(500), UNKNOWN);
    }

    #[test]
    fn server_not_found_is_not_an_error() {
        let d = stream(Role::Server, "/helloworld.Greeter/SayHello", Some(200), Some(5), End::Complete);
        let o = outcome(&d).unwrap();
        assert!(!o.is_error);
        assert_eq!(span_name(&o), "helloworld.Greeter/SayHello");
        let a = span_attributes(Mode::Stable, &o);
        assert_eq!(get(&a, "rpc.system.name"), Some(&s("grpc")));
        assert_eq!(get(&a, "rpc.method"), Some(&s("helloworld.Greeter/SayHello")));
        assert_eq!(get(&a, "rpc.response.status_code"), Some(&s("NOT_FOUND")));
        assert_eq!(get(&a, "error.type"), None);
        assert_eq!(get(&a, "rpc.system"), None);
        assert_eq!(get(&a, "network.protocol.name"), Some(&s("http")));
        // The client side of the same call is an error.
        let d = stream(Role::Client, "/helloworld.Greeter/SayHello", Some(200), Some(5), End::Complete);
        let o = outcome(&d).unwrap();
        assert!(o.is_error);
        assert_eq!(o.error_type.as_deref(), Some("NOT_FOUND"));
    }

    #[test]
    fn experimental_and_dup() {
        let d = stream(Role::Server, "/helloworld.Greeter/SayHello", Some(200), Some(13), End::Complete);
        let o = outcome(&d).unwrap();
        let a = span_attributes(Mode::Experimental, &o);
        assert_eq!(get(&a, "rpc.system"), Some(&s("grpc")));
        assert_eq!(get(&a, "rpc.service"), Some(&s("helloworld.Greeter")));
        assert_eq!(get(&a, "rpc.method"), Some(&s("SayHello")));
        assert_eq!(get(&a, "rpc.grpc.status_code"), Some(&Value::Int(13)));
        assert_eq!(get(&a, "rpc.system.name"), None);
        let a = span_attributes(Mode::Dup, &o);
        assert_eq!(get(&a, "rpc.system"), Some(&s("grpc")));
        assert_eq!(get(&a, "rpc.system.name"), Some(&s("grpc")));
        assert_eq!(get(&a, "rpc.method"), Some(&s("helloworld.Greeter/SayHello")));
        assert_eq!(a.iter().filter(|(k, _)| *k == "rpc.method").count(), 1);
        assert_eq!(get(&a, "rpc.grpc.status_code"), Some(&Value::Int(13)));
        assert_eq!(get(&a, "rpc.response.status_code"), Some(&s("INTERNAL")));
        assert_eq!(get(&a, "error.type"), Some(&s("INTERNAL")));
    }

    #[test]
    fn unimplemented_methods_are_other() {
        let d = stream(Role::Server, "/pkg.Svc/Nope", Some(200), Some(12), End::Complete);
        let o = outcome(&d).unwrap();
        assert_eq!(o.full_method, OTHER);
        assert_eq!(o.method_original.as_deref(), Some("pkg.Svc/Nope"));
        assert_eq!(span_name(&o), "grpc");
        let d = stream(Role::Server, "/not-grpc", Some(200), Some(0), End::Complete);
        assert_eq!(outcome(&d).unwrap().full_method, OTHER);
    }

    #[test]
    fn derived_statuses() {
        let cancel = End::Reset { code: Some(8), by_traced: false };
        let o = outcome(&stream(Role::Server, "/a.B/C", None, None, cancel)).unwrap();
        assert_eq!(o.status_code, Some(CANCELLED));
        assert!(!o.is_error);
        let o = outcome(&stream(Role::Client, "/a.B/C", Some(503), None, End::Complete)).unwrap();
        assert_eq!(o.status_code, Some(UNAVAILABLE));
        let o = outcome(&stream(Role::Client, "/a.B/C", None, None, End::GoAway { code: 0 })).unwrap();
        assert_eq!(o.status_code, Some(UNAVAILABLE));
        let o = outcome(&stream(Role::Server, "/a.B/C", Some(200), None, End::Closed)).unwrap();
        assert_eq!(o.status_code, None);
        assert!(o.is_error);
        assert_eq!(o.error_type.as_deref(), Some("_OTHER"));
        // grpc-status wins over the rest.
        let o = outcome(&stream(Role::Client, "/a.B/C", Some(200), Some(0), cancel)).unwrap();
        assert_eq!(o.status_code, Some(OK));
        let mut plain = stream(Role::Client, "/", Some(200), None, End::Complete);
        plain.grpc = None;
        assert_eq!(outcome(&plain), None);
    }

    #[test]
    fn metric_specs() {
        let m = metrics(Mode::Stable, Role::Server);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].name, m[0].unit), ("rpc.server.call.duration", "s"));
        assert_eq!(m[0].buckets.first(), Some(&0.005));
        let m = metrics(Mode::Dup, Role::Client);
        let names: Vec<_> = m.iter().map(|m| (m.name, m.unit)).collect();
        assert_eq!(names, vec![("rpc.client.call.duration", "s"), ("rpc.client.duration", "ms")]);
        let m = metrics(Mode::Experimental, Role::Server);
        assert_eq!((m[0].name, m[0].unit, m[0].ns_per_unit), ("rpc.server.duration", "ms", 1e6));
    }
}
