//! The messaging metrics' series ([`ipc_schema::messaging`]):
//! `messaging.client.operation.duration` (every messaging call),
//! `messaging.client.sent.messages` (a `send` call's messages) and
//! `messaging.client.consumed.messages` (a `receive` call's), their
//! attributes from the call the span-actor read off the wire
//! ([`MsgCall`], carried in the span), never from attribute strings.
//!
//! A series' attributes are those the conventions list for its metric,
//! each only when the call has it:
//! - all three: `messaging.system`, `messaging.operation.name`,
//!   `messaging.destination.name`, `messaging.destination.template`,
//!   `messaging.destination.partition.id`, `error.type`,
//!   `server.address`, `server.port`;
//! - the duration adds `messaging.operation.type`,
//!   `messaging.consumer.group.name` and
//!   `messaging.destination.subscription.name`; the consumed counter the
//!   last two.
//!
//! Never `messaging.destination.name` of a temporary or anonymous
//! destination (a reply queue, a NATS inbox, a server-named queue): the
//! conventions want it only when its cardinality is low, and those are
//! one a request. Never the client id, the offset, the routing key or any
//! per-message number: one series each. Bounded like every histogram's
//! series ([`super`]).
//!
//! A messaging series is a sorted list of attributes, which is what a
//! database series is too: both are kept as a [`super::DbKey`].

use ipc_schema::messaging::{consumed, duration, op_type, sent};
use ipc_schema::{MsgCall, Span, Value};

use super::db::DbAttrs;
use super::{Instrument, Kind};

/// `messaging.client.operation.duration`.
pub const DURATION: Instrument =
    Instrument { name: duration::NAME, description: duration::DESCRIPTION, unit: duration::UNIT, kind: Kind::Histogram };
/// `messaging.client.sent.messages`.
pub const SENT: Instrument = Instrument { name: sent::NAME, description: sent::DESCRIPTION, unit: sent::UNIT, kind: Kind::Counter };
/// `messaging.client.consumed.messages`.
pub const CONSUMED: Instrument =
    Instrument { name: consumed::NAME, description: consumed::DESCRIPTION, unit: consumed::UNIT, kind: Kind::Counter };

/// Which of the three a series is of: their attributes differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Metric {
    Duration,
    Sent,
    Consumed,
}

/// The counter a call's messages count in, if any: a `send`'s in
/// [`SENT`], a `receive`'s in [`CONSUMED`] (a settle, a subscribe moves
/// no message).
pub(super) fn counted(c: &MsgCall<&str>) -> Option<Metric> {
    match c.operation_type {
        Some(op_type::SEND) => Some(Metric::Sent),
        Some(op_type::RECEIVE) => Some(Metric::Consumed),
        _ => None,
    }
}

/// The messages a call counts: its batch's count, or one when the wire
/// did not tell (a call of one message: an MQTT or NATS publish).
pub(super) fn messages(c: &MsgCall<&str>) -> f64 {
    c.message_count.unwrap_or(1) as f64
}

/// The attributes of call `c` (of span `s`) in metric `m`, sorted by key.
pub(super) fn attributes<'a>(m: Metric, s: &Span<&'a str>, c: &MsgCall<&'a str>) -> DbAttrs<'a> {
    let mut a = Vec::with_capacity(11);
    let mut put = |k: &'static str, v: Option<&'a str>| {
        if let Some(v) = v {
            a.push((k, Value::Str(v)));
        }
    };
    let consumer = m != Metric::Sent;
    put("error.type", c.error_type);
    put("messaging.consumer.group.name", c.consumer_group.filter(|_| consumer));
    put("messaging.destination.name", c.destination.filter(|_| !c.temporary && !c.anonymous));
    put("messaging.destination.partition.id", c.partition);
    put("messaging.destination.subscription.name", c.subscription.filter(|_| consumer));
    put("messaging.destination.template", c.template.filter(|_| !c.temporary && !c.anonymous));
    put("messaging.operation.name", Some(c.operation_name));
    put("messaging.operation.type", c.operation_type.filter(|_| m == Metric::Duration));
    put("messaging.system", Some(c.system));
    put("server.address", s.server_address);
    if s.server_port != 0 {
        a.push(("server.port", Value::Int(i64::from(s.server_port))));
    }
    a
}
