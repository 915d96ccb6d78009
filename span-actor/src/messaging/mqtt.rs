//! MQTT 3.1.1 and 5, client side: [`MqttConn`].
//!
//! # Layout
//! ```text
//! packet  = u8 (type << 4 | flags), varint remaining_length (1-4 bytes,
//!           at most 268 435 455), variable header, payload
//! CONNECT = string "MQTT" (3.1: "MQIsdp"), u8 level (3, 4: 3.1.1, 5),
//!           u8 flags, u16 keep-alive, [v5 properties], string client id,
//!           (will, username, password: never read)
//! PUBLISH = flags: dup, qos (2 bits), retain; string topic,
//!           [u16 packet id: qos > 0], [v5 properties], payload (never read)
//! PUBACK PUBREC PUBREL PUBCOMP = u16 packet id, [v5: u8 reason, properties]
//! SUBSCRIBE UNSUBSCRIBE = u16 packet id, [v5 properties], filters
//! SUBACK UNSUBACK = u16 packet id, [v5 properties], u8 reason per filter
//! properties = varint length, (u8 id, value)*   (v5)
//! ```
//! Strings are u16 length + bytes.
//!
//! # Calls
//! - The client's PUBLISH → `publish` (send, PRODUCER): topic, QoS,
//!   the `traceparent` user property (v5; no other property is kept).
//!   QoS 0 ends at its send; QoS 1 at the broker's PUBACK; QoS 2 at its
//!   PUBCOMP (or a PUBREC refusing it). A reason code ≥ 0x80 (v5) is the
//!   `error.type`, in decimal.
//! - The broker's PUBLISH → `receive` (receive, CONSUMER): QoS 0 ends
//!   where it was read; QoS 1 at the client's PUBACK; QoS 2 at its
//!   PUBCOMP (what the client did with it lies between).
//! - SUBSCRIBE / UNSUBSCRIBE → `subscribe` / `unsubscribe` (no operation
//!   type: the conventions have none), ended by SUBACK / UNSUBACK: the
//!   filter when there is one (`messaging.destination.template` when it
//!   has wildcards, else the destination), a refused filter's reason as
//!   `error.type`.
//! - CONNECT gives the connection's client id (its `messaging.client.id`)
//!   and protocol level; CONNACK, PINGREQ/PINGRESP, DISCONNECT, AUTH are
//!   counted `control_packets`. Username, password, will and
//!   authentication data are never read.
//! - v5 topic aliases: a PUBLISH with an empty topic and an alias takes
//!   the topic an earlier PUBLISH of the same direction gave the alias
//!   (at most [`MAX_ALIASES`] per direction; an unknown alias: no topic).
//!
//! A connection followed from mid-way does not know its protocol level:
//! PUBLISH properties are then not read (no `traceparent`), SUBACK's
//! reasons neither.
//!
//! # Desync and resync
//! Each packet is framed by its remaining length, so a LOST region inside
//! one is skipped; a header in a LOST region, or a header MQTT forbids (a
//! reserved type, wrong flags, a QoS of 3, a length over 4 bytes), loses
//! the direction's place. It is found again at a record captured whole
//! (no LOST piece) whose bytes are, from its first to its last, whole
//! packets with valid headers: clients and brokers write packets whole,
//! and a record that tiles exactly into valid headers does not start
//! inside a payload but by a chance a payload would have to arrange.
//! Acknowledgements seen meanwhile find no call and are counted.
//!
//! # Memory
//! Two [`Stream`]s, at most [`MAX_PENDING`] calls awaiting their
//! acknowledgement, at most 2 × [`MAX_ALIASES`] topic aliases.

use super::common::{self, R};
use super::{done, name, traceparent, MsgCounts, MsgOp, MsgSystem, OpType, Out, MAX_PENDING};
use crate::db::stream::{Frame, Msg, Stream};

/// Topic aliases remembered per direction.
pub const MAX_ALIASES: usize = 64;

const CONNECT: u8 = 1;
const CONNACK: u8 = 2;
const PUBLISH: u8 = 3;
const PUBACK: u8 = 4;
const PUBREC: u8 = 5;
const PUBREL: u8 = 6;
const PUBCOMP: u8 = 7;
const SUBSCRIBE: u8 = 8;
const SUBACK: u8 = 9;
const UNSUBSCRIBE: u8 = 10;
const UNSUBACK: u8 = 11;
const PINGREQ: u8 = 12;
const PINGRESP: u8 = 13;
const DISCONNECT: u8 = 14;
const AUTH: u8 = 15;

