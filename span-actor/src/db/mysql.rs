//! MySQL and MariaDB classic protocol, client side: [`MyConn`].
//!
//! # Layout
//! ```text
//! packet   = u24le(len) u8(seq) payload(len)   (len 0xFFFFFF: continued in the next)
//! greeting = 0x0a cstring(server version) u32 ... caps (lower u16, upper u16) ...   (recv, first)
//! response = u32le(client caps) u32 u8 [23] cstring(user) auth(never read)
//!            [cstring(database) if CLIENT_CONNECT_WITH_DB] ...
//! ssl request = the first 32 bytes of a response, CLIENT_SSL set: TLS follows
//! command  = u8(cmd) body, seq 0: COM_QUERY 0x03 text, COM_STMT_PREPARE 0x16
//!            text, COM_STMT_EXECUTE 0x17 u32le(id) (parameters never read),
//!            COM_STMT_CLOSE 0x19 u32le(id), COM_INIT_DB 0x02 name, ...
//! answer   = OK 0x00 | ERR 0xff u16le(code) ['#' sqlstate] message(never read)
//!          | result set: lenenc(columns), column definitions, [EOF],
//!            rows, EOF/OK 0xfe (status flag MORE_RESULTS: another follows)
//! ```
//!
//! # Decisions
//! - A call is a COM_QUERY or a COM_STMT_EXECUTE (with its statement's
//!   text). COM_STMT_PREPARE is not a call the application made: no op,
//!   counted `prepares`, its text remembered under the id the server's
//!   answer gives. COM_INIT_DB changes the namespace when answered OK (no
//!   op), as does a database in the handshake response. COM_PING,
//!   COM_STMT_RESET, COM_RESET_CONNECTION... are not calls either
//!   (pool health checks): their answers are ignored.
//! - `returned_rows` is the number of rows of every result set of the
//!   call, set only when every row header was seen.
//! - An ERR gives `status_code` and `error_type`: the error number, as
//!   decimal text (`1064`); never the message.
//! - Statements are sanitized by the session's backslash rule: the status
//!   flags of the greeting and of each OK and EOF say whether `sql_mode`
//!   has NO_BACKSLASH_ESCAPES; not known (traced mid-way, a call still
//!   unanswered), [`sql::sanitize`] reads the text both ways. And by its
//!   client character set (big5, sjis, cp932, gbk, gb18030 have
//!   characters whose second byte is a backslash or a backtick): the
//!   handshake response's collation says it; not known (traced mid-way,
//!   or since a statement that may have changed it: one that says
//!   `names`, `charset` or `character`, or a COM_CHANGE_USER), the text
//!   is read in each set.
//! - Query attributes (CLIENT_QUERY_ATTRIBUTES) are skipped by their
//!   types' lengths, never read; when the handshake was not seen, a body
//!   shaped as attributes (a count, then a set count of 1: no SQL text
//!   starts so) is read as them.
//!
//! # Desync and resync
//! The protocol is one command, one answer. A recv desync is recovered by
//! a recv record whose captured tail ends with a complete terminator
//! (0xfe, short, no MORE_RESULTS) or ERR packet: the pending call ends
//! there (no row count). A send desync is recovered by a send record that
//! starts with a sequence-0 packet of a known command.
//!
//! # Memory
//! Two [`Stream`]s, one pending call, at most [`MAX_STATEMENTS`] prepared
//! statements (sanitized text ≤ 2 KiB each).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ipc_schema::db::system;
use ipc_schema::Text;

use super::pieces::{self, Piece};
use super::sql::{self, Charset, Dialect, Escapes};
use super::stream::{Frame, Next, Stream, MAX_BUFFERED};
use super::{done, op, op_heap, set_sql, text, DbCounts, DbOp, Out, MAX_STATEMENTS};

const CLIENT_CONNECT_WITH_DB: u32 = 0x0000_0008;
const CLIENT_PROTOCOL_41: u32 = 0x0000_0200;
const CLIENT_SSL: u32 = 0x0000_0800;
const CLIENT_SECURE_CONNECTION: u32 = 0x0000_8000;
const CLIENT_PLUGIN_AUTH_LENENC: u32 = 0x0020_0000;
const CLIENT_DEPRECATE_EOF: u32 = 0x0100_0000;
const CLIENT_QUERY_ATTRIBUTES: u32 = 0x0800_0000;

