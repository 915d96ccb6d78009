//! The database parsers on byte sequences as real clients and servers
//! write them (psql/libpq, psycopg pipelines, MariaDB 10.11 and its
//! clients, redis-py, pymemcache), split across records at awkward
//! places, with LOST regions as the kernel makes them; and hostile input.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::pieces::{encode, Piece};
use super::*;

/// Values that must never appear in any op field.
const SECRETS: &[&str] = &["hunter2", "secret-param", "secret-val", "bob@example.com", "s3cr3t", "SuperSecret", "relation \"nope\""];

fn assert_no_secret(ops: &[DbOp]) {
    for s in SECRETS {
        assert_no(ops, s);
    }
}

/// Pieces of a record that captured all of `b`.
fn whole(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out, Piece::Bytes(b));
    out
}

/// Pieces of a record as the kernel captures a long syscall: the first
/// `head` bytes, LOST, the last `tail` bytes.
fn captured(b: &[u8], head: usize, tail: usize) -> Vec<u8> {
    if b.len() <= head + tail {
        return whole(b);
    }
    let mut out = Vec::new();
    encode(&mut out, Piece::Bytes(&b[..head]));
    encode(&mut out, Piece::Lost((b.len() - head - tail) as u32));
    encode(&mut out, Piece::Bytes(&b[b.len() - tail..]));
    out
}

/// A connection under test.
struct T {
    c: DbConn,
    ops: Vec<DbOp>,
    counts: DbCounts,
    ts: u64,
}

impl T {
    fn new(s: System) -> T {
        T { c: DbConn::new(s), ops: Vec::new(), counts: DbCounts::default(), ts: 1000 }
    }

    /// One whole record; returns its timestamp.
    fn io(&mut self, send: bool, b: &[u8]) -> u64 {
        self.rec(send, &whole(b))
    }

    fn send(&mut self, b: &[u8]) -> u64 {
        self.io(true, b)
    }

    fn recv(&mut self, b: &[u8]) -> u64 {
        self.io(false, b)
    }

    fn rec(&mut self, send: bool, pieces: &[u8]) -> u64 {
        self.ts += 10;
        self.c.feed(send, self.ts, false, pieces, &mut self.ops, &mut self.counts);
        assert!(self.c.held_bytes() < 5 << 20);
        self.ts
    }

    /// `b` as several records split at the given offsets.
    fn split(&mut self, send: bool, b: &[u8], cuts: &[usize]) -> u64 {
        let mut last = 0;
        let mut ts = 0;
        for &c in cuts.iter().chain(std::iter::once(&b.len())) {
            let c = c.min(b.len());
            if c > last {
                ts = self.io(send, &b[last..c]);
                last = c;
            }
        }
        ts
    }
}

// ---------------------------------------------------------------- PostgreSQL

fn pg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn cstrs(parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(p);
        v.push(0);
    }
    v
}

/// psql's startup message.
fn pg_startup(user: &str, db: Option<&str>) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend(cstrs(&[b"user", user.as_bytes()]));
    if let Some(db) = db {
        body.extend(cstrs(&[b"database", db.as_bytes()]));
    }
    body.extend(cstrs(&[b"application_name", b"psql", b"client_encoding", b"UTF8"]));
    body.push(0);
    let mut v = (body.len() as u32 + 4).to_be_bytes().to_vec();
    v.extend(body);
    v
}

/// The server's answer to a startup: AuthenticationOk, some
/// ParameterStatus, BackendKeyData, ReadyForQuery.
fn pg_hello() -> Vec<u8> {
    let mut v = pg(b'R', &0u32.to_be_bytes());
    v.extend(pg(b'S', &cstrs(&[b"server_version", b"16.4"])));
    v.extend(pg(b'S', &cstrs(&[b"client_encoding", b"UTF8"])));
    v.extend(pg(b'K', &[0, 0, 0x30, 0x39, 1, 2, 3, 4]));
    v.extend(pg(b'Z', b"I"));
    v
}

fn pg_query(q: &str) -> Vec<u8> {
    pg(b'Q', &cstrs(&[q.as_bytes()]))
}

fn pg_parse(name: &str, q: &str, ntypes: u16) -> Vec<u8> {
    let mut b = cstrs(&[name.as_bytes(), q.as_bytes()]);
    b.extend_from_slice(&ntypes.to_be_bytes());
    for _ in 0..ntypes {
        b.extend_from_slice(&0u32.to_be_bytes());
    }
    pg(b'P', &b)
}

fn pg_bind(portal: &str, stmt: &str, params: &[&[u8]]) -> Vec<u8> {
    let mut b = cstrs(&[portal.as_bytes(), stmt.as_bytes()]);
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&(params.len() as u16).to_be_bytes());
    for p in params {
        b.extend_from_slice(&(p.len() as u32).to_be_bytes());
        b.extend_from_slice(p);
    }
    b.extend_from_slice(&1u16.to_be_bytes());
    b.extend_from_slice(&1u16.to_be_bytes());
    pg(b'B', &b)
}

fn pg_describe_portal(portal: &str) -> Vec<u8> {
    let mut b = vec![b'P'];
    b.extend(cstrs(&[portal.as_bytes()]));
    pg(b'D', &b)
}

fn pg_execute(portal: &str) -> Vec<u8> {
    let mut b = cstrs(&[portal.as_bytes()]);
    b.extend_from_slice(&0u32.to_be_bytes());
    pg(b'E', &b)
}

fn pg_sync() -> Vec<u8> {
    pg(b'S', &[])
}

fn pg_row_desc(cols: &[&str]) -> Vec<u8> {
    let mut b = (cols.len() as u16).to_be_bytes().to_vec();
    for c in cols {
        b.extend(cstrs(&[c.as_bytes()]));
        b.extend_from_slice(&[0, 0, 0x40, 0x01, 0, 1, 0, 0, 0, 25, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]);
    }
    pg(b'T', &b)
}

fn pg_data_row(vals: &[&[u8]]) -> Vec<u8> {
    let mut b = (vals.len() as u16).to_be_bytes().to_vec();
    for v in vals {
        b.extend_from_slice(&(v.len() as u32).to_be_bytes());
        b.extend_from_slice(v);
    }
    pg(b'D', &b)
}

fn pg_cc(tag: &str) -> Vec<u8> {
    pg(b'C', &cstrs(&[tag.as_bytes()]))
}

fn pg_err(state: &str, msg: &str) -> Vec<u8> {
    let mut b =
        cstrs(&[b"SERROR", b"VERROR", format!("C{state}").as_bytes(), format!("M{msg}").as_bytes(), b"Fparse_relation.c", b"L1449"]);
    b.push(0);
    pg(b'E', &b)
}

