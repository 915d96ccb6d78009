//! PostgreSQL frontend/backend protocol v3, client side: [`PgConn`].
//!
//! # Layout
//! ```text
//! untyped  = i32be(len, itself included) i32be(code) body      (first send)
//!   code: 196608+minor startup (cstring key/value pairs, then 0),
//!         80877103 SSLRequest, 80877104 GSSENCRequest, 80877102 CancelRequest
//! typed    = u8(type) i32be(len, itself included) body          (all else)
//! ssl answer = one byte, 'S' (TLS follows) or 'N'                (recv)
//! ```
//! Frontend types used: `Q` query, `P` parse (name, text), `B` bind
//! (portal, statement; parameter values never read), `E` execute
//! (portal), `S` sync, `C` close (`S`/`P` + name); `D` `H` `X` `d` `c`
//! `f` `p` are framed and ignored (`p`, the password, is never read).
//! Backend types used: `C` CommandComplete (tag), `I` EmptyQuery, `s`
//! PortalSuspended, `E` ErrorResponse (only its `C` field, the SQLSTATE),
//! `Z` ReadyForQuery, `G`/`H` CopyIn/CopyOut, `S` ParameterStatus (only
//! `standard_conforming_strings` and `client_encoding`: how the server
//! reads a backslash in a statement, and which bytes make one character
//! (SJIS, BIG5, GBK, GB18030, JOHAB have characters whose second byte is
//! a backslash), so how [`sql::sanitize`] must; a statement sent while a
//! call is in flight, or before the server said it, is read every way);
//! the rest (`N`, `A`,
//! `T`, `D`, `1`, `2`, `3`, `t`, `n`, `R`, `K`, `d`, `c`) framed and ignored.
//!
//! # Pairing
//! Every Query and Execute is a call; calls and Syncs wait in one queue in
//! send order (the startup message queues a Sync too: the server ends the
//! startup with a ReadyForQuery), and the server answers in that order: CommandComplete,
//! EmptyQuery, PortalSuspended or ErrorResponse end the oldest Execute;
//! ReadyForQuery ends a Query (a multi-statement Query is one call: the
//! first statement's operation and row count, the first error). After an
//! ErrorResponse the server skips to Sync: the Executes it skips are
//! counted `skipped_after_error`, with no op.
//!
//! # Desync and resync
//! - **recv**: a recv record whose captured tail ends with a complete
//!   ReadyForQuery (`Z`, length 5, status `I`/`T`/`E`) is a boundary: it
//!   ends every pending call, at that record's time. The CommandComplete
//!   or ErrorResponse that ends exactly where the `Z` starts gives the
//!   last call its rows or status (the others end with what is known).
//! - **send**: a desync drops sends until a record that starts with a
//!   plausible `Q`/`P`/`B` header; the calls whose requests fell in the
//!   gap cannot be paired, so the recv side waits for a `Z` tail too.
//!
//! # Memory
//! Two [`Stream`]s, at most [`MAX_PENDING`] queued calls, at most
//! [`MAX_STATEMENTS`] statements of sanitized text (≤ 2 KiB) under names
//! of at most [`MAX_NAME`] bytes, and at most [`MAX_PORTALS`] portals
//! (sharing the statements' text).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ipc_schema::db::system;
use ipc_schema::Text;

use super::pieces::{self, Piece};
use super::sql::{self, Charset, Dialect, Escapes};
use super::stream::{Frame, Msg, Next, Stream, MAX_BUFFERED};
use super::{done, op, op_heap, set_sql, text, DbCounts, DbOp, Out, MAX_NAME, MAX_PENDING, MAX_STATEMENTS};

/// Portals remembered (nearly always just the unnamed one; named portals
/// are cursors).
pub const MAX_PORTALS: usize = 64;

/// The largest message length accepted from a header (PostgreSQL's own
/// limit is 1 GiB); a larger one means the stream is not where we think.
const MAX_MESSAGE: u32 = 1 << 30;

/// Protocol version 3.0 (3.x: minor version in the low 16 bits).
const PROTOCOL_3: u32 = 196_608;
/// SSLRequest code.
const SSL_REQUEST: u32 = 80_877_103;
/// GSSENCRequest code.
const GSS_REQUEST: u32 = 80_877_104;
/// CancelRequest code.
const CANCEL_REQUEST: u32 = 80_877_102;

