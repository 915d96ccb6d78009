//! The NATS client protocol: [`NatsConn`].
//!
//! # Layout
//! ```text
//! server: INFO {json}              client: CONNECT {json}
//!         MSG <subject> <sid> [reply] <#bytes>            PUB <subject> [reply] <#bytes>
//!         HMSG <subject> <sid> [reply] <#hdr> <#total>    HPUB <subject> [reply] <#hdr> <#total>
//!         PING, PONG, +OK, -ERR '<text>'                  SUB <subject> [queue] <sid>
//!                                                         UNSUB <sid> [max], PING, PONG
//! ```
//! Each a control line ended by CRLF (a bare LF is taken too), verbs in
//! any case, fields split by spaces or tabs (clients write empty ones:
//! nats-py sends `PUB subject  16`); PUB, HPUB, MSG and HMSG are followed
//! by their payload, of the declared length, and CRLF. An H-verb's
//! payload opens with its headers (`NATS/1.0[ status]` CRLF, `Key: Value`
//! lines, CRLF), the first `#hdr` bytes.
//!
//! # Calls
//! - PUB / HPUB → `publish` (send, PRODUCER): the subject, the body size
//!   (payload less headers), a `traceparent` header (no other header is
//!   read). It ends at its send; in verbose mode (CONNECT's `verbose`),
//!   at the server's `+OK` or `-ERR` (its words are the `error.type`).
//! - MSG / HMSG → `receive` (receive, CONSUMER): the subject, the
//!   subscription's queue group as `messaging.consumer.group.name` and its
//!   filter, when it has wildcards, as the template, the body size, a
//!   `traceparent`; an HMSG status of 503 (no responders to a request) is
//!   its `error.type`. The delivery is pushed, but the wire shows only its
//!   arrival: no `process` is seen (core NATS has no acknowledgement).
//! - SUB / UNSUB → `subscribe` / `unsubscribe` (no operation type, as
//!   MQTT's), ending at their send (verbose: at `+OK`/`-ERR`).
//! - A request/reply is a PUB (with a reply subject) then a MSG on the
//!   reply subject: two ops, as the wire has them.
//! - INFO, CONNECT, PING, PONG: `control_packets`. Of CONNECT only the
//!   `verbose` member is read (a small JSON scanner that skips every
//!   other member's value unread: never `pass`, `auth_token`, `nkey`,
//!   `sig`, `jwt`, `user`); nothing of INFO is kept.
//!
//! Verbose mode pairs: the server answers each client command (CONNECT,
//! PUB, HPUB, SUB, UNSUB) with `+OK`, or instead `-ERR`, in order, so
//! answers pair first in, first out. One `-ERR` comes besides the `+OK`:
//! nats-server's pedantic `Invalid Publish Subject` (it marks the command
//! and leaves it waiting for its `+OK`).
//!
//! # Desync and resync
//! A payload is framed by its declared length, so a LOST region inside
//! one is skipped; a control line in a LOST region, a line with no verb
//! of the protocol or one longer than [`MAX_LINE`], loses the direction's
//! place. It is found again at a record captured whole whose bytes are,
//! from first to last, whole commands with known verbs (clients and
//! servers write commands whole; a payload would have to spell a verb at
//! a record's first byte and tile the record exactly).
//!
//! # Memory
//! Two [`Stream`]s, at most [`MAX_PENDING`] commands awaiting `+OK`
//! (verbose only), at most [`MAX_SUBS`] subscriptions (sid, filter, queue
//! group, each at most [`super::MAX_NAME`] bytes): about 2 × 256 KiB +
//! 256 × 2 KiB + 256 × 800 B ≈ 1.2 MiB for a hostile connection.

use std::collections::VecDeque;

use super::common;
use super::{done, name, traceparent, MsgCounts, MsgOp, MsgSystem, OpType, Out, MAX_PENDING};
use crate::db::stream::{Frame, Msg, Stream};

/// Longest control line read (nats-server's `max_control_line` defaults
/// to 4 KiB; INFO lines with many URLs are longer).
pub const MAX_LINE: usize = 16 * 1024;

/// The prefix of the reply subjects NATS clients make for their requests
/// (`_INBOX.{client's id}.{request}`): a temporary destination.
pub const INBOX: &str = "_INBOX.";

/// Subscriptions remembered per connection; past it the oldest is
/// forgotten.
pub const MAX_SUBS: usize = 256;