/// SERVER_MORE_RESULTS_EXISTS in a terminator's status flags.
const MORE_RESULTS: u16 = 0x0008;
/// SERVER_STATUS_NO_BACKSLASH_ESCAPES: the session's `sql_mode` has
/// NO_BACKSLASH_ESCAPES (in the greeting's and every OK's and EOF's
/// status flags).
const NO_BACKSLASH_ESCAPES: u16 = 0x0200;

const COM_QUIT: u8 = 0x01;
const COM_INIT_DB: u8 = 0x02;
const COM_QUERY: u8 = 0x03;
const COM_CHANGE_USER: u8 = 0x11;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
const COM_STMT_CLOSE: u8 = 0x19;

/// Kept length of a database name.
const MAX_NAMESPACE: usize = 128;

fn u24(b: &[u8]) -> Option<u32> {
    b.get(..3).map(|b| u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16)
}

fn u16le(b: &[u8]) -> Option<u16> {
    b.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

fn u32le(b: &[u8]) -> Option<u32> {
    b.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A length-encoded integer: (value, bytes it took).
fn lenenc(b: &[u8]) -> Option<(u64, usize)> {
    let (&first, rest) = b.split_first()?;
    let n = match first {
        0..=0xfa => return Some((u64::from(first), 1)),
        0xfc => 2,
        0xfd => 3,
        0xfe => 8,
        _ => return None,
    };
    let v = rest.get(..n)?.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x));
    Some((v, 1 + n))
}

/// How a collation (the handshake response's one byte) builds characters:
/// big5 (1, 84), gbk (28, 87) and sjis (13, 88), cp932 (95, 96) have
/// characters whose second byte is a backslash or a backtick; gb18030's
/// ids (248–250) are MySQL's, and other collations in MariaDB: not known.
/// Every other character set a client may use keeps ASCII bytes ASCII.
fn collation_charset(id: u8) -> Charset {
    match id {
        1 | 84 | 28 | 87 => Charset::Wide,
        13 | 88 | 95 | 96 => Charset::Sjis,
        248..=250 => Charset::Unknown,
        _ => Charset::Plain,
    }
}

/// Whether a statement may change the client character set (`SET NAMES`,
/// `SET CHARACTER SET`, `CHARSET`, `character_set_client`): it says
/// `names`, `charset` or `character` anywhere (a superset: a column so
/// named only costs readings).
fn may_set_charset(text: &[u8]) -> bool {
    [&b"names"[..], b"charset", b"character"].iter().any(|w| text.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w)))
}

fn frame(h: &[u8]) -> Frame {
    match u24(h) {
        Some(len) if h.len() >= 4 => Frame::Len(u64::from(len) + 4),
        _ => Frame::Need,
    }
}

/// Whether `b` starts with a protocol-10 server greeting (for
/// [`super::detect`] and the first recv).
pub fn is_greeting(b: &[u8]) -> bool {
    let (Some(len), Some(&0), Some(&10)) = (u24(b), b.get(3), b.get(4)) else {
        return false;
    };
    let version = b.get(5..).unwrap_or(&[]);
    let end = memchr::memchr(0, version);
    (20..=1024).contains(&len)
        && version.first().is_some_and(u8::is_ascii_digit)
        && end.is_some_and(|e| e < 64 && version[..e].iter().all(|c| c.is_ascii_graphic()))
}

/// The connection's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Nothing seen: the first record tells (a greeting, or a connection
    /// traced mid-way).
    #[default]
    Unknown,
    /// Greeting seen: the handshake response (or SSL request) comes.
    Handshake,
    /// Authentication exchange: nothing is read until the server's OK.
    Auth,
    /// Commands.
    Command,
}

/// Where a result set's parsing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rs {
    /// The answer's first packet.
    First,
    /// Column definitions left.
    Columns(u64),
    /// Rows; `eof`: the EOF after the columns was seen (without
    /// DEPRECATE_EOF it comes before the rows, and is not the end).
    Rows { eof: bool },
}

