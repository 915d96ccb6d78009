//! Database wire protocols in user space: the kernel's records of a
//! CLIENT's database connection in, one [`DbOp`] per database call out.
//! Pure logic: no I/O, no clock, no global state.
//!
//! For each send or receive a traced client makes on a database
//! connection, the kernel ships a record: the direction, the monotonic
//! time the syscall completed, whether the bytes are TLS plaintext (from
//! the TLS uprobes) or socket bytes, and the captured bytes as
//! [`pieces`]: the head of the syscall's bytes, a LOST count for the
//! middle, and its last bytes. [`DbConn`] follows one connection: a
//! [`stream::Stream`] per direction frames the protocol's messages and
//! skips bodies lost in the middle, and the protocol's state machine
//! pairs requests with their answers.
//!
//! **Nothing secret, ever.** No bound parameter value, password or
//! authentication message, Redis or memcached value, Redis `AUTH`/`HELLO`
//! argument or server error message is kept or output: query text is
//! [`sql::sanitize`]d before it is stored, Redis and memcached arguments
//! become `?`, errors are reduced to their code.
//!
//! **Never a guess.** A call whose request was not seen produces no op; a
//! prepared statement from before tracing gives an op without text
//! (counted `unknown_statement`); when a direction loses its place (a
//! header in a LOST region) the protocol recovers only at a boundary it
//! can prove (each module says which), and what it cannot pair is counted.
//!
//! # Layout
//! - [`pieces`]: the record's piece bytes (hostile) into [`pieces::Piece`]s.
//! - [`stream`]: one direction: framing, LOST regions, desync.
//! - [`sql`]: SQL sanitizing, operation, collection and summary (shared by
//!   PostgreSQL and MySQL).
//! - [`postgres`]: PostgreSQL v3 (simple and extended query, pipelines,
//!   COPY, SSLRequest).
//! - [`mysql`]: MySQL and MariaDB classic protocol (text and prepared
//!   statements).
//! - [`redis`]: RESP2/RESP3 (pipelines, MULTI/EXEC, pub/sub, pushes).
//! - [`memcached`]: the text protocol (and meta commands).
//! - here: [`DbOp`], [`DbCounts`], [`System`], [`detect`] and [`DbConn`];
//!   [`judge`], the database conventions' span parts of a call; [`FAMILY`],
//!   the databases as a family of [`crate::stream_table`].
//! - tests: each protocol's beside it (`postgres/tests.rs`, `mysql/tests.rs`,
//!   `redis/tests.rs`, `memcached/tests.rs`); those across protocols in
//!   `tests.rs` and `gap_tests.rs`; what they share in `testing.rs`.
//!
//! # Memory per connection
//! Two streams of at most [`stream::MAX_BUFFERED`] (64 KiB) unparsed
//! bytes each (plus one piece, ≤ 64 KiB, while it is parsed), the
//! requests awaiting answers (at most [`MAX_PENDING`], each a few hundred
//! bytes plus its sanitized text, ≤ 2 KiB), and prepared statements (at
//! most [`MAX_STATEMENTS`] × ([`MAX_STATEMENT_TEXT`] + name ≤
//! [`MAX_NAME`])). A pending op holds at most its text (2 KiB), summary
//! and collection (255 B each) and namespace (128 B). Worst case about
//! 2 × 128 KiB + 1024 × 3 KiB + 256 × 2.3 KiB ≈ 4 MiB for a hostile
//! connection ([`DbConn::held_bytes`] counts it), a few KiB for an idle
//! one (buffers shrink when empty). The caller bounds the number of
//! connections.

#[cfg(test)]
mod gap_tests;
pub mod memcached;
pub mod mysql;
pub mod pieces;
pub mod postgres;
pub mod redis;
pub mod sql;
pub mod stream;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use ipc_schema::db::system;
use ipc_schema::{DbCall, Text};

use crate::operation::{Addrs, Call, Conn, SpanParts};
use crate::stream_table::{calls_of, Calls, Family, Followed, StreamConn};

/// Requests awaiting an answer kept per connection (a pipeline deeper than
/// this is given up: counted `too_many_pending`, its ops `unanswered`).
pub const MAX_PENDING: usize = 1024;

/// Prepared statements remembered per connection (PostgreSQL named
/// statements, MySQL statement ids); past it the oldest is forgotten
/// (counted `evicted_statements`: its executions then have no text).
pub const MAX_STATEMENTS: usize = 256;