/// The `traceparent` user property's key.
const TRACEPARENT: &[u8] = b"traceparent";

/// The frame of the packet at the head of `h`: its fixed header checked
/// (type, flags), its length from the remaining length.
fn frame(h: &[u8]) -> Frame {
    let Some(&first) = h.first() else { return Frame::Need };
    let (kind, flags) = (first >> 4, first & 0x0f);
    let flags_ok = match kind {
        0 => false,
        PUBLISH => (flags >> 1) & 3 != 3,
        PUBREL | SUBSCRIBE | UNSUBSCRIBE => flags == 2,
        _ => flags == 0,
    };
    if !flags_ok {
        return Frame::Bad;
    }
    let mut len = 0u64;
    for i in 0..4 {
        let Some(&b) = h.get(1 + i) else { return Frame::Need };
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Frame::Len(len + 2 + i as u64);
        }
    }
    Frame::Bad
}

/// Whether `b` starts with an MQTT CONNECT (for [`super::detect`]).
pub fn is_connect(b: &[u8]) -> bool {
    if b.first() != Some(&0x10) || !matches!(frame(b), Frame::Len(_)) {
        return false;
    }
    let at = 1 + b[1..].iter().take(4).take_while(|c| **c & 0x80 != 0).count() + 1;
    let rest = b.get(at..).unwrap_or(&[]);
    rest.starts_with(b"\x00\x04MQTT") || rest.starts_with(b"\x00\x06MQIsdp")
}

/// Whether a record's captured bytes are whole packets, exactly (the
/// resync rule).
fn tiles(b: &[u8]) -> bool {
    let mut at = 0;
    while at < b.len() {
        match frame(&b[at..]) {
            Frame::Len(n) if n as usize <= b.len() - at => at += n as usize,
            _ => return false,
        }
    }
    !b.is_empty()
}

/// MQTT's fields besides the big-endian numbers.
trait MqttFields<'a> {
    /// A UTF-8 string or binary data: u16 length + bytes.
    fn string(&mut self) -> Option<&'a [u8]>;
    /// A variable byte integer (at most 4 bytes).
    fn varint(&mut self) -> Option<usize>;
    /// v5 properties: the `traceparent` user property and the topic
    /// alias; every other one skipped unread.
    fn properties(&mut self) -> Option<Props<'a>>;
}

impl<'a> MqttFields<'a> for R<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }

    fn varint(&mut self) -> Option<usize> {
        let mut v = 0usize;
        for i in 0..4 {
            let b = self.u8()?;
            v |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn properties(&mut self) -> Option<Props<'a>> {
        let len = self.varint()?;
        let mut p = R::new(self.take(len)?);
        let mut out = Props::default();
        while p.at < p.b.len() {
            match p.u8()? {
                0x01 | 0x17 | 0x19 | 0x24 | 0x25 | 0x28 | 0x29 | 0x2a => {
                    p.take(1)?;
                }
                0x13 | 0x21 | 0x22 => {
                    p.take(2)?;
                }
                0x23 => out.alias = Some(p.u16()?),
                0x02 | 0x11 | 0x18 | 0x27 => {
                    p.take(4)?;
                }
                0x0b => {
                    p.varint()?;
                }
                0x03 | 0x08 | 0x09 | 0x12 | 0x15 | 0x16 | 0x1a | 0x1c | 0x1f => {
                    p.string()?;
                }
                0x26 => {
                    let k = p.string()?;
                    let v = p.string()?;
                    if k == TRACEPARENT && out.traceparent.is_none() {
                        out.traceparent = Some(v);
                    }
                }
                _ => return None,
            }
        }
        Some(out)
    }
}

#[derive(Debug, Default)]
struct Props<'a> {
    alias: Option<u16>,
    traceparent: Option<&'a [u8]>,
}

/// What a pending call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The broker's PUBACK (client QoS 1).
    PubAck,
    /// The broker's PUBREC, then its PUBCOMP (client QoS 2).
    PubRec,
    PubComp,
    /// The client's PUBACK (broker QoS 1).
    ClientPubAck,
    /// The client's PUBCOMP (broker QoS 2).
    ClientPubComp,
    /// SUBACK / UNSUBACK.
    SubAck,
    UnsubAck,
}