/// The answer awaited.
#[derive(Debug, Default)]
enum Resp {
    /// None: an answer now is unpaired.
    #[default]
    None,
    /// An answer nobody reads (ping, reset, a prepare's definitions...),
    /// up to the next command.
    Ignore,
    /// A call's answer (boxed: the other states are small).
    Call { op: Box<DbOp>, rs: Rs, rows: u64 },
    /// A prepare's OK gives the statement id for this text.
    Prepare(Arc<str>),
    /// COM_INIT_DB: the namespace if OK.
    InitDb(String),
}

/// The connection's state besides its two streams.
#[derive(Debug, Default)]
struct St {
    phase: Phase,
    mariadb: bool,
    server_caps: Option<u32>,
    client_caps: Option<u32>,
    tls_only: bool,
    namespace: Option<String>,
    statements: HashMap<u32, Arc<str>>,
    order: VecDeque<u32>,
    resp: Resp,
    /// The next send packet continues a 16 MiB one.
    send_continued: bool,
    /// NO_BACKSLASH_ESCAPES, as the last status flags said (`None`: none
    /// seen, or the recv side lost its place since).
    no_backslash: Option<bool>,
    /// The client character set, as the handshake response said (`None`:
    /// not seen, or a statement may have changed it since).
    charset: Option<Charset>,
}

/// One MySQL/MariaDB client connection. See the module doc.
#[derive(Debug, Default)]
pub struct MyConn {
    send: Stream,
    recv: Stream,
    st: St,
}

impl MyConn {
    /// `mysql`, or `mariadb` once the greeting said so.
    pub fn system_name(&self) -> &'static str {
        if self.st.mariadb {
            system::MARIADB
        } else {
            system::MYSQL
        }
    }

    /// Calls awaiting their answer (0 or 1).
    pub fn pending(&self) -> usize {
        usize::from(matches!(self.st.resp, Resp::Call { .. }))
    }

    /// Approximate bytes held.
    pub fn held_bytes(&self) -> usize {
        let pending = if let Resp::Call { op, .. } = &self.st.resp { op_heap(op) } else { 0 };
        self.send.held() + self.recv.held() + pending + self.st.statements.values().map(|t| t.len() + 48).sum::<usize>()
    }

    /// Counts the pending call unanswered and forgets it.
    pub fn abort(&mut self, counts: &mut DbCounts) {
        counts.unanswered += self.pending() as u64;
        self.st.resp = Resp::None;
    }

    /// One record (see [`super::DbConn::feed`]; `pieces` is valid).
    pub fn feed(&mut self, send: bool, ts: u64, tls: bool, bytes: &[u8], out: &mut Out<'_>, counts: &mut DbCounts) {
        if !tls && self.st.tls_only {
            counts.ciphertext_records += 1;
            return;
        }
        let first = match pieces::pieces(bytes).next() {
            Some(Ok(Piece::Bytes(b))) => Some(b),
            _ => None,
        };
        if self.st.phase == Phase::Unknown {
            self.st.phase = if !send && first.is_some_and(is_greeting) { Phase::Handshake } else { Phase::Command };
        }
        let stream = if send { &mut self.send } else { &mut self.recv };
        if send && stream.desynced() {
            if first.is_some_and(|b| self.st.phase == Phase::Command && is_command_start(b)) {
                stream.restart();
                counts.resync += 1;
            } else {
                return;
            }
        }
        for piece in pieces::pieces(bytes).flatten() {
            stream.push(piece);
            loop {
                match stream.next(frame) {
                    Next::Msg(m) => {
                        if m.len > MAX_BUFFERED as u64 {
                            counts.too_large += 1;
                        }
                        let p = m.bytes.get(4..).unwrap_or(&[]);
                        let desync = if send {
                            let continued = std::mem::replace(&mut self.st.send_continued, m.len == 0xFF_FFFF + 4);
                            if !continued {
                                self.st.on_send(p, m.bytes[3], ts, counts);
                            }
                            false
                        } else {
                            self.st.on_recv(p, m.whole, ts, out, counts)
                        };
                        if desync {
                            counts.desync += 1;
                            stream.desync();
                            if !send {
                                // Status flags may go by unseen.
                                self.st.no_backslash = None;
                            }
                            break;
                        }
                    }
                    Next::Wait => break,
                    Next::Desync => {
                        counts.desync += 1;
                        if !send {
                            self.st.no_backslash = None;
                        }
                        break;
                    }
                }
            }
        }
        if !send && self.recv.desynced() {
            if let Some(tail) = pieces::tail(bytes) {
                if self.st.tail_resync(tail, ts, out) {
                    self.recv.restart();
                    counts.resync += 1;
                }
            }
        }
    }
}

