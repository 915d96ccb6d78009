//! The HTTP request-duration histograms' series: their instruments and
//! the key of a series, taken from the span's typed HTTP fields (the
//! conventions' attribute list for the metric, never `url.path`).

use std::hash::{Hash, Hasher};

use ipc_schema::{HttpCall, Span, SpanKind, Value};
use rustc_hash::FxHasher;

use super::{Instrument, Kind};
use crate::digits::decimal;

/// `http.server.request.duration`.
pub const SERVER_DURATION: Instrument =
    Instrument { name: "http.server.request.duration", description: "Duration of HTTP server requests.", unit: "s", kind: Kind::Histogram };
/// `http.client.request.duration`.
pub const CLIENT_DURATION: Instrument =
    Instrument { name: "http.client.request.duration", description: "Duration of HTTP client requests.", unit: "s", kind: Kind::Histogram };

/// What of a span makes up its histogram attributes: the spec's list,
/// never `url.path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesKey {
    method: Box<str>,
    status: u16,
    version: Box<str>,
    scheme: Box<str>,
    error: bool,
    /// `http.route` (server) or `server.address` (client).
    label: Option<Box<str>>,
    /// `server.port` (client spans only; 0 for server spans).
    port: u16,
    kind: SpanKind,
}

// (An HTTP exchange's span is a SERVER's or a CLIENT's: the other kinds
// are a messaging call's, taken as a client's if one ever came here.)
fn label<'a>(s: &Span<&'a str>, h: &HttpCall<&'a str>) -> Option<&'a str> {
    match s.kind {
        SpanKind::Server => h.route,
        SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => s.server_address,
    }
}

fn port(s: &Span<&str>) -> u16 {
    if s.kind == SpanKind::Server {
        0
    } else {
        s.server_port
    }
}

/// The hash of the series of exchange `h` (of span `s`).
pub(super) fn span_hash(s: &Span<&str>, h: &HttpCall<&str>) -> u64 {
    let mut x = FxHasher::default();
    (&h.method, h.status, &h.protocol_version, &h.scheme, s.error, label(s, h), port(s)).hash(&mut x);
    x.finish()
}

impl SeriesKey {
    pub(super) fn new(s: &Span<&str>, h: &HttpCall<&str>) -> SeriesKey {
        SeriesKey {
            method: h.method.into(),
            status: h.status,
            version: h.protocol_version.into(),
            scheme: h.scheme.into(),
            error: s.error,
            label: label(s, h).map(Into::into),
            port: port(s),
            kind: s.kind,
        }
    }

    pub(super) fn matches(&self, s: &Span<&str>, h: &HttpCall<&str>) -> bool {
        self.status == h.status
            && self.error == s.error
            && self.port == port(s)
            && *self.method == *h.method
            && *self.version == *h.protocol_version
            && *self.scheme == *h.scheme
            && self.label.as_deref() == label(s, h)
    }

    /// The series' attributes, sorted by key (as the OpenTelemetry SDKs
    /// export them).
    pub fn attributes(&self, mut f: impl FnMut(&'static str, Value<&str>)) {
        let mut digits = [0u8; 20];
        if self.error {
            f("error.type", Value::Str(decimal(u64::from(self.status), &mut digits)));
        }
        f("http.request.method", Value::Str(&self.method));
        f("http.response.status_code", Value::Int(i64::from(self.status)));
        match self.kind {
            SpanKind::Server => {
                if let Some(r) = &self.label {
                    f("http.route", Value::Str(r));
                }
                f("network.protocol.version", Value::Str(&self.version));
            }
            SpanKind::Client | SpanKind::Producer | SpanKind::Consumer => {
                f("network.protocol.version", Value::Str(&self.version));
                if let Some(a) = &self.label {
                    f("server.address", Value::Str(a));
                }
                f("server.port", Value::Int(i64::from(self.port)));
            }
        }
        f("url.scheme", Value::Str(&self.scheme));
    }
}
