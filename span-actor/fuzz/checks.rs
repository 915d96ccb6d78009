//! What each fuzz target checks, one function per target, shared by the
//! cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the deterministic
//! replay of the checked-in corpus in the normal suite
//! (`span-actor/tests/fuzz_corpus.rs`, stable): a crash found by fuzzing
//! becomes a corpus file, so a regression test, by being saved there.
//!
//! Layout: [`http1`] (captured request bytes through the whole
//! transformation), [`route_redact`] (route grouping and query redaction
//! against an independent oracle), [`ipc_decode`] (every message the
//! actors and the loader decode), [`config`] (the configuration file),
//! [`db_conn`] (records into one database connection of each protocol),
//! [`kafka_conn`], [`mqtt_conn`], [`amqp_conn`] and [`nats_conn`] (records
//! into one broker connection).

// Each target uses one of them.
#![allow(dead_code)]

use std::time::Instant;

use ipc_schema::{ConnHead, ProcessInfo, RawBatch, RawEvent, Role, SockAddr};
use ringtail_config::{RouteSettings, Settings};
use runtime_kit::counters::Registry;
use span_actor::db::pieces::{encode, Piece};
use span_actor::db::{sql, DbConn, DbCounts, System, MAX_PENDING};
use span_actor::http::{parse_pipeline, parse_request};
use span_actor::messaging::{MsgConn, MsgCounts, MsgSystem};
use span_actor::redact::{Redactor, REDACTED};
use span_actor::routes::{Router, OVERFLOW_ROUTE};
use span_actor::transform::Transformer;

/// Secret query keys, lowercase, the oracle's own list: the conventions',
/// some of ringtail's defaults, and the one [`settings`] configures.
const SECRET_KEYS: [&str; 9] =
    ["awsaccesskeyid", "signature", "sig", "x-goog-signature", "password", "access_token", "x-amz-security-token", "key", "tenant_secret"];