/// A payload length taken as plausible (nats-server's `max_payload` is at
/// most 64 MiB).
const MAX_PAYLOAD: u64 = 1 << 30;

/// The verbs of each direction.
const CLIENT_VERBS: &[&[u8]] = &[b"CONNECT", b"PUB", b"HPUB", b"SUB", b"UNSUB", b"PING", b"PONG"];
const SERVER_VERBS: &[&[u8]] = &[b"INFO", b"MSG", b"HMSG", b"PING", b"PONG", b"+OK", b"-ERR"];

/// Whether `b` starts with a client's CONNECT (for [`super::detect`]).
pub fn is_connect(b: &[u8]) -> bool {
    b.len() >= 9 && b[..9].eq_ignore_ascii_case(b"CONNECT {")
}

/// Whether `b` starts with a server's INFO (for
/// [`super::detect_server_first`]).
pub fn is_info(b: &[u8]) -> bool {
    b.len() >= 6 && b[..6].eq_ignore_ascii_case(b"INFO {")
}

/// The control line at the head of `h`, without its line end, and the
/// line end's length.
fn line(h: &[u8]) -> Option<(&[u8], usize)> {
    let n = h.iter().take(MAX_LINE + 1).position(|c| *c == b'\n')?;
    Some(match h[..n].strip_suffix(b"\r") {
        Some(l) => (l, 2),
        None => (&h[..n], 1),
    })
}

/// A control line's fields (split on spaces and tabs, empty ones
/// dropped).
fn fields(l: &[u8]) -> impl Iterator<Item = &[u8]> {
    l.split(|c| *c == b' ' || *c == b'\t').filter(|f| !f.is_empty())
}

