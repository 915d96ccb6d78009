//! memcached text protocol (and meta commands), client side: [`McConn`].
//!
//! # Layout
//! ```text
//! request = cmd SP args CRLF [data block: <bytes> bytes CRLF]   (set add replace append prepend cas, ms)
//! reply   = VALUE key flags bytes [cas] CRLF data CRLF ... END CRLF       (get gets gat gats)
//!         | STAT ... CRLF ... END CRLF                                    (stats)
//!         | VA size flags CRLF data CRLF | HD | NF | NS | EX | EN | MN | ME ...   (meta)
//!         | STORED | NOT_STORED | EXISTS | NOT_FOUND | DELETED | TOUCHED | OK | <number>
//!         | VERSION x | ERROR | CLIENT_ERROR msg | SERVER_ERROR msg
//! ```
//! A data block is skipped by its declared length (+ CRLF), never kept:
//! one in a LOST region is fine.
//!
//! # Decisions
//! - `db.operation.name` is the command as the protocol spells it
//!   (lowercase: `get`, `set`, `mg`), from a closed list (the name is a
//!   metric attribute; any other command is `_OTHER`, with no text);
//!   `db.query.text` is the command and one `?` per key (`get ? ?`); no
//!   key or value is kept.
//! - `quit` has no reply (the server closes): no op, counted `no_reply`.
//! - `noreply` (and the meta quiet flag `q`) means no reply comes: no op,
//!   counted `no_reply` (a span would have no end to measure; a quiet
//!   meta command's failure reply could then be mispaired, so quiet meta
//!   commands are rare enough to accept that). So does `quit`: the server
//!   closes the connection without a word.
//! - `returned_rows` is the number of `VALUE` items of a retrieval.
//! - `ERROR`, `CLIENT_ERROR`, `SERVER_ERROR` set `status_code` and
//!   `error.type` to that word (never the message); `NOT_FOUND`,
//!   `NOT_STORED` and `EXISTS` are answers, not errors.
//!
//! # Desync
//! Like RESP, nothing in a byte tail marks a reply boundary: a desync
//! gives the connection up for good (counted `desync`, `given_up`, the
//! pending calls `unanswered`).
//!
//! # Memory
//! Two [`Stream`]s and at most [`MAX_PENDING`] pending calls.

use std::collections::VecDeque;

use ipc_schema::db::system;
use ipc_schema::Text;

use super::pieces;
use super::stream::{Frame, Msg, Next, Stream, MAX_BUFFERED};
use super::{done, op, op_heap, DbCounts, DbOp, Out, MAX_PENDING, OTHER};

/// Commands recognised: (name, how its reply ends, whether it carries a
/// data block, which argument positions are keys: `Keys::All` from 1).
const COMMANDS: &[(&str, Reply, bool, Keys)] = &[
    ("get", Reply::Values, false, Keys::All),
    ("gets", Reply::Values, false, Keys::All),
    ("gat", Reply::Values, false, Keys::AllFrom2),
    ("gats", Reply::Values, false, Keys::AllFrom2),
    ("set", Reply::Line, true, Keys::One),
    ("add", Reply::Line, true, Keys::One),
    ("replace", Reply::Line, true, Keys::One),
    ("append", Reply::Line, true, Keys::One),
    ("prepend", Reply::Line, true, Keys::One),
    ("cas", Reply::Line, true, Keys::One),
    ("delete", Reply::Line, false, Keys::One),
    ("incr", Reply::Line, false, Keys::One),
    ("decr", Reply::Line, false, Keys::One),
    ("touch", Reply::Line, false, Keys::One),
    ("flush_all", Reply::Line, false, Keys::None),
    ("version", Reply::Line, false, Keys::None),
    ("verbosity", Reply::Line, false, Keys::None),
    ("stats", Reply::Values, false, Keys::None),
    ("mg", Reply::Meta, false, Keys::One),
    ("ms", Reply::Meta, true, Keys::One),
    ("md", Reply::Meta, false, Keys::One),
    ("ma", Reply::Meta, false, Keys::One),
    ("mn", Reply::Meta, false, Keys::None),
    ("me", Reply::Meta, false, Keys::One),
];

/// Where keys are among a command's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    None,
    One,
    All,
    /// gat/gats: an expiry, then keys.
    AllFrom2,
}