/// A query key as the oracle reads it: `%XX` decoded, `+` a space, lowercase.
fn oracle_key(raw: &str) -> Vec<u8> {
    let b = raw.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hex = |x: Option<&u8>| x.and_then(|c| (*c as char).to_digit(16));
        if b[i] == b'%' {
            if let (Some(h), Some(l)) = (hex(b.get(i + 1)), hex(b.get(i + 2))) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    out.to_ascii_lowercase()
}

/// Every parameter of an exported query whose key is secret has the value
/// `REDACTED`.
fn assert_redacted(query: &str) {
    for part in query.split(['&', ';']) {
        if let Some((k, v)) = part.split_once('=') {
            let key = oracle_key(k);
            if SECRET_KEYS.iter().any(|s| s.as_bytes() == key.as_slice()) {
                assert_eq!(v, REDACTED, "secret {k:?} exported in {query:?}");
            }
        }
    }
}

fn settings() -> Settings {
    let mut s = Settings::default();
    s.redaction.query_keys = vec!["tenant_secret".parse().expect("a valid key")];
    s.routes.max_cardinality = 8;
    s
}

/// Captured request bytes (the first two bytes choose the status and the
/// role) through the parser and the whole transformation: never a panic,
/// no user information in an address, no secret in a query.
pub fn http1(data: &[u8]) {
    for head in parse_pipeline(data) {
        assert!(!head.method.is_empty() && head.method.len() <= 32);
        for h in [&head.host, &head.target_host].into_iter().flatten() {
            assert!(!h.contains('@'), "user information kept: {h:?}");
        }
    }
    let _ = parse_request(data);
    let (ctl, request) = match data {
        [a, b, rest @ ..] => (u16::from_le_bytes([*a, *b]), rest),
        _ => (200, data),
    };
    let status = 100 + ctl % 500;
    let role = if ctl & 0x8000 != 0 { Role::Client } else { Role::Server };
    let registry = Registry::new(ipc_schema::Component::SpanActor, 1);
    let mut t = Transformer::new(&settings(), &registry);
    let ev = RawEvent {
        conn: ConnHead {
            role,
            pid: 10,
            tid: 10,
            fd: 3,
            proc_start_ns: 1,
            conn_id: 1,
            local: SockAddr::from_bytes(false, [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8080),
            peer: SockAddr::from_bytes(false, [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 40_000),
            tls: false,
        },
        seq: 1,
        parent: None,
        start_mono_ns: 1_000,
        end_mono_ns: 2_000,
        status,
        request_len: u32::try_from(request.len()).unwrap_or(u32::MAX),
        truncated: false,
        orphan: false,
        h2c: false,
        unlinked: false,
        propagated: None,
        kernel_ids: None,
        request: request.to_vec(),
    };
    // The same bytes again as a response pipelined behind it (an orphan).
    let orphan = RawEvent { orphan: true, seq: 2, request: Vec::new(), request_len: 0, ..ev.clone() };
    let batch = RawBatch::of(
        i64::MAX,
        7,
        vec![ProcessInfo {
            pid: 10,
            proc_start_ns: 1,
            comm: "fuzz".into(),
            exe_name: Some("fuzz".into()),
            exe_path: None,
            env_service_name: None,
            env_resource_attributes: None,
            container_id: None,
        }],
        &[ev, orphan],
        &[],
        &[],
    );
    let mut out = Vec::new();
    let now = Instant::now();
    t.transform(1, 1, &batch, now, &mut out);
    t.expire(now + std::time::Duration::from_secs(3600), &mut out);
    for p in &out {
        let s = &p.span;
        if let Some(q) = s.call.http().and_then(|h| h.query.as_ref()) {
            assert_redacted(q);
        }
        if let Some(a) = &s.server_address {
            assert!(!a.contains('@'), "user information in server.address: {a:?}");
        }
        assert!(s.end_unix_ns >= s.start_unix_ns);
    }
}

/// Paths (lines; a line's first byte picks the status class) through a
/// router with a budget of 8, and each line as a query through the
/// redactor: the budget holds, an unmatched 4xx never spends it, a
/// configured template keeps its name, and redaction is complete,
/// idempotent and keeps every parameter.
pub fn route_redact(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut rs = RouteSettings { max_cardinality: 8, ..RouteSettings::default() };
    rs.patterns = vec!["/api/{id}".parse().expect("a valid template")];
    let mut router = Router::new(&rs);
    let redactor = Redactor::new(&settings().redaction);
    for line in text.lines() {
        let (class, path) = match line.as_bytes().first() {
            Some(c) => (c % 5 + 1, line.get(1..).unwrap_or("")),
            None => (2, ""),
        };
        let status = u16::from(class) * 100;
        let before = router.cardinality("svc");
        if let Some(r) = router.route("svc", path, status) {
            let after = router.cardinality("svc");
            assert!(after <= 8, "budget exceeded: {after}");
            if status / 100 == 4 {
                assert_eq!(before, after, "a 4xx spent budget on {path:?}");
            }
            if r.overflowed {
                assert_eq!(r.route.as_deref(), Some(OVERFLOW_ROUTE));
            }
            let api = path.strip_prefix("/api/").is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
            if api {
                assert_eq!(r.route.as_deref(), Some("/api/{id}"), "{path:?}");
            }
        }
        let q = line;
        let Some(once) = redactor.query(Some(q)) else { panic!("a query dropped without drop_query") };
        assert_redacted(&once);
        assert_eq!(once.split(['&', ';']).count(), q.split(['&', ';']).count(), "parameters lost: {q:?} → {once:?}");
        assert_eq!(redactor.query(Some(&once)).as_deref(), Some(once.as_str()), "not idempotent");
    }
}

/// Bytes off a socket as every message kind the processes decode: never a
/// panic, and what decodes encodes and decodes again.
pub fn ipc_decode(data: &[u8]) {
    if let Ok(env) = ipc_schema::decode(data) {
        // A span batch's spans are checked as they are read.
        if let ipc_schema::Body::Spans(b) = &env.body {
            if let Ok(spans) = b.read() {
                assert_eq!(spans.len(), b.len(), "read spans are the number declared");
                assert!(spans.iter().all(|s| (s.resource as usize) < b.resources.len()));
            }
        }
        if let ipc_schema::Body::Raw(b) = &env.body {
            assert_eq!(b.events().count() + b.h2().count() + b.streams().count(), b.len(), "a decoded raw batch reads whole");
        }
        if let Ok(bytes) = ipc_schema::encode(&env) {
            let again = ipc_schema::decode(&bytes);
            assert!(again.is_ok(), "re-encoded message does not decode: {again:?}");
        }
    }
    let _ = ipc_schema::decode_ack(data);
}

/// Configuration text: never a panic, and what loads passes its own rules.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = Settings::from_toml(&text) {
        assert!(s.validate().is_ok(), "loaded settings fail validation");
    }
}

/// What a hostile connection may hold: above the worst case the `db`
/// module's doc states (about 4 MiB).
const DB_MAX_HELD: usize = 5 << 20;

/// A fuzz record's pieces: with flag 4 `bytes` are the raw pieces
/// (hostile piece framing), else the stream bytes captured whole or (flag
/// 8) as head + LOST + tail, the way the kernel captures a long syscall.
fn record_pieces(flags: u8, bytes: &[u8]) -> Vec<u8> {
    if flags & 4 != 0 {
        return bytes.to_vec();
    }
    let mut p = Vec::new();
    if flags & 8 != 0 && bytes.len() > 2 {
        let head = bytes.len() / 2;
        encode(&mut p, Piece::Bytes(&bytes[..head]));
        encode(&mut p, Piece::Lost(u32::from(bytes[0]) * 97));
        encode(&mut p, Piece::Bytes(&bytes[head..]));
    } else {
        encode(&mut p, Piece::Bytes(bytes));
    }
    p
}

/// Arbitrary records into one database connection of each protocol
/// (`span_actor::db`): never a panic, bounded state (pending calls and
/// bytes held), nothing pending after close, well-formed ops.
///
/// Input layout: `u8(system % 4)` then records, each `u8(flags)
/// u16le(len) len bytes`; flags: 1 send, 2 TLS plaintext, 4 the bytes are
/// the record's raw pieces (hostile piece framing), else they are the
/// stream bytes, captured whole or (flag 8) as head + LOST + tail the way
/// the kernel captures a long syscall.
pub fn db_conn(data: &[u8]) {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let system = [System::Postgres, System::MySql, System::Redis, System::Memcached][usize::from(sel % 4)];
    let mut conn = DbConn::new(system);
    let mut ops = Vec::new();
    let mut counts = DbCounts::default();
    let mut ts = 0u64;
    while let [flags, a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        let pieces = record_pieces(*flags, bytes);
        ts += 1;
        conn.feed_ops(flags & 1 != 0, ts, flags & 2 != 0, &pieces, &mut ops, &mut counts);
        assert!(conn.pending() <= MAX_PENDING, "{} pending", conn.pending());
        assert!(conn.held_bytes() <= DB_MAX_HELD, "{} bytes held", conn.held_bytes());
    }
    conn.close(&mut counts);
    assert_eq!(conn.pending(), 0, "calls pending after close");
    for op in &ops {
        assert!(op.start_ns <= op.end_ns, "{op:?}");
        assert!(op.call.system == conn.system_name() || system == System::MySql, "{op:?}");
        assert!(op.call.query_text.as_ref().is_none_or(|q| q.len() <= sql::MAX_QUERY_TEXT), "{op:?}");
        assert!(op.call.query_summary.as_ref().is_none_or(|q| q.len() <= sql::MAX_SUMMARY), "{op:?}");
    }
}

/// Secrets planted in literals, keys and values by [`db_secrets`]: none
/// may appear in any exported text of any op.
const PLANTED: [&str; 4] = ["SECRET", "DEADBEEFCAFE", "9876543210", "1011001110001"];

/// Reads the generator's choices off the fuzzer's bytes (0 when they run
/// out).
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> &'s str {
        from[usize::from(self.next()) % from.len()]
    }

    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Stand-ins for GBK characters whose second byte is ASCII, in a session