/// A statement's kept text: it is kept sanitized, so at most
/// [`sql::MAX_QUERY_TEXT`] bytes.
pub const MAX_STATEMENT_TEXT: usize = sql::MAX_QUERY_TEXT;

/// `db.operation.name` of a call whose command is not one of the
/// protocol's known names (a metric label: what a client sends there is
/// never exported), as HTTP's `_OTHER` method.
pub const OTHER: &str = "_OTHER";

/// Longest statement or portal name remembered (a longer one is not
/// remembered: its executions have no text, counted).
pub const MAX_NAME: usize = 128;

/// One database call: when, and what it was under the database
/// conventions, already in the form its span carries
/// ([`ipc_schema::DbCall`]: `db.query.text` sanitized (no literal, no
/// value, ≤ 2 KiB), `db.query.summary` ≤ 255 bytes, `db.collection.name`
/// only when the call acts on one table, `db.response.status_code` and
/// `error.type` set on errors, `db.response.returned_rows` when every row
/// was counted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbOp {
    /// CLOCK_MONOTONIC ns of the send record that carried the call's
    /// request (its last needed message, e.g. PostgreSQL's Execute).
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns of the recv record that carried its completion.
    pub end_ns: u64,
    /// The call (its `system` one of `ipc_schema::db::system`).
    pub call: DbCall<Text>,
}

/// What the database conventions make of a call (a CLIENT's, over
/// `conn`): named `db.query.summary`, else the operation, else the system
/// (the system's for `_OTHER`, as `HTTP` is for an `_OTHER` method); its
/// `db.*` attributes as the parsers decided them; the server is its peer.
#[inline]
pub fn judge(op: Box<DbOp>, conn: &Conn, addrs: &mut Addrs) -> SpanParts {
    let DbOp { start_ns: _, end_ns: _, call } = *op;
    // `_OTHER` (a command not known) is no name: the system's is.
    let name = match (&call.query_summary, &call.operation) {
        (Some(s), _) => s.clone(),
        (None, Some(s)) if *s != OTHER => s.clone(),
        _ => call.system.clone(),
    };
    let error = call.error_type.is_some();
    SpanParts::to_peer(conn, addrs, name, error, ipc_schema::Call::Db(call))
}

/// What the parsers dropped or could not know, by reason. Reasons are
/// fixed (metric label values); add with [`DbCounts::add`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DbCounts {
    /// Records whose pieces were malformed (the connection was given up).
    pub malformed: u64,
    /// Times a direction lost its place (a header in a LOST region, a bad
    /// header, unframable bytes).
    pub desync: u64,
    /// Times a direction found its place again at a provable boundary.
    pub resync: u64,
    /// Calls whose request was seen but whose answer never could be paired
    /// (desync, connection given up, closed): no op.
    pub unanswered: u64,
    /// PostgreSQL Executes the server skipped after an error in their
    /// pipeline (no op: the server did not run them).
    pub skipped_after_error: u64,
    /// Executions of a prepared statement prepared before tracing (or
    /// forgotten): op without query text.
    pub unknown_statement: u64,
    /// Prepared statements forgotten over [`MAX_STATEMENTS`] (or with a
    /// name over [`MAX_NAME`]).
    pub evicted_statements: u64,
    /// Messages longer than [`stream::MAX_BUFFERED`]: read from their
    /// head, the rest skipped.
    pub too_large: u64,
    /// Requests over [`MAX_PENDING`] awaiting answers: the connection's
    /// pending calls were given up.
    pub too_many_pending: u64,
    /// Redis pushes and pub/sub messages (not calls).
    pub pushes_ignored: u64,
    /// Requests with no answer by design (memcached `noreply` and
    /// `quit`), and a Redis QUIT whose `+OK` did not come before the
    /// connection closed: no op.
    pub no_reply: u64,
    /// Statement preparations (MySQL COM_STMT_PREPARE): not a call the
    /// application made, no op.
    pub prepares: u64,
    /// Answers with no request waiting (the request was not seen).
    pub unpaired_answers: u64,
    /// Records ignored because the connection switched to TLS (socket
    /// bytes are then ciphertext).
    pub ciphertext_records: u64,
    /// Connections given up for good (malformed records, a protocol that
    /// cannot resync).
    pub given_up: u64,
    /// Calls awaiting an answer when a record told of records the kernel's
    /// ring had no room for (Redis, memcached: their answers may have
    /// been in them): not traced. (The calls whose sends were lost are
    /// the loader's, counted under the same reason.)
    pub calls_lost: u64,
}