/// The longest startup-phase message accepted (startup parameters).
const MAX_UNTYPED: u32 = 10_000;

/// Kept length of the startup `database`/`user` value.
const MAX_NAMESPACE: usize = 128;

fn be32(b: &[u8]) -> Option<u32> {
    b.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether `b` starts with a startup-phase message: a length in range and
/// a known code. Used by [`super::detect`] and on the first send.
pub fn is_startup(b: &[u8]) -> bool {
    match (be32(b), b.get(4..8).and_then(be32)) {
        (Some(len), Some(code)) => {
            (8..=MAX_UNTYPED).contains(&len)
                && (code & 0xffff_0000 == PROTOCOL_3 || matches!(code, SSL_REQUEST | GSS_REQUEST | CANCEL_REQUEST))
        }
        _ => false,
    }
}

/// A frontend or backend type byte (letters and `1`-`3`): anything else
/// at a message boundary means the stream lost its place.
fn is_type(b: u8) -> bool {
    b.is_ascii_alphabetic() || matches!(b, b'1'..=b'3')
}

fn typed_frame(h: &[u8]) -> Frame {
    match (h.first(), h.get(1..5).and_then(be32)) {
        (Some(&t), _) if !is_type(t) => Frame::Bad,
        (_, None) => Frame::Need,
        (_, Some(len)) if !(4..=MAX_MESSAGE).contains(&len) => Frame::Bad,
        (_, Some(len)) => Frame::Len(u64::from(len) + 1),
    }
}

fn untyped_frame(h: &[u8]) -> Frame {
    match be32(h) {
        None => Frame::Need,
        Some(len) if (8..=MAX_UNTYPED).contains(&len) => Frame::Len(u64::from(len)),
        Some(_) => Frame::Bad,
    }
}

/// How a `client_encoding` name (as the server reports it) builds
/// characters: the client-only encodings with ASCII second bytes; every
/// other encoding PostgreSQL has keeps ASCII bytes ASCII (UHC's second
/// bytes are letters).
fn client_encoding(name: &[u8]) -> Charset {
    const WIDE: [&[u8]; 4] = [b"BIG5", b"GBK", b"GB18030", b"JOHAB"];
    const SJIS: [&[u8]; 2] = [b"SJIS", b"SHIFT_JIS_2004"];
    if WIDE.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        Charset::Wide
    } else if SJIS.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        Charset::Sjis
    } else {
        Charset::Plain
    }
}

/// A NUL-terminated string: (the string, what follows its NUL); `None`
/// for the rest when there is no NUL (a cut message).
fn cstr(b: &[u8]) -> (&[u8], Option<&[u8]>) {
    match memchr::memchr(0, b) {
        Some(i) => (&b[..i], Some(&b[i + 1..])),
        None => (b, None),
    }
}

/// The SQLSTATE (`C` field) of an ErrorResponse body; never the message.
fn sqlstate(mut body: &[u8]) -> Option<String> {
    while let Some((&field, rest)) = body.split_first() {
        if field == 0 {
            return None;
        }
        let (value, next) = cstr(rest);
        if field == b'C' {
            return (value.len() == 5 && value.iter().all(u8::is_ascii_alphanumeric)).then(|| text(value, 5));
        }
        body = next?;
    }
    None
}

/// A CommandComplete tag: (command, the last number).
fn tag_rows(tag: &[u8]) -> (&[u8], Option<u64>) {
    let cmd = tag.split(|&b| b == b' ').next().unwrap_or(&[]);
    let n = tag.rsplit(|&b| b == b' ').next().and_then(|n| std::str::from_utf8(n).ok()).and_then(|n| n.parse().ok());
    (cmd, n)
}

/// Where the send side is in the startup phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// No send seen yet: the first one tells (startup, or a connection
    /// traced mid-way).
    #[default]
    Unknown,
    /// Startup-phase messages (no type byte).
    Untyped,
    /// Typed messages.
    Typed,
}

/// SSL/GSS negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Ssl {
    #[default]
    None,
    /// An SSLRequest or GSSENCRequest was sent: one answer byte comes.
    AwaitAnswer { gss: bool },
    /// The server said `S`: only TLS plaintext records are read.
    TlsOnly,
}