/// How a reply ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// One line.
    Line,
    /// `VALUE`/`STAT` lines (VALUE with data) until `END`.
    Values,
    /// One meta line (`VA` with data).
    Meta,
}

/// Whether `b` starts like a memcached text command (for
/// [`super::detect`]): a known command, a space or CRLF.
pub fn is_command_start(b: &[u8]) -> bool {
    let n = b.iter().take_while(|c| c.is_ascii_lowercase() || **c == b'_').count();
    matches!(b.get(n), Some(b' ' | b'\r')) && COMMANDS.iter().any(|c| c.0.as_bytes() == &b[..n]) && n > 2
}

/// The decimal at `w`, bounded.
fn num(w: Option<&[u8]>) -> Option<u64> {
    std::str::from_utf8(w?).ok()?.parse().ok()
}

fn line(h: &[u8]) -> Frame {
    match memchr::memmem::find(h, b"\r\n") {
        Some(i) => Frame::Len(i as u64 + 2),
        // A command or reply line is short (keys ≤ 250 bytes).
        None if h.len() > 8192 => Frame::Bad,
        None => Frame::Need,
    }
}

#[derive(Debug)]
struct Pending {
    op: DbOp,
    reply: Reply,
    values: u64,
}

#[derive(Debug, Default)]
struct St {
    given_up: bool,
    send_body: Option<u64>,
    recv_body: Option<u64>,
    pending: VecDeque<Pending>,
}

/// One memcached client connection. See the module doc.
#[derive(Debug, Default)]
pub struct McConn {
    send: Stream,
    recv: Stream,
    st: St,
}

impl McConn {
    /// Calls awaiting replies.
    pub fn pending(&self) -> usize {
        self.st.pending.len()
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        self.send.held() + self.recv.held() + self.st.pending.iter().map(|p| op_heap(&p.op) + 200).sum::<usize>()
    }

    /// Counts pending calls unanswered and forgets them.
    pub fn abort(&mut self, counts: &mut DbCounts) {
        counts.unanswered += self.st.pending.len() as u64;
        self.st.pending.clear();
    }

    /// One record (see [`super::DbConn::feed`]; `pieces` is valid).
    pub fn feed(&mut self, send: bool, ts: u64, _tls: bool, bytes: &[u8], out: &mut Out<'_>, counts: &mut DbCounts) {
        if self.st.given_up {
            return;
        }
        for piece in pieces::pieces(bytes).flatten() {
            let stream = if send { &mut self.send } else { &mut self.recv };
            stream.push(piece);
            let mut bad = false;
            loop {
                let body = if send { self.st.send_body } else { self.st.recv_body };
                match stream.next(|h| body.map_or_else(|| line(h), Frame::Len)) {
                    Next::Msg(m) => {
                        if m.len > MAX_BUFFERED as u64 {
                            counts.too_large += 1;
                        }
                        let ok = if send { self.st.on_send(m, ts, counts) } else { self.st.on_recv(m, ts, out, counts) };
                        if !ok {
                            bad = true;
                            break;
                        }
                    }
                    Next::Wait => break,
                    Next::Desync => {
                        bad = true;
                        break;
                    }
                }
            }
            if bad {
                counts.desync += 1;
                counts.given_up += 1;
                self.abort(counts);
                self.st.given_up = true;
                return;
            }
        }
    }
}