impl DbCounts {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &DbCounts) {
        let DbCounts {
            malformed,
            desync,
            resync,
            unanswered,
            skipped_after_error,
            unknown_statement,
            evicted_statements,
            too_large,
            too_many_pending,
            pushes_ignored,
            no_reply,
            prepares,
            unpaired_answers,
            ciphertext_records,
            given_up,
            calls_lost,
        } = *other;
        self.malformed += malformed;
        self.desync += desync;
        self.resync += resync;
        self.unanswered += unanswered;
        self.skipped_after_error += skipped_after_error;
        self.unknown_statement += unknown_statement;
        self.evicted_statements += evicted_statements;
        self.too_large += too_large;
        self.too_many_pending += too_many_pending;
        self.pushes_ignored += pushes_ignored;
        self.no_reply += no_reply;
        self.prepares += prepares;
        self.unpaired_answers += unpaired_answers;
        self.ciphertext_records += ciphertext_records;
        self.given_up += given_up;
        self.calls_lost += calls_lost;
    }

    /// Adds the counts to `counts`, by [`DbCounts::labelled`] order (most
    /// records count nothing: then nothing is labelled).
    fn add_to(&self, counts: &mut [u64]) {
        if *self == DbCounts::default() {
            return;
        }
        for (slot, (_, n)) in counts.iter_mut().zip(self.labelled()) {
            *slot += n;
        }
    }

    /// (label, value) pairs, for `ringtail_dropped_events_total{reason}`
    /// and logs.
    pub fn labelled(&self) -> [(&'static str, u64); 16] {
        [
            ("db_malformed", self.malformed),
            ("db_desync", self.desync),
            ("db_resync", self.resync),
            ("db_unanswered", self.unanswered),
            ("db_skipped_after_error", self.skipped_after_error),
            ("db_unknown_statement", self.unknown_statement),
            ("db_evicted_statements", self.evicted_statements),
            ("db_too_large", self.too_large),
            ("db_too_many_pending", self.too_many_pending),
            ("db_pushes_ignored", self.pushes_ignored),
            ("db_no_reply", self.no_reply),
            ("db_prepares", self.prepares),
            ("db_unpaired_answers", self.unpaired_answers),
            ("db_ciphertext_records", self.ciphertext_records),
            ("db_given_up", self.given_up),
            ("db_calls_lost", self.calls_lost),
        ]
    }
}

/// A database protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// PostgreSQL frontend/backend protocol v3.
    Postgres,
    /// MySQL / MariaDB classic protocol.
    MySql,
    /// Redis (and compatible) RESP2/RESP3.
    Redis,
    /// memcached text (and meta) protocol.
    Memcached,
}

impl System {
    /// `db.system.name` (MySQL connections may turn out to be MariaDB:
    /// [`DbConn::system_name`] knows).
    pub fn name(self) -> &'static str {
        match self {
            System::Postgres => system::POSTGRESQL,
            System::MySql => system::MYSQL,
            System::Redis => system::REDIS,
            System::Memcached => system::MEMCACHED,
        }
    }
}

/// Which protocol a client connection speaks, from its first bytes where
/// they tell, else from the server's default port. `first_send` is the
/// first captured bytes the client sent, `first_recv` the first it
/// received if that came first (MySQL's server speaks first).
///
/// By bytes ([`detect_bytes`]): a PostgreSQL startup / SSLRequest /
/// CancelRequest / GSSENCRequest (length, then a known code); a MySQL
/// protocol-10 greeting on recv; a RESP command array (`*N\r\n$`); a
/// memcached text command. By port ([`detect_port`]): 5432, 3306, 6379,
/// 11211. A TLS ClientHello says nothing: the port decides.
pub fn detect(first_send: &[u8], first_recv: Option<&[u8]>, peer_port: u16) -> Option<System> {
    detect_bytes(first_send, first_recv).or_else(|| detect_port(peer_port))
}

/// [`detect`] by the first bytes alone.
pub fn detect_bytes(first_send: &[u8], first_recv: Option<&[u8]>) -> Option<System> {
    if let Some(r) = first_recv {
        if mysql::is_greeting(r) {
            return Some(System::MySql);
        }
    }
    if postgres::is_startup(first_send) {
        return Some(System::Postgres);
    }
    if redis::is_command_start(first_send) {
        return Some(System::Redis);
    }
    if memcached::is_command_start(first_send) {
        return Some(System::Memcached);
    }
    None
}

