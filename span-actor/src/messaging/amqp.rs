//! AMQP 0-9-1 (RabbitMQ), client side: [`AmqpConn`].
//!
//! # Layout
//! ```text
//! header  = "AMQP" 0 0 9 1               (the client's first 8 bytes; a
//!                                          server refusing the version
//!                                          answers with its own)
//! frame   = u8 type, u16 channel, u32 size, size bytes, u8 0xCE
//! type    = 1 method | 2 content header | 3 content body | 8 heartbeat
//! method  = u16 class, u16 method, arguments
//! content = u16 class, u16 weight, u64 body size, u16 property flags
//!           (bit 0: more flags follow), properties in flag order
//!           (basic: content-type, content-encoding, headers, ...)
//! table   = u32 length, (shortstr name, u8 type, value)*
//! shortstr = u8 length + bytes; longstr = u32 length + bytes
//! ```
//! A method that carries a message (`basic.publish`, `basic.deliver`,
//! `basic.get-ok`, `basic.return`) is followed on its channel, in its
//! direction, by one content header and body frames up to the body size.
//! Channels are multiplexed on the connection: each has its own state
//! (confirm mode, the message whose content is being read per direction,
//! its `basic.get` awaiting an answer).
//!
//! # Calls
//! - The client's `basic.publish` → `publish` (send, PRODUCER): the
//!   exchange as `messaging.destination.name` (`""` for the default
//!   exchange: the RabbitMQ conventions say so), the routing key, the
//!   body size from the content header, and a `traceparent` of the
//!   header's `headers` table (parsed; no other header value is read).
//!   Without publisher confirms it ends at its last frame; on a channel
//!   in confirm mode (`confirm.select`) at the broker's `basic.ack` or
//!   `basic.nack` (`error.type` `NACK`) of its sequence number (`multiple`
//!   settles every one up to it); a `basic.return` (mandatory, unroutable)
//!   gives the oldest such publish to the same exchange and routing key
//!   its reply code (`NO_ROUTE`).
//! - The broker's `basic.deliver` → `deliver`. To a consumer the client
//!   registered with acknowledgements (`basic.consume` without `no-ack`):
//!   `process` (CONSUMER), from the delivery to the client's
//!   `basic.ack`/`nack`/`reject` of its tag, which brackets the handler's
//!   work (clients settle when their callback is done). To a `no-ack`
//!   consumer, or one whose `basic.consume` was not seen: `receive`,
//!   ending where it was read (its processing is not on the wire).
//! - The client's `basic.get` → `get` (receive, CONSUMER: a pull), ended
//!   by `get-ok` (exchange, routing key, delivery tag, body size,
//!   `traceparent`); `get-empty` is no op (counted `empty_gets`).
//! - The client's `basic.ack`, `basic.nack`, `basic.reject` → `ack`,
//!   `nack`, `reject` (settle, CLIENT): the tag, how many deliveries it
//!   settled when they were seen, their exchange and routing key when all
//!   share them. AMQP acknowledgements have no answer: the op ends at its
//!   send.
//! - `channel.close` / `connection.close` from the broker with an error
//!   reply code (`404 NOT_FOUND` for a publish to a missing exchange):
//!   the calls pending on the channel (the connection) end there with the
//!   code's name as `error.type`. A publish without confirms has already
//!   ended: the error cannot be tied to it (RabbitMQ does not say which
//!   publish failed), so it is not. Closes the client asked for leave
//!   their pending calls `unanswered`.
//! - Every other method (connection and channel handshakes, heartbeats:
//!   `control_packets`; exchange, queue, `basic.qos`, `basic.consume`,
//!   tx: `other_requests`) is no op. `connection.start-ok` (the SASL
//!   response: credentials) is never read past its frame header; no
//!   message body, consumer tag or header value but `traceparent` reaches
//!   an op (consumer tags are kept, bounded, only to know a consumer's
//!   acknowledgement mode).
//!
//! # Desync and resync
//! Every frame is framed by its size and checked by its end octet (a
//! frame whose end is not 0xCE loses the direction's place, as a header
//! in a LOST region does). The place is found again at a record captured
//! whole whose bytes are, from first to last, whole frames of a known
//! type each ending in 0xCE: clients and brokers write frames whole, and
//! a body would have to arrange every end octet. Content being read is
//! forgotten (its frames count as `bad_messages` until the next method);
//! calls pending stay pending.
//!
//! # Memory
//! Two [`Stream`]s, at most [`MAX_PENDING`] calls pending on all channels
//! (each an op, or the tag of a delivery awaiting its acknowledgement),
//! at most [`MAX_CHANNELS`] channel states (each up to two ops whose
//! content is being read), at most [`MAX_CONSUMERS`] consumer tags of at
//! most [`super::MAX_NAME`] bytes: about 2 × 256 KiB + 256 × 2 KiB + 64
//! × 4 KiB + 256 × 300 B ≈ 1.1 MiB for a hostile connection.