/// A decimal length.
fn number(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 12 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The verb of a line, if it is one of `verbs` (any case), and the rest.
fn verb<'a>(l: &'a [u8], verbs: &[&'static [u8]]) -> Option<(&'static [u8], &'a [u8])> {
    let end = l.iter().position(|c| *c == b' ' || *c == b'\t' || *c == b'{').unwrap_or(l.len());
    let v = verbs.iter().find(|v| l[..end].eq_ignore_ascii_case(v))?;
    Some((v, &l[end..]))
}

/// A payload command's payload length (and header length): the last
/// field (and the one before, for H-verbs).
fn payload_len(v: &[u8], rest: &[u8]) -> Option<(u64, u64)> {
    let f: Vec<&[u8]> = fields(rest).take(6).collect();
    let (hdr, total) = match v {
        b"HPUB" | b"HMSG" => (number(f.get(f.len().checked_sub(2)?)?)?, number(f.last()?)?),
        _ => (0, number(f.last()?)?),
    };
    let min_fields = match v {
        b"PUB" => 2,
        b"MSG" | b"HPUB" => 3,
        _ => 4,
    };
    (f.len() >= min_fields && f.len() <= min_fields + 1 && hdr <= total && total <= MAX_PAYLOAD).then_some((hdr, total))
}

/// The frame of the command at the head of `h` of one direction.
fn frame(h: &[u8], send: bool) -> Frame {
    let verbs = if send { CLIENT_VERBS } else { SERVER_VERBS };
    let Some((l, end)) = line(h) else {
        // Not a line yet: bad once it cannot start a verb or is too long.
        let end = h.iter().position(|c| matches!(c, b' ' | b'\t' | b'{' | b'\r')).unwrap_or(h.len());
        let tok = &h[..end];
        let ok = verbs.iter().any(|v| match end < h.len() {
            true => v.eq_ignore_ascii_case(tok),
            false => v.len() >= tok.len() && v[..tok.len()].eq_ignore_ascii_case(tok),
        });
        return if ok && h.len() <= MAX_LINE { Frame::Need } else { Frame::Bad };
    };
    let Some((v, rest)) = verb(l, verbs) else { return Frame::Bad };
    let head = (l.len() + end) as u64;
    match v {
        b"PUB" | b"HPUB" | b"MSG" | b"HMSG" => match payload_len(v, rest) {
            Some((_, total)) => Frame::Len(head + total + 2),
            None => Frame::Bad,
        },
        _ => Frame::Len(head),
    }
}

/// Whether a record's captured bytes are whole commands, exactly (the
/// resync rule).
fn tiles(b: &[u8], send: bool) -> bool {
    let mut at = 0;
    while at < b.len() {
        match frame(&b[at..], send) {
            Frame::Len(n) if n <= (b.len() - at) as u64 => at += n as usize,
            _ => return false,
        }
    }
    !b.is_empty()
}

/// CONNECT's `verbose` member, read without reading any other value: a
/// scanner over the JSON object's top level that steps over strings
/// (escapes included), nested objects and arrays.
fn connect_verbose(json: &[u8]) -> Option<bool> {
    let mut i = json.iter().position(|c| *c == b'{')? + 1;
    let mut depth = 0usize;
    let mut key: Option<&[u8]> = None;
    let mut expect_key = true;
    while i < json.len() {
        match json[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < json.len() && json[i] != b'"' {
                    i += if json[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 0 && expect_key {
                    key = json.get(start..i);
                }
            }
            b':' if depth == 0 => {
                expect_key = false;
                if key == Some(b"verbose") {
                    let v = json.get(i + 1..)?;
                    let v = &v[v.iter().position(|c| !c.is_ascii_whitespace())?..];
                    return Some(v.starts_with(b"true"));
                }
            }
            b',' if depth == 0 => expect_key = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return None,
            b'}' | b']' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The `traceparent` value of a headers block, and its status code.
fn headers(block: &[u8]) -> (Option<&[u8]>, Option<u16>) {
    let mut lines = block.split(|c| *c == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status = lines.next().and_then(|first| {
        let rest = first.strip_prefix(b"NATS/1.0")?;
        let code = fields(rest).next()?;
        std::str::from_utf8(code).ok()?.parse().ok()
    });
    for l in lines {
        let Some(colon) = l.iter().position(|c| *c == b':') else { continue };
        if l[..colon].trim_ascii().eq_ignore_ascii_case(b"traceparent") {
            return (Some(l[colon + 1..].trim_ascii()), status);
        }
    }
    (None, status)
}

/// `error.type` of a `-ERR`'s text (nats-server's fixed words; a
/// subject some carry is never kept).
fn err_name(text: &[u8]) -> &'static str {
    const KNOWN: &[(&str, &str)] = &[
        ("permissions violation", "permissions_violation"),
        ("invalid publish subject", "invalid_publish_subject"),
        ("invalid subject", "invalid_subject"),
        ("maximum payload violation", "maximum_payload_violation"),
        ("authorization violation", "authorization_violation"),
        ("user authentication", "authorization_violation"),
        ("authentication timeout", "authentication_timeout"),
        ("unknown protocol operation", "unknown_protocol_operation"),
        ("maximum subscriptions exceeded", "maximum_subscriptions_exceeded"),
        ("maximum connections exceeded", "maximum_connections_exceeded"),
        ("maximum control line exceeded", "maximum_control_line_exceeded"),
        ("slow consumer", "slow_consumer"),
        ("stale connection", "stale_connection"),
        ("parser error", "parser_error"),
    ];
    let t = text.trim_ascii();
    let t = t.strip_prefix(b"'").unwrap_or(t);
    KNOWN.iter().find(|(k, _)| t.len() >= k.len() && t[..k.len()].eq_ignore_ascii_case(k.as_bytes())).map_or("_OTHER", |(_, n)| n)
}

/// `error.type` of an HMSG status (a request's 503: no responders).
fn status_name(code: u16) -> Option<&'static str> {
    match code {
        503 => Some("no_responders"),
        408 => Some("request_timeout"),
        _ => None,
    }
}

/// A subscription: sid, filter, queue group.
#[derive(Debug)]
struct Sub {
    sid: String,
    filter: String,
    queue: Option<String>,
}

/// A command awaiting its `+OK` (verbose mode): its op, or none (CONNECT).
#[derive(Debug)]
struct Pending {
    op: Option<MsgOp>,
}

/// One NATS client connection. See the module doc.
#[derive(Debug, Default)]
pub struct NatsConn {
    send: Stream,
    recv: Stream,
    st: St,
}

/// The connection's state besides its streams.
#[derive(Debug, Default)]
struct St {
    /// CONNECT asked for verbose mode: every command is answered.
    verbose: bool,
    pending: VecDeque<Pending>,
    subs: VecDeque<Sub>,
}

impl NatsConn {
    /// Commands awaiting their `+OK`.
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
                .map(|p| std::mem::size_of::<Pending>() + p.op.as_ref().map_or(0, |o| std::mem::size_of::<MsgOp>() + o.heap()))
                .sum::<usize>()
            + self
                .st
                .subs
                .iter()
                .map(|s| std::mem::size_of::<Sub>() + s.sid.capacity() + s.filter.capacity() + s.queue.as_ref().map_or(0, String::capacity))
                .sum::<usize>()
    }

    /// Forgets the pending commands (the caller counts them).
    pub(super) fn forget_pending(&mut self) {
        self.st.pending.clear();
    }

    /// Both directions lose their place; the `+OK`s of what went by are
    /// unknown, so nothing pending can be paired any more.
    pub(super) fn lose_place(&mut self, counts: &mut MsgCounts) {
        self.send.desync();
        self.recv.desync();
        counts.unanswered += self.pending() as u64;
        self.st.pending.clear();
    }

    /// One record (its pieces valid, GAP pieces taken off).
    pub(super) fn feed(&mut self, send: bool, ts: u64, bytes: &[u8], out: &mut Out<'_>, counts: &mut MsgCounts) {
        let stream = if send { &mut self.send } else { &mut self.recv };
        let Some(restarted) = common::resume(stream, bytes, |b| tiles(b, send), counts) else {
            return;
        };
        if restarted && !send {
            // Answers went by unseen: pairing would be off.
            counts.unanswered += self.pending() as u64;
            self.st.pending.clear();
        }
        let stream = if send { &mut self.send } else { &mut self.recv };
        common::drain(
            stream,
            bytes,
            |h| frame(h, send),
            counts,
            |m, counts| {
                self.st.command(send, m, ts, out, counts);
                true
            },
        );
    }
}

impl St {
    /// One command of either direction.
    fn command(&mut self, send: bool, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
        let Some((l, end)) = line(m.bytes) else {
            // A control line longer than what was captured: not one the
            // framing took.
            counts.bad_messages += 1;
            return;
        };
        let verbs = if send { CLIENT_VERBS } else { SERVER_VERBS };
        let Some((v, rest)) = verb(l, verbs) else {
            counts.bad_messages += 1;
            return;
        };
        let body = m.bytes.get(l.len() + end..).unwrap_or(&[]);
        let ok = match (v, send) {
            (b"CONNECT", true) => {
                counts.control_packets += 1;
                self.verbose = connect_verbose(rest) == Some(true);
                if self.verbose {
                    self.wait(None, counts);
                }
                Some(())
            }
            (b"PUB" | b"HPUB", true) => self.publish(v, rest, body, m, ts, out, counts),
            (b"SUB", true) => self.subscribe(rest, m, ts, out, counts),
            (b"UNSUB", true) => self.unsubscribe(rest, m, ts, out, counts),
            (b"MSG" | b"HMSG", false) => self.message(v, rest, body, m, ts, out, counts),
            (b"+OK", false) => {
                self.answer(None, ts, m.len, out, counts);
                Some(())
            }
            (b"-ERR", false) => {
                self.answer(Some(rest), ts, m.len, out, counts);
                Some(())
            }
            _ => {
                counts.control_packets += 1;
                Some(())
            }
        };
        if ok.is_none() {
            counts.bad_messages += 1;
        }
    }

    /// A command ends now, or (verbose) waits for its answer.
    fn done_or_wait(&mut self, op: MsgOp, out: &mut Out<'_>, counts: &mut MsgCounts) {
        if self.verbose {
            self.wait(Some(op), counts);
        } else {
            done(out, op);
        }
    }

    fn wait(&mut self, op: Option<MsgOp>, counts: &mut MsgCounts) {
        if self.pending.len() >= MAX_PENDING {
            if let Some(old) = self.pending.pop_front() {
                if old.op.is_some() {
                    counts.too_many_pending += 1;
                    counts.unanswered += 1;
                }
            }
        }
        self.pending.push_back(Pending { op });
    }

    /// `+OK` (`err` none) or `-ERR` with its text: the oldest command's
    /// answer.
    fn answer(&mut self, err: Option<&[u8]>, ts: u64, len: u64, out: &mut Out<'_>, counts: &mut MsgCounts) {
        let error = err.map(err_name);
        let Some(p) = self.pending.front_mut() else {
            // Not verbose (a -ERR about a PUB that ended at its send), or
            // the command was not seen.
            counts.unpaired_answers += 1;
            return;
        };
        if let (Some(e), Some(op)) = (error, p.op.as_mut()) {
            op.error_type.get_or_insert(e);
        }
        if error == Some("invalid_publish_subject") {
            // Its +OK follows.
            return;
        }
        let Some(p) = self.pending.pop_front() else { return };
        if let Some(mut op) = p.op {
            op.end_ns = ts.max(op.start_ns);
            op.recv_bytes = op.recv_bytes.saturating_add(len);
            done(out, op);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn publish(
        &mut self,
        v: &[u8],
        rest: &[u8],
        body: &[u8],
        m: Msg<'_>,
        ts: u64,
        out: &mut Out<'_>,
        counts: &mut MsgCounts,
    ) -> Option<()> {
        let subject = fields(rest).next()?;
        let (hdr, total) = payload_len(v, rest)?;
        let mut op = MsgOp::new(MsgSystem::Nats, Some(OpType::Send), "publish", ts);
        op.destination = Some(name(subject, counts));
        op.body_size = Some(total - hdr);
        op.send_bytes = m.len;
        if hdr > 0 {
            self.read_headers(body, hdr, &mut op, counts);
        }
        self.done_or_wait(op, out, counts);
        Some(())
    }

    /// An H-verb's headers, from the captured part of its payload.
    fn read_headers(&self, body: &[u8], hdr: u64, op: &mut MsgOp, counts: &mut MsgCounts) {
        let n = usize::try_from(hdr).unwrap_or(usize::MAX).min(body.len());
        let (tp, status) = headers(&body[..n]);
        if let Some(tp) = tp.and_then(traceparent) {
            op.link(tp, counts);
        }
        if let Some(e) = status.and_then(status_name) {
            op.error_type = Some(e);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        v: &[u8],
        rest: &[u8],
        body: &[u8],
        m: Msg<'_>,
        ts: u64,
        out: &mut Out<'_>,
        counts: &mut MsgCounts,
    ) -> Option<()> {
        let mut f = fields(rest);
        let subject = f.next()?;
        let sid = f.next()?;
        let (hdr, total) = payload_len(v, rest)?;
        let mut op = MsgOp::new(MsgSystem::Nats, Some(OpType::Receive), "receive", ts);
        op.destination = Some(name(subject, counts));
        op.body_size = Some(total - hdr);
        op.recv_bytes = m.len;
        if let Some(s) = self.subs.iter().find(|s| s.sid.as_bytes() == sid) {
            op.consumer_group = s.queue.clone();
            if s.filter.contains(['*', '>']) {
                op.template = Some(s.filter.clone());
            }
        }
        if hdr > 0 {
            self.read_headers(body, hdr, &mut op, counts);
        }
        done(out, op);
        Some(())
    }

    fn subscribe(&mut self, rest: &[u8], m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) -> Option<()> {
        let f: Vec<&[u8]> = fields(rest).take(4).collect();
        let (filter, queue, sid) = match f[..] {
            [s, sid] => (s, None, sid),
            [s, q, sid] => (s, Some(q), sid),
            _ => return None,
        };
        let sub = Sub { sid: name(sid, counts), filter: name(filter, counts), queue: queue.map(|q| name(q, counts)) };
        let mut op = MsgOp::new(MsgSystem::Nats, None, "subscribe", ts);
        op.send_bytes = m.len;
        if sub.filter.contains(['*', '>']) {
            op.template = Some(sub.filter.clone());
        } else {
            op.destination = Some(sub.filter.clone());
        }
        op.consumer_group = sub.queue.clone();
        self.subs.retain(|s| s.sid != sub.sid);
        if self.subs.len() >= MAX_SUBS {
            self.subs.pop_front();
        }
        self.subs.push_back(sub);
        self.done_or_wait(op, out, counts);
        Some(())
    }

    fn unsubscribe(&mut self, rest: &[u8], m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut MsgCounts) -> Option<()> {
        let mut f = fields(rest);
        let sid = f.next()?;
        let max = f.next();
        let mut op = MsgOp::new(MsgSystem::Nats, None, "unsubscribe", ts);
        op.send_bytes = m.len;
        if let Some(i) = self.subs.iter().position(|s| s.sid.as_bytes() == sid) {
            let s = &self.subs[i];
            if s.filter.contains(['*', '>']) {
                op.template = Some(s.filter.clone());
            } else {
                op.destination = Some(s.filter.clone());
            }
            op.consumer_group = s.queue.clone();
            // With a max the subscription lives until that many messages
            // came: keep it for their queue group.
            if max.is_none() {
                self.subs.remove(i);
            }
        }
        self.done_or_wait(op, out, counts);
        Some(())
    }
}

#[cfg(test)]
mod tests;