/// [`detect`] by the server's default port alone.
pub fn detect_port(peer_port: u16) -> Option<System> {
    match peer_port {
        5432 => Some(System::Postgres),
        3306 => Some(System::MySql),
        6379 => Some(System::Redis),
        11211 => Some(System::Memcached),
        _ => None,
    }
}

/// The databases as a family of the stream table
/// ([`crate::stream_table`]): told by [`detect`], followed by a
/// [`DbConn`], counted by [`DbCounts::labelled`].
pub const FAMILY: Family = Family {
    by_bytes: |send, recv| detect_bytes(send, recv).map(DbStream::boxed),
    by_port: |port| detect_port(port).map(DbStream::boxed),
    reasons: || DbCounts::default().labelled().iter().map(|(r, _)| *r).collect(),
};

/// A [`DbConn`] as the stream table follows it.
struct DbStream {
    conn: DbConn,
}

impl DbStream {
    fn boxed(system: System) -> Followed {
        Box::new(DbStream { conn: DbConn::new(system) })
    }
}

/// Where a connection's finished calls go: the stream table's
/// operations, each pushed once where its answer is read (no list of the
/// databases' own in between: each move would be a copy).
pub type Out<'a> = Calls<'a>;

/// `op` is finished: onto `out`, boxed (as the parsers keep pending
/// calls) so that the table, the operation and the span's judge move a
/// pointer, not the call.
#[inline]
pub(crate) fn done(out: &mut Out<'_>, op: Box<DbOp>) {
    out.push(op.start_ns, op.end_ns, Call::Db(op));
}

impl StreamConn for DbStream {
    fn feed(&mut self, send: bool, ts_ns: u64, tls: bool, pieces: &[u8], out: &mut Calls<'_>, counts: &mut [u64]) {
        let mut c = DbCounts::default();
        self.conn.feed(send, ts_ns, tls, pieces, out, &mut c);
        c.add_to(counts);
    }

    fn joined_midway(&mut self, _counts: &mut [u64]) {
        self.conn.joined_midway();
    }

    fn close(&mut self, counts: &mut [u64]) {
        let mut c = DbCounts::default();
        self.conn.close(&mut c);
        c.add_to(counts);
    }

    fn held_bytes(&self) -> usize {
        self.conn.held_bytes()
    }
}

/// Whether socket bytes start a TLS handshake record (ClientHello or
/// ServerHello): from then on the connection's socket bytes are
/// ciphertext, and only TLS plaintext records are read.
fn is_tls_handshake(b: &[u8]) -> bool {
    // Content type 22, version 3.x, then (after the u16 length) a
    // ClientHello (1) or ServerHello (2).
    matches!(b, [0x16, 0x03, 0..=4, _, _, 1 | 2, ..])
}

/// The protocol state of one connection.
#[derive(Debug)]
enum Proto {
    Postgres(Box<postgres::PgConn>),
    MySql(Box<mysql::MyConn>),
    Redis(Box<redis::RedisConn>),
    Memcached(Box<memcached::McConn>),
}

/// One client connection to a database: records in, [`DbOp`]s out.
#[derive(Debug)]
pub struct DbConn {
    proto: Proto,
    /// Redis and memcached, whose streams mark no boundary a byte tail
    /// could be recognised by: the connection is followed from its next
    /// send that begins a command (records before it are ignored), as
    /// after records were lost, or when it is followed from mid-way.
    await_command: bool,
    /// TLS plaintext was seen (or a handshake on the socket): socket
    /// bytes are ciphertext from now on.
    tls_only: bool,
    /// A malformed record made the connection unreadable for good.
    given_up: bool,
    /// A record was seen: a TLS handshake on the socket is looked for
    /// only in the first (PostgreSQL and MySQL negotiate TLS in-band and
    /// handle it themselves; Redis and memcached over TLS start with it).
    seen: bool,
}

impl DbConn {
    /// A connection speaking `system`, followed from its first record
    /// (its start, or wherever tracing began).
    pub fn new(system: System) -> DbConn {
        let proto = match system {
            System::Postgres => Proto::Postgres(Box::default()),
            System::MySql => Proto::MySql(Box::default()),
            System::Redis => Proto::Redis(Box::default()),
            System::Memcached => Proto::Memcached(Box::default()),
        };
        DbConn { proto, await_command: false, tls_only: false, given_up: false, seen: false }
    }