use std::collections::VecDeque;

use super::common::{self, R};
use super::{done, name, traceparent, MsgCounts, MsgOp, MsgSystem, OpType, Out, MAX_PENDING};
use crate::db::stream::{Frame, Msg, Stream};

/// Channel states kept per connection; past it the oldest is forgotten
/// (counted `too_many_channels`).
pub const MAX_CHANNELS: usize = 64;

/// Consumer tags kept per connection (to know which consumers
/// acknowledge); past it the oldest is forgotten.
pub const MAX_CONSUMERS: usize = 256;

/// The protocol header a 0-9-1 client opens with.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

/// Every frame's last octet.
const FRAME_END: u8 = 0xce;

const METHOD: u8 = 1;
const HEADER: u8 = 2;
const BODY: u8 = 3;
const HEARTBEAT: u8 = 8;

const CONNECTION: u16 = 10;
const CHANNEL: u16 = 20;
const BASIC: u16 = 60;
const CONFIRM: u16 = 85;

/// (class, method) ids read.
const CLOSE: u16 = 40;
const CLOSE_OK: u16 = 41;
const CONNECTION_CLOSE: u16 = 50;
const CONNECTION_CLOSE_OK: u16 = 51;
const CHANNEL_OPEN: u16 = 10;
const CONSUME: u16 = 20;
const CONSUME_OK: u16 = 21;
const CANCEL: u16 = 30;
const CANCEL_OK: u16 = 31;
const PUBLISH: u16 = 40;
const RETURN: u16 = 50;
const DELIVER: u16 = 60;
const GET: u16 = 70;
const GET_OK: u16 = 71;
const GET_EMPTY: u16 = 72;
const ACK: u16 = 80;
const REJECT: u16 = 90;
const NACK: u16 = 120;
const SELECT: u16 = 10;

/// The `traceparent` header's name.
const TRACEPARENT: &[u8] = b"traceparent";

/// Whether `b` starts with the AMQP 0-9-1 protocol header (for
/// [`super::detect`]).
pub fn is_protocol_header(b: &[u8]) -> bool {
    b.starts_with(PROTOCOL_HEADER)
}

/// The frame at the head of `h` (or a protocol header): its type checked,
/// its length from its size.
fn frame(h: &[u8]) -> Frame {
    match h.first().copied() {
        None => Frame::Need,
        Some(b'A') => match h.get(..4) {
            Some(b"AMQP") => Frame::Len(8),
            Some(_) => Frame::Bad,
            None if b"AMQP".starts_with(h) => Frame::Need,
            None => Frame::Bad,
        },
        Some(METHOD | HEADER | BODY | HEARTBEAT) => match h.get(3..7) {
            Some(s) => Frame::Len(u64::from(u32::from_be_bytes([s[0], s[1], s[2], s[3]])) + 8),
            None => Frame::Need,
        },
        Some(_) => Frame::Bad,
    }
}

/// Whether a whole frame ends as frames must (a protocol header has no
/// end octet).
fn ends_well(b: &[u8]) -> bool {
    b.starts_with(b"AMQP") || b.last() == Some(&FRAME_END)
}

/// Whether a record's captured bytes are whole frames, exactly, each
/// ending well (the resync rule).
fn tiles(b: &[u8]) -> bool {
    let mut at = 0;
    while at < b.len() {
        match frame(&b[at..]) {
            Frame::Len(n) if n <= (b.len() - at) as u64 && ends_well(&b[at..at + n as usize]) => at += n as usize,
            _ => return false,
        }
    }
    !b.is_empty()
}