#[derive(Debug)]
struct Pending {
    id: u16,
    wait: Wait,
    op: MsgOp,
}

/// Topic aliases of one direction, oldest first.
type Aliases = Vec<(u16, String)>;

/// One MQTT client connection. See the module doc.
#[derive(Debug, Default)]
pub struct MqttConn {
    send: Stream,
    recv: Stream,
    st: St,
}

/// The connection's state besides its streams.
#[derive(Debug, Default)]
struct St {
    /// CONNECT's protocol level (4: 3.1.1, 5: v5); `None` when CONNECT
    /// was not seen.
    level: Option<u8>,
    client_id: Option<String>,
    pending: Vec<Pending>,
    /// Topic aliases the client set (its PUBLISHes).
    send_aliases: Aliases,
    /// Topic aliases the broker set.
    recv_aliases: Aliases,
}

impl MqttConn {
    /// Calls awaiting their acknowledgement.
    pub fn pending(&self) -> usize {
        self.st.pending.len()
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        self.send.held()
            + self.recv.held()
            + self.st.pending.iter().map(|p| std::mem::size_of::<Pending>() + p.op.heap()).sum::<usize>()
            + self.st.send_aliases.iter().chain(&self.st.recv_aliases).map(|(_, t)| 32 + t.capacity()).sum::<usize>()
            + self.st.client_id.as_ref().map_or(0, String::capacity)
    }

    /// Forgets the pending calls (the caller counts them).
    pub(super) fn forget_pending(&mut self) {
        self.st.pending.clear();
    }

    /// Both directions lose their place; aliases set in what went by are
    /// unknown, so all are forgotten.
    pub(super) fn lose_place(&mut self, _counts: &mut MsgCounts) {
        self.send.desync();
        self.recv.desync();
        self.st.send_aliases.clear();
        self.st.recv_aliases.clear();
    }

    /// One record (its pieces valid, GAP pieces taken off).
    pub(super) fn feed(&mut self, send: bool, ts: u64, bytes: &[u8], out: &mut Out<'_>, counts: &mut MsgCounts) {
        let stream = if send { &mut self.send } else { &mut self.recv };
        let Some(restarted) = common::resume(stream, bytes, tiles, counts) else {
            return;
        };
        if restarted && !send {
            self.st.recv_aliases.clear();
        }
        let stream = if send { &mut self.send } else { &mut self.recv };
        common::drain(stream, bytes, frame, counts, |m, counts| {
            self.st.packet(send, m, ts, out, counts);
            true
        });
    }
}

impl St {
    fn v5(&self) -> bool {
        self.level == Some(5)
    }

    /// One packet of either direction.
    fn packet(&mut self, send: bool, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
        let kind = m.bytes[0] >> 4;
        let flags = m.bytes[0] & 0x0f;
        let mut r = R { b: m.bytes, at: 1 };
        if r.varint().is_none() {
            counts.bad_messages += 1;
            return;
        }
        let ok = match (kind, send) {
            (CONNECT, true) => self.connect(&mut r, counts),
            (PUBLISH, _) => self.publish(send, flags, &mut r, m, ts, out, counts),
            (PUBACK | PUBREC | PUBCOMP, _) => self.ack(send, kind, &mut r, m, ts, out, counts),
            (PUBREL, _) => Some(()),
            (SUBSCRIBE | UNSUBSCRIBE, true) => self.subscribe(kind, &mut r, m, ts, counts),
            (SUBACK | UNSUBACK, false) => self.suback(kind, &mut r, m, ts, out, counts),
            (CONNACK | PINGREQ | PINGRESP | DISCONNECT | AUTH, _) => {
                counts.control_packets += 1;
                Some(())
            }
            // A packet the wrong way round.
            _ => None,
        };
        if ok.is_none() {
            counts.bad_messages += 1;
        }
    }

    fn connect(&mut self, r: &mut R<'_>, counts: &mut MsgCounts) -> Option<()> {
        counts.control_packets += 1;
        r.string()?; // "MQTT"
        let level = r.u8()?;
        r.take(1 + 2)?; // flags, keep-alive
        self.level = Some(level);
        if level == 5 {
            r.properties()?;
        }
        let id = r.string()?;
        // Never further: will, username, password follow.
        self.client_id = (!id.is_empty()).then(|| name(id, counts));
        Some(())
    }