    /// The connection was found mid-way (its first record is not its
    /// first: tracing began after it did, or it is followed afresh after
    /// being forgotten): Redis and memcached wait for a send that begins
    /// a command (an answer read first would be an unpaired one, and give
    /// the connection up for good); PostgreSQL and MySQL find their place
    /// by their own rules.
    pub fn joined_midway(&mut self) {
        self.await_command = matches!(self.proto, Proto::Redis(_) | Proto::Memcached(_));
    }

    /// Whether a send starting with `b` begins a command where a Redis or
    /// memcached connection is followed again (see `await_command`): a
    /// RESP array's header; a memcached command's name, then its line's
    /// end within the first bytes (keys are at most 250 bytes). Inline
    /// Redis commands are not trusted: a value's bytes look the same.
    fn begins_command(&self, b: &[u8]) -> bool {
        match self.proto {
            Proto::Redis(_) => redis::is_command_start(b),
            Proto::Memcached(_) => memcached::is_command_start(b) && memchr::memmem::find(&b[..b.len().min(1024)], b"\r\n").is_some(),
            Proto::Postgres(_) | Proto::MySql(_) => true,
        }
    }

    /// Records of the connection went by unseen (the kernel's ring was
    /// full, `gap` says how many bytes each way), before a record that
    /// came. PostgreSQL and MySQL read them as LOST bytes of each
    /// direction and find their place again by their own rules (their
    /// calls left unpaired are counted `unanswered`). Redis and memcached
    /// have no such place: the calls awaiting answers are counted
    /// `calls_lost` and forgotten, and the connection is followed again
    /// from its next send that begins a command.
    fn gap(&mut self, gap: pieces::Gap, ts_ns: u64, tls: bool, out: &mut Out<'_>, counts: &mut DbCounts) {
        let system = match &mut self.proto {
            Proto::Postgres(_) | Proto::MySql(_) => {
                for (send, n) in [(true, gap.send), (false, gap.recv)] {
                    if n == 0 {
                        continue;
                    }
                    let mut lost = Vec::with_capacity(5);
                    pieces::encode(&mut lost, pieces::Piece::Lost(n));
                    match &mut self.proto {
                        Proto::Postgres(c) => c.feed(send, ts_ns, tls, &lost, out, counts),
                        Proto::MySql(c) => c.feed(send, ts_ns, tls, &lost, out, counts),
                        Proto::Redis(_) | Proto::Memcached(_) => {}
                    }
                }
                return;
            }
            Proto::Redis(_) => System::Redis,
            Proto::Memcached(_) => System::Memcached,
        };
        counts.calls_lost += self.pending() as u64;
        // a fresh parser: its streams at a boundary, nothing pending
        self.proto = DbConn::new(system).proto;
        self.await_command = true;
    }

