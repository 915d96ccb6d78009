//! PostgreSQL: the parser's helpers, then conversations as psql/libpq and
//! psycopg pipelines write them, split across records at awkward places,
//! with LOST regions as the kernel makes them, and the quoting rules and
//! encodings a session sets. The message builders are `pub(in crate::db)`
//! for the cross-protocol tests in `db/tests.rs`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::db::testing::*;
use crate::db::{System, MAX_STATEMENTS};

#[test]
fn sqlstate_and_tags() {
    assert_eq!(sqlstate(b"SERROR\0VERROR\0C42P01\0Mrelation \"x\" does not exist\0\0").as_deref(), Some("42P01"));
    assert_eq!(sqlstate(b"Mno code\0\0"), None);
    assert_eq!(sqlstate(b"C4"), None);
    assert_eq!(tag_rows(b"SELECT 10000"), (&b"SELECT"[..], Some(10000)));
    assert_eq!(tag_rows(b"INSERT 0 5"), (&b"INSERT"[..], Some(5)));
    assert_eq!(tag_rows(b"BEGIN"), (&b"BEGIN"[..], None));
}

#[test]
fn startup_shapes() {
    assert!(is_startup(&[0, 0, 0, 8, 4, 210, 22, 47]));
    assert!(is_startup(&[0, 0, 0, 9, 0, 3, 0, 0, 0]));
    assert!(!is_startup(b"Q\0\0\0\x0dSELECT 1\0"));
    assert!(!is_startup(&[0, 0, 0, 8]));
}

// ---------------------------------------------------------------- conversations

pub(in crate::db) fn pg(t: u8, body: &[u8]) -> Vec<u8> {
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
pub(in crate::db) fn pg_startup(user: &str, db: Option<&str>) -> Vec<u8> {
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
pub(in crate::db) fn pg_hello() -> Vec<u8> {
    let mut v = pg(b'R', &0u32.to_be_bytes());
    v.extend(pg(b'S', &cstrs(&[b"server_version", b"16.4"])));
    v.extend(pg(b'S', &cstrs(&[b"client_encoding", b"UTF8"])));
    v.extend(pg(b'K', &[0, 0, 0x30, 0x39, 1, 2, 3, 4]));
    v.extend(pg(b'Z', b"I"));
    v
}

pub(in crate::db) fn pg_query(q: &str) -> Vec<u8> {
    pg(b'Q', &cstrs(&[q.as_bytes()]))
}

pub(in crate::db) fn pg_parse(name: &str, q: &str, ntypes: u16) -> Vec<u8> {
    let mut b = cstrs(&[name.as_bytes(), q.as_bytes()]);
    b.extend_from_slice(&ntypes.to_be_bytes());
    for _ in 0..ntypes {
        b.extend_from_slice(&0u32.to_be_bytes());
    }
    pg(b'P', &b)
}

pub(in crate::db) fn pg_bind(portal: &str, stmt: &str, params: &[&[u8]]) -> Vec<u8> {
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

pub(in crate::db) fn pg_execute(portal: &str) -> Vec<u8> {
    let mut b = cstrs(&[portal.as_bytes()]);
    b.extend_from_slice(&0u32.to_be_bytes());
    pg(b'E', &b)
}

pub(in crate::db) fn pg_sync() -> Vec<u8> {
    pg(b'S', &[])
}

pub(in crate::db) fn pg_row_desc(cols: &[&str]) -> Vec<u8> {
    let mut b = (cols.len() as u16).to_be_bytes().to_vec();
    for c in cols {
        b.extend(cstrs(&[c.as_bytes()]));
        b.extend_from_slice(&[0, 0, 0x40, 0x01, 0, 1, 0, 0, 0, 25, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]);
    }
    pg(b'T', &b)
}

pub(in crate::db) fn pg_data_row(vals: &[&[u8]]) -> Vec<u8> {
    let mut b = (vals.len() as u16).to_be_bytes().to_vec();
    for v in vals {
        b.extend_from_slice(&(v.len() as u32).to_be_bytes());
        b.extend_from_slice(v);
    }
    pg(b'D', &b)
}

pub(in crate::db) fn pg_cc(tag: &str) -> Vec<u8> {
    pg(b'C', &cstrs(&[tag.as_bytes()]))
}

fn pg_err(state: &str, msg: &str) -> Vec<u8> {
    let mut b =
        cstrs(&[b"SERROR", b"VERROR", format!("C{state}").as_bytes(), format!("M{msg}").as_bytes(), b"Fparse_relation.c", b"L1449"]);
    b.push(0);
    pg(b'E', &b)
}

pub(in crate::db) fn pg_ready(s: u8) -> Vec<u8> {
    pg(b'Z', &[s])
}

pub(in crate::db) fn pg_connected() -> T {
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
        t.c.feed_ops(send, t.ts, true, &whole(b), &mut t.ops, &mut t.counts);
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

// ---------------------------------------------------------------- quoting rules, names

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