    fn push(&mut self, p: Pending, counts: &mut MsgCounts) {
        // A packet id is reused once its flow ended; a flow still open
        // under it was not finished where seen.
        if let Some(i) = self.pending.iter().position(|q| q.id == p.id && same_side(q.wait, p.wait)) {
            self.pending.remove(i);
            counts.unanswered += 1;
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
            counts.too_many_pending += 1;
            counts.unanswered += 1;
        }
        self.pending.push(p);
    }

    #[allow(clippy::too_many_arguments)]
    fn publish(
        &mut self,
        send: bool,
        flags: u8,
        r: &mut R<'_>,
        m: Msg<'_>,
        ts: u64,
        out: &mut Out<'_>,
        counts: &mut MsgCounts,
    ) -> Option<()> {
        let qos = (flags >> 1) & 3;
        let topic = r.string()?;
        let id = if qos > 0 { Some(r.u16()?) } else { None };
        let props = if self.v5() { r.properties() } else { None };
        let (op_type, op_name) = if send { (OpType::Send, "publish") } else { (OpType::Receive, "receive") };
        let mut op = MsgOp::new(MsgSystem::Mqtt, Some(op_type), op_name, ts);
        op.qos = Some(qos);
        op.client_id = self.client_id.clone();
        if send {
            op.send_bytes = m.len;
        } else {
            op.recv_bytes = m.len;
        }
        let aliases = if send { &mut self.send_aliases } else { &mut self.recv_aliases };
        let alias = props.as_ref().and_then(|p| p.alias);
        op.destination = match (topic.is_empty(), alias) {
            (false, Some(a)) => {
                let t = name(topic, counts);
                aliases.retain(|(x, _)| *x != a);
                if aliases.len() >= MAX_ALIASES {
                    aliases.remove(0);
                }
                aliases.push((a, t.clone()));
                Some(t)
            }
            (false, None) => Some(name(topic, counts)),
            (true, Some(a)) => aliases.iter().find(|(x, _)| *x == a).map(|(_, t)| t.clone()),
            (true, None) => None,
        };
        if let Some(tp) = props.as_ref().and_then(|p| p.traceparent).and_then(traceparent) {
            op.link(tp, counts);
        }
        let wait = match (qos, send) {
            (1, true) => Some(Wait::PubAck),
            (2, true) => Some(Wait::PubRec),
            (1, false) => Some(Wait::ClientPubAck),
            (2, false) => Some(Wait::ClientPubComp),
            _ => None,
        };
        if flags & 8 != 0 && self.pending.iter().any(|p| Some(p.id) == id && Some(p.wait) == wait) {
            // A DUP resend of a flow still open: the same call.
            return Some(());
        }
        match (id, qos, send) {
            (Some(id), 1, true) => self.push(Pending { id, wait: Wait::PubAck, op }, counts),
            (Some(id), 2, true) => self.push(Pending { id, wait: Wait::PubRec, op }, counts),
            (Some(id), 1, false) => self.push(Pending { id, wait: Wait::ClientPubAck, op }, counts),
            (Some(id), 2, false) => self.push(Pending { id, wait: Wait::ClientPubComp, op }, counts),
            _ => done(out, op),
        }
        Some(())
    }

    #[allow(clippy::too_many_arguments)]
    fn ack(&mut self, send: bool, kind: u8, r: &mut R<'_>, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) -> Option<()> {
        let id = r.u16()?;
        let reason = if r.at < r.b.len() { r.u8()? } else { 0 };
        let wait = match (kind, send) {
            (PUBACK, false) => Wait::PubAck,
            (PUBREC, false) => Wait::PubRec,
            (PUBCOMP, false) => Wait::PubComp,
            (PUBACK, true) => Wait::ClientPubAck,
            (PUBCOMP, true) => Wait::ClientPubComp,
            // The client's PUBREC of a QoS 2 delivery: its PUBCOMP ends it.
            (PUBREC, true) => return Some(()),
            _ => return None,
        };
        let Some(i) = self.pending.iter().position(|p| p.id == id && p.wait == wait) else {
            counts.unpaired_answers += 1;
            return Some(());
        };
        let p = &mut self.pending[i];
        if send {
            p.op.send_bytes += m.len;
        } else {
            p.op.recv_bytes += m.len;
        }
        if reason >= 0x80 {
            p.op.error_type = Some(reason_name(reason));
        }
        if wait == Wait::PubRec && reason < 0x80 {
            p.wait = Wait::PubComp;
            return Some(());
        }
        let mut p = self.pending.remove(i);
        p.op.end_ns = ts.max(p.op.start_ns);
        done(out, p.op);
        Some(())
    }