/// `error.type` of a reply code (`None`: 200, success).
pub fn reply_name(code: u16) -> Option<&'static str> {
    Some(match code {
        200 => return None,
        311 => "CONTENT_TOO_LARGE",
        312 => "NO_ROUTE",
        313 => "NO_CONSUMERS",
        320 => "CONNECTION_FORCED",
        402 => "INVALID_PATH",
        403 => "ACCESS_REFUSED",
        404 => "NOT_FOUND",
        405 => "RESOURCE_LOCKED",
        406 => "PRECONDITION_FAILED",
        501 => "FRAME_ERROR",
        502 => "SYNTAX_ERROR",
        503 => "COMMAND_INVALID",
        504 => "CHANNEL_ERROR",
        505 => "UNEXPECTED_FRAME",
        506 => "RESOURCE_ERROR",
        530 => "NOT_ALLOWED",
        540 => "NOT_IMPLEMENTED",
        541 => "INTERNAL_ERROR",
        _ => "_OTHER",
    })
}

/// AMQP's fields besides the big-endian numbers.
trait AmqpFields<'a> {
    /// A short string: u8 length + bytes.
    fn shortstr(&mut self) -> Option<&'a [u8]>;
    /// A long string, a byte array, a table or an array: u32 length +
    /// bytes.
    fn long(&mut self) -> Option<&'a [u8]>;
}

impl<'a> AmqpFields<'a> for R<'a> {
    fn shortstr(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    fn long(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u32()?).ok()?;
        self.take(n)
    }
}

/// The `traceparent` of a field table (its top level), if one is there
/// as a string; every other value is skipped by its size, unread.
fn table_traceparent(table: &[u8]) -> Option<&[u8]> {
    let mut r = R::new(table);
    while r.at < r.b.len() {
        let key = r.shortstr()?;
        let size = match r.u8()? {
            b't' | b'b' | b'B' => 1,
            b's' | b'u' => 2,
            b'I' | b'i' | b'f' => 4,
            b'l' | b'L' | b'd' | b'T' => 8,
            b'D' => 5,
            b'V' => 0,
            b'S' | b'x' => {
                let v = r.long()?;
                if key == TRACEPARENT {
                    return Some(v);
                }
                continue;
            }
            b'A' | b'F' => {
                r.long()?;
                continue;
            }
            // An unknown type: its size is unknown, nothing after it can be
            // read.
            _ => return None,
        };
        r.take(size)?;
    }
    None
}

/// What a message's content, once read, finishes.
#[derive(Debug)]
enum Then {
    /// A publish: ended now, or (confirm mode) pending its confirm.
    Publish(Option<u64>),
    /// A delivery: ended now (`receive`), or pending its settle.
    Deliver { tag: u64, settle: bool },
    /// A `get-ok`: ended now; its tag awaits a settle unless `no-ack`.
    GetOk { tag: u64, settle: bool },
    /// A returned message: nothing to keep.
    Skip,
}

/// The message whose content is being read on a channel, one direction.
#[derive(Debug)]
struct Content {
    op: Option<MsgOp>,
    then: Then,
    /// The content header was read.
    header: bool,
    /// Body bytes still to come.
    left: u64,
}

/// One channel's state.
#[derive(Debug)]
struct Channel {
    id: u16,
    /// Publisher confirms are on; the next publish's sequence number.
    confirm: Option<u64>,
    send: Option<Content>,
    recv: Option<Content>,
    /// The `no-ack` flag of the last `basic.consume` awaiting its
    /// `consume-ok` (which names a server-chosen tag).
    consuming: Option<bool>,
}

impl Channel {
    fn new(id: u16) -> Channel {
        Channel { id, confirm: None, send: None, recv: None, consuming: None }
    }

    fn heap(&self) -> usize {
        [&self.send, &self.recv].into_iter().flatten().filter_map(|c| c.op.as_ref()).map(|o| std::mem::size_of::<MsgOp>() + o.heap()).sum()
    }
}