impl St {
    fn deprecate_eof(&self) -> Option<bool> {
        match (self.server_caps, self.client_caps) {
            (Some(s), Some(c)) => Some(s & c & CLIENT_DEPRECATE_EOF != 0),
            _ => None,
        }
    }

    /// How the server reads a backslash in the statement sent now: as the
    /// last status flags said, unless a call is still unanswered (it may
    /// change `sql_mode`) or none were seen.
    fn escapes(&self) -> Escapes {
        match self.no_backslash {
            _ if matches!(self.resp, Resp::Call { .. }) => Escapes::Unknown,
            Some(true) => Escapes::Standard,
            Some(false) => Escapes::Backslash,
            None => Escapes::Unknown,
        }
    }

    /// Status flags from an OK, EOF or greeting.
    fn status_flags(&mut self, flags: u16) {
        self.no_backslash = Some(flags & NO_BACKSLASH_ESCAPES != 0);
    }

    fn new_op(&self, ts: u64) -> DbOp {
        let mut o = op(if self.mariadb { system::MARIADB } else { system::MYSQL }, ts);
        o.call.namespace = self.namespace.clone().map(Text::Owned);
        o
    }

    /// A client packet's payload (not a continuation).
    fn on_send(&mut self, p: &[u8], seq: u8, ts: u64, counts: &mut DbCounts) {
        match self.phase {
            // A command starts a sequence; other packets (LOCAL INFILE
            // data) are not commands.
            Phase::Unknown | Phase::Command if seq == 0 => self.command(p, ts, counts),
            Phase::Unknown | Phase::Command => {}
            Phase::Handshake => self.handshake_response(p),
            // Authentication data: never read.
            Phase::Auth => {}
        }
    }

    fn handshake_response(&mut self, p: &[u8]) {
        let Some(caps) = u32le(p) else { return };
        self.client_caps = Some(caps);
        if caps & CLIENT_PROTOCOL_41 == 0 {
            // Protocol 320: nothing to read; commands follow the OK.
            self.phase = Phase::Auth;
            return;
        }
        if p.len() == 32 && caps & CLIENT_SSL != 0 {
            // SSL request: the real response comes again inside TLS.
            self.tls_only = true;
            return;
        }
        self.phase = Phase::Auth;
        self.charset = p.get(8).map(|&c| collation_charset(c));
        // caps, max packet, charset, 23 reserved; the user name.
        let Some(rest) = p.get(32..) else { return };
        let Some(user_end) = memchr::memchr(0, rest) else { return };
        let rest = &rest[user_end + 1..];
        // The auth response: skipped by its length, never read.
        let skip = if caps & CLIENT_PLUGIN_AUTH_LENENC != 0 {
            lenenc(rest).and_then(|(n, k)| usize::try_from(n).ok()?.checked_add(k))
        } else if caps & CLIENT_SECURE_CONNECTION != 0 {
            rest.first().map(|&n| usize::from(n) + 1)
        } else {
            memchr::memchr(0, rest).map(|e| e + 1)
        };
        if caps & CLIENT_CONNECT_WITH_DB != 0 {
            if let Some(db) = skip.and_then(|s| rest.get(s..)) {
                let name = &db[..memchr::memchr(0, db).unwrap_or(db.len())];
                if !name.is_empty() {
                    self.namespace = Some(text(name, MAX_NAMESPACE));
                }
            }
        }
    }