    /// `db.system.name`: `mariadb` once a MySQL-protocol greeting said so.
    pub fn system_name(&self) -> &'static str {
        match &self.proto {
            Proto::Postgres(_) => system::POSTGRESQL,
            Proto::MySql(c) => c.system_name(),
            Proto::Redis(_) => system::REDIS,
            Proto::Memcached(_) => system::MEMCACHED,
        }
    }

    /// One record: `send` (the client wrote) or not, the time its syscall
    /// completed, whether its bytes are TLS plaintext, and its pieces
    /// ([`pieces`] layout). Finished calls are appended to `out`; what was
    /// dropped is added to `counts`.
    pub fn feed(&mut self, send: bool, ts_ns: u64, tls: bool, record: &[u8], out: &mut Out<'_>, counts: &mut DbCounts) {
        if self.given_up {
            return;
        }
        let Ok((pieces, gap)) = pieces::split_gap(record) else {
            counts.malformed += 1;
            self.give_up(counts);
            return;
        };
        if !gap.is_empty() {
            self.gap(gap, ts_ns, tls, out, counts);
        }
        let first = !std::mem::replace(&mut self.seen, true);
        if tls {
            self.tls_only = true;
        } else if self.tls_only {
            counts.ciphertext_records += 1;
            return;
        } else if first && matches!(pieces::pieces(pieces).next(), Some(Ok(pieces::Piece::Bytes(b))) if is_tls_handshake(b)) {
            self.tls_only = true;
            counts.ciphertext_records += 1;
            return;
        }
        if self.await_command {
            let head = match pieces::pieces(pieces).next() {
                Some(Ok(pieces::Piece::Bytes(b))) => b,
                _ => &[],
            };
            if !send || !self.begins_command(head) {
                return;
            }
            self.await_command = false;
        }
        match &mut self.proto {
            Proto::Postgres(c) => c.feed(send, ts_ns, tls, pieces, out, counts),
            Proto::MySql(c) => c.feed(send, ts_ns, tls, pieces, out, counts),
            Proto::Redis(c) => c.feed(send, ts_ns, tls, pieces, out, counts),
            Proto::Memcached(c) => c.feed(send, ts_ns, tls, pieces, out, counts),
        }
    }

    /// [`DbConn::feed`] with the finished calls as [`DbOp`]s: the form
    /// the parsers' tests and the fuzz targets read (the stream table
    /// takes them as operations, without this copy).
    pub fn feed_ops(&mut self, send: bool, ts_ns: u64, tls: bool, record: &[u8], ops: &mut Vec<DbOp>, counts: &mut DbCounts) {
        let out = calls_of(tls, |out| self.feed(send, ts_ns, tls, record, out, counts));
        ops.extend(out.into_iter().filter_map(|s| match s.call {
            Call::Db(op) => Some(*op),
            Call::Http(_) | Call::Messaging(_) => None,
        }));
    }

    /// The connection closed: calls still awaiting answers are counted
    /// `unanswered`.
    pub fn close(&mut self, counts: &mut DbCounts) {
        self.abort(counts);
    }

    /// Calls awaiting answers (for tests and the caller's accounting).
    pub fn pending(&self) -> usize {
        match &self.proto {
            Proto::Postgres(c) => c.pending(),
            Proto::MySql(c) => c.pending(),
            Proto::Redis(c) => c.pending(),
            Proto::Memcached(c) => c.pending(),
        }
    }

    /// Approximate bytes held (buffers, pending calls, statements).
    pub fn held_bytes(&self) -> usize {
        match &self.proto {
            Proto::Postgres(c) => c.held_bytes(),
            Proto::MySql(c) => c.held_bytes(),
            Proto::Redis(c) => c.held_bytes(),
            Proto::Memcached(c) => c.held_bytes(),
        }
    }

    fn abort(&mut self, counts: &mut DbCounts) {
        match &mut self.proto {
            Proto::Postgres(c) => c.abort(counts),
            Proto::MySql(c) => c.abort(counts),
            Proto::Redis(c) => c.abort(counts),
            Proto::Memcached(c) => c.abort(counts),
        }
    }

    fn give_up(&mut self, counts: &mut DbCounts) {
        self.abort(counts);
        self.given_up = true;
        counts.given_up += 1;
    }
}

/// A request awaiting its answer, in the form every module keeps: the op
/// as far as the request tells.
pub(crate) fn op(system: &'static str, start_ns: u64) -> DbOp {
    DbOp { start_ns, end_ns: start_ns, call: DbCall { system: Text::Static(system), ..DbCall::default() } }
}

/// Fills operation, collection, summary and text of `op` from sanitized
/// SQL.
pub(crate) fn set_sql(op: &mut DbOp, sanitized: &str) {
    let c = &mut op.call;
    c.operation = sql::operation(sanitized).map(|o| Text::Owned(o.to_owned()));
    c.collection = sql::collection(sanitized).map(Text::Owned);
    c.query_summary = sql::summary(sanitized).map(Text::Owned);
    c.query_text = (!sanitized.is_empty()).then(|| Text::Owned(sanitized.to_owned()));
}

/// Bytes an op holds on the heap (for [`DbConn::held_bytes`]).
pub(crate) fn op_heap(op: &DbOp) -> usize {
    let c = &op.call;
    [&c.namespace, &c.operation, &c.collection, &c.query_text, &c.query_summary, &c.status_code, &c.error_type]
        .iter()
        .map(|s| match s {
            Some(Text::Owned(s)) => s.capacity(),
            _ => 0,
        })
        .sum()
}

/// Text from a traced process, made a bounded `String` (lossy UTF-8).
pub(crate) fn text(b: &[u8], max: usize) -> String {
    let mut s = String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned();
    sql::cut(&mut s, max);
    s
}