/// What a pending call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The broker's confirm of this publish sequence number.
    Confirm(u64),
    /// The client's settle of this delivery tag (the op: a `process`
    /// delivery; none: a `get-ok`'s message).
    Settle(u64),
    /// `get-ok` / `get-empty` (the get's `no-ack` flag).
    Get(bool),
}

#[derive(Debug)]
struct Pending {
    channel: u16,
    wait: Wait,
    op: Option<MsgOp>,
    /// The exchange and routing key of a delivery awaiting its settle.
    dest: Option<(String, Option<String>)>,
}

/// One AMQP 0-9-1 client connection. See the module doc.
#[derive(Debug, Default)]
pub struct AmqpConn {
    send: Stream,
    recv: Stream,
    st: St,
}

/// The connection's state besides its streams.
#[derive(Debug, Default)]
struct St {
    channels: Vec<Channel>,
    pending: VecDeque<Pending>,
    /// (channel, consumer tag, acknowledges).
    consumers: VecDeque<(u16, String, bool)>,
}

impl AmqpConn {
    /// Calls awaiting an answer (deliveries of `get-ok`s awaiting their
    /// settle are no call: not counted).
    pub fn pending(&self) -> usize {
        self.st.pending.iter().filter(|p| p.op.is_some()).count()
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        self.send.held()
            + self.recv.held()
            + self
                .st
                .pending
                .iter()
                .map(|p| {
                    std::mem::size_of::<Pending>()
                        + p.op.as_ref().map_or(0, MsgOp::heap)
                        + p.dest.as_ref().map_or(0, |(e, k)| e.capacity() + k.as_ref().map_or(0, String::capacity))
                })
                .sum::<usize>()
            + self.st.channels.iter().map(|c| std::mem::size_of::<Channel>() + c.heap()).sum::<usize>()
            + self.st.consumers.iter().map(|(_, t, _)| 32 + t.capacity()).sum::<usize>()
    }

    /// Forgets the pending calls (the caller counts them).
    pub(super) fn forget_pending(&mut self) {
        self.st.pending.clear();
    }

    /// Both directions lose their place; content being read is forgotten.
    pub(super) fn lose_place(&mut self, _counts: &mut MsgCounts) {
        self.send.desync();
        self.recv.desync();
        for c in &mut self.st.channels {
            c.send = None;
            c.recv = None;
        }
    }

    /// One record (its pieces valid, GAP pieces taken off).
    pub(super) fn feed(&mut self, send: bool, ts: u64, bytes: &[u8], out: &mut Out<'_>, counts: &mut MsgCounts) {
        let stream = if send { &mut self.send } else { &mut self.recv };
        let Some(restarted) = common::resume(stream, bytes, tiles, counts) else {
            return;
        };
        if restarted {
            self.st.forget_content(send);
        }
        let stream = if send { &mut self.send } else { &mut self.recv };
        common::drain(stream, bytes, frame, counts, |m, counts| {
            if m.whole && !ends_well(m.bytes) {
                // A frame not ended by its end octet: the framing is off.
                self.st.forget_content(send);
                return false;
            }
            self.st.frame(send, m, ts, out, counts);
            true
        });
    }
}

impl Channel {
    fn content(&mut self, send: bool) -> &mut Option<Content> {
        if send {
            &mut self.send
        } else {
            &mut self.recv
        }
    }
}

impl St {
    /// Forgets the content being read in one direction on every channel.
    fn forget_content(&mut self, send: bool) {
        for c in &mut self.channels {
            *c.content(send) = None;
        }
    }

    /// The state of channel `id`, made if new (the oldest forgotten past
    /// [`MAX_CHANNELS`]).
    fn channel(&mut self, id: u16, counts: &mut MsgCounts) -> &mut Channel {
        let i = match self.channels.iter().position(|c| c.id == id) {
            Some(i) => i,
            None => {
                if self.channels.len() >= MAX_CHANNELS {
                    self.channels.remove(0);
                    counts.too_many_channels += 1;
                }
                self.channels.push(Channel::new(id));
                self.channels.len() - 1
            }
        };
        &mut self.channels[i]
    }