/// A queue entry: a call awaiting its end, or a Sync awaiting its `Z`.
#[derive(Debug)]
enum Entry {
    Call {
        /// Boxed: a queue of Syncs stays small.
        op: Box<DbOp>,
        /// A simple Query (ends at `Z`) rather than an Execute.
        simple: bool,
        /// A CopyOutResponse was seen (`COPY n` is then rows returned).
        copy_out: bool,
        /// A simple Query's first statement completed (later ones do not
        /// change its rows).
        first_done: bool,
    },
    Sync,
}

/// What a CommandComplete/ErrorResponse says about its call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Completion {
    Tag { rows: Option<u64>, cmd: Vec<u8> },
    Error(Option<String>),
}

fn complete(op: &mut DbOp, c: &Completion, copy_out: bool) {
    match c {
        Completion::Tag { rows, cmd } => {
            let returns = matches!(cmd.as_slice(), b"SELECT" | b"FETCH") || (cmd.as_slice() == b"COPY" && copy_out);
            if returns {
                op.call.returned_rows = *rows;
            }
        }
        Completion::Error(state) => {
            op.call.status_code = state.clone().map(Text::Owned);
            op.call.error_type = Some(Text::Owned(state.clone().unwrap_or_else(|| "_OTHER".to_owned())));
        }
    }
}

/// The protocol state (everything but the two streams).
#[derive(Debug, Default)]
struct Core {
    phase: Phase,
    ssl: Ssl,
    given_up: bool,
    namespace: Option<String>,
    /// Statement name → sanitized text, with insertion order for eviction.
    statements: HashMap<Box<[u8]>, Arc<str>>,
    order: VecDeque<Box<[u8]>>,
    /// Portal name → its statement's text (`None`: statement unknown).
    portals: HashMap<Box<[u8]>, Option<Arc<str>>>,
    queue: VecDeque<Entry>,
    /// An error was answered and no Sync was queued after it: the server
    /// skips the Executes sent until the next Sync.
    skip_until_sync: bool,
    /// The session's `standard_conforming_strings`, as its last
    /// ParameterStatus said (`None`: none seen, or the recv side lost its
    /// place since).
    standard_strings: Option<bool>,
    /// The session's `client_encoding`, as its last ParameterStatus said
    /// (`None`: as `standard_strings`).
    encoding: Option<Charset>,
}

/// One PostgreSQL client connection. See the module doc.
#[derive(Debug, Default)]
pub struct PgConn {
    send: Stream,
    recv: Stream,
    core: Core,
}

impl PgConn {
    /// Calls awaiting their end.
    pub fn pending(&self) -> usize {
        self.core.queue.iter().filter(|e| matches!(e, Entry::Call { .. })).count()
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        let c = &self.core;
        let queue: usize = c.queue.iter().map(|e| if let Entry::Call { op, .. } = e { op_heap(op) + 256 } else { 16 }).sum();
        let stmts: usize = c.statements.iter().map(|(k, v)| 2 * k.len() + v.len() + 64).sum();
        let portals: usize = c.portals.keys().map(|k| k.len() + 48).sum();
        self.send.held() + self.recv.held() + queue + stmts + portals
    }

    /// Counts every pending call unanswered and forgets them.
    pub fn abort(&mut self, counts: &mut DbCounts) {
        counts.unanswered += self.pending() as u64;
        self.core.queue.clear();
        self.core.skip_until_sync = false;
    }

    /// One record (see [`super::DbConn::feed`]; `pieces` is valid).
    pub fn feed(&mut self, send: bool, ts: u64, tls: bool, bytes: &[u8], out: &mut Out<'_>, counts: &mut DbCounts) {
        if self.core.given_up {
            return;
        }
        if !tls && self.core.ssl == Ssl::TlsOnly {
            counts.ciphertext_records += 1;
            return;
        }
        if send {
            self.feed_send(ts, bytes, counts);
        } else {
            self.feed_recv(ts, bytes, out, counts);
        }
    }