/// whose client set is GBK: 乗 (0x81 0x5C, a backslash's byte) and 乣
/// (0x81 0x60, a backtick's). A client escapes by characters, so never
/// those bytes; [`gbk`] writes them.
const GBK_5C: char = '\u{E000}';
const GBK_60: char = '\u{E001}';

/// A statement's bytes as its session's client sends them: the GBK
/// stand-ins as their two bytes.
fn gbk(q: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(q.len());
    for ch in q.chars() {
        match ch {
            GBK_5C => out.extend_from_slice(&[0x81, 0x5C]),
            GBK_60 => out.extend_from_slice(&[0x81, 0x60]),
            ch => out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

/// A value for a string literal, as the application has it: the secret
/// among quotes, backslashes and comment or dollar markers (and, in a GBK
/// session, characters whose second byte is a backslash or a backtick).
fn value(c: &mut Choices<'_>, wide: bool) -> String {
    const PARTS: [&str; 16] =
        ["SECRET", "a b", "'", "\\", "\\'", "''", "--", "/*", "*/", "$", "\"", "\n", ";", "$q$", "\u{E000}", "\u{E001}"];
    let parts = if wide { &PARTS[..] } else { &PARTS[..14] };
    let mut v = String::new();
    for _ in 0..1 + c.next() % 6 {
        v.push_str(c.pick(parts));
    }
    v.push_str("SECRET");
    v
}

/// A literal holding a planted secret, written as a client escaping for
/// the session's rule (`backslash`) writes it.
fn literal(c: &mut Choices<'_>, pg: bool, backslash: bool, wide: bool) -> String {
    let v = value(c, wide);
    // A quote inside escaped by doubling it, or (backslash rule) by `\`.
    let doubled = c.next().is_multiple_of(2);
    let quote = |v: &str, q: char, backslash: bool| -> String {
        let v = if backslash { v.replace('\\', "\\\\") } else { v.to_owned() };
        let escaped = if backslash && !doubled { format!("\\{q}") } else { format!("{q}{q}") };
        format!("{q}{}{q}", v.replace(q, &escaped))
    };
    match c.next() % 10 {
        0 if pg => format!("E{}", quote(&v, '\'', true)),
        1 if pg => format!("$q${}$q$", v.replace("$q$", "")),
        2 if !pg => quote(&v, '"', backslash),
        3 if !pg => format!("_utf8mb4{}", quote(&v, '\'', backslash)),
        // Unicode escapes (standard strings only): no backslash but theirs.
        3 if !backslash => format!("U&{}", quote(&v.replace('\\', ""), '\'', false)),
        4 => format!("N{}", quote(&v, '\'', backslash)),
        5 => "X'DEADBEEFCAFE'".to_owned(),
        6 => "0xDEADBEEFCAFE".to_owned(),
        7 => format!("{}9876543210", c.pick(&["-", "+", "", "1_", "0.", "1e"])),
        8 => c.pick(&["0b1011001110001", "B'1011001110001'", "b'1011001110001'", "0o1011001110001"]).to_owned(),
        _ => quote(&v, '\'', backslash),
    }
}

/// A statement: code fragments and literals with planted secrets, each
/// literal written for the session's rule.
fn statement(c: &mut Choices<'_>, pg: bool, backslash: bool, wide: bool) -> Vec<u8> {
    const CODE: [&str; 16] =
        ["SELECT", " a", ",", " FROM t", " WHERE", " =", " -", " (", ")", " AND", " --c\n", " /* c */", " $1", " ?", " ;", "\n"];
    // MySQL identifiers holding 乣, in a GBK session
    const GBK_IDENTS: [&str; 2] = [" `x\u{E001}`", " x\u{E001}"];
    let mut q = String::from("SELECT ");
    for _ in 0..1 + c.next() % 8 {
        if c.next().is_multiple_of(2) {
            q.push_str(c.pick(&CODE));
        } else if wide && !pg && c.next().is_multiple_of(4) {
            q.push_str(c.pick(&GBK_IDENTS));
        } else {
            let lit = literal(c, pg, backslash, wide);
            q.push(' ');
            q.push_str(&lit);
        }
    }
    gbk(&q)
}

fn pg_msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn my_pkt(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

/// Records into one connection: statements, keys and values holding
/// planted secrets, written as a client following the session's quoting
/// rule writes them (the server saying the rule, or not); no op may
/// export any of them ([`PLANTED`]), whatever the protocol.
pub fn db_secrets(data: &[u8]) {
    let mut c = Choices(data);
    let sel = c.next();
    let system = [System::Postgres, System::MySql, System::Redis, System::Memcached][usize::from(sel % 4)];
    let mut conn = DbConn::new(system);
    let mut ops = Vec::new();
    let mut counts = DbCounts::default();
    let mut ts = 0u64;
    let mut feed = |conn: &mut DbConn, send: bool, bytes: &[u8], ops: &mut Vec<_>, counts: &mut DbCounts| {
        let mut p = Vec::new();
        encode(&mut p, Piece::Bytes(bytes));
        ts += 1;
        conn.feed_ops(send, ts, false, &p, ops, counts);
    };
    // The session's rule: said by the server (0: not said, the client's
    // choice), and kept.
    let said = sel / 4 % 3;
    let backslash = match said {
        1 => true,
        2 => false,
        _ => sel / 12 % 2 == 0,
    };
    // The client set: GBK (said with the rule, or not said), or UTF-8.
    let wide = sel / 48 % 2 == 1;
    match system {
        System::Postgres => {
            let mut startup = 196_608u32.to_be_bytes().to_vec();
            startup.extend_from_slice(b"user\0app\0\0");
            let mut framed = (startup.len() as u32 + 4).to_be_bytes().to_vec();
            framed.extend(startup);
            feed(&mut conn, true, &framed, &mut ops, &mut counts);
            let mut hello = pg_msg(b'R', &0u32.to_be_bytes());
            if said != 0 {
                let v: &[u8] = if backslash { b"standard_conforming_strings\0off\0" } else { b"standard_conforming_strings\0on\0" };
                hello.extend(pg_msg(b'S', v));
                let encoding: &[u8] = if wide { b"client_encoding\0GBK\0" } else { b"client_encoding\0UTF8\0" };
                hello.extend(pg_msg(b'S', encoding));
            }
            hello.extend(pg_msg(b'Z', b"I"));
            feed(&mut conn, false, &hello, &mut ops, &mut counts);
            while !c.done() {
                let mut q = statement(&mut c, true, backslash, wide);
                q.push(0);
                let send = if c.next() % 2 == 0 {
                    pg_msg(b'Q', &q)
                } else {
                    let mut parse = vec![0];
                    parse.extend_from_slice(&q);
                    parse.extend_from_slice(&[0, 0]);
                    [pg_msg(b'P', &parse), pg_msg(b'B', b"\0\0\0\0\0\0\0\0"), pg_msg(b'E', b"\0\0\0\0\0"), pg_msg(b'S', &[])].concat()
                };
                feed(&mut conn, true, &send, &mut ops, &mut counts);
                feed(&mut conn, false, &[pg_msg(b'C', b"SELECT 1\0"), pg_msg(b'Z', b"I")].concat(), &mut ops, &mut counts);
            }
        }
        System::MySql => {
            let status: u16 = if backslash { 0x0002 } else { 0x0202 };
            let ok = |seq: u8| {
                let mut p = vec![0, 0, 0];
                p.extend_from_slice(&status.to_le_bytes());
                p.extend_from_slice(&[0, 0]);
                my_pkt(seq, &p)
            };
            let attrs = sel / 24 % 2 == 1;
            if said != 0 {
                let mut g = vec![10];
                g.extend_from_slice(b"8.0.36\0");
                g.extend_from_slice(&[1, 0, 0, 0]);
                g.extend_from_slice(b"abcdefgh\0");
                g.extend_from_slice(&0xf7ffu16.to_le_bytes());
                g.push(0x2d);
                g.extend_from_slice(&status.to_le_bytes());
                let upper: u16 = if attrs { 0x0800 } else { 0 };
                g.extend_from_slice(&upper.to_le_bytes());
                g.push(21);
                g.extend_from_slice(&[0; 10]);
                g.extend_from_slice(b"ijklmnopqrst\0");
                feed(&mut conn, false, &my_pkt(0, &g), &mut ops, &mut counts);
                let caps: u32 = 0x8 | 0x200 | 0x8000 | if attrs { 1 << 27 } else { 0 };
                let mut hs = caps.to_le_bytes().to_vec();
                // the collation: gbk_chinese_ci (28), or utf8mb4_general_ci
                hs.extend_from_slice(&[0, 0, 0, 1, if wide { 28 } else { 0x2d }]);
                hs.extend_from_slice(&[0; 23]);
                hs.extend_from_slice(b"app\0\x00db\0");
                feed(&mut conn, true, &my_pkt(1, &hs), &mut ops, &mut counts);
                feed(&mut conn, false, &ok(2), &mut ops, &mut counts);
            }
            while !c.done() {
                let q = statement(&mut c, false, backslash, wide);
                let mut p = vec![0x03];
                if attrs {
                    // One string attribute holding a secret.
                    p.extend_from_slice(&[1, 1, 0, 1, 0xfe, 0, 6]);
                    p.extend_from_slice(b"tenant\x0cSECRET-value");
                }
                p.extend_from_slice(&q);
                feed(&mut conn, true, &my_pkt(0, &p), &mut ops, &mut counts);
                feed(&mut conn, false, &ok(1), &mut ops, &mut counts);
            }
        }
        System::Redis => {
            while !c.done() {
                let name = c.pick(&["SET", "GET", "SECRET", "CLIENT", "CONFIG", "AUTH", "HELLO", "QUIT", "9876543210"]);
                let n = 1 + c.next() % 4;
                let mut args = vec![name.to_owned()];
                for _ in 0..n {
                    args.push(c.pick(&["SECRET", "SETNAME", "GET", "x", "DEADBEEFCAFE"]).to_owned());
                }
                let req = if c.next() % 3 == 0 {
                    format!("{}\r\n", args.join(" ")).into_bytes()
                } else {
                    let mut v = format!("*{}\r\n", args.len()).into_bytes();
                    for a in &args {
                        v.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
                    }
                    v
                };
                feed(&mut conn, true, &req, &mut ops, &mut counts);
                let reply: &[u8] = match c.next() % 3 {
                    0 => b"+OK\r\n",
                    1 => b"-ERR SECRET unknown\r\n",
                    _ => b"$6\r\nSECRET\r\n",
                };
                feed(&mut conn, false, reply, &mut ops, &mut counts);
            }
        }
        System::Memcached => {
            while !c.done() {
                let cmd = c.pick(&["get", "set", "SECRET", "delete", "quit", "mg", "incr"]);
                let key = c.pick(&["SECRET", "9876543210", "k"]);
                let req = match cmd {
                    "set" => format!("set {key} 0 0 6\r\nSECRET\r\n"),
                    _ => format!("{cmd} {key}\r\n"),
                };
                feed(&mut conn, true, req.as_bytes(), &mut ops, &mut counts);
                let reply: &[u8] = match cmd {
                    "get" => b"VALUE SECRET 0 6\r\nSECRET\r\nEND\r\n",
                    "set" => b"STORED\r\n",
                    "quit" => b"",
                    "mg" => b"EN\r\n",
                    _ => b"CLIENT_ERROR SECRET\r\n",
                };
                if !reply.is_empty() {
                    feed(&mut conn, false, reply, &mut ops, &mut counts);
                }
            }
        }
    }
    conn.close(&mut counts);
    for op in &ops {
        let c = &op.call;
        let fields = [&c.namespace, &c.operation, &c.collection, &c.query_text, &c.query_summary, &c.status_code, &c.error_type];
        for f in fields.into_iter().flatten() {
            for s in PLANTED {
                assert!(!f.contains(s), "planted {s:?} exported in {op:?}");
            }
        }
    }
}

/// What a hostile broker connection may hold: above the worst case the
/// `messaging` module's doc states (about 1.1 MiB).
const MSG_MAX_HELD: usize = 2 << 20;

/// Records (as [`db_conn`] reads them: flags (bit 0 send, 1 TLS, 2 raw
/// pieces, 3 head + LOST + tail, 4 a GAP after), u16le length, bytes)
/// into one broker connection: never a panic, bounded state, nothing
/// pending after close, well-formed ops.
fn msg_conn(system: MsgSystem, data: &[u8]) {
    let mut conn = MsgConn::new(system);
    let mut ops = Vec::new();
    let mut counts = MsgCounts::default();
    let mut ts = 0u64;
    let mut rest = data;
    while let [flags, a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        let (bytes, next) = tail.split_at(len);
        rest = next;
        let mut pieces = record_pieces(*flags, bytes);
        if flags & 16 != 0 {
            span_actor::db::pieces::encode_gap(&mut pieces, span_actor::db::pieces::Gap { recv: u32::from(*a), send: u32::from(*b) });
        }
        ts += 1;
        conn.feed_ops(flags & 1 != 0, ts, flags & 2 != 0, &pieces, &mut ops, &mut counts);
        assert!(conn.pending() <= span_actor::messaging::MAX_PENDING, "{} pending", conn.pending());
        assert!(conn.held_bytes() <= MSG_MAX_HELD, "{} bytes held", conn.held_bytes());
    }
    conn.close(&mut counts);
    assert_eq!(conn.pending(), 0, "calls pending after close");
    for op in &ops {
        assert!(op.start_ns <= op.end_ns, "{op:?}");
        assert_eq!(op.system, system, "{op:?}");
        assert!(op.links.len() <= span_actor::messaging::MAX_LINKS, "{op:?}");
        // (offset ranges of known messages only; a membership note is no call)
        assert!(op.ranges.len() <= span_actor::messaging::MAX_RANGES, "{op:?}");
        assert!(op.ranges.iter().all(|r| r.base >= 0 && r.count > 0 && r.end().is_some()), "{op:?}");
        assert!(op.membership.is_none() || (op.op_type.is_none() && op.consumer_group.is_some()), "{op:?}");
        for n in [&op.destination, &op.template, &op.routing_key, &op.consumer_group, &op.client_id].into_iter().flatten() {
            assert!(n.len() <= span_actor::messaging::MAX_NAME, "{op:?}");
        }
    }
}

/// Arbitrary records into one Kafka connection
/// (`span_actor::messaging::kafka`): see [`msg_conn`].
pub fn kafka_conn(data: &[u8]) {
    msg_conn(MsgSystem::Kafka, data);
}

/// Arbitrary records into one MQTT connection
/// (`span_actor::messaging::mqtt`): see [`msg_conn`].
pub fn mqtt_conn(data: &[u8]) {
    msg_conn(MsgSystem::Mqtt, data);
}

/// Arbitrary records into one AMQP 0-9-1 connection
/// (`span_actor::messaging::amqp`): see [`msg_conn`].
pub fn amqp_conn(data: &[u8]) {
    msg_conn(MsgSystem::Rabbitmq, data);
}

/// Arbitrary records into one NATS connection
/// (`span_actor::messaging::nats`): see [`msg_conn`].
pub fn nats_conn(data: &[u8]) {
    msg_conn(MsgSystem::Nats, data);
}