    /// Keeps a call pending (the oldest given up past [`MAX_PENDING`]).
    fn push(&mut self, p: Pending, counts: &mut MsgCounts) {
        if self.pending.len() >= MAX_PENDING {
            if let Some(old) = self.pending.pop_front() {
                if old.op.is_some() {
                    counts.too_many_pending += 1;
                    counts.unanswered += 1;
                }
            }
        }
        self.pending.push_back(p);
    }

    /// One frame of either direction.
    fn frame(&mut self, send: bool, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
        let mut r = R::new(m.bytes);
        if m.bytes.starts_with(b"AMQP") {
            counts.control_packets += 1;
            return;
        }
        let (Some(kind), Some(channel), Some(_size)) = (r.u8(), r.u16(), r.u32()) else {
            counts.bad_messages += 1;
            return;
        };
        let ok = match kind {
            METHOD => self.method(send, channel, &mut r, m, ts, out, counts),
            HEADER => self.header(send, channel, &mut r, m, ts, out, counts),
            BODY => self.body(send, channel, m, ts, out, counts),
            _ => {
                counts.control_packets += 1;
                Some(())
            }
        };
        if ok.is_none() {
            counts.bad_messages += 1;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn method(
        &mut self,
        send: bool,
        channel: u16,
        r: &mut R<'_>,
        m: Msg<'_>,
        ts: u64,
        out: &mut Out<'_>,
        counts: &mut MsgCounts,
    ) -> Option<()> {
        let class = r.u16()?;
        let method = r.u16()?;
        // A method ends any content in its direction on its channel.
        if let Some(c) = self.channels.iter_mut().find(|c| c.id == channel) {
            if c.content(send).take().is_some() {
                counts.bad_messages += 1;
            }
        }
        match (class, method, send) {
            (CONNECTION, CONNECTION_CLOSE, false) | (CHANNEL, CLOSE, false) => {
                counts.control_packets += 1;
                let code = r.u16()?;
                let whole = class == CONNECTION;
                self.fail(if whole { None } else { Some(channel) }, reply_name(code), ts, m.len, out, counts);
                self.forget(whole, channel);
            }
            (CONNECTION, CONNECTION_CLOSE_OK, false) | (CHANNEL, CLOSE_OK, false) => {
                // The close the client asked for is done: what it left
                // pending will not be answered.
                counts.control_packets += 1;
                let whole = class == CONNECTION;
                let before = self.pending.len();
                self.pending.retain(|p| !(whole || p.channel == channel) || p.op.is_none());
                counts.unanswered += (before - self.pending.len()) as u64;
                self.pending.retain(|p| !(whole || p.channel == channel));
                self.forget(whole, channel);
            }
            (CHANNEL, CHANNEL_OPEN, true) => {
                counts.control_packets += 1;
                self.channels.retain(|c| c.id != channel);
                self.channel(channel, counts);
            }
            (CONNECTION | CHANNEL, ..) => counts.control_packets += 1,
            (CONFIRM, SELECT, true) => {
                counts.other_requests += 1;
                self.channel(channel, counts).confirm.get_or_insert(1);
            }
            (BASIC, PUBLISH, true) => {
                r.u16()?;
                let exchange = r.shortstr()?;
                let key = r.shortstr()?;
                let mut op = MsgOp::new(MsgSystem::Rabbitmq, Some(OpType::Send), "publish", ts);
                op.destination = Some(name(exchange, counts));
                op.routing_key = (!key.is_empty()).then(|| name(key, counts));
                op.send_bytes = m.len;
                let ch = self.channel(channel, counts);
                let seq = ch.confirm;
                if let Some(s) = seq {
                    ch.confirm = Some(s.saturating_add(1));
                }
                ch.send = Some(Content { op: Some(op), then: Then::Publish(seq), header: false, left: 0 });
            }
            (BASIC, CONSUME, true) => {
                counts.other_requests += 1;
                r.u16()?;
                r.shortstr()?; // queue
                let tag = r.shortstr()?;
                let no_ack = r.u8()? & 2 != 0;
                if tag.is_empty() {
                    self.channel(channel, counts).consuming = Some(no_ack);
                } else {
                    self.consumer(channel, tag, no_ack, counts);
                    self.channel(channel, counts).consuming = None;
                }
            }
            (BASIC, CONSUME_OK, false) => {
                let tag = r.shortstr()?;
                let ch = self.channel(channel, counts);
                if let Some(no_ack) = ch.consuming.take() {
                    self.consumer(channel, tag, no_ack, counts);
                }
            }
            (BASIC, CANCEL_OK, false) | (BASIC, CANCEL, false) => {
                let tag = r.shortstr()?;
                self.consumers.retain(|(c, t, _)| !(*c == channel && t.as_bytes() == tag));
            }
            (BASIC, DELIVER, false) => {
                let tag = r.shortstr()?;
                let delivery = r.u64()?;
                r.u8()?; // redelivered
                let exchange = r.shortstr()?;
                let key = r.shortstr()?;
                let settle = self.consumers.iter().find(|(c, t, _)| *c == channel && t.as_bytes() == tag).is_some_and(|(.., a)| *a);
                let op_type = if settle { OpType::Process } else { OpType::Receive };
                let mut op = MsgOp::new(MsgSystem::Rabbitmq, Some(op_type), "deliver", ts);
                op.destination = Some(name(exchange, counts));
                op.routing_key = (!key.is_empty()).then(|| name(key, counts));
                op.delivery_tag = Some(delivery);
                op.recv_bytes = m.len;
                let then = Then::Deliver { tag: delivery, settle };
                self.channel(channel, counts).recv = Some(Content { op: Some(op), then, header: false, left: 0 });
            }
            (BASIC, GET, true) => {
                r.u16()?;
                r.shortstr()?; // queue
                let no_ack = r.u8()? & 1 != 0;
                let mut op = MsgOp::new(MsgSystem::Rabbitmq, Some(OpType::Receive), "get", ts);
                op.send_bytes = m.len;
                // A channel's methods are synchronous: a get still waiting
                // was answered unseen.
                let before = self.pending.len();
                self.pending.retain(|p| !(p.channel == channel && matches!(p.wait, Wait::Get(_))));
                counts.unanswered += (before - self.pending.len()) as u64;
                self.push(Pending { channel, wait: Wait::Get(no_ack), op: Some(op), dest: None }, counts);
            }
            (BASIC, GET_OK | GET_EMPTY, false) => {
                let Some(i) = self.pending.iter().position(|p| p.channel == channel && matches!(p.wait, Wait::Get(_))) else {
                    counts.unpaired_answers += 1;
                    if method == GET_OK {
                        self.channel(channel, counts).recv = Some(Content { op: None, then: Then::Skip, header: false, left: 0 });
                    }
                    return Some(());
                };
                let p = self.pending.remove(i)?;
                let (Wait::Get(no_ack), Some(mut op)) = (p.wait, p.op) else { return None };
                if method == GET_EMPTY {
                    counts.empty_gets += 1;
                    return Some(());
                }
                let delivery = r.u64()?;
                r.u8()?;
                let exchange = r.shortstr()?;
                let key = r.shortstr()?;
                op.destination = Some(name(exchange, counts));
                op.routing_key = (!key.is_empty()).then(|| name(key, counts));
                op.delivery_tag = Some(delivery);
                op.recv_bytes = m.len;
                let then = Then::GetOk { tag: delivery, settle: !no_ack };
                self.channel(channel, counts).recv = Some(Content { op: Some(op), then, header: false, left: 0 });
            }
            (BASIC, ACK | NACK, false) => {
                let tag = r.u64()?;
                let multiple = r.u8()? & 1 != 0;
                self.confirm(channel, tag, multiple, method == NACK, ts, m.len, out, counts);
            }
            (BASIC, ACK | NACK | REJECT, true) => {
                let tag = r.u64()?;
                let multiple = method != REJECT && r.u8()? & 1 != 0;
                let op_name = match method {
                    ACK => "ack",
                    NACK => "nack",
                    _ => "reject",
                };
                self.settle(channel, tag, multiple, op_name, ts, m.len, out);
            }
            (BASIC, RETURN, false) => {
                let code = r.u16()?;
                r.shortstr()?; // reply text
                let exchange = r.shortstr()?;
                let key = r.shortstr()?;
                let returned = self.pending.iter_mut().find(|p| {
                    p.channel == channel
                        && matches!(p.wait, Wait::Confirm(_))
                        && p.op.as_ref().is_some_and(|o| {
                            o.destination.as_deref().map(str::as_bytes) == Some(exchange)
                                && o.routing_key.as_deref().map_or(&b""[..], str::as_bytes) == key
                        })
                });
                match returned.and_then(|p| p.op.as_mut()) {
                    Some(op) => op.error_type = reply_name(code),
                    None => counts.unpaired_answers += 1,
                }
                self.channel(channel, counts).recv = Some(Content { op: None, then: Then::Skip, header: false, left: 0 });
            }
            (_, _, true) => counts.other_requests += 1,
            _ => {}
        }
        Some(())
    }

    /// A channel (or, `whole`, the connection) is closed: its state and
    /// consumers go.
    fn forget(&mut self, whole: bool, channel: u16) {
        self.channels.retain(|c| !whole && c.id != channel);
        self.consumers.retain(|(c, ..)| !whole && *c != channel);
    }

    fn consumer(&mut self, channel: u16, tag: &[u8], no_ack: bool, counts: &mut MsgCounts) {
        let tag = name(tag, counts);
        self.consumers.retain(|(c, t, _)| !(*c == channel && *t == tag));
        if self.consumers.len() >= MAX_CONSUMERS {
            self.consumers.pop_front();
        }
        self.consumers.push_back((channel, tag, !no_ack));
    }

    #[allow(clippy::too_many_arguments)]
    fn header(
        &mut self,
        send: bool,
        channel: u16,
        r: &mut R<'_>,
        m: Msg<'_>,
        ts: u64,
        out: &mut Out<'_>,
        counts: &mut MsgCounts,
    ) -> Option<()> {
        let ch = self.channels.iter_mut().find(|c| c.id == channel)?;
        let content = ch.content(send);
        let c = content.as_mut().filter(|c| !c.header)?;
        c.header = true;
        r.u16()?; // class
        r.u16()?; // weight
        c.left = r.u64()?;
        if let Some(op) = c.op.as_mut() {
            op.body_size = Some(c.left);
            if send {
                op.send_bytes = op.send_bytes.saturating_add(m.len);
            } else {
                op.recv_bytes = op.recv_bytes.saturating_add(m.len);
            }
            // Properties: the flags, then content-type and content-encoding
            // (short strings) before the headers table.
            let props = (|| {
                let mut flags = vec![r.u16()?];
                while flags.last()? & 1 != 0 && flags.len() < 8 {
                    flags.push(r.u16()?);
                }
                let first = flags[0];
                if first & (1 << 15) != 0 {
                    r.shortstr()?;
                }
                if first & (1 << 14) != 0 {
                    r.shortstr()?;
                }
                if first & (1 << 13) != 0 {
                    return r.long();
                }
                None
            })();
            if let Some(tp) = props.and_then(table_traceparent).and_then(traceparent) {
                op.link(tp, counts);
            }
        }
        if c.left == 0 {
            self.finish(send, channel, ts, out, counts);
        }
        Some(())
    }

    fn body(&mut self, send: bool, channel: u16, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) -> Option<()> {
        let ch = self.channels.iter_mut().find(|c| c.id == channel)?;
        let c = ch.content(send).as_mut().filter(|c| c.header)?;
        let payload = m.len.saturating_sub(8);
        c.left = c.left.saturating_sub(payload);
        if let Some(op) = c.op.as_mut() {
            if send {
                op.send_bytes = op.send_bytes.saturating_add(m.len);
            } else {
                op.recv_bytes = op.recv_bytes.saturating_add(m.len);
            }
        }
        if c.left == 0 {
            self.finish(send, channel, ts, out, counts);
        }
        Some(())
    }

    /// A message's content was read whole: its call ends or waits.
    fn finish(&mut self, send: bool, channel: u16, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
        let Some(c) = self.channels.iter_mut().find(|c| c.id == channel).and_then(|c| c.content(send).take()) else { return };
        let Some(mut op) = c.op else { return };
        op.end_ns = ts.max(op.start_ns);
        match c.then {
            Then::Publish(Some(seq)) => self.push(Pending { channel, wait: Wait::Confirm(seq), op: Some(op), dest: None }, counts),
            Then::Deliver { tag, settle: true } => {
                let dest = op.destination.clone().map(|e| (e, op.routing_key.clone()));
                self.push(Pending { channel, wait: Wait::Settle(tag), op: Some(op), dest }, counts);
            }
            Then::GetOk { tag, settle } => {
                if settle {
                    let dest = op.destination.clone().map(|e| (e, op.routing_key.clone()));
                    self.push(Pending { channel, wait: Wait::Settle(tag), op: None, dest }, counts);
                }
                done(out, op);
            }
            Then::Publish(None) | Then::Deliver { settle: false, .. } | Then::Skip => done(out, op),
        }
    }

    /// The broker confirmed (or refused) publishes up to `tag`.
    #[allow(clippy::too_many_arguments)]
    fn confirm(
        &mut self,
        channel: u16,
        tag: u64,
        multiple: bool,
        nack: bool,
        ts: u64,
        len: u64,
        out: &mut Out<'_>,
        counts: &mut MsgCounts,
    ) {
        let hit = |p: &Pending| p.channel == channel && matches!(p.wait, Wait::Confirm(s) if s == tag || (multiple && s <= tag));
        if !self.pending.iter().any(hit) {
            counts.unpaired_answers += 1;
            return;
        }
        let mut rest = VecDeque::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            if !hit(&p) {
                rest.push_back(p);
                continue;
            }
            if let Some(mut op) = p.op {
                op.end_ns = ts.max(op.start_ns);
                op.recv_bytes = op.recv_bytes.saturating_add(len);
                if nack && op.error_type.is_none() {
                    op.error_type = Some("NACK");
                }
                done(out, op);
            }
        }
        self.pending = rest;
    }

    /// The client settled deliveries up to `tag` (tag 0 with `multiple`:
    /// all of the channel's).
    #[allow(clippy::too_many_arguments)]
    fn settle(&mut self, channel: u16, tag: u64, multiple: bool, op_name: &'static str, ts: u64, len: u64, out: &mut Out<'_>) {
        let hit =
            |p: &Pending| p.channel == channel && matches!(p.wait, Wait::Settle(t) if t == tag || (multiple && (t <= tag || tag == 0)));
        let mut settle = MsgOp::new(MsgSystem::Rabbitmq, Some(OpType::Settle), op_name, ts);
        settle.delivery_tag = Some(tag);
        settle.send_bytes = len;
        let mut n = 0u32;
        let mut dest: Option<Option<(String, Option<String>)>> = None;
        let mut rest = VecDeque::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            if !hit(&p) {
                rest.push_back(p);
                continue;
            }
            n = n.saturating_add(1);
            dest = match dest {
                None => Some(p.dest.clone()),
                Some(d) if d == p.dest => Some(d),
                Some(_) => Some(None),
            };
            if let Some(mut op) = p.op {
                op.end_ns = ts.max(op.start_ns);
                op.send_bytes = op.send_bytes.saturating_add(len);
                done(out, op);
            }
        }
        self.pending = rest;
        if n > 0 {
            settle.message_count = Some(n);
        }
        if let Some(Some((exchange, key))) = dest {
            settle.destination = Some(exchange);
            settle.routing_key = key;
        }
        done(out, settle);
    }

    /// The broker closed a channel (`Some`) or the connection with
    /// `error`: the calls pending there end now, with it.
    fn fail(&mut self, channel: Option<u16>, error: Option<&'static str>, ts: u64, len: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
        let mut rest = VecDeque::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            if channel.is_some_and(|c| c != p.channel) {
                rest.push_back(p);
                continue;
            }
            match (p.op, error) {
                (Some(mut op), Some(e)) => {
                    op.end_ns = ts.max(op.start_ns);
                    op.recv_bytes = op.recv_bytes.saturating_add(len);
                    op.error_type = Some(e);
                    done(out, op);
                }
                (Some(_), None) => counts.unanswered += 1,
                (None, _) => {}
            }
        }
        self.pending = rest;
    }
}

#[cfg(test)]
mod tests;