    fn feed_send(&mut self, ts: u64, bytes: &[u8], counts: &mut DbCounts) {
        let first = match pieces::pieces(bytes).next() {
            Some(Ok(Piece::Bytes(b))) => Some(b),
            _ => None,
        };
        if self.send.desynced() {
            if self.core.phase == Phase::Typed && first.is_some_and(plausible_request) {
                self.send.restart();
                counts.resync += 1;
            } else {
                return;
            }
        }
        for piece in pieces::pieces(bytes).flatten() {
            self.send.push(piece);
            loop {
                let core = &mut self.core;
                let phase = core.phase;
                let next = self.send.next(|h| match phase {
                    // The first message: a startup-phase one, or a typed
                    // one (traced mid-way); 8 bytes tell.
                    Phase::Unknown if h.len() < 8 => Frame::Need,
                    Phase::Unknown if is_startup(h) => untyped_frame(h),
                    Phase::Untyped => untyped_frame(h),
                    _ => typed_frame(h),
                });
                match next {
                    Next::Msg(m) => {
                        if m.len > MAX_BUFFERED as u64 {
                            counts.too_large += 1;
                        }
                        if core.phase == Phase::Unknown {
                            core.phase = if is_startup(m.bytes) { Phase::Untyped } else { Phase::Typed };
                        }
                        let untyped = core.phase == Phase::Untyped;
                        if untyped {
                            core.on_untyped(m);
                        } else if core.on_send(m, ts, counts) {
                            // Too many pending: answers cannot be paired
                            // until a `Z` tail.
                            self.recv.desync();
                        }
                    }
                    Next::Wait => break,
                    Next::Desync => {
                        counts.desync += 1;
                        // Calls in the gap will be answered too: pair
                        // nothing until a `Z` tail proves a boundary.
                        self.recv.desync();
                        break;
                    }
                }
            }
        }
    }

    fn feed_recv(&mut self, ts: u64, bytes: &[u8], out: &mut Out<'_>, counts: &mut DbCounts) {
        let mut strip_first = false;
        if let Ssl::AwaitAnswer { gss } = self.core.ssl {
            match pieces::pieces(bytes).next() {
                Some(Ok(Piece::Bytes(&[b'S', ..]))) if !gss => {
                    // TLS follows; the startup message comes again inside it.
                    self.core.ssl = Ssl::TlsOnly;
                    self.send.restart();
                    self.recv.restart();
                    return;
                }
                Some(Ok(Piece::Bytes(&[b'G', ..]))) if gss => {
                    // GSSAPI encryption: nothing readable follows.
                    self.core.given_up = true;
                    counts.given_up += 1;
                    return;
                }
                Some(Ok(Piece::Bytes(&[b'N', ..]))) => {
                    self.core.ssl = Ssl::None;
                    strip_first = true;
                }
                // An old server's ErrorResponse: typed from here.
                _ => self.core.ssl = Ssl::None,
            }
        }
        for piece in pieces::pieces(bytes).flatten() {
            let piece = match piece {
                Piece::Bytes(b) if strip_first => {
                    strip_first = false;
                    Piece::Bytes(&b[1..])
                }
                p => p,
            };
            self.recv.push(piece);
            loop {
                let core = &mut self.core;
                match self.recv.next(typed_frame) {
                    Next::Msg(m) => {
                        if m.len > MAX_BUFFERED as u64 {
                            counts.too_large += 1;
                        }
                        core.on_recv(m, ts, out, counts);
                    }
                    Next::Wait => break,
                    Next::Desync => {
                        counts.desync += 1;
                        // A ParameterStatus may go by unseen.
                        self.core.standard_strings = None;
                        self.core.encoding = None;
                        break;
                    }
                }
            }
        }
        if self.recv.desynced() {
            if let Some(tail) = pieces::tail(bytes) {
                if self.core.tail_resync(tail, ts, out) {
                    self.recv.restart();
                    counts.resync += 1;
                }
            }
        }
    }
}

/// Whether a send record starting with `b` starts at a message boundary
/// we can trust after a desync: a `Q`, `P` or `B` header with a sane
/// length, followed (if captured) by the end of the bytes or another
/// frontend message type.
fn plausible_request(b: &[u8]) -> bool {
    if !matches!(b.first(), Some(b'Q' | b'P' | b'B')) {
        return false;
    }
    match typed_frame(b) {
        Frame::Len(len) if len >= 6 => match usize::try_from(len).ok().and_then(|l| b.get(l..)) {
            Some(rest) => rest.first().is_none_or(|&t| matches!(t, b'Q' | b'P' | b'B' | b'D' | b'E' | b'S' | b'H' | b'C')),
            // The rest of the message is beyond the captured head.
            None => true,
        },
        _ => false,
    }
}