fn pg_ready(s: u8) -> Vec<u8> {
    pg(b'Z', &[s])
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

fn pg_connected() -> T {
    let mut t = T::new(System::Postgres);
    t.send(&pg_startup("alice", Some("shop")));
    t.recv(&pg(b'R', &[0, 0, 0, 10, b'S', b'C', b'R', b'A', b'M', b'-', b'S', b'H', b'A', b'-', b'2', b'5', b'6', 0, 0]));
    // SASL messages: the password proof is never read.
    t.send(&pg(b'p', b"SCRAM-SHA-256\0\0\0\0\x20n,,n=,r=hunter2hunter2hunter2hunter"));
    t.recv(&pg_hello());
    t
}

#[test]
fn pg_psql_simple_query() {
    let mut t = pg_connected();
    let start = t.send(&pg_query("SELECT id, name FROM users WHERE email = 'bob@example.com';"));
    let end = t.recv(&cat(&[pg_row_desc(&["id", "name"]), pg_data_row(&[b"1", b"Bob"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1, "{:?}", t.ops);
    let op = &t.ops[0];
    assert_eq!((op.start_ns, op.end_ns), (start, end));
    assert_eq!(op.call.system, "postgresql");
    assert_eq!(op.call.namespace.as_deref(), Some("shop"));
    assert_eq!(op.call.operation.as_deref(), Some("SELECT"));
    assert_eq!(op.call.collection.as_deref(), Some("users"));
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT id, name FROM users WHERE email = ?;"));
    assert_eq!(op.call.query_summary.as_deref(), Some("SELECT users"));
    assert_eq!(op.call.returned_rows, Some(1));
    assert_eq!(op.call.error_type, None);
    assert_no_secret(&t.ops);
    assert_eq!(t.c.pending(), 0);
}

#[test]
fn pg_namespace_defaults_to_the_user() {
    let mut t = T::new(System::Postgres);
    t.send(&pg_startup("carol", None));
    t.recv(&pg_hello());
    t.send(&pg_query("BEGIN"));
    t.recv(&cat(&[pg_cc("BEGIN"), pg_ready(b'T')]));
    assert_eq!(t.ops[0].call.namespace.as_deref(), Some("carol"));
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("BEGIN"));
    assert_eq!(t.ops[0].call.returned_rows, None);
}

/// A Query sent with the startup message, before the server's
/// ReadyForQuery for the startup: that `Z` answers the startup, not the
/// Query (found by the end-to-end hostile test: a startup and a Query cut
/// short in one write got an op ended by the startup's `Z`).
#[test]
fn pg_query_sent_with_the_startup_is_ended_by_its_own_ready() {
    let mut t = T::new(System::Postgres);
    let start = t.send(&cat(&[pg_startup("alice", Some("shop")), pg_query("SELECT 1")]));
    t.recv(&pg_hello());
    assert!(t.ops.is_empty(), "the startup's ReadyForQuery ended the query: {:?}", t.ops);
    assert_eq!(t.c.pending(), 1);
    let end = t.recv(&cat(&[pg_row_desc(&["?column?"]), pg_data_row(&[b"1"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1, "{:?}", t.ops);
    assert_eq!((t.ops[0].start_ns, t.ops[0].end_ns), (start, end));
    assert_eq!(t.ops[0].call.returned_rows, Some(1));
    // The server closes without answering a query it never got whole: no op.
    let mut t = T::new(System::Postgres);
    let mut cut = pg_query("SELECT 1");
    cut.truncate(7);
    t.send(&cat(&[pg_startup("alice", Some("shop")), cut]));
    t.recv(&pg_hello());
    t.c.close(&mut t.counts);
    assert!(t.ops.is_empty(), "{:?}", t.ops);
    assert_eq!(t.counts.unanswered, 0);
}

#[test]
fn pg_multi_statement_query_is_one_op() {
    let mut t = pg_connected();
    t.send(&pg_query("UPDATE t SET a = 1; SELECT * FROM t"));
    t.recv(&cat(&[pg_cc("UPDATE 3"), pg_row_desc(&["a"]), pg_data_row(&[b"1"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("UPDATE"));
    // Rows affected are not rows returned.
    assert_eq!(t.ops[0].call.returned_rows, None);
}

#[test]
fn pg_libpq_extended_query_never_keeps_parameters() {
    let mut t = pg_connected();
    let q = "SELECT * FROM accounts WHERE owner = $1 AND pin = $2";
    let req = cat(&[pg_parse("", q, 2), pg_bind("", "", &[b"secret-param", b"s3cr3t"]), pg_describe_portal(""), pg_execute(""), pg_sync()]);
    // Split inside the Bind's parameter value and inside a header.
    let start = t.split(true, &req, &[7, 40, 61]);
    let resp = cat(&[
        pg(b'1', &[]),
        pg(b'2', &[]),
        pg_row_desc(&["owner", "pin"]),
        pg_data_row(&[b"secret-param", b"s3cr3t"]),
        pg_cc("SELECT 1"),
        pg_ready(b'I'),
    ]);
    let end = t.split(false, &resp, &[3, 9, 30]);
    assert_eq!(t.ops.len(), 1, "{:?} {:?}", t.ops, t.counts);
    let op = &t.ops[0];
    assert_eq!((op.start_ns, op.end_ns), (start, end));
    assert_eq!(op.call.query_text.as_deref(), Some(q));
    assert_eq!(op.call.collection.as_deref(), Some("accounts"));
    assert_eq!(op.call.returned_rows, Some(1));
    assert_no_secret(&t.ops);
}

#[test]
fn pg_psycopg_pipeline_pairs_in_order_and_skips_after_error() {
    let mut t = pg_connected();
    let mut req = Vec::new();
    for (i, q) in
        ["INSERT INTO items (name) VALUES ($1)", "INSERT INTO items (id) VALUES ($1)", "SELECT count(*) FROM items"].iter().enumerate()
    {
        req.extend(pg_parse("", q, 1));
        req.extend(pg_bind("", "", &[format!("secret-param-{i}").as_bytes()]));
        req.extend(pg_describe_portal(""));
        req.extend(pg_execute(""));
    }
    req.extend(pg_sync());
    let start = t.send(&req);
    let resp = cat(&[
        pg(b'1', &[]),
        pg(b'2', &[]),
        pg(b'n', &[]),
        pg_cc("INSERT 0 1"),
        pg(b'1', &[]),
        pg(b'2', &[]),
        pg(b'n', &[]),
        pg_err("23505", "duplicate key value violates unique constraint \"items_pkey\" SuperSecret"),
        pg_ready(b'I'),
    ]);
    let end = t.recv(&resp);
    assert_eq!(t.ops.len(), 2, "{:?}", t.ops);
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("INSERT"));
    assert_eq!(t.ops[0].call.error_type, None);
    assert_eq!(t.ops[1].call.status_code.as_deref(), Some("23505"));
    assert_eq!(t.ops[1].call.error_type.as_deref(), Some("23505"));
    assert!(t.ops.iter().all(|o| o.start_ns == start && o.end_ns == end));
    assert_eq!(t.counts.skipped_after_error, 1);
    assert_eq!(t.c.pending(), 0);
    assert_no_secret(&t.ops);
}

#[test]
fn pg_named_statements_and_statements_from_before_tracing() {
    let mut t = pg_connected();
    t.send(&cat(&[pg_parse("s1", "DELETE FROM sessions WHERE token = $1", 1), pg(b'D', b"Ss1\0"), pg_sync()]));
    t.recv(&cat(&[pg(b'1', &[]), pg(b't', &[0, 1, 0, 0, 0, 25]), pg(b'n', &[]), pg_ready(b'I')]));
    assert!(t.ops.is_empty());
    t.send(&cat(&[pg_bind("", "s1", &[b"secret-param"]), pg_execute(""), pg_sync()]));
    t.recv(&cat(&[pg(b'2', &[]), pg_cc("DELETE 1"), pg_ready(b'I')]));
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("DELETE"));
    assert_eq!(t.ops[0].call.returned_rows, None);
    // A statement prepared before tracing began: an op without text.
    t.send(&cat(&[pg_bind("", "older", &[b"secret-param"]), pg_execute(""), pg_sync()]));
    t.recv(&cat(&[pg(b'2', &[]), pg_cc("SELECT 2"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.query_text, None);
    assert_eq!(t.ops[1].call.operation, None);
    assert_eq!(t.ops[1].call.returned_rows, Some(2));
    assert_eq!(t.counts.unknown_statement, 1);
    // Close forgets it.
    t.send(&cat(&[pg(b'C', b"Ss1\0"), pg_bind("", "s1", &[]), pg_execute(""), pg_sync()]));
    t.recv(&cat(&[pg(b'3', &[]), pg(b'2', &[]), pg_cc("DELETE 0"), pg_ready(b'I')]));
    assert_eq!(t.ops[2].call.query_text, None);
    assert_eq!(t.counts.unknown_statement, 2);
}

#[test]
fn pg_statement_table_is_bounded() {
    let mut t = pg_connected();
    for i in 0..(MAX_STATEMENTS + 50) {
        t.send(&cat(&[pg_parse(&format!("s{i}"), &format!("SELECT {i} FROM t{i}"), 0), pg_sync()]));
        t.recv(&cat(&[pg(b'1', &[]), pg_ready(b'I')]));
    }
    assert_eq!(t.counts.evicted_statements, 50);
    // The newest is still there, the oldest is not.
    t.send(&cat(&[
        pg_bind("", &format!("s{}", MAX_STATEMENTS + 49), &[]),
        pg_execute(""),
        pg_bind("", "s0", &[]),
        pg_execute(""),
        pg_sync(),
    ]));
    t.recv(&cat(&[pg(b'2', &[]), pg_cc("SELECT 1"), pg(b'2', &[]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops[0].call.collection.as_deref(), Some(format!("t{}", MAX_STATEMENTS + 49).as_str()));
    assert_eq!(t.ops[1].call.query_text, None);
}

/// A 10,000-row result read in 64 KiB syscalls, each captured as its head,
/// LOST and its tail: one op, ending at the record with the `Z`, with the
/// row count from the CommandComplete in the last tail.
#[test]
fn pg_ten_thousand_rows_with_lost_middles() {
    let mut t = pg_connected();
    let start = t.send(&pg_query("SELECT id, email FROM users"));
    let mut resp = pg_row_desc(&["id", "email"]);
    for i in 0..10_000 {
        resp.extend(pg_data_row(&[i.to_string().as_bytes(), format!("user{i}@example.org").as_bytes()]));
    }
    resp.extend(pg_cc("SELECT 10000"));
    resp.extend(pg_ready(b'I'));
    assert!(resp.len() > 300_000);
    let mut end = 0;
    for chunk in resp.chunks(65_536) {
        end = t.rec(false, &captured(chunk, 3_900, 256));
        assert_eq!(t.ops.len(), usize::from(end != 0 && chunk.as_ptr() as usize + chunk.len() == resp.as_ptr() as usize + resp.len()));
    }
    assert_eq!(t.ops.len(), 1);
    let op = &t.ops[0];
    assert_eq!((op.start_ns, op.end_ns), (start, end));
    assert_eq!(op.call.returned_rows, Some(10_000));
    assert_eq!(t.counts.desync, 1);
    assert_eq!(t.counts.resync, 1);
    // And the connection goes on.
    t.send(&pg_query("COMMIT"));
    t.recv(&cat(&[pg_cc("COMMIT"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.operation.as_deref(), Some("COMMIT"));
}

/// A large row whose body is LOST (its header seen) is skipped without a
/// desync.
#[test]
fn pg_lost_inside_one_message_is_not_a_desync() {
    let mut t = pg_connected();
    t.send(&pg_query("SELECT doc FROM blobs WHERE id = 1"));
    let big = vec![b'x'; 100_000];
    let resp = cat(&[pg_row_desc(&["doc"]), pg_data_row(&[&big]), pg_cc("SELECT 1"), pg_ready(b'I')]);
    t.rec(false, &captured(&resp, 3_900, 256));
    assert_eq!(t.counts.desync, 0);
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.returned_rows, Some(1));
}

#[test]
fn pg_error_in_a_lost_tail_still_gives_the_status() {
    let mut t = pg_connected();
    t.send(&pg_query("SELECT * FROM big"));
    let mut resp = pg_row_desc(&["a"]);
    for i in 0..2_000 {
        resp.extend(pg_data_row(&[format!("{i:08}").as_bytes()]));
    }
    resp.extend(pg_err("57014", "canceling statement due to statement timeout"));
    resp.extend(pg_ready(b'I'));
    t.rec(false, &captured(&resp, 3_900, 256));
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.status_code.as_deref(), Some("57014"));
    assert_eq!(t.ops[0].call.returned_rows, None);
}

#[test]
fn pg_send_desync_resyncs_on_a_query() {
    let mut t = pg_connected();
    // executemany: a pipeline too long to capture, its headers LOST.
    let mut req = Vec::new();
    for i in 0..400 {
        req.extend(pg_bind("", "", &[format!("secret-param-{i}").as_bytes()]));
        req.extend(pg_execute(""));
    }
    req.extend(pg_sync());
    t.rec(true, &captured(&req, 3_900, 256));
    assert_eq!(t.counts.desync, 1);
    let mut resp = Vec::new();
    for _ in 0..400 {
        resp.extend(pg(b'2', &[]));
        resp.extend(pg_cc("INSERT 0 1"));
    }
    resp.extend(pg_ready(b'I'));
    let end = t.rec(false, &captured(&resp, 3_900, 256));
    // The Executes seen (unknown statement) end at the `Z`.
    assert!(!t.ops.is_empty());
    assert!(t.ops.iter().all(|o| o.end_ns == end));
    assert_eq!(t.c.pending(), 0);
    let n = t.ops.len();
    t.send(&pg_query("SELECT 1"));
    t.recv(&cat(&[pg_row_desc(&["x"]), pg_data_row(&[b"1"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), n + 1);
    assert_eq!(t.ops[n].call.returned_rows, Some(1));
    assert_no_secret(&t.ops);
}

#[test]
fn pg_copy_out_counts_rows_copy_in_does_not() {
    let mut t = pg_connected();
    t.send(&pg_query("COPY items TO STDOUT"));
    t.recv(&cat(&[
        pg(b'H', &[0, 0, 1, 0, 0]),
        pg(b'd', b"1\tsecret-val\n"),
        pg(b'd', b"2\tb\n"),
        pg(b'c', &[]),
        pg_cc("COPY 2"),
        pg_ready(b'I'),
    ]));
    assert_eq!(t.ops[0].call.returned_rows, Some(2));
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("COPY"));
    t.send(&pg_query("COPY items FROM STDIN"));
    t.recv(&pg(b'G', &[0, 0, 1, 0, 0]));
    t.send(&cat(&[pg(b'd', b"3\tsecret-val\n"), pg(b'c', &[])]));
    t.recv(&cat(&[pg_cc("COPY 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.returned_rows, None);
    assert_no_secret(&t.ops);
}

#[test]
fn pg_ssl_request_then_tls() {
    let mut t = T::new(System::Postgres);
    t.send(&[0, 0, 0, 8, 4, 210, 22, 47]);
    t.recv(b"S");
    // The TLS handshake on the socket: ciphertext, ignored.
    t.send(&[0x16, 0x03, 0x01, 0x02, 0x00, 1, 2, 3]);
    t.recv(&[0x16, 0x03, 0x03, 0x00, 0x7a, 9, 9]);
    t.send(&[0x17, 0x03, 0x03, 0, 5, 1, 2, 3, 4, 5]);
    // The plaintext, from the TLS uprobes.
    let feed = |t: &mut T, send: bool, b: &[u8]| {
        t.ts += 10;
        t.c.feed(send, t.ts, true, &whole(b), &mut t.ops, &mut t.counts);
    };
    feed(&mut t, true, &pg_startup("alice", Some("tlsdb")));
    feed(&mut t, false, &pg_hello());
    feed(&mut t, true, &pg_query("SELECT now()"));
    feed(&mut t, false, &cat(&[pg_row_desc(&["now"]), pg_data_row(&[b"2026"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1, "{:?}", t.counts);
    assert_eq!(t.ops[0].call.namespace.as_deref(), Some("tlsdb"));
    assert!(t.counts.ciphertext_records >= 2);
}

#[test]
fn pg_ssl_refused_continues_in_plaintext() {
    let mut t = T::new(System::Postgres);
    t.send(&[0, 0, 0, 8, 4, 210, 22, 47]);
    t.recv(b"N");
    t.send(&pg_startup("alice", Some("plain")));
    t.recv(&pg_hello());
    t.send(&pg_query("SELECT 1"));
    t.recv(&cat(&[pg_row_desc(&["x"]), pg_data_row(&[b"1"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.namespace.as_deref(), Some("plain"));
}

#[test]
fn pg_connection_traced_mid_way() {
    let mut t = T::new(System::Postgres);
    t.send(&pg_query("SELECT 1"));
    t.recv(&cat(&[pg(b'N', b"SNOTICE\0Mhi\0\0"), pg_row_desc(&["x"]), pg_data_row(&[b"1"]), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.namespace, None);
}

/// The same conversation split at random places gives the same ops.
#[test]
fn pg_random_splits_give_the_same_ops() {
    let conversation: Vec<(bool, Vec<u8>)> = vec![
        (true, pg_startup("alice", Some("shop"))),
        (false, pg_hello()),
        (true, pg_query("SELECT * FROM users WHERE id = 7")),
        (false, cat(&[pg_row_desc(&["id"]), pg_data_row(&[b"7"]), pg_cc("SELECT 1"), pg_ready(b'I')])),
        (
            true,
            cat(&[
                pg_parse("", "UPDATE users SET name = $1 WHERE id = $2", 2),
                pg_bind("", "", &[b"secret-param", b"7"]),
                pg_execute(""),
                pg_sync(),
            ]),
        ),
        (false, cat(&[pg(b'1', &[]), pg(b'2', &[]), pg_cc("UPDATE 1"), pg_ready(b'I')])),
        (true, pg_query("SELEC oops")),
        (false, cat(&[pg_err("42601", "syntax error at or near \"SELEC\""), pg_ready(b'I')])),
    ];
    let reference = {
        let mut t = T::new(System::Postgres);
        for (send, b) in &conversation {
            t.io(*send, b);
        }
        t.ops
    };
    assert_eq!(reference.len(), 3);
    assert_eq!(reference[2].call.status_code.as_deref(), Some("42601"));
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..200 {
        let mut t = T::new(System::Postgres);
        for (send, b) in &conversation {
            let mut cuts: Vec<usize> = (0..rng.random_range(0..4)).map(|_| rng.random_range(0..b.len())).collect();
            cuts.sort();
            t.split(*send, b, &cuts);
        }
        let strip = |o: &DbOp| DbOp { start_ns: 0, end_ns: 0, ..o.clone() };
        assert_eq!(t.ops.iter().map(strip).collect::<Vec<_>>(), reference.iter().map(strip).collect::<Vec<_>>());
    }
}

// ---------------------------------------------------------------- MySQL

fn my(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

/// MariaDB 10.11's greeting.
fn mariadb_greeting() -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"5.5.5-10.11.6-MariaDB-0+deb12u1\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(b"abcdefgh\0");
    p.extend_from_slice(&0xf7feu16.to_le_bytes());
    p.push(0x2d);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&0x81ffu16.to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&0x1du32.to_le_bytes());
    p.extend_from_slice(b"ijklmnopqrst\0");
    p.extend_from_slice(b"mysql_native_password\0");
    my(0, &p)
}

const CAPS: u32 = 0x1 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x2_0000 | 0x8_0000;

fn my_handshake_response(caps: u32, db: &str) -> Vec<u8> {
    my_handshake_response_in(caps, db, 0x2d)
}

/// A handshake response with its collation (the client character set).
fn my_handshake_response_in(caps: u32, db: &str, collation: u8) -> Vec<u8> {
    let mut p = caps.to_le_bytes().to_vec();
    p.extend_from_slice(&16_777_216u32.to_le_bytes());
    p.push(collation);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(b"app\0");
    p.push(20);
    p.extend_from_slice(b"hunter2hunter2hunter");
    p.extend_from_slice(db.as_bytes());
    p.push(0);
    p.extend_from_slice(b"mysql_native_password\0");
    my(1, &p)
}

fn my_ok(seq: u8) -> Vec<u8> {
    my(seq, &[0, 0, 0, 2, 0, 0, 0])
}

fn my_eof(seq: u8) -> Vec<u8> {
    my(seq, &[0xfe, 0, 0, 0x22, 0])
}

fn my_coldef(seq: u8, name: &str) -> Vec<u8> {
    let mut p = Vec::new();
    for s in ["def", "shop", "users", "users", name, name] {
        p.push(s.len() as u8);
        p.extend_from_slice(s.as_bytes());
    }
    p.extend_from_slice(&[0x0c, 0x2d, 0, 0, 1, 0, 0, 0xfd, 0, 0, 0, 0, 0]);
    my(seq, &p)
}

fn my_connected() -> T {
    let mut t = T::new(System::MySql);
    t.recv(&mariadb_greeting());
    t.send(&my_handshake_response(CAPS, "shop"));
    t.recv(&my_ok(2));
    t
}

#[test]
fn mariadb_query_result_error_and_prepared_statement() {
    let mut t = my_connected();
    assert_eq!(t.c.system_name(), "mariadb");
    let mut q = vec![0x03];
    q.extend_from_slice(b"SELECT name FROM users WHERE email = 'bob@example.com'");
    let start = t.send(&my(0, &q));
    let resp = cat(&[my(1, &[1]), my_coldef(2, "name"), my_eof(3), my(4, b"\x03Bob"), my(5, b"\x05Alice"), my_eof(6)]);
    let end = t.split(false, &resp, &[2, 13, 40]);
    assert_eq!(t.ops.len(), 1, "{:?}", t.counts);
    let op = &t.ops[0];
    assert_eq!((op.start_ns, op.end_ns), (start, end));
    assert_eq!(op.call.system, "mariadb");
    assert_eq!(op.call.namespace.as_deref(), Some("shop"));
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT name FROM users WHERE email = ?"));
    assert_eq!(op.call.collection.as_deref(), Some("users"));
    assert_eq!(op.call.returned_rows, Some(2));

    // ERR 1064.
    t.send(&my(0, b"\x03SELEC * FROM users"));
    let mut err = vec![0xff, 0x28, 0x04, b'#'];
    err.extend_from_slice(b"42000You have an error in your SQL syntax near 'SuperSecret'");
    t.recv(&my(1, &err));
    assert_eq!(t.ops[1].call.status_code.as_deref(), Some("1064"));
    assert_eq!(t.ops[1].call.error_type.as_deref(), Some("1064"));

    // Prepare (no op), execute (an op with the statement's text).
    t.send(&my(0, b"\x16SELECT name FROM users WHERE id = ?"));
    t.recv(&cat(&[my(1, &[0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0]), my_coldef(2, "?"), my_eof(3), my_coldef(4, "name"), my_eof(5)]));
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.counts.prepares, 1);
    let mut exec = vec![0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0xfe, 0];
    exec.push(12);
    exec.extend_from_slice(b"secret-param");
    t.send(&my(0, &exec));
    t.recv(&cat(&[my(1, &[1]), my_coldef(2, "name"), my_eof(3), my(4, b"\x00\x00\x03Bob"), my_eof(5)]));
    assert_eq!(t.ops.len(), 3);
    assert_eq!(t.ops[2].call.query_text.as_deref(), Some("SELECT name FROM users WHERE id = ?"));
    assert_eq!(t.ops[2].call.returned_rows, Some(1));
    // COM_INIT_DB changes the namespace.
    t.send(&my(0, b"\x02analytics"));
    t.recv(&my_ok(1));
    t.send(&my(0, b"\x03INSERT INTO events (a) VALUES (1)"));
    t.recv(&my(1, &[0, 1, 0, 2, 0, 0, 0]));
    assert_eq!(t.ops[3].call.namespace.as_deref(), Some("analytics"));
    assert_eq!(t.ops[3].call.returned_rows, None);
    assert_no_secret(&t.ops);
}

#[test]
fn mysql_deprecate_eof_and_a_lost_result() {
    let mut t = T::new(System::MySql);
    let mut g = mariadb_greeting();
    // A MySQL 8 greeting (no MariaDB in the version) with DEPRECATE_EOF.
    g.splice(5..36, b"8.0.36-0ubuntu0.22.04.1\0\0\0\0\0\0\0\0".iter().copied());
    let len = g.len() - 4;
    g[..3].copy_from_slice(&(len as u32).to_le_bytes()[..3]);
    t.recv(&g);
    assert_eq!(t.c.system_name(), "mysql");
    t.send(&my_handshake_response(CAPS | CLIENT_DEPRECATE_EOF_FOR_TESTS, "shop"));
    t.recv(&my_ok(2));
    t.send(&my(0, b"\x03SELECT id FROM big"));
    let mut resp = cat(&[my(1, &[1]), my_coldef(2, "id")]);
    for i in 0..5_000u32 {
        let v = i.to_string();
        let mut row = vec![v.len() as u8];
        row.extend_from_slice(v.as_bytes());
        resp.extend(my((i % 256) as u8, &row));
    }
    resp.extend(my(9, &[0xfe, 0, 0, 0x22, 0, 0, 0]));
    let end = t.rec(false, &captured(&resp, 3_900, 256));
    assert_eq!(t.ops.len(), 1, "{:?}", t.counts);
    assert_eq!(t.ops[0].end_ns, end);
    // Not every row was seen.
    assert_eq!(t.ops[0].call.returned_rows, None);
    // Whole, every row is counted.
    t.send(&my(0, b"\x03SELECT id FROM big"));
    t.recv(&resp);
    assert_eq!(t.ops[1].call.returned_rows, Some(5_000));
}

const CLIENT_DEPRECATE_EOF_FOR_TESTS: u32 = 0x0100_0000;

// ---------------------------------------------------------------- Redis

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

#[test]
fn redis_py_pipeline_of_100_sets() {
    let mut t = T::new(System::Redis);
    let mut req = Vec::new();
    for i in 0..100 {
        req.extend(resp(&[b"SET", format!("key:{i}").as_bytes(), format!("secret-val-{i}").as_bytes()]));
    }
    let start = t.split(true, &req, &[5, 1000, 1001]);
    let replies = b"+OK\r\n".repeat(100);
    let end = t.split(false, &replies, &[1, 250, 251, 252]);
    assert_eq!(t.ops.len(), 100);
    // The last command came in the last send record, its reply in the
    // last recv record.
    assert_eq!((t.ops[99].start_ns, t.ops[99].end_ns), (start, end));
    for op in &t.ops {
        assert_eq!(op.call.operation.as_deref(), Some("SET"));
        assert_eq!(op.call.query_text.as_deref(), Some("SET ? ?"));
        assert_eq!(op.call.query_summary.as_deref(), Some("SET"));
        assert_eq!(op.call.namespace.as_deref(), Some("0"));
        assert_eq!(op.call.system, "redis");
        assert!(op.start_ns <= start && op.end_ns <= end && op.start_ns < op.end_ns);
    }
    assert_no_secret(&t.ops);
}

#[test]
fn redis_multi_exec_errors_select_and_subcommands() {
    let mut t = T::new(System::Redis);
    t.send(&cat(&[resp(&[b"AUTH", b"default", b"hunter2"]), resp(&[b"CLIENT", b"SETNAME", b"worker-1"]), resp(&[b"SELECT", b"2"])]));
    t.recv(b"+OK\r\n+OK\r\n+OK\r\n");
    assert_eq!(t.ops[0].call.query_text.as_deref(), Some("AUTH ? ?"));
    assert_eq!(t.ops[1].call.operation.as_deref(), Some("CLIENT SETNAME"));
    assert_eq!(t.ops[1].call.query_text.as_deref(), Some("CLIENT SETNAME ?"));
    t.send(&cat(&[resp(&[b"MULTI"]), resp(&[b"INCR", b"counter"]), resp(&[b"LPUSH", b"q", b"secret-val"]), resp(&[b"EXEC"])]));
    t.recv(b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:5\r\n:1\r\n");
    let ops: Vec<_> = t.ops[3..].iter().map(|o| o.call.operation.clone().unwrap()).collect();
    assert_eq!(ops, ["MULTI", "INCR", "LPUSH", "EXEC"]);
    assert!(t.ops[3..].iter().all(|o| o.call.namespace.as_deref() == Some("2")));
    t.send(&resp(&[b"LPUSH", b"counter", b"secret-val"]));
    t.recv(b"-WRONGTYPE Operation against a key holding the wrong kind of value SuperSecret\r\n");
    let op = t.ops.last().unwrap();
    assert_eq!(op.call.status_code.as_deref(), Some("WRONGTYPE"));
    assert_eq!(op.call.error_type.as_deref(), Some("WRONGTYPE"));
    // Inline command.
    t.send(b"PING\r\n");
    t.recv(b"+PONG\r\n");
    assert_eq!(t.ops.last().unwrap().call.operation.as_deref(), Some("PING"));
    assert_no_secret(&t.ops);
}

#[test]
fn redis_pubsub_pushes_are_not_calls() {
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"SUBSCRIBE", b"news", b"alerts"]));
    t.recv(b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$6\r\nalerts\r\n:2\r\n");
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("SUBSCRIBE"));
    t.recv(b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$10\r\nsecret-val\r\n");
    t.recv(b"*3\r\n$7\r\nmessage\r\n$6\r\nalerts\r\n$10\r\nsecret-val\r\n");
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.counts.pushes_ignored, 3);
    t.send(&resp(&[b"PING"]));
    t.recv(b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\nx\r\n*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.operation.as_deref(), Some("PING"));
    assert_no_secret(&t.ops);
}

#[test]
fn redis_resp3_hello_map_and_pushes() {
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"HELLO", b"3", b"AUTH", b"default", b"hunter2"]));
    t.recv(b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n");
    assert_eq!(t.ops[0].call.query_text.as_deref(), Some("HELLO ? ? ? ?"));
    t.send(&resp(&[b"CLIENT", b"TRACKING", b"on"]));
    t.recv(b"+OK\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n");
    t.send(&resp(&[b"HGETALL", b"h"]));
    t.recv(b"|1\r\n+ttl\r\n:3\r\n%1\r\n+f\r\n=14\r\ntxt:secret-val\r\n");
    assert_eq!(t.ops.len(), 3);
    assert_eq!(t.counts.pushes_ignored, 1);
    assert_eq!(t.ops[2].call.operation.as_deref(), Some("HGETALL"));
    assert_no_secret(&t.ops);
}

#[test]
fn redis_big_value_in_a_lost_region() {
    let mut t = T::new(System::Redis);
    let value = vec![b'v'; 200_000];
    t.rec(true, &captured(&resp(&[b"SET", b"big", &value]), 3_900, 256));
    t.recv(b"+OK\r\n");
    t.send(&resp(&[b"GET", b"big"]));
    let mut reply = b"$200000\r\n".to_vec();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\n");
    let end = t.rec(false, &captured(&reply, 3_900, 256));
    assert_eq!(t.ops.len(), 2, "{:?}", t.counts);
    assert_eq!(t.ops[1].end_ns, end);
    assert_eq!(t.counts.desync, 0);
    // A header in a LOST region gives the connection up.
    t.send(&resp(&[b"LRANGE", b"l", b"0", b"-1"]));
    let mut list = b"*5000\r\n".to_vec();
    for i in 0..5000 {
        list.extend_from_slice(format!("$6\r\nv{i:05}\r\n").as_bytes());
    }
    t.rec(false, &captured(&list, 3_900, 256));
    assert_eq!((t.counts.desync, t.counts.given_up, t.counts.unanswered), (1, 1, 1));
    t.send(&resp(&[b"PING"]));
    t.recv(b"+PONG\r\n");
    assert_eq!(t.ops.len(), 2);
}

// ---------------------------------------------------------------- memcached

#[test]
fn memcached_multi_get_storage_errors_and_stats() {
    let mut t = T::new(System::Memcached);
    let value = vec![b's'; 1024];
    let mut set = b"set user:1 0 3600 1024\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    t.split(true, &set, &[10, 30, 500]);
    t.recv(b"STORED\r\n");
    let start = t.send(b"get user:1 user:2 user:3\r\n");
    let mut reply = b"VALUE user:1 0 1024\r\n".to_vec();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\nVALUE user:3 0 10\r\nsecret-val\r\nEND\r\n");
    let end = t.split(false, &reply, &[3, 700, 1046]);
    assert_eq!(t.ops.len(), 2, "{:?}", t.counts);
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("set"));
    assert_eq!(t.ops[0].call.query_text.as_deref(), Some("set ?"));
    let get = &t.ops[1];
    assert_eq!((get.start_ns, get.end_ns), (start, end));
    assert_eq!(get.call.query_text.as_deref(), Some("get ? ? ?"));
    assert_eq!(get.call.returned_rows, Some(2));
    assert_eq!(get.call.system, "memcached");
    // noreply: no op.
    t.send(b"set k 0 0 10 noreply\r\nsecret-val\r\n");
    assert_eq!(t.counts.no_reply, 1);
    t.send(b"delete nope\r\nincr n 1\r\nbogus\r\nset k 0 0 -1\r\n");
    assert_eq!(t.counts.given_up, 1, "a bad length gives the connection up");
    let mut t2 = T::new(System::Memcached);
    t2.send(b"delete nope\r\nincr n 1\r\nbogus\r\n");
    t2.recv(b"NOT_FOUND\r\n5\r\nERROR\r\n");
    assert_eq!(t2.ops[0].call.error_type, None);
    assert_eq!(t2.ops[1].call.operation.as_deref(), Some("incr"));
    assert_eq!(t2.ops[2].call.error_type.as_deref(), Some("ERROR"));
    t2.send(b"stats\r\n");
    t2.recv(b"STAT pid 1\r\nSTAT uptime 5\r\nEND\r\n");
    assert_eq!(t2.ops[3].call.operation.as_deref(), Some("stats"));
    assert_eq!(t2.ops[3].call.returned_rows, None);
    t2.send(b"mg user:1 v f\r\nms k 10 T0\r\nsecret-val\r\nmn\r\n");
    t2.recv(b"VA 10 f0\r\nsecret-val\r\nHD\r\nMN\r\n");
    assert_eq!(t2.ops.len(), 7);
    assert_eq!(t2.ops[4].call.query_text.as_deref(), Some("mg ?"));
    t2.send(b"set k 0 0 3\r\nabc\r\n");
    t2.recv(b"SERVER_ERROR out of memory storing object SuperSecret\r\n");
    assert_eq!(t2.ops[7].call.status_code.as_deref(), Some("SERVER_ERROR"));
    assert_no_secret(&t.ops);
    assert_no_secret(&t2.ops);
}

// ---------------------------------------------------------------- detect, hostile input

#[test]
fn detect_by_bytes_then_port() {
    assert_eq!(detect(&pg_startup("a", None), None, 1), Some(System::Postgres));
    assert_eq!(detect(&[0, 0, 0, 8, 4, 210, 22, 47], None, 1), Some(System::Postgres));
    assert_eq!(detect(b"", Some(&mariadb_greeting()), 1), Some(System::MySql));
    assert_eq!(detect(&resp(&[b"PING"]), None, 1), Some(System::Redis));
    assert_eq!(detect(b"get foo\r\n", None, 1), Some(System::Memcached));
    assert_eq!(detect(&[0x16, 3, 1, 0, 5], None, 6379), Some(System::Redis));
    assert_eq!(detect(b"GET / HTTP/1.1\r\n", None, 8080), None);
    assert_eq!(detect(b"", None, 11211), Some(System::Memcached));
    assert_eq!(System::MySql.name(), "mysql");
}

#[test]
fn malformed_records_give_the_connection_up() {
    let mut t = pg_connected();
    t.send(&pg_query("SELECT 1"));
    t.rec(false, &[9, 9, 9]);
    assert_eq!((t.counts.malformed, t.counts.given_up, t.counts.unanswered), (1, 1, 1));
    t.recv(&cat(&[pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert!(t.ops.is_empty());
}

/// Records of a conversation: (send, bytes).
type Conversation = Vec<(bool, Vec<u8>)>;

/// Valid conversations of each protocol, to mutate.
fn corpus() -> Vec<(System, Conversation)> {
    let mut big = pg_row_desc(&["a"]);
    for i in 0..500 {
        big.extend(pg_data_row(&[format!("{i:06}").as_bytes()]));
    }
    big.extend(pg_cc("SELECT 500"));
    big.extend(pg_ready(b'I'));
    vec![
        (
            System::Postgres,
            vec![
                (true, pg_startup("alice", Some("shop"))),
                (false, pg_hello()),
                (true, cat(&[pg_parse("s", "SELECT $1", 1), pg_bind("", "s", &[b"secret-param"]), pg_execute(""), pg_sync()])),
                (false, cat(&[pg(b'1', &[]), pg(b'2', &[]), pg_cc("SELECT 1"), pg_ready(b'I')])),
                (true, pg_query("SELECT * FROM t")),
                (false, big),
            ],
        ),
        (
            System::MySql,
            vec![
                (false, mariadb_greeting()),
                (true, my_handshake_response(CAPS, "shop")),
                (false, my_ok(2)),
                (true, my(0, b"\x03SELECT 1")),
                (false, cat(&[my(1, &[1]), my_coldef(2, "x"), my_eof(3), my(4, b"\x011"), my_eof(5)])),
            ],
        ),
        (
            System::Redis,
            vec![
                (true, cat(&[resp(&[b"SET", b"k", b"secret-val"]), resp(&[b"GET", b"k"])])),
                (false, b"+OK\r\n$10\r\nsecret-val\r\n*2\r\n%1\r\n+a\r\n:1\r\n_\r\n".to_vec()),
            ],
        ),
        (
            System::Memcached,
            vec![(true, b"get a b\r\nset k 0 0 3\r\nabc\r\n".to_vec()), (false, b"VALUE a 0 3\r\nxyz\r\nEND\r\nSTORED\r\n".to_vec())],
        ),
    ]
}

/// Random records (valid conversations cut, mutated, with LOST pieces,
/// and plain random bytes) never panic, keep memory bounded, and never
/// output a secret.
#[test]
fn hostile_records_never_panic_and_stay_bounded() {
    let mut rng = StdRng::seed_from_u64(0xdb);
    let corpus = corpus();
    for round in 0..3_000 {
        let (system, conv) = &corpus[round % corpus.len()];
        let mut t = T::new(*system);
        for _ in 0..rng.random_range(1..12) {
            let (send, base) = &conv[rng.random_range(0..conv.len())];
            let mut b = base.clone();
            match rng.random_range(0..5) {
                0 => b.truncate(rng.random_range(0..=b.len())),
                1 => {
                    for _ in 0..rng.random_range(1..4) {
                        if !b.is_empty() {
                            let i = rng.random_range(0..b.len());
                            b[i] = rng.random();
                        }
                    }
                }
                2 => b = (0..rng.random_range(0..300)).map(|_| rng.random()).collect(),
                _ => {}
            }
            let pieces = match rng.random_range(0..4) {
                0 => captured(&b, rng.random_range(0..64), rng.random_range(0..64)),
                1 => {
                    let mut p = whole(&b);
                    if rng.random_bool(0.2) {
                        // Malformed.
                        p.push(rng.random());
                    }
                    p
                }
                _ => whole(&b),
            };
            let send = if rng.random_bool(0.1) { !send } else { *send };
            t.ts += 1;
            t.c.feed(send, t.ts, rng.random_bool(0.05), &pieces, &mut t.ops, &mut t.counts);
            assert!(t.c.pending() <= MAX_PENDING);
            assert!(t.c.held_bytes() <= 5 << 20);
        }
        t.c.close(&mut t.counts);
        assert_no_secret(&t.ops);
        for op in &t.ops {
            assert!(op.start_ns <= op.end_ns);
            assert!(op.call.query_text.as_ref().is_none_or(|q| q.len() <= sql::MAX_QUERY_TEXT));
            assert!(op.call.query_summary.as_ref().is_none_or(|q| q.len() <= sql::MAX_SUMMARY));
        }
    }
}

/// A flood of pipelined requests never answered: pending stays bounded
/// and the excess is counted.
#[test]
fn pending_calls_are_bounded() {
    for system in [System::Postgres, System::Redis, System::Memcached] {
        let mut t = T::new(system);
        let one = match system {
            System::Postgres => pg_query("SELECT 1"),
            System::Redis => resp(&[b"PING"]),
            _ => b"version\r\n".to_vec(),
        };
        let req = one.repeat(MAX_PENDING + 10);
        for chunk in req.chunks(30_000) {
            t.send(chunk);
        }
        assert!(t.c.pending() <= MAX_PENDING, "{system:?}");
        assert!(t.counts.too_many_pending >= 1, "{system:?}");
    }
}

#[test]
fn pg_portal_suspended_empty_query_and_async_messages() {
    let mut t = pg_connected();
    // A cursor-style Execute with a row limit: PortalSuspended ends it.
    t.send(&cat(&[pg_parse("", "SELECT * FROM events", 0), pg_bind("", "", &[]), pg_execute(""), pg(b'H', &[])]));
    t.recv(&cat(&[pg(b'1', &[]), pg(b'2', &[]), pg(b'A', b"\0\0\0\x01chan\0secret-val\0"), pg_data_row(&[b"1"]), pg(b's', &[])]));
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.collection.as_deref(), Some("events"));
    t.send(&cat(&[pg_execute(""), pg_sync()]));
    t.recv(&cat(&[pg_data_row(&[b"2"]), pg(b'S', &cstrs(&[b"TimeZone", b"UTC"])), pg_cc("SELECT 1"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.returned_rows, Some(1));
    t.send(&pg_query(""));
    t.recv(&cat(&[pg(b'I', &[]), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 3);
    assert_eq!(t.ops[2].call.query_text, None);
    assert_eq!(t.c.pending(), 0);
    assert_no_secret(&t.ops);
}

#[test]
fn pg_huge_query_text_is_read_from_its_head() {
    let mut t = pg_connected();
    let values: Vec<String> = (0..20_000).map(|i| format!("({i}, 'secret-val-{i}')")).collect();
    let q = format!("INSERT INTO items (id, name) VALUES {}", values.join(", "));
    let start = t.rec(true, &captured(&pg_query(&q), 3_900, 256));
    t.recv(&cat(&[pg_cc("INSERT 0 20000"), pg_ready(b'I')]));
    assert_eq!(t.ops.len(), 1);
    let op = &t.ops[0];
    assert_eq!(op.start_ns, start);
    assert_eq!(op.call.operation.as_deref(), Some("INSERT"));
    assert_eq!(op.call.collection.as_deref(), Some("items"));
    assert!(op.call.query_text.as_ref().unwrap().starts_with("INSERT INTO items (id, name) VALUES (?, ?), (?, ?)"));
    assert!(op.call.query_text.as_ref().unwrap().len() <= sql::MAX_QUERY_TEXT);
    assert_eq!(t.counts.too_large, 1);
    assert_eq!(t.counts.desync, 0);
    assert_no_secret(&t.ops);
}

#[test]
fn mysql_ssl_request_then_tls_handshake_response() {
    let mut t = T::new(System::MySql);
    t.recv(&mariadb_greeting());
    let hs = my_handshake_response(CAPS | 0x800, "securedb");
    // The SSL request: the response's first 32 bytes, seq 1.
    t.send(&my(1, &hs[4..36]));
    t.send(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 0]);
    t.recv(&[0x16, 0x03, 0x03, 0x00, 0x05, 2, 0, 0, 0]);
    let feed = |t: &mut T, send: bool, b: &[u8]| {
        t.ts += 10;
        t.c.feed(send, t.ts, true, &whole(b), &mut t.ops, &mut t.counts);
    };
    let mut again = hs.clone();
    again[3] = 2;
    feed(&mut t, true, &again);
    feed(&mut t, false, &my_ok(3));
    feed(&mut t, true, &my(0, b"\x03DELETE FROM sessions WHERE id = 'secret-val'"));
    feed(&mut t, false, &my(1, &[0, 1, 0, 2, 0, 0, 0]));
    assert_eq!(t.ops.len(), 1, "{:?}", t.counts);
    assert_eq!(t.ops[0].call.namespace.as_deref(), Some("securedb"));
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("DELETE"));
    assert_eq!(t.counts.ciphertext_records, 2);
    assert_no_secret(&t.ops);
}

#[test]
fn mysql_traced_mid_way_and_unknown_statement() {
    let mut t = T::new(System::MySql);
    t.send(&my(0, b"\x17\x09\0\0\0\0\x01\0\0\0"));
    t.recv(&my(1, &[0, 0, 0, 2, 0, 0, 0]));
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.ops[0].call.query_text, None);
    assert_eq!(t.ops[0].call.system, "mysql");
    assert_eq!(t.counts.unknown_statement, 1);
    // A command that was never answered, then another.
    t.send(&my(0, b"\x03SELECT SLEEP(10)"));
    t.send(&my(0, b"\x03SELECT 1"));
    t.recv(&cat(&[my(1, &[1]), my_coldef(2, "1"), my_eof(3), my(4, b"\x011"), my_eof(5)]));
    assert_eq!(t.counts.unanswered, 1);
    assert_eq!(t.ops.len(), 2);
    assert_eq!(t.ops[1].call.returned_rows, Some(1));
}

#[test]
fn redis_over_tls_from_the_start() {
    let mut t = T::new(System::Redis);
    t.send(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 0]);
    t.recv(&[0x16, 0x03, 0x03, 0x00, 0x05, 2, 0, 0, 0]);
    t.ts += 10;
    t.c.feed(true, t.ts, true, &whole(&resp(&[b"GET", b"k"])), &mut t.ops, &mut t.counts);
    t.ts += 10;
    t.c.feed(false, t.ts, true, &whole(b"$-1\r\n"), &mut t.ops, &mut t.counts);
    assert_eq!(t.ops.len(), 1);
    assert_eq!(t.counts.desync, 0);
}

// ---------------------------------------------------------------- quoting rules, names

/// Never exported, whatever the quoting rule of the session.
fn assert_no(ops: &[DbOp], secret: &str) {
    for op in ops {
        let fields = [
            &op.call.namespace,
            &op.call.operation,
            &op.call.collection,
            &op.call.query_text,
            &op.call.query_summary,
            &op.call.status_code,
            &op.call.error_type,
        ];
        for f in fields.into_iter().flatten() {
            assert!(!f.contains(secret), "{secret:?} in {op:?}");
        }
    }
}

fn pg_status(name: &str, value: &str) -> Vec<u8> {
    pg(b'S', &cstrs(&[name.as_bytes(), value.as_bytes()]))
}

/// A simple Query and its answer; the op it made.
fn pg_simple(t: &mut T, q: &str, answer: &[Vec<u8>]) -> DbOp {
    t.send(&pg_query(q));
    t.recv(&answer.concat());
    t.ops.last().cloned().expect("an op")
}

#[test]
fn pg_follows_standard_conforming_strings() {
    let mut t = T::new(System::Postgres);
    t.send(&pg_startup("alice", Some("shop")));
    // The server says it, as every server does after the startup.
    t.recv(&cat(&[pg(b'R', &0u32.to_be_bytes()), pg_status("standard_conforming_strings", "on"), pg_ready(b'I')]));
    let done = [pg_cc("SELECT 1"), pg_ready(b'I')];
    // on: `'C:\'` is a whole literal.
    let op = pg_simple(&mut t, "SELECT 'C:\\' , x FROM t", &done);
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT ? , x FROM t"));
    // on, but text only the other rule reads (a string would run off the
    // end): nothing either rule calls a literal shows.
    let op = pg_simple(&mut t, "SELECT 'it\\'s SECRET here' FROM t", &done);
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT ?"));
    // off, said by the SET's answer: a backslash escapes.
    pg_simple(
        &mut t,
        "SET standard_conforming_strings = off",
        &[pg_status("standard_conforming_strings", "off"), pg_cc("SET"), pg_ready(b'I')],
    );
    let op = pg_simple(&mut t, "SELECT 'it\\'s SECRET here', x FROM t", &done);
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT ?, x FROM t"));
    // E'' escapes whatever the setting; dollar quotes have no escapes.
    pg_simple(
        &mut t,
        "SET standard_conforming_strings = on",
        &[pg_status("standard_conforming_strings", "on"), pg_cc("SET"), pg_ready(b'I')],
    );
    let op = pg_simple(&mut t, "SELECT E'it\\'s SECRET', $q$SECRET ' \\$q$, y FROM t", &done);
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT ?, ?, y FROM t"));
    // A pipeline: the SET may change the rule before the next Parse is
    // read, so that one is read both ways.
    t.send(&cat(&[
        pg_parse("", "SET standard_conforming_strings = off", 0),
        pg_bind("", "", &[]),
        pg_execute(""),
        pg_parse("", "SELECT 'it\\'s SECRET', z FROM t", 0),
        pg_bind("", "", &[]),
        pg_execute(""),
        pg_sync(),
    ]));
    t.recv(&cat(&[
        pg(b'1', &[]),
        pg(b'2', &[]),
        pg_status("standard_conforming_strings", "off"),
        pg_cc("SET"),
        pg(b'1', &[]),
        pg(b'2', &[]),
        pg_cc("SELECT 1"),
        pg_ready(b'I'),
    ]));
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT ?"));
    assert_no(&t.ops, "SECRET");
}

#[test]
fn pg_without_the_startup_reads_both_ways() {
    let mut t = T::new(System::Postgres);
    let op =
        pg_simple(&mut t, "SELECT 'it\\'s SECRET here' FROM t WHERE a = 'C:\\' OR b = 'SECRET2'", &[pg_cc("SELECT 1"), pg_ready(b'I')]);
    assert_eq!(op.call.query_text.as_deref(), Some("SELECT ?"));
    assert_no(&t.ops, "SECRET");
}

/// An OK with these status flags.
fn my_ok_status(seq: u8, status: u16) -> Vec<u8> {
    let mut p = vec![0, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    my(seq, &p)
}

#[test]
fn mysql_follows_no_backslash_escapes() {
    let mut t = my_connected();
    let q = b"\x03SELECT * FROM t WHERE p = 'C:\\' OR secret = 'SECRET'";
    // The default: a backslash escapes (the greeting's and the OK's
    // status flags say so), so the text is one literal to its end.
    t.send(&my(0, q));
    t.recv(&my_ok_status(1, 0x0002));
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT * FROM t WHERE p = ?"));
    t.send(&my(0, b"\x03SET sql_mode = 'NO_BACKSLASH_ESCAPES'"));
    t.recv(&my_ok_status(1, 0x0202));
    t.send(&my(0, q));
    t.recv(&my_ok_status(1, 0x0202));
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT * FROM t WHERE p = ? OR secret = ?"));
    // Traced mid-way: both ways.
    let mut u = T::new(System::MySql);
    u.send(&my(0, q));
    u.recv(&my_ok_status(1, 0x0202));
    assert_eq!(u.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT * FROM t WHERE p = ?"));
    assert_no(&t.ops, "SECRET");
    assert_no(&u.ops, "SECRET");
}

/// A statement whose first literal is 乗 in GBK (0x81 0x5C: its second
/// byte a backslash when read by bytes), then a secret, then an escaped
/// quote (so a reading by bytes ends every string it opens).
const GBK_QUERY: &[u8] = b"SELECT '\x81\\', 'x SECRET x', 'a\\'b' FROM t";

#[test]
fn mysql_follows_the_client_character_set() {
    // gbk_chinese_ci (28) in the handshake: read by GBK characters.
    let mut t = T::new(System::MySql);
    t.recv(&mariadb_greeting());
    t.send(&my_handshake_response_in(CAPS, "shop", 28));
    t.recv(&my_ok(2));
    t.send(&my(0, &[b"\x03", GBK_QUERY].concat()));
    t.recv(&my_ok(1));
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT ?, ?, ? FROM t"));
    // A statement that may change the set: from then on every set's
    // reading, whatever the server answered.
    t.send(&my(0, b"\x03SET NAMES utf8mb4"));
    t.recv(&my_ok(1));
    t.send(&my(0, &[b"\x03", GBK_QUERY].concat()));
    t.recv(&my_ok(1));
    // utf8mb4 (45): read by bytes; UTF-8 text is read as before.
    let mut u = my_connected();
    u.send(&my(0, "\x03SELECT 'é\\'s', x FROM t".as_bytes()));
    u.recv(&my_ok(1));
    assert_eq!(u.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT ?, x FROM t"));
    // Traced mid-way: every set's reading.
    let mut v = T::new(System::MySql);
    v.send(&my(0, &[b"\x03", GBK_QUERY].concat()));
    v.recv(&my_ok(1));
    assert_eq!(v.ops.len(), 1);
    for ops in [&t.ops, &u.ops, &v.ops] {
        assert_no(ops, "SECRET");
    }
}

#[test]
fn pg_follows_the_client_encoding() {
    let q = |sql: &[u8]| pg(b'Q', &cstrs(&[sql]));
    let done = [pg_cc("SELECT 1"), pg_ready(b'I')].concat();
    let mut t = T::new(System::Postgres);
    t.send(&pg_startup("alice", Some("shop")));
    t.recv(&cat(&[
        pg(b'R', &0u32.to_be_bytes()),
        pg_status("standard_conforming_strings", "off"),
        pg_status("client_encoding", "GBK"),
        pg_ready(b'I'),
    ]));
    t.send(&q(GBK_QUERY));
    t.recv(&done);
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT ?, ?, ? FROM t"));
    // Set to UTF8, said by the SET's answer: read by bytes.
    t.send(&q(b"SET client_encoding = 'UTF8'"));
    t.recv(&cat(&[pg_status("client_encoding", "UTF8"), pg_cc("SET"), pg_ready(b'I')]));
    t.send(&q("SELECT 'é\\'s', x FROM t".as_bytes()));
    t.recv(&done);
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT ?, x FROM t"));
    // Without the startup: every encoding's reading.
    let mut u = T::new(System::Postgres);
    u.send(&q(GBK_QUERY));
    u.recv(&done);
    assert_eq!(u.ops.len(), 1);
    assert_no(&t.ops, "SECRET");
    assert_no(&u.ops, "SECRET");
}

/// A COM_QUERY with one query attribute (a string) before `q`.
fn my_query_with_attribute(name: &str, value: &str, q: &str) -> Vec<u8> {
    let mut p = vec![0x03, 1, 1, 0, 1, 0xfe, 0];
    p.push(name.len() as u8);
    p.extend_from_slice(name.as_bytes());
    p.push(value.len() as u8);
    p.extend_from_slice(value.as_bytes());
    p.extend_from_slice(q.as_bytes());
    my(0, &p)
}

#[test]
fn mysql_query_attributes_are_never_read_as_text() {
    // The handshake not seen: a body shaped as attributes is read as them.
    let mut t = T::new(System::MySql);
    t.send(&my_query_with_attribute("tenant", "SECRET-tenant", "SELECT a FROM t WHERE b = 1"));
    t.recv(&my_ok_status(1, 2));
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT a FROM t WHERE b = ?"));
    t.send(&my(0, b"\x03\x00\x01SELECT 2"));
    t.recv(&my_ok_status(1, 2));
    assert_eq!(t.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT ?"));
    // Attributes whose values do not parse: no text at all.
    t.send(&my(0, b"\x03\x02\x01\x00\x01\xfe\x00\x06tenantSECRET-x"));
    t.recv(&my_ok_status(1, 2));
    assert_eq!(t.ops.last().unwrap().call.query_text, None);
    assert_eq!(t.ops.len(), 3);
    // The handshake seen, attributes on both sides.
    let mut u = T::new(System::MySql);
    let mut greeting = mariadb_greeting();
    // Upper capability bits: CLIENT_QUERY_ATTRIBUTES (1 << 27).
    let at = 4 + 1 + "5.5.5-10.11.6-MariaDB-0+deb12u1".len() + 1 + 4 + 9 + 2 + 1 + 2;
    greeting[at + 1] |= 0x08;
    u.recv(&greeting);
    u.send(&my_handshake_response(CAPS | 1 << 27, "shop"));
    u.recv(&my_ok(2));
    u.send(&my_query_with_attribute("tenant", "SECRET-tenant", "SELECT a FROM t WHERE b = 1"));
    u.recv(&my_ok_status(1, 2));
    assert_eq!(u.ops.last().unwrap().call.query_text.as_deref(), Some("SELECT a FROM t WHERE b = ?"));
    assert_no(&t.ops, "SECRET");
    assert_no(&u.ops, "SECRET");
}

#[test]
fn redis_names_only_known_commands() {
    let mut t = T::new(System::Redis);
    t.send(&cat(&[
        resp(&[b"SECRETRD8", b"x"]),
        resp(&[b"get", b"k"]),
        resp(&[b"CLIENT", b"SETNAME", b"w"]),
        resp(&[b"CONFIG", b"SECRETSUB", b"x"]),
        resp(&[b"config", b"get", b"maxmemory"]),
    ]));
    t.recv(b"-ERR unknown command 'SECRETRD8'\r\n$1\r\nv\r\n+OK\r\n-ERR unknown subcommand\r\n*0\r\n");
    t.send(b"SECRETINLINE now\r\n");
    t.recv(b"-ERR unknown command\r\n");
    let names: Vec<_> = t.ops.iter().map(|o| (o.call.operation.as_deref(), o.call.query_text.as_deref())).collect();
    assert_eq!(
        names,
        [
            (Some("_OTHER"), None),
            (Some("GET"), Some("GET ?")),
            (Some("CLIENT SETNAME"), Some("CLIENT SETNAME ?")),
            (Some("CONFIG"), Some("CONFIG ? ?")),
            (Some("CONFIG GET"), Some("CONFIG GET ?")),
            (Some("_OTHER"), None),
        ]
    );
    assert_no(&t.ops, "SECRET");
}

#[test]
fn quit_is_not_an_unanswered_call() {
    // Redis: the server closes after QUIT (a client may not read its +OK).
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"GET", b"k"]));
    t.recv(b"$-1\r\n");
    t.send(&resp(&[b"QUIT"]));
    t.c.close(&mut t.counts);
    assert_eq!((t.counts.unanswered, t.counts.no_reply, t.ops.len()), (0, 1, 1));
    // Answered: an op like any other.
    let mut t = T::new(System::Redis);
    t.send(&resp(&[b"QUIT"]));
    t.recv(b"+OK\r\n");
    t.c.close(&mut t.counts);
    assert_eq!((t.counts.unanswered, t.counts.no_reply, t.ops.len()), (0, 0, 1));
    // memcached: `quit` has no reply.
    let mut t = T::new(System::Memcached);
    t.send(b"get k\r\n");
    t.recv(b"END\r\n");
    t.send(b"quit\r\n");
    t.c.close(&mut t.counts);
    assert_eq!((t.counts.unanswered, t.counts.no_reply, t.ops.len()), (0, 1, 1));
    // An unknown memcached command is `_OTHER`, never its name.
    let mut t = T::new(System::Memcached);
    t.send(b"SECRETCMD k\r\n");
    t.recv(b"ERROR\r\n");
    assert_eq!(t.ops[0].call.operation.as_deref(), Some("_OTHER"));
    assert_no(&t.ops, "SECRET");
}