    fn command(&mut self, p: &[u8], ts: u64, counts: &mut DbCounts) {
        let Some((&cmd, body)) = p.split_first() else { return };
        if cmd == COM_CHANGE_USER || matches!(cmd, COM_QUERY | COM_STMT_PREPARE) && may_set_charset(body) {
            self.charset = None;
        }
        if let Resp::Call { .. } = self.resp {
            // A new command while one is unanswered: that answer is lost.
            counts.unanswered += 1;
        }
        self.resp = match cmd {
            COM_QUERY => {
                let mut o = self.new_op(ts);
                let escapes = self.escapes();
                let attrs = self.client_caps.zip(self.server_caps).map(|(c, s)| c & s & CLIENT_QUERY_ATTRIBUTES != 0);
                let q = match attrs {
                    Some(true) => after_attributes(body),
                    Some(false) => Some(body),
                    // The handshake was not seen: a body shaped as
                    // attributes is read as them (no SQL text starts so),
                    // so their values are never read as text.
                    None if attributes_shaped(body) => after_attributes(body),
                    None => Some(body),
                };
                if let Some(q) = q {
                    set_sql(&mut o, &sql::sanitize(q, Dialect::MySql, escapes, self.charset.unwrap_or(Charset::Unknown)));
                }
                Resp::Call { op: Box::new(o), rs: Rs::First, rows: 0 }
            }
            COM_STMT_PREPARE => {
                counts.prepares += 1;
                Resp::Prepare(sql::sanitize(body, Dialect::MySql, self.escapes(), self.charset.unwrap_or(Charset::Unknown)).into())
            }
            COM_STMT_EXECUTE => {
                let mut o = self.new_op(ts);
                match u32le(body).and_then(|id| self.statements.get(&id)) {
                    Some(t) => set_sql(&mut o, t),
                    None => counts.unknown_statement += 1,
                }
                Resp::Call { op: Box::new(o), rs: Rs::First, rows: 0 }
            }
            COM_STMT_CLOSE => {
                if let Some(id) = u32le(body) {
                    if self.statements.remove(&id).is_some() {
                        self.order.retain(|&x| x != id);
                    }
                }
                Resp::None
            }
            COM_INIT_DB => Resp::InitDb(text(body, MAX_NAMESPACE)),
            COM_QUIT | COM_STMT_SEND_LONG_DATA => Resp::None,
            COM_CHANGE_USER => {
                self.phase = Phase::Auth;
                Resp::None
            }
            _ => Resp::Ignore,
        };
    }

    /// A server packet's payload. `true`: the stream is not where we
    /// thought (a desync).
    fn on_recv(&mut self, p: &[u8], whole: bool, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) -> bool {
        match self.phase {
            Phase::Unknown | Phase::Handshake => {
                if p.first() == Some(&10) {
                    self.greeting(p);
                }
                false
            }
            Phase::Auth => {
                if p.first() == Some(&0x00) {
                    self.phase = Phase::Command;
                    self.resp = Resp::None;
                    self.status_flags(Self::status(p));
                }
                false
            }
            Phase::Command => self.answer(p, whole, ts, out, counts),
        }
    }

    fn greeting(&mut self, p: &[u8]) {
        let version_end = memchr::memchr(0, &p[1..]).map_or(p.len(), |e| e + 1);
        let version = &p[1..version_end];
        self.mariadb = memchr::memmem::find(version, b"MariaDB").is_some();
        // version NUL, conn id (4), auth data (8), filler (1).
        let at = version_end + 1 + 4 + 8 + 1;
        if let (Some(lower), Some(upper)) = (p.get(at..).and_then(u16le), p.get(at + 5..).and_then(u16le)) {
            self.server_caps = Some(u32::from(lower) | u32::from(upper) << 16);
        }
        // caps (lower), charset, status flags.
        if let Some(flags) = p.get(at + 3..).and_then(u16le) {
            self.status_flags(flags);
        }
    }

    /// Whether a packet ends a result set (EOF or the OK that replaces
    /// it): 0xfe and short; a row starting with 0xfe is 9 bytes or more
    /// (and with DEPRECATE_EOF, 16 MiB or more).
    fn is_terminator(&self, p: &[u8]) -> bool {
        p.first() == Some(&0xfe) && (p.len() < 9 || self.deprecate_eof() == Some(true) && p.len() < 0xFF_FFFF)
    }