/// Whether `t` ends with a complete ReadyForQuery.
fn ends_with_ready(t: &[u8]) -> bool {
    t.len() >= 6 && {
        let z = &t[t.len() - 6..];
        z[0] == b'Z' && z[1..5] == [0, 0, 0, 5] && matches!(z[5], b'I' | b'T' | b'E')
    }
}

/// The CommandComplete or ErrorResponse that ends exactly at the end of
/// `t`, if one can be found in it.
fn last_completion(t: &[u8]) -> Option<Completion> {
    let end = t.len();
    // The latest start first: the shortest message that fits.
    for p in (0..end.saturating_sub(5)).rev() {
        let typ = t[p];
        if typ != b'C' && typ != b'E' {
            continue;
        }
        if be32(&t[p + 1..]).map(|l| l as usize + 1) != Some(end - p) {
            continue;
        }
        let body = &t[p + 5..];
        if typ == b'C' {
            // A tag: printable ASCII, one NUL at its end.
            let (tag, rest) = cstr(body);
            if rest == Some(&[][..]) && !tag.is_empty() && tag.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
                let (cmd, rows) = tag_rows(tag);
                return Some(Completion::Tag { rows, cmd: cmd.to_vec() });
            }
        } else if body.ends_with(&[0, 0]) || body == [0] {
            return Some(Completion::Error(sqlstate(body)));
        }
    }
    None
}

impl Core {
    /// A startup-phase message (send).
    fn on_untyped(&mut self, m: Msg<'_>) {
        let code = m.bytes.get(4..).and_then(be32).unwrap_or(0);
        match code {
            SSL_REQUEST => self.ssl = Ssl::AwaitAnswer { gss: false },
            GSS_REQUEST => self.ssl = Ssl::AwaitAnswer { gss: true },
            // A cancel connection carries nothing else.
            CANCEL_REQUEST => {}
            c if c & 0xffff_0000 == PROTOCOL_3 => {
                let mut user = None;
                let mut database = None;
                let mut rest = m.bytes.get(8..).unwrap_or(&[]);
                // Pairs until the empty key; only user and database are
                // looked at (`options` and the rest are never kept).
                while let (key, Some(after_key)) = cstr(rest) {
                    if key.is_empty() {
                        break;
                    }
                    let (value, after_value) = cstr(after_key);
                    match key {
                        b"database" => database = Some(text(value, MAX_NAMESPACE)),
                        b"user" => user = Some(text(value, MAX_NAMESPACE)),
                        _ => {}
                    }
                    match after_value {
                        Some(r) => rest = r,
                        None => break,
                    }
                }
                // The server's default database is the user's name.
                self.namespace = database.filter(|d| !d.is_empty()).or(user);
                self.phase = Phase::Typed;
                // The server ends the startup with a ReadyForQuery of its
                // own: a Query sent before it (in the same write) must not
                // be ended by it. A Sync in the queue takes it. (Once per
                // connection: the phase is typed from here on.)
                self.queue.push_back(Entry::Sync);
            }
            _ => self.phase = Phase::Typed,
        }
    }

    fn new_op(&self, ts: u64) -> DbOp {
        let mut o = op(system::POSTGRESQL, ts);
        o.call.namespace = self.namespace.clone().map(Text::Owned);
        o
    }

    /// Queues a call. `true`: the queue overflowed and was given up.
    fn enqueue(&mut self, e: Entry, counts: &mut DbCounts) -> bool {
        if self.queue.len() >= MAX_PENDING {
            counts.too_many_pending += 1;
            counts.unanswered += self.queue.iter().filter(|e| matches!(e, Entry::Call { .. })).count() as u64;
            self.queue.clear();
            self.skip_until_sync = false;
            return true;
        }
        self.queue.push_back(e);
        false
    }

