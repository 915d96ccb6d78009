//! The RPC duration histograms' series ([`ipc_schema::rpc::METRICS`]):
//! their attributes, from the call the span-actor decided
//! ([`RpcCall`], carried in the span): the exporter applies no RPC rule
//! of its own and reads no attribute string back.
//!
//! A series' attributes are those the conventions list for the metric:
//! stable `rpc.system.name`, `rpc.method`, `rpc.response.status_code`,
//! `error.type`; experimental `rpc.system`, `rpc.service`, `rpc.method`,
//! `rpc.grpc.status_code`; plus `server.address` and `server.port` on
//! client metrics only (on a server they would come from the peer's
//! `:authority`, as unbounded as a Host header). A method the span-actor
//! did not recognise is `_OTHER` in the stable set and names no service
//! or method in the experimental one.

use std::hash::{Hash, Hasher};

use ipc_schema::rpc::Set;
use ipc_schema::{RpcCall, Span, SpanKind, Value};
use rustc_hash::FxHasher;

/// An RPC series' attributes as the span has them, sorted by key.
pub(super) type RpcAttrs<'a> = Vec<(&'static str, Value<&'a str>)>;

/// The attributes of call `c` (of span `s`) in the histogram of `set`,
/// sorted by key.
pub(super) fn attributes<'a>(set: Set, s: &Span<&'a str>, c: &RpcCall<&'a str>) -> RpcAttrs<'a> {
    let mut a = Vec::with_capacity(6);
    let mut put = |k: &'static str, v: Option<Value<&'a str>>| {
        if let Some(v) = v {
            a.push((k, v));
        }
    };
    match set {
        Set::Stable => {
            put("error.type", c.error_type.map(Value::Str));
            put("rpc.method", Some(Value::Str(c.method)));
            put("rpc.response.status_code", c.status.map(Value::Str));
            put("rpc.system.name", Some(Value::Str(c.system)));
        }
        Set::Experimental => {
            put("rpc.grpc.status_code", c.code.map(|code| Value::Int(i64::from(code))));
            put("rpc.method", c.service_method.map(|(_, m)| Value::Str(m)));
            put("rpc.service", c.service_method.map(|(sv, _)| Value::Str(sv)));
            put("rpc.system", Some(Value::Str(c.system)));
        }
    }
    if s.kind == SpanKind::Client {
        put("server.address", s.server_address.map(Value::Str));
        put("server.port", Some(Value::Int(i64::from(s.server_port))));
    }
    a
}

pub(super) fn hash(a: &RpcAttrs<'_>) -> u64 {
    let mut h = FxHasher::default();
    a.hash(&mut h);
    h.finish()
}

/// An RPC series' attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcKey(Vec<(&'static str, Value<Box<str>>)>);

impl RpcKey {
    pub(super) fn new(a: &RpcAttrs<'_>) -> RpcKey {
        RpcKey(a.iter().map(|(k, v)| (*k, v.map_str(|s| Box::<str>::from(s)))).collect())
    }

    pub(super) fn matches(&self, a: &RpcAttrs<'_>) -> bool {
        self.0.len() == a.len() && self.0.iter().zip(a).all(|((k1, v1), (k2, v2))| k1 == k2 && v1.as_borrowed() == *v2)
    }

    /// The series' attributes, sorted by key.
    pub fn attributes(&self, mut f: impl FnMut(&'static str, Value<&str>)) {
        for (name, v) in &self.0 {
            f(name, v.as_borrowed());
        }
    }
}