impl St {
    /// A send line or data block. `false`: desync.
    fn on_send(&mut self, m: Msg<'_>, ts: u64, counts: &mut DbCounts) -> bool {
        if self.send_body.take().is_some() {
            // A value: skipped, never read.
            return true;
        }
        if !m.whole {
            return false;
        }
        let l = &m.bytes[..m.bytes.len() - 2];
        let mut words = l.split(|c| *c == b' ').filter(|w| !w.is_empty());
        let Some(name) = words.next() else { return true };
        if name == b"quit" {
            counts.no_reply += 1;
            return true;
        }
        let args: Vec<&[u8]> = words.take(64).collect();
        if name == b"quit" {
            // The server closes the connection without a reply.
            counts.no_reply += 1;
            return true;
        }
        let Some(&(cmd, reply, data, keys)) = COMMANDS.iter().find(|c| c.0.as_bytes() == name) else {
            // Unknown command: the server answers ERROR; pair it anyway so
            // the replies stay in order. Its name is not exported.
            let mut o = op(system::MEMCACHED, ts);
            o.call.operation = Some(Text::Owned(OTHER.to_owned()));
            return self.push(Pending { op: o, reply: Reply::Line, values: 0 }, counts);
        };
        if data {
            // set: key flags exptime bytes; cas: + cas unique; ms: key datalen.
            let at = if cmd == "ms" { 1 } else { 3 };
            match num(args.get(at).copied()) {
                Some(n) => self.send_body = Some(n.saturating_add(2)),
                None => return false,
            }
        }
        let quiet =
            if reply == Reply::Meta { args.iter().skip(1).any(|a| *a == b"q") } else { args.last().is_some_and(|a| *a == b"noreply") };
        if quiet {
            counts.no_reply += 1;
            return true;
        }
        let nkeys = match keys {
            Keys::None => 0,
            Keys::One => 1,
            Keys::All => args.len(),
            Keys::AllFrom2 => args.len().saturating_sub(1),
        };
        let mut o = op(system::MEMCACHED, ts);
        let mut text = cmd.to_owned();
        for _ in 0..nkeys {
            text.push_str(" ?");
        }
        o.call.operation = Some(Text::Owned(cmd.to_owned()));
        o.call.query_summary = Some(Text::Owned(cmd.to_owned()));
        o.call.query_text = Some(Text::Owned(text));
        self.push(Pending { op: o, reply, values: 0 }, counts)
    }

    fn push(&mut self, p: Pending, counts: &mut DbCounts) -> bool {
        if self.pending.len() >= MAX_PENDING {
            counts.too_many_pending += 1;
            return false;
        }
        self.pending.push_back(p);
        true
    }

    /// A recv line or data block. `false`: desync.
    fn on_recv(&mut self, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) -> bool {
        if self.recv_body.take().is_some() {
            // A value (never read); a meta VA ends its call with it.
            if self.pending.front().is_some_and(|p| p.reply == Reply::Meta) {
                self.finish(None, ts, out);
            }
            return true;
        }
        if !m.whole {
            return false;
        }
        let l = &m.bytes[..m.bytes.len() - 2];
        let mut words = l.split(|c| *c == b' ');
        let first = words.next().unwrap_or(&[]);
        let Some(front) = self.pending.front_mut() else {
            counts.unpaired_answers += 1;
            // Without a request we cannot tell a value's length from a
            // line that merely looks like a header: still skip it.
            if first == b"VALUE" || first == b"VA" {
                return false;
            }
            return true;
        };
        match first {
            b"ERROR" | b"CLIENT_ERROR" | b"SERVER_ERROR" => {
                let w = String::from_utf8_lossy(first).into_owned();
                self.finish(Some(w), ts, out);
            }
            b"VALUE" if front.reply == Reply::Values => {
                // VALUE key flags bytes [cas]
                let mut w = words.skip(2);
                match num(w.next()) {
                    Some(n) => {
                        front.values += 1;
                        self.recv_body = Some(n.saturating_add(2));
                    }
                    None => return false,
                }
            }
            b"STAT" if front.reply == Reply::Values => {}
            b"END" if front.reply == Reply::Values => {
                let rows = front.values;
                if front.op.call.operation.as_deref() != Some("stats") {
                    front.op.call.returned_rows = Some(rows);
                }
                self.finish(None, ts, out);
            }
            b"VA" if front.reply == Reply::Meta => match num(words.next()) {
                Some(n) => self.recv_body = Some(n.saturating_add(2)),
                None => return false,
            },
            _ if front.reply == Reply::Values => return false,
            _ => self.finish(None, ts, out),
        }
        true
    }

    fn finish(&mut self, error: Option<String>, ts: u64, out: &mut Out<'_>) {
        if let Some(mut p) = self.pending.pop_front() {
            if let Some(e) = error {
                p.op.call.status_code = Some(Text::Owned(e.clone()));
                p.op.call.error_type = Some(Text::Owned(e));
            }
            p.op.end_ns = ts.max(p.op.start_ns);
            done(out, Box::new(p.op));
        }
    }
}

#[cfg(test)]
mod tests;