    fn remember(&mut self, name: &[u8], text: Arc<str>, counts: &mut DbCounts) {
        if name.len() > MAX_NAME {
            counts.evicted_statements += 1;
            return;
        }
        if self.statements.insert(name.into(), text).is_none() {
            self.order.push_back(name.into());
            if self.order.len() > MAX_STATEMENTS {
                if let Some(old) = self.order.pop_front() {
                    self.statements.remove(&old);
                    counts.evicted_statements += 1;
                }
            }
        }
    }

    fn forget(&mut self, name: &[u8]) {
        if self.statements.remove(name).is_some() {
            self.order.retain(|n| &**n != name);
        }
    }

    /// A typed frontend message. `true`: the queue overflowed.
    fn on_send(&mut self, m: Msg<'_>, ts: u64, counts: &mut DbCounts) -> bool {
        let body = m.bytes.get(5..).unwrap_or(&[]);
        match m.bytes[0] {
            b'Q' => {
                let (q, _) = cstr(body);
                let mut o = self.new_op(ts);
                set_sql(&mut o, &sql::sanitize(q, Dialect::Postgres, self.escapes(), self.charset()));
                return self.enqueue(Entry::Call { op: Box::new(o), simple: true, copy_out: false, first_done: false }, counts);
            }
            b'P' => {
                let (name, rest) = cstr(body);
                match rest {
                    Some(rest) => {
                        let (q, _) = cstr(rest);
                        let sanitized: Arc<str> = sql::sanitize(q, Dialect::Postgres, self.escapes(), self.charset()).into();
                        self.remember(name, sanitized, counts);
                    }
                    // The name was cut: that statement's text is unknown.
                    None => counts.evicted_statements += 1,
                }
            }
            b'B' => {
                let (portal, rest) = cstr(body);
                let stmt = rest.map(|r| cstr(r)).and_then(|(s, after)| after.map(|_| s));
                if portal.len() <= MAX_NAME {
                    let text = stmt.and_then(|s| self.statements.get(s).cloned());
                    if self.portals.len() >= MAX_PORTALS && !self.portals.contains_key(portal) {
                        // Portals are nearly always the unnamed one: a
                        // flood of named ones is simply forgotten.
                        self.portals.clear();
                    }
                    self.portals.insert(portal.into(), text);
                }
            }
            b'E' => {
                if self.skip_until_sync {
                    counts.skipped_after_error += 1;
                    return false;
                }
                let (portal, _) = cstr(body);
                let mut o = self.new_op(ts);
                match self.portals.get(portal) {
                    Some(Some(t)) => set_sql(&mut o, t),
                    _ => counts.unknown_statement += 1,
                }
                return self.enqueue(Entry::Call { op: Box::new(o), simple: false, copy_out: false, first_done: false }, counts);
            }
            b'S' => {
                self.skip_until_sync = false;
                return self.enqueue(Entry::Sync, counts);
            }
            b'C' => {
                let (name, _) = cstr(body.get(1..).unwrap_or(&[]));
                match body.first() {
                    Some(b'S') => self.forget(name),
                    Some(b'P') => {
                        self.portals.remove(name);
                    }
                    _ => {}
                }
            }
            // Describe, Flush, Terminate, COPY data/done/fail, password
            // and SASL messages (never read), function calls.
            _ => {}
        }
        false
    }

    /// A typed backend message.
    fn on_recv(&mut self, m: Msg<'_>, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) {
        let body = m.bytes.get(5..).unwrap_or(&[]);
        match m.bytes[0] {
            t @ (b'C' | b'I' | b's') => {
                let c = if t == b'C' {
                    let (tag, _) = cstr(body);
                    let (cmd, rows) = tag_rows(tag);
                    Completion::Tag { rows, cmd: cmd.to_vec() }
                } else {
                    Completion::Tag { rows: None, cmd: Vec::new() }
                };
                self.end_front(c, ts, out, counts);
            }
            b'E' => self.end_front(Completion::Error(sqlstate(body)), ts, out, counts),
            b'Z' => self.ready(ts, out),
            b'S' => self.parameter_status(body, m.whole),
            t @ (b'G' | b'H') => {
                if let Some(Entry::Call { copy_out, .. }) = self.queue.front_mut() {
                    *copy_out = t == b'H';
                }
            }
            _ => {}
        }
    }