    /// The status flags of an OK or EOF payload.
    fn status(p: &[u8]) -> u16 {
        if p.first() == Some(&0xfe) && p.len() == 5 {
            return u16le(&p[3..]).unwrap_or(0);
        }
        let rest = p.get(1..).unwrap_or(&[]);
        let Some((_, a)) = lenenc(rest) else { return 0 };
        let Some((_, b)) = rest.get(a..).and_then(lenenc) else { return 0 };
        rest.get(a + b..).and_then(u16le).unwrap_or(0)
    }

    fn answer(&mut self, p: &[u8], whole: bool, ts: u64, out: &mut Out<'_>, counts: &mut DbCounts) -> bool {
        let mut desync = false;
        self.resp = match std::mem::take(&mut self.resp) {
            Resp::None => {
                counts.unpaired_answers += 1;
                Resp::Ignore
            }
            Resp::Ignore => Resp::Ignore,
            Resp::Prepare(text) => {
                if p.first() == Some(&0x00) {
                    if let Some(id) = p.get(1..).and_then(u32le) {
                        self.remember(id, text, counts);
                    }
                }
                // Parameter and column definitions follow: not read.
                Resp::Ignore
            }
            Resp::InitDb(name) => {
                if p.first() == Some(&0x00) {
                    self.namespace = Some(name);
                    self.status_flags(Self::status(p));
                }
                Resp::Ignore
            }
            Resp::Call { mut op, rs, rows } => {
                let first = p.first().copied();
                let mut finish = |mut op: Box<DbOp>, rows: Option<u64>| {
                    op.call.returned_rows = rows;
                    op.end_ns = ts.max(op.start_ns);
                    done(out, op);
                    Resp::Ignore
                };
                if first == Some(0xff) {
                    // ERR, at any point of the answer.
                    set_error(&mut op, p);
                    finish(op, None)
                } else {
                    match rs {
                        Rs::First => match first {
                            Some(0x00) => {
                                let flags = Self::status(p);
                                self.no_backslash = Some(flags & NO_BACKSLASH_ESCAPES != 0);
                                if flags & MORE_RESULTS != 0 {
                                    Resp::Call { op, rs: Rs::First, rows }
                                } else {
                                    finish(op, (rows > 0).then_some(rows))
                                }
                            }
                            // LOCAL INFILE: the client sends the file, then
                            // the server answers.
                            Some(0xfb) => Resp::Call { op, rs: Rs::First, rows },
                            _ => match lenenc(p) {
                                Some((n, _)) if whole && n > 0 => Resp::Call { op, rs: Rs::Columns(n), rows },
                                _ => {
                                    desync = true;
                                    Resp::Call { op, rs, rows }
                                }
                            },
                        },
                        Rs::Columns(n) if n > 1 => Resp::Call { op, rs: Rs::Columns(n - 1), rows },
                        Rs::Columns(_) => Resp::Call { op, rs: Rs::Rows { eof: self.deprecate_eof() == Some(true) }, rows },
                        Rs::Rows { eof } if self.is_terminator(p) => {
                            let flags = Self::status(p);
                            self.no_backslash = Some(flags & NO_BACKSLASH_ESCAPES != 0);
                            if !eof && p.len() < 9 {
                                // The EOF after the column definitions.
                                Resp::Call { op, rs: Rs::Rows { eof: true }, rows }
                            } else if flags & MORE_RESULTS != 0 {
                                Resp::Call { op, rs: Rs::First, rows }
                            } else {
                                finish(op, Some(rows))
                            }
                        }
                        Rs::Rows { eof } => {
                            // A row: the columns' EOF, if any, is behind.
                            let _ = eof;
                            Resp::Call { op, rs: Rs::Rows { eof: true }, rows: rows.saturating_add(1) }
                        }
                    }
                }
            }
        };
        desync
    }

    fn remember(&mut self, id: u32, text: Arc<str>, counts: &mut DbCounts) {
        if self.statements.insert(id, text).is_none() {
            self.order.push_back(id);
            if self.order.len() > MAX_STATEMENTS {
                if let Some(old) = self.order.pop_front() {
                    self.statements.remove(&old);
                    counts.evicted_statements += 1;
                }
            }
        }
    }