    fn subscribe(&mut self, kind: u8, r: &mut R<'_>, m: Msg<'_>, ts: u64, counts: &mut MsgCounts) -> Option<()> {
        let id = r.u16()?;
        let (op_name, wait) = if kind == SUBSCRIBE { ("subscribe", Wait::SubAck) } else { ("unsubscribe", Wait::UnsubAck) };
        let mut op = MsgOp::new(MsgSystem::Mqtt, None, op_name, ts);
        op.send_bytes = m.len;
        op.client_id = self.client_id.clone();
        let filters = (|| {
            if self.v5() {
                r.properties()?;
            }
            let mut filters = Vec::new();
            while r.at < r.b.len() && filters.len() < 2 {
                filters.push(r.string()?);
                if kind == SUBSCRIBE {
                    r.u8()?; // options
                }
            }
            Some(filters)
        })();
        if let Some([f]) = filters.as_deref() {
            let f = name(f, counts);
            if f.contains(['+', '#']) {
                op.template = Some(f);
            } else {
                op.destination = Some(f);
            }
        }
        self.push(Pending { id, wait, op }, counts);
        Some(())
    }

    fn suback(&mut self, kind: u8, r: &mut R<'_>, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) -> Option<()> {
        let id = r.u16()?;
        let wait = if kind == SUBACK { Wait::SubAck } else { Wait::UnsubAck };
        let Some(i) = self.pending.iter().position(|p| p.id == id && p.wait == wait) else {
            counts.unpaired_answers += 1;
            return Some(());
        };
        let mut p = self.pending.remove(i);
        p.op.end_ns = ts.max(p.op.start_ns);
        p.op.recv_bytes = m.len;
        // Reasons: v5 after the properties; 3.1.1 SUBACK's return codes
        // (0x80 failure); 3.1.1 UNSUBACK has none.
        let v5 = self.v5();
        let reasons = if v5 {
            r.properties().map(|_| &r.b[r.at..])
        } else if kind == SUBACK && self.level.is_some() {
            Some(&r.b[r.at..])
        } else {
            None
        };
        if let Some(bad) = reasons.and_then(|rs| rs.iter().find(|c| **c >= 0x80)) {
            p.op.error_type = Some(reason_name(*bad));
        }
        done(out, p.op);
        Some(())
    }
}

/// Whether two waits are of flows the same side started (packet ids are
/// per side).
fn same_side(a: Wait, b: Wait) -> bool {
    let client = |w| matches!(w, Wait::PubAck | Wait::PubRec | Wait::PubComp | Wait::SubAck | Wait::UnsubAck);
    client(a) == client(b)
}

/// `error.type` of a reason code ≥ 0x80, in decimal (a fixed set).
fn reason_name(code: u8) -> &'static str {
    const NAMES: [&str; 128] = {
        let mut t = ["_OTHER"; 128];
        let codes: [(usize, &str); 25] = [
            (0x80, "128"),
            (0x81, "129"),
            (0x82, "130"),
            (0x83, "131"),
            (0x84, "132"),
            (0x85, "133"),
            (0x86, "134"),
            (0x87, "135"),
            (0x88, "136"),
            (0x89, "137"),
            (0x8a, "138"),
            (0x8b, "139"),
            (0x8c, "140"),
            (0x8d, "141"),
            (0x8e, "142"),
            (0x8f, "143"),
            (0x90, "144"),
            (0x91, "145"),
            (0x92, "146"),
            (0x93, "147"),
            (0x94, "148"),
            (0x95, "149"),
            (0x96, "150"),
            (0x97, "151"),
            (0x9e, "158"),
        ];
        let mut i = 0;
        while i < codes.len() {
            t[codes[i].0 - 0x80] = codes[i].1;
            i += 1;
        }
        t
    };
    NAMES.get(usize::from(code).wrapping_sub(0x80)).copied().unwrap_or("_OTHER")
}

#[cfg(test)]
mod tests;