    /// ParameterStatus: the server reports `standard_conforming_strings`
    /// and `client_encoding` at the start and whenever they change (a
    /// SET, a rollback of one).
    fn parameter_status(&mut self, body: &[u8], whole: bool) {
        let (name, rest) = cstr(body);
        let value = rest.map(|r| cstr(r).0).filter(|_| whole);
        match name {
            b"standard_conforming_strings" => {
                self.standard_strings = match value {
                    Some(b"on") => Some(true),
                    Some(b"off") => Some(false),
                    _ => None,
                }
            }
            b"client_encoding" => self.encoding = value.map(client_encoding),
            _ => {}
        }
    }

    /// The session's client character set for the statement sent now
    /// (known as [`Self::escapes`] is).
    fn charset(&self) -> Charset {
        match self.encoding {
            Some(cs) if self.queue.is_empty() => cs,
            _ => Charset::Unknown,
        }
    }

    /// How the server reads a backslash in the statement sent now: as
    /// the last ParameterStatus said, unless a call still in flight may
    /// change it (its ParameterStatus would come before its answer) or
    /// none was seen.
    fn escapes(&self) -> Escapes {
        match self.standard_strings {
            _ if !self.queue.is_empty() => Escapes::Unknown,
            Some(true) => Escapes::Standard,
            Some(false) => Escapes::Backslash,
            None => Escapes::Unknown,
        }
    }

    /// A completion for the oldest call.
    fn end_front(&mut self, c: Completion, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) {
        match self.queue.front_mut() {
            Some(Entry::Call { op, simple: true, copy_out, first_done }) => {
                // A simple Query: its first statement's rows, its first
                // error; it ends at `Z`.
                let is_error = matches!(c, Completion::Error(_));
                if is_error && op.call.error_type.is_none() || !is_error && !*first_done {
                    complete(op, &c, *copy_out);
                }
                *first_done = true;
            }
            Some(Entry::Call { simple: false, .. }) => {
                if let Some(Entry::Call { mut op, copy_out, .. }) = self.queue.pop_front() {
                    complete(&mut op, &c, copy_out);
                    op.end_ns = ts.max(op.start_ns);
                    done(out, op);
                }
                if matches!(c, Completion::Error(_)) {
                    // The server skips to Sync.
                    while let Some(Entry::Call { simple: false, .. }) = self.queue.front() {
                        self.queue.pop_front();
                        counts.skipped_after_error += 1;
                    }
                    if self.queue.is_empty() {
                        self.skip_until_sync = true;
                    }
                }
            }
            // An error of a Parse/Bind with no Execute, an auth failure,
            // or the answer to a request not seen.
            Some(Entry::Sync) | None => {
                if matches!(c, Completion::Tag { .. }) {
                    counts.unpaired_answers += 1;
                }
            }
        }
    }

    /// ReadyForQuery: ends a Query, or retires a Sync (and any Execute
    /// before it whose completion never came: it ends here).
    fn ready(&mut self, ts: u64, out: &mut Out<'_>) {
        while let Some(e) = self.queue.pop_front() {
            match e {
                Entry::Call { mut op, simple, .. } => {
                    op.end_ns = ts.max(op.start_ns);
                    done(out, op);
                    if simple {
                        return;
                    }
                }
                Entry::Sync => return,
            }
        }
    }

    /// The recv resync: if `tail` ends with ReadyForQuery, every pending
    /// call ends at `ts`, the last with the completion found right before
    /// the `Z`. `true` when it did.
    fn tail_resync(&mut self, tail: &[u8], ts: u64, out: &mut Out<'_>) -> bool {
        if !ends_with_ready(tail) {
            return false;
        }
        let last = last_completion(&tail[..tail.len() - 6]);
        let calls: Vec<(Box<DbOp>, bool)> = self
            .queue
            .drain(..)
            .filter_map(|e| if let Entry::Call { op, copy_out, .. } = e { Some((op, copy_out)) } else { None })
            .collect();
        let n = calls.len();
        for (i, (mut op, copy_out)) in calls.into_iter().enumerate() {
            if i + 1 == n {
                if let Some(c) = &last {
                    complete(&mut op, c, copy_out);
                }
            }
            op.end_ns = ts.max(op.start_ns);
            done(out, op);
        }
        self.skip_until_sync = false;
        true
    }
}

#[cfg(test)]
pub(super) mod tests;
