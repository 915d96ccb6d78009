//! The database call duration histogram's series
//! ([`ipc_schema::db`], `db.client.operation.duration`): their attributes,
//! from the call the span-actor read off the wire ([`DbCall`], carried in
//! the span), never from attribute strings.
//!
//! A series' attributes are those the conventions list for the metric,
//! each only when the call has it: `db.system.name`, `db.namespace`,
//! `db.operation.name`, `db.collection.name`, `db.query.summary` (the
//! conventions recommend it; it is what names the span), and
//! `db.response.status_code`, `error.type`, `server.address`,
//! `server.port`. Never `db.query.text`: even sanitized it is one series a
//! statement, and the summary already says what the call was.

use std::hash::{Hash, Hasher};

use ipc_schema::{DbCall, Span, Value};
use rustc_hash::FxHasher;

use super::{Instrument, Kind};

/// `db.client.operation.duration`.
pub const DURATION: Instrument =
    Instrument { name: ipc_schema::db::NAME, description: ipc_schema::db::DESCRIPTION, unit: ipc_schema::db::UNIT, kind: Kind::Histogram };

/// A database series' attributes as the span has them, sorted by key.
pub(super) type DbAttrs<'a> = Vec<(&'static str, Value<&'a str>)>;

/// The attributes of call `c` (of span `s`), sorted by key.
pub(super) fn attributes<'a>(s: &Span<&'a str>, c: &DbCall<&'a str>) -> DbAttrs<'a> {
    let mut a = Vec::with_capacity(9);
    let mut put = |k: &'static str, v: Option<&'a str>| {
        if let Some(v) = v {
            a.push((k, Value::Str(v)));
        }
    };
    put("db.collection.name", c.collection);
    put("db.namespace", c.namespace);
    put("db.operation.name", c.operation);
    put("db.query.summary", c.query_summary);
    put("db.response.status_code", c.status_code);
    put("db.system.name", Some(c.system));
    put("error.type", c.error_type);
    put("server.address", s.server_address);
    if s.server_port != 0 {
        a.push(("server.port", Value::Int(i64::from(s.server_port))));
    }
    a
}

pub(super) fn hash(a: &DbAttrs<'_>) -> u64 {
    let mut h = FxHasher::default();
    a.hash(&mut h);
    h.finish()
}

/// A database series' attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbKey(Vec<(&'static str, Value<Box<str>>)>);

impl DbKey {
    pub(super) fn new(a: &DbAttrs<'_>) -> DbKey {
        DbKey(a.iter().map(|(k, v)| (*k, v.map_str(|s| Box::<str>::from(s)))).collect())
    }

    pub(super) fn matches(&self, a: &DbAttrs<'_>) -> bool {
        self.0.len() == a.len() && self.0.iter().zip(a).all(|((k1, v1), (k2, v2))| k1 == k2 && v1.as_borrowed() == *v2)
    }

    /// The series' attributes, sorted by key.
    pub fn attributes(&self, mut f: impl FnMut(&'static str, Value<&str>)) {
        for (name, v) in &self.0 {
            f(name, v.as_borrowed());
        }
    }
}
