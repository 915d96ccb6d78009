//! MySQL and MariaDB: conversations as MariaDB 10.11 and its clients write
//! them (text and prepared statements, DEPRECATE_EOF, SSL), split across
//! records, with LOST regions, and the quoting rules, character sets and
//! query attributes a session sets. The packet builders are
//! `pub(in crate::db)` for the cross-protocol tests in `db/tests.rs`.

use crate::db::testing::*;
use crate::db::System;

pub(in crate::db) fn my(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

/// MariaDB 10.11's greeting.
pub(in crate::db) fn mariadb_greeting() -> Vec<u8> {
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

pub(in crate::db) const CAPS: u32 = 0x1 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x2_0000 | 0x8_0000;

pub(in crate::db) fn my_handshake_response(caps: u32, db: &str) -> Vec<u8> {
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

pub(in crate::db) fn my_ok(seq: u8) -> Vec<u8> {
    my(seq, &[0, 0, 0, 2, 0, 0, 0])
}

pub(in crate::db) fn my_eof(seq: u8) -> Vec<u8> {
    my(seq, &[0xfe, 0, 0, 0x22, 0])
}

pub(in crate::db) fn my_coldef(seq: u8, name: &str) -> Vec<u8> {
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
        t.c.feed_ops(send, t.ts, true, &whole(b), &mut t.ops, &mut t.counts);
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

// ---------------------------------------------------------------- quoting rules, names

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