    /// The recv resync (see the module doc).
    fn tail_resync(&mut self, t: &[u8], ts: u64, out: &mut Out<'_>) -> bool {
        let end = t.len();
        for p in (0..end.saturating_sub(4)).rev().take(600) {
            let Some(len) = u24(&t[p..]) else { continue };
            if p + 4 + len as usize != end {
                continue;
            }
            let payload = &t[p + 4..];
            let ok = match payload.first() {
                Some(0xfe) => payload.len() < 64 && Self::status(payload) & MORE_RESULTS == 0,
                Some(0xff) => payload.len() >= 3,
                _ => false,
            };
            if !ok {
                continue;
            }
            if let Resp::Call { mut op, .. } = std::mem::take(&mut self.resp) {
                if payload[0] == 0xff {
                    set_error(&mut op, payload);
                }
                op.end_ns = ts.max(op.start_ns);
                done(out, op);
            }
            self.resp = Resp::Ignore;
            return true;
        }
        false
    }
}

/// ERR: the error number as status and type; never the message.
fn set_error(op: &mut DbOp, p: &[u8]) {
    let code = p.get(1..).and_then(u16le).map(|c| c.to_string());
    op.call.error_type = Some(Text::Owned(code.clone().unwrap_or_else(|| "_OTHER".to_owned())));
    op.call.status_code = code.map(Text::Owned);
}

/// Whether a COM_QUERY body starts as query attributes do
/// (CLIENT_QUERY_ATTRIBUTES): a parameter count, then a parameter set
/// count of 1. SQL text never does (its second byte would be 0x01).
fn attributes_shaped(body: &[u8]) -> bool {
    lenenc(body).is_some_and(|(_, k)| body.get(k) == Some(&1))
}

/// The query text after a COM_QUERY's attributes (parameter count, set
/// count, null bitmap, bind flag, types and names, values): the values
/// are skipped by their types' lengths, never read. `None` when they do
/// not parse (the text is then not read at all).
fn after_attributes(body: &[u8]) -> Option<&[u8]> {
    let (n, k) = lenenc(body)?;
    let mut at = k;
    let (sets, k) = lenenc(body.get(at..)?)?;
    at += k;
    if n == 0 {
        return body.get(at..);
    }
    // At most one set (always 1 today), and a count a packet can hold.
    if sets != 1 || n > 4096 {
        return None;
    }
    let n = n as usize;
    let bitmap = body.get(at..at + n.div_ceil(8))?;
    at += n.div_ceil(8);
    if body.get(at) != Some(&1) {
        return None;
    }
    at += 1;
    let mut types = Vec::with_capacity(n);
    for _ in 0..n {
        types.push(*body.get(at)?);
        at += 2;
        let (len, k) = lenenc(body.get(at..)?)?;
        at = at.checked_add(k)?.checked_add(usize::try_from(len).ok()?)?;
    }
    for (i, t) in types.into_iter().enumerate() {
        if bitmap[i / 8] & (1 << (i % 8)) != 0 {
            continue; // NULL: no value
        }
        let len = match t {
            1 => 1,
            2 | 13 => 2,
            3 | 4 | 9 => 4,
            5 | 8 => 8,
            6 => 0,
            // TIMESTAMP, DATE, TIME, DATETIME: a length byte, then that many.
            7 | 10 | 11 | 12 => 1 + usize::from(*body.get(at)?),
            // Strings, decimals, blobs, JSON, BIT, ENUM, SET, GEOMETRY.
            0 | 15 | 16 | 245..=255 => {
                let (len, k) = lenenc(body.get(at..)?)?;
                k.checked_add(usize::try_from(len).ok()?)?
            }
            _ => return None,
        };
        at = at.checked_add(len)?;
    }
    body.get(at..)
}

/// Whether a send record starting with `b` is a sequence-0 command packet
/// (the send resync).
fn is_command_start(b: &[u8]) -> bool {
    matches!((u24(b), b.get(3), b.get(4)), (Some(len), Some(&0), Some(&cmd))
        if len >= 1 && matches!(cmd, COM_QUIT | COM_INIT_DB | COM_QUERY | COM_STMT_PREPARE | COM_STMT_EXECUTE | COM_STMT_CLOSE | 0x0e | 0x1a | 0x1f))
}

#[cfg(test)]
pub(super) mod tests;
